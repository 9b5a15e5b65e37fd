"""The linear congruential steps that the tests' long-running kernels take (``kernels.lcg_steps``),
computed on the host: importable without Triton."""

import numpy as np

LCG_A, LCG_C = 1664525, 1013904223


def lcg_reference(x, steps):
    """``steps`` rounds of ``v * LCG_A + LCG_C`` on int32 (wrapping), composed by squaring."""
    total, power = (1, 0), (LCG_A, LCG_C)  # affine maps v -> a*v + c modulo 2**32
    while steps:
        if steps & 1:
            total = (total[0] * power[0] % 2**32, (total[1] * power[0] + power[1]) % 2**32)
        power = (power[0] * power[0] % 2**32, (power[1] * power[0] + power[1]) % 2**32)
        steps >>= 1
    wide = x.view(np.uint32).astype(np.uint64)
    return ((wide * np.uint64(total[0]) + np.uint64(total[1])) % np.uint64(2**32)).astype(
        np.uint32).view(np.int32)
