"""Matrix multiplication with autotuning and a transposed operand (Triton's tutorial 03).

``b`` is passed as ``bt.T``, a transposed view of a (N, K) array: the kernel reads it through
its strides (``b.stride(0)``, ``b.stride(1)``), no copy is made.  ``triton.autotune`` picks
the fastest block configuration for the shape on the device.  Checked against float64 numpy.

    python examples/tutorial_matmul_transposed.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton

# Before @triton.autotune runs: the autotuner takes its benchmarker from the active driver.
queue = ur_cffi.triton.activate()


@triton.autotune(
    configs=[triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4),
             triton.Config({"BM": 64, "BN": 32, "BK": 32}, num_warps=4),
             triton.Config({"BM": 32, "BN": 64, "BK": 16}, num_warps=4)],
    key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    """``a @ b`` for 2-D float32 arrays of any strides, on the Triton queue."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: (M, K) @ (K, N) only")
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError(f"matmul of float32 arrays only, not {a.dtype} and {b.dtype}")
    (M, K), (_, N) = a.shape, b.shape
    c = ur_cffi.empty((M, N), np.float32, queue=ur_cffi.triton.current_queue())
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
    return c


def main():
    rng = np.random.default_rng()
    M, N, K = 150, 97, 130
    a_host = rng.standard_normal((M, K)).astype(np.float32)
    bt_host = rng.standard_normal((N, K)).astype(np.float32)
    a, bt = ur_cffi.asarray(a_host, queue=queue), ur_cffi.asarray(bt_host, queue=queue)
    c = matmul(a, bt.T).to_numpy()  # bt.T: a (K, N) view with strides (1, K)
    reference = a_host.astype(np.float64) @ bt_host.T.astype(np.float64)
    error = float(np.max(np.abs(c - reference) / (1 + np.abs(reference))))
    print(f"matmul {M}x{K} @ ({N}x{K}).T, best config {matmul_kernel.best_config}: "
          f"max relative error {error:.3g}")
    ur_cffi.triton.deactivate()
    return 0 if error < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
