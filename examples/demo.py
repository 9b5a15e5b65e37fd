"""The original ctypes demo, on ur_cffi: a Triton kernel scales a vector on a UR device.

Allocate device memory, copy the input in, launch a Triton kernel that receives the raw UR
device addresses as int64 and casts them to float pointers itself, wait with
``queue.finish()`` (the original slept), copy the result back and compare.  Prints
``MSE: 0.0``; exits with status 1 if the result is not exact.  No PyTorch anywhere.

    python examples/demo.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def scale(x_addr, y_addr, a, n, BLOCK: tl.constexpr):
    x_ptr = x_addr.to(tl.pointer_type(tl.float32))
    y_ptr = y_addr.to(tl.pointer_type(tl.float32))
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)


def main():
    n, block, a = 1_000_003, 1024, 2.5
    device = ur_cffi.default_device()
    print(f"device: {device.name} ({device.type.name}, {device.backend.name})")
    x = np.random.default_rng().standard_normal(n).astype(np.float32)

    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        x_device = ur_cffi.asarray(x, queue=queue)
        y_device = ur_cffi.empty(n, np.float32, queue=queue)
        y_device.fill(np.nan)  # so that anything the kernel misses shows up

        with ur_cffi.triton.using(queue):  # Triton compiles for this device, launches here
            scale[(triton.cdiv(n, block),)](x_device.data_ptr(), y_device.data_ptr(), a, n,
                                            BLOCK=block)
        queue.finish()
        y = y_device.to_numpy()

    expected = (x.astype(np.float64) * a).astype(np.float32)  # rounded once, as on the device
    mse = float(np.mean((y.astype(np.float64) - expected) ** 2))
    print(f"MSE: {mse}")
    return 0 if np.array_equal(y, expected) else 1


if __name__ == "__main__":
    sys.exit(main())
