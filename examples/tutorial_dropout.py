"""Seeded dropout with ``tl.rand`` (Triton's tutorial 04), without PyTorch.

The mask comes from a seed and each element's offset, so the same seed gives the same mask
and no mask is stored.  The input is a strided view (every third element).  Checked: kept
elements are ``x / (1 - p)`` exactly as float64 numpy computes them, dropped ones are 0, the
same seed repeats the mask, another seed changes it, and about ``p`` of them are dropped.

    python examples/tutorial_dropout.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, x_stride, p, seed, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * x_stride, mask=mask)
    keep = tl.rand(seed, offsets) > p
    tl.store(out_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x, p, seed):
    """Each element of the 1-D float32 array ``x`` (any stride) zeroed with probability ``p``,
    the rest scaled by 1 / (1 - p); a contiguous array on the Triton queue."""
    if x.ndim != 1 or x.dtype != np.float32:
        raise ValueError(f"dropout takes a 1-D float32 array (x.ravel() of others), not "
                         f"{x.dtype} of shape {x.shape}")
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability p must be in [0, 1), not {p!r}")
    out = ur_cffi.empty(x.shape, np.float32, queue=ur_cffi.triton.current_queue())
    n = x.size
    dropout_kernel[(triton.cdiv(n, 1024),)](x, out, n, x.stride(0), p, seed, BLOCK=1024)
    return out


def main():
    queue = ur_cffi.triton.activate()
    host = np.random.default_rng().standard_normal(3 * 10_000).astype(np.float32) + 5
    x = ur_cffi.asarray(host, queue=queue)[::3]  # 10,000 elements, stride 3
    p = 0.3
    first, again = dropout(x, p, 1234).to_numpy(), dropout(x, p, 1234).to_numpy()
    other = dropout(x, p, 4321).to_numpy()
    kept = first != 0
    expected = host[::3].astype(np.float64) / (1 - np.float64(np.float32(p)))
    error = float(np.max(np.abs(first[kept] - expected[kept]) / expected[kept]))
    dropped = 1 - kept.mean()
    same = np.array_equal(first, again) and not np.array_equal(first, other)
    print(f"dropout p={p} of a strided view: dropped {dropped:.3f}, max error {error:.3g}, "
          f"same seed same mask: {same}")
    ur_cffi.triton.deactivate()
    return 0 if error < 1e-6 and same and abs(dropped - p) < 0.03 else 1


if __name__ == "__main__":
    sys.exit(main())
