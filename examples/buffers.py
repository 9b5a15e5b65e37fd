"""UR memory objects (``urMemBufferCreate``), the kind of memory the original demo used.

A ``Buffer`` is written and read through a queue at byte offsets, and its backend handle (a
``cl_mem`` on OpenCL, a Level Zero allocation there) is available for other libraries.
Exits with status 1 on any mismatch.

    python examples/buffers.py
"""

import numpy as np

import ur_cffi


def main():
    rng = np.random.default_rng()
    x = rng.integers(-(2**31), 2**31, 10_007, dtype=np.int32)
    device = ur_cffi.default_device()
    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        with ur_cffi.Buffer(context, x.nbytes) as buffer:
            buffer.write(queue, x)
            patch = rng.integers(0, 100, 7, dtype=np.int32)
            buffer.write(queue, patch, offset=4 * 5000)  # byte offsets
            back = np.empty_like(x)
            event = buffer.read(queue, back, blocking=False)
            event.wait()
            expected = x.copy()
            expected[5000:5007] = patch
            exact = np.array_equal(back, expected)
            handle = buffer.native_handle(device)
            print(f"{buffer.nbytes} bytes, native {device.backend.name} handle {handle:#x}")
            print(f"write, partial write and read exact: {exact}")
            try:
                buffer.read(queue, np.empty(10, np.int32), offset=x.nbytes - 8)
            except ValueError as error:
                print(f"refused: {error}")
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
