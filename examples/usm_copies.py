"""USM memory of the three kinds, and exact copies between numpy and devices.

Device memory is reachable only through copies; host and shared memory can also be read in
place.  Every copy is checked against numpy; exits with status 1 on any mismatch.

    python examples/usm_copies.py
"""

import ctypes

import numpy as np

import ur_cffi


def main():
    rng = np.random.default_rng()
    device = ur_cffi.default_device()
    ok = True
    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        x = rng.standard_normal((300, 7))
        arrays = {kind: ur_cffi.asarray(x, queue=queue, kind=kind)
                  for kind in ("device", "host", "shared")}
        for kind, array in arrays.items():
            same = np.array_equal(array.to_numpy(), x)
            print(f"{kind:6} {array.shape} {array.dtype} {array.nbytes} bytes at "
                  f"{array.data_ptr():#x}: round trip exact {same}")
            ok &= same

        # Host memory is ordinary memory to the CPU: read it without a copy.
        host = arrays["host"]
        in_place = np.frombuffer((ctypes.c_double * host.size).from_address(host.data_ptr()),
                                 np.float64).reshape(host.shape)
        ok &= np.array_equal(in_place, x)

        # Device to device, a fill, and copies of parts (offsets count elements).
        copy = ur_cffi.empty(x.shape, np.float64, queue=queue)
        copy.copy_from(arrays["device"])
        copy.fill(-1.0, offset=10, count=5)
        part = rng.standard_normal(20)
        copy.copy_from(part, offset=2000)
        expected = x.ravel().copy()
        expected[10:15] = -1.0
        expected[2000:2020] = part
        window = np.empty(50)
        copy.copy_to(window, offset=1990)
        same = np.array_equal(copy.to_numpy().ravel(), expected) and \
            np.array_equal(window, expected[1990:2040])
        print(f"device to device, fill and partial copies exact {same}")
        ok &= same

        # A copy that does not fit is refused before UR sees it.
        try:
            copy.copy_from(part, offset=copy.size - 3)
        except ValueError as error:
            print(f"refused: {error}")
        else:
            ok = False
    print("all exact" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
