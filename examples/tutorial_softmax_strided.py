"""Fused softmax over a strided view (Triton's tutorial 02), without PyTorch.

The input is a view: every other row of a wider array, columns 5 to 700.  The kernel takes the
view's own address (``x.data_ptr()`` is the first element of the view) and its row stride in
elements (``x.stride(0)``), exactly as Triton code written for PyTorch tensors does.  Checked
against a float64 numpy softmax of the same view; exits with status 1 if the error is large.

    python examples/tutorial_softmax_strided.py
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
    """Softmax over the last axis of a 2-D float32 array whose rows are contiguous, as an
    array laid out as ``x`` on the Triton queue (where the kernel runs)."""
    if not isinstance(x, ur_cffi.USMArray):
        raise TypeError(f"softmax takes a USMArray (ur_cffi.asarray(x)), not {type(x).__name__}")
    if x.ndim != 2 or x.dtype != np.float32 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(f"softmax takes a 2-D float32 array with contiguous rows, not "
                         f"{x.dtype} of shape {x.shape} and strides {x.stride()}")
    rows, cols = x.shape
    y = ur_cffi.empty_like(x, queue=ur_cffi.triton.current_queue())
    if cols:
        softmax_kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols,
                                BLOCK_SIZE=triton.next_power_of_2(cols))
    return y


def main():
    queue = ur_cffi.triton.activate()
    host = (np.random.default_rng().standard_normal((401, 777)) * 4).astype(np.float32)
    wide = ur_cffi.asarray(host, queue=queue)
    view = wide[::2, 5:700]  # a view: no copy, its own address and strides
    y = softmax(view).to_numpy()

    part = host[::2, 5:700].astype(np.float64)
    reference = np.exp(part - part.max(axis=1, keepdims=True))
    reference /= reference.sum(axis=1, keepdims=True)
    error = float(np.max(np.abs(y - reference)))
    print(f"softmax of a {view.shape[0]}x{view.shape[1]} view with strides {view.stride()}: "
          f"max error {error:.3g}")
    ur_cffi.triton.deactivate()
    return 0 if error < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
