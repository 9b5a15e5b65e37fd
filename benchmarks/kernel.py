"""The benchmark's kernel: one work-group of a trivial Triton kernel, compiled to SPIR-V.

Every method launches the same SPIR-V (the Triton method compiles it through its own JIT),
so launch figures measure the path to the device, not the kernel.  The module compiles with
``triton.compile`` directly, with no driver and no PyTorch.
"""

from __future__ import annotations

import contextlib

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


class _NoArch:
    """Stands in for triton-xpu 3.3's ``arch_utils`` C++ helper, which needs SYCL headers,
    ``libze_loader`` and torch to build; it only names GPU architectures."""

    @staticmethod
    def parse_device_arch(arch):
        return ""


@contextlib.contextmanager
def _without_arch_parser():
    backend = triton.backends.backends["intel"].compiler
    module_globals = backend.__init__.__globals__
    original = module_globals["compile_module_from_src"]
    module_globals["compile_module_from_src"] = (
        lambda src, name: _NoArch() if name == "arch_utils" else original(src, name))
    try:
        yield
    finally:
        module_globals["compile_module_from_src"] = original


def compile_spirv(device) -> tuple[bytes, int]:
    """``(spirv, shared_bytes)`` of :func:`tiny` for a ur_cffi ``device`` (Triton's cache
    makes repeat runs fast)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    properties = {
        "max_work_group_size": device.max_work_group_size,
        "max_num_sub_groups": device.max_work_group_size // min(device.sub_group_sizes),
        "sub_group_sizes": list(device.sub_group_sizes),
        "has_fp64": device.has_fp64,
        "has_subgroup_matrix_multiply_accumulate": False,
        "has_subgroup_matrix_multiply_accumulate_tensor_float32": False,
        "has_subgroup_2d_block_io": False,
        "has_bfloat16_conversions": "cl_intel_bfloat16_conversions" in device.extensions,
    }
    with _without_arch_parser():
        compiled = triton.compile(ASTSource(tiny, SIGNATURE, {"BLOCK": BLOCK}, {}),
                                  target=GPUTarget("xpu", properties, 32),
                                  options={"num_warps": NUM_WARPS})
    return compiled.asm["spv"], compiled.metadata.shared
