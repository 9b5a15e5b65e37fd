"""Fused row-wise softmax (Triton's tutorial kernel) on a UR device, without PyTorch.

One program per row loads the row once, subtracts its maximum, exponentiates, normalises and
stores; the row length is not a power of two, so the kernel masks the tail.  Checks against a
float64 numpy softmax and prints the largest error; exits with status 1 if it is too large.

    python examples/softmax.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, numerator / tl.sum(numerator, axis=0),
             mask=mask)


def softmax(x):
    """Softmax over the last axis of a 2-D float32 USMArray whose rows are contiguous (a view
    such as ``x[::2, :k]`` too), as a new USMArray on the Triton queue (where the kernel
    runs: its ``to_numpy()`` waits for the kernel)."""
    if not isinstance(x, ur_cffi.USMArray):
        raise TypeError(f"softmax takes a USMArray (ur_cffi.asarray(x)), not {type(x).__name__}")
    if x.ndim != 2 or x.dtype != np.float32 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(f"softmax takes a 2-D float32 array with contiguous rows, not "
                         f"{x.dtype} of shape {x.shape} and strides {x.stride()}")
    rows, cols = x.shape
    y = ur_cffi.empty(x.shape, np.float32, queue=ur_cffi.triton.current_queue())
    if cols:  # (no program has a row to load where rows have no element)
        softmax_kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols,
                                BLOCK_SIZE=triton.next_power_of_2(cols))
    return y


def main():
    queue = ur_cffi.triton.activate()
    rows, cols = 823, 781
    x = (np.random.default_rng().standard_normal((rows, cols)) * 4).astype(np.float32)
    y = softmax(ur_cffi.asarray(x, queue=queue)).to_numpy()  # to_numpy waits for the kernel

    reference = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    reference /= reference.sum(axis=1, keepdims=True)
    error = float(np.max(np.abs(y - reference)))
    print(f"softmax of {rows}x{cols} on {queue.device.name}: max error {error:.3g}, "
          f"rows sum to 1 within {float(np.max(np.abs(y.sum(axis=1) - 1))):.3g}")
    ur_cffi.triton.deactivate()
    return 0 if error < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
