"""A tiled fp32 matrix multiply with ``tl.dot`` on a UR device, over a 2-D grid.

Each program computes one BLOCK_M x BLOCK_N tile of C, stepping through K in BLOCK_K chunks;
the sizes are not multiples of the blocks, so every load and store is masked.  ``tl.dot``
needs work-group local memory, which the launch passes as a local-memory argument.  Checks
against float64 numpy and prints the largest relative error; exits with status 1 if too large.

    python examples/matmul.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    """``a @ b`` for 2-D float32 USMArrays of any strides, as a new USMArray on the Triton
    queue (where the kernel runs)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: (m, k) @ (k, n) only")
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError(f"matmul of float32 arrays only, not {a.dtype} and {b.dtype}")
    (m, k), (_, n) = a.shape, b.shape
    c = ur_cffi.empty((m, n), np.float32, queue=ur_cffi.triton.current_queue())

    def grid(meta):  # the tiles of C, from the block sizes Triton is compiling for
        return triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"])

    matmul_kernel[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=32,
                        BLOCK_N=32, BLOCK_K=32)
    return c


def main():
    queue = ur_cffi.triton.activate()
    rng = np.random.default_rng()
    m, k, n = 157, 243, 119
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = matmul(ur_cffi.asarray(a, queue=queue), ur_cffi.asarray(b, queue=queue))
    queue.finish()
    reference = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(c.to_numpy() - reference)) / np.max(np.abs(reference)))
    print(f"({m}x{k}) @ ({k}x{n}) on {queue.device.name}: max relative error {error:.3g}")
    ur_cffi.triton.deactivate()
    return 0 if error < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
