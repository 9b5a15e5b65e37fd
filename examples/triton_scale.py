"""Scale a vector with a Triton kernel that takes typed ur_cffi arrays, on any UR device.

The original demo passed raw device addresses as int64 and cast them in the kernel
(``examples/demo.py``); here the kernel takes the arrays themselves: each USMArray passes as a
pointer typed by its dtype (``*fp32``), as torch tensors do on other drivers.  The launch's
Event is the handle to wait on.  Prints the largest error against a float64 reference; exits
with status 1 if any element is wrong.  No PyTorch anywhere.

    python examples/triton_scale.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def scale(x_ptr, y_ptr, a, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)


def main():
    queue = ur_cffi.triton.activate()  # a queue on ur_cffi.default_device(); Triton uses it
    print(f"device: {queue.device.name} ({queue.device.type.name}, {queue.device.backend.name})")
    n, a = 100_003, 10.0
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    x_device = ur_cffi.asarray(x, queue=queue)
    y_device = ur_cffi.empty(n, np.float32, queue=queue)
    y_device.fill(np.nan)  # anything the kernel misses shows up

    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
    scale[grid](x_device, y_device, a, n, BLOCK_SIZE=1024)
    event = ur_cffi.triton.last_event()  # the launch's own Event
    event.wait()
    y = y_device.to_numpy()

    expected = (x.astype(np.float64) * a).astype(np.float32)  # rounded once, as on the device
    error = float(np.max(np.abs(y.astype(np.float64) - x.astype(np.float64) * a)))
    print(f"scaled {n} floats by {a}: max error {error:.3g}, "
          f"kernel {event.status.name}")
    ur_cffi.triton.deactivate()
    return 0 if np.array_equal(y, expected) else 1


if __name__ == "__main__":
    sys.exit(main())
