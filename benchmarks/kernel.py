"""The benchmark's kernel: one work-group of a trivial Triton kernel, compiled to SPIR-V.

Every method launches the same SPIR-V (the Triton method compiles it through its own JIT),
so launch figures measure the path to the device, not the kernel.  It is compiled ahead of
time with ``ur_cffi.triton.compile``, with no driver and no PyTorch.
"""

from __future__ import annotations

import triton
import triton.language as tl

NAME = "tiny"
SIGNATURE = {"x_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}
BLOCK = 32  # one sub-group of 32 work-items: the whole launch is one work-group
NUM_WARPS = 1
N = 32  # the kernel writes x[i] = i + N for i < N


@triton.jit
def tiny(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, offsets + n, mask=offsets < n)


def expected():
    """What ``x[:N]`` holds after one launch."""
    return list(range(N, 2 * N))


def compile_spirv(device) -> tuple[bytes, int]:
    """``(spirv, shared_bytes)`` of :func:`tiny` for a ur_cffi ``device`` (Triton's cache
    makes repeat runs fast)."""
    import ur_cffi.triton

    compiled = ur_cffi.triton.compile(tiny, SIGNATURE, {"BLOCK": BLOCK}, device=device,
                                      num_warps=NUM_WARPS)
    return compiled.asm["spv"], compiled.metadata.shared
