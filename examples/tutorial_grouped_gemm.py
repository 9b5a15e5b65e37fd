"""Grouped GEMM with an array of addresses (Triton's tutorial 08), without PyTorch.

Several independent matrix products of different sizes run in one launch: the kernel gets
device arrays holding each group's matrix addresses (``data_ptr()`` of ur_cffi arrays, one of
them a transposed view), sizes and leading dimensions, and casts the addresses to typed
pointers (``.to(tl.pointer_type(tl.float32))``).  Each product is checked against float64
numpy; exits with status 1 if one is off.

    python examples/tutorial_grouped_gemm.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def grouped_matmul_kernel(a_addresses, b_addresses, c_addresses, sizes, strides, groups,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tile = tl.program_id(0)
    last = 0
    for g in range(groups):
        m = tl.load(sizes + g * 3)
        n = tl.load(sizes + g * 3 + 1)
        k = tl.load(sizes + g * 3 + 2)
        tiles = tl.cdiv(m, BM) * tl.cdiv(n, BN)
        if tile >= last and tile < last + tiles:
            a_ptr = tl.load(a_addresses + g).to(tl.pointer_type(tl.float32))
            b_ptr = tl.load(b_addresses + g).to(tl.pointer_type(tl.float32))
            c_ptr = tl.load(c_addresses + g).to(tl.pointer_type(tl.float32))
            sam = tl.load(strides + g * 6)
            sak = tl.load(strides + g * 6 + 1)
            sbk = tl.load(strides + g * 6 + 2)
            sbn = tl.load(strides + g * 6 + 3)
            scm = tl.load(strides + g * 6 + 4)
            scn = tl.load(strides + g * 6 + 5)
            local = tile - last
            rm = (local // tl.cdiv(n, BN)) * BM + tl.arange(0, BM)
            rn = (local % tl.cdiv(n, BN)) * BN + tl.arange(0, BN)
            rk = tl.arange(0, BK)
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BK)):
                ks = kk * BK + rk
                a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak,
                            mask=(rm[:, None] < m) & (ks[None, :] < k), other=0.0)
                b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn,
                            mask=(ks[:, None] < k) & (rn[None, :] < n), other=0.0)
                acc += tl.dot(a, b, input_precision="ieee")
            tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
                     mask=(rm[:, None] < m) & (rn[None, :] < n))
        last += tiles


def main():
    queue = ur_cffi.triton.activate()
    rng = np.random.default_rng()
    BM = BN = BK = 32
    shapes = [(70, 50, 40), (33, 90, 64), (128, 17, 100)]  # (m, n, k) per group
    a_host = [rng.standard_normal((m, k)).astype(np.float32) for m, n, k in shapes]
    b_host = [rng.standard_normal((k, n)).astype(np.float32) for m, n, k in shapes]
    a = [ur_cffi.asarray(x, queue=queue) for x in a_host]
    # group 1's b is a transposed view of an (n, k) array: its strides say so
    b = [ur_cffi.asarray(b_host[0], queue=queue),
         ur_cffi.asarray(np.ascontiguousarray(b_host[1].T), queue=queue).T,
         ur_cffi.asarray(b_host[2], queue=queue)]
    c = [ur_cffi.full((m, n), np.nan, np.float32, queue=queue) for m, n, k in shapes]

    def addresses(arrays):
        return ur_cffi.asarray(np.array([x.data_ptr() for x in arrays], np.int64), queue=queue)

    sizes = ur_cffi.asarray(np.array(shapes, np.int32).ravel(), queue=queue)
    strides = ur_cffi.asarray(np.array([(*x.stride(), *y.stride(), *z.stride())
                                        for x, y, z in zip(a, b, c)], np.int32).ravel(),
                              queue=queue)
    tiles = sum(triton.cdiv(m, BM) * triton.cdiv(n, BN) for m, n, k in shapes)
    grouped_matmul_kernel[(tiles,)](addresses(a), addresses(b), addresses(c), sizes, strides,
                                    len(shapes), BM=BM, BN=BN, BK=BK)
    queue.finish()
    errors = []
    for got, x, y in zip(c, a_host, b_host):
        reference = x.astype(np.float64) @ y.astype(np.float64)
        errors.append(float(np.max(np.abs(got.to_numpy() - reference)
                                   / (1 + np.abs(reference)))))
    print(f"grouped GEMM of {len(shapes)} products {shapes} in one launch of {tiles} "
          f"programs: max relative errors {', '.join(f'{e:.3g}' for e in errors)}")
    ur_cffi.triton.deactivate()
    return 0 if max(errors) < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
