"""Triton kernels the tests share (Triton reads a kernel's source and globals from its module).

Every kernel that takes a block size names it ``BLOCK``.
"""

import triton
import triton.language as tl

from lcg import LCG_A, LCG_C, lcg_reference  # noqa: F401 - the kernels' constants, and tests'


@triton.jit
def scale_addresses(x_addr, y_addr, a, n, BLOCK: tl.constexpr):
    # The original demo: raw int64 device addresses, cast to typed pointers in the kernel.
    x_ptr = x_addr.to(tl.pointer_type(tl.float32))
    y_ptr = y_addr.to(tl.pointer_type(tl.float32))
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)


@triton.jit
def scale(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, numerator / tl.sum(numerator, axis=0),
             mask=cols < n_cols)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
           stride_cm, stride_cn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
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


@triton.jit
def layer_norm(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n, eps,
               BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def add_2d(x_ptr, y_ptr, out_ptr, rows, cols, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    c = tl.program_id(1) * BC + tl.arange(0, BC)[None, :]
    mask = (r < rows) & (c < cols)
    offsets = r * cols + c
    tl.store(out_ptr + offsets,
             tl.load(x_ptr + offsets, mask=mask) + 2 * tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


@triton.jit
def program_ids(out_ptr, nx, ny):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    tl.store(out_ptr + (z * ny + y) * nx + x, x + 1000 * y + 1000000 * z)


@triton.jit
def mixed_scalars(out_ptr, i, j, h, d, flag, small, wide, half, bf, f, big):
    # One store per argument, each widened to float64 so the host can compare exactly.
    tl.store(out_ptr + 0, i.to(tl.float64))
    tl.store(out_ptr + 1, j.to(tl.float64))
    tl.store(out_ptr + 2, h.to(tl.float64))
    tl.store(out_ptr + 3, d)
    tl.store(out_ptr + 4, flag.to(tl.float64))
    tl.store(out_ptr + 5, small.to(tl.float64))
    tl.store(out_ptr + 6, wide.to(tl.float64))
    tl.store(out_ptr + 7, half.to(tl.float64))
    tl.store(out_ptr + 8, bf.to(tl.float64))
    tl.store(out_ptr + 9, f.to(tl.float64))
    tl.store(out_ptr + 10, big.to(tl.float64))


@triton.jit
def axpy_int64(x_ptr, y_ptr, a, offset: tl.int64, n, BLOCK: tl.constexpr):
    # `offset` is annotated int64, so a small Python int still arrives as 8 bytes.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, a * x + offset.to(tl.float32), mask=mask)


@triton.jit
def twelve_args(a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, ka, kb, kc, kd, bias, n, shift,
                BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    total = ka * tl.load(a_ptr + offsets, mask=mask) + kb * tl.load(b_ptr + offsets, mask=mask)
    total += kc * tl.load(c_ptr + offsets, mask=mask) + kd * tl.load(d_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets + shift, total + bias, mask=mask)


@triton.jit
def tuple_add(pointers, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(pointers[0] + offsets, mask=mask)
    tl.store(pointers[2] + offsets, x + tl.load(pointers[1] + offsets, mask=mask), mask=mask)


@triton.jit
def tuple_axpy(pointers, n, a, TAG: tl.constexpr, BLOCK: tl.constexpr):
    """out = a * x + y, beside a constexpr tuple ``TAG`` (passed only: Triton 3.3 cannot
    index one in a kernel)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(pointers[0] + offsets, mask=mask)
    tl.store(pointers[2] + offsets, a * x + tl.load(pointers[1] + offsets, mask=mask), mask=mask)


@triton.jit
def lcg_steps(x_ptr, y_ptr, n, steps, BLOCK: tl.constexpr):
    # `steps` rounds of a 32-bit linear congruential generator: a loop the compiler cannot
    # shorten, so the kernel runs as long as asked and the result is still exact.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask)
    for _ in range(steps):
        value = value * 1664525 + 1013904223
    tl.store(y_ptr + offsets, value, mask=mask)


@triton.jit
def block_sums(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # A cross-warp reduction: Triton gives the kernel a work-group local memory argument.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, axis=0))


@triton.jit
def store_scalars(out_ptr, a, b, c, d, e, f):
    tl.store(out_ptr + 0, a.to(tl.float64))
    tl.store(out_ptr + 1, b.to(tl.float64))
    tl.store(out_ptr + 2, c.to(tl.float64))
    tl.store(out_ptr + 3, d.to(tl.float64))
    tl.store(out_ptr + 4, e.to(tl.float64))
    tl.store(out_ptr + 5, f.to(tl.float64))


@triton.jit
def store_flag(out_ptr, flag, n):
    tl.store(out_ptr + 0, flag.to(tl.float64))
    tl.store(out_ptr + 1, n.to(tl.float64))


@triton.jit
def scale_with_default_block(x_ptr, n, BLOCK: tl.constexpr = 32):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def fill_beside_unused_pointer(out_ptr, n, unused_ptr):
    # A last parameter that hidden_args fills (as Triton's NVIDIA scratch pointers are).
    offsets = tl.arange(0, 64)
    tl.store(out_ptr + offsets, offsets.to(tl.float32) + n, mask=offsets < n)
