"""Triton kernels shared by the raw-layer tests (Triton needs them at module level)."""

import triton
import triton.language as tl


@triton.jit
def scale(x_addr, y_addr, a, n, BLOCK: tl.constexpr):
    # The original demo's style: raw int64 device addresses cast to typed pointers.
    x_ptr = x_addr.to(tl.pointer_type(tl.float32))
    y_ptr = y_addr.to(tl.pointer_type(tl.float32))
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)
