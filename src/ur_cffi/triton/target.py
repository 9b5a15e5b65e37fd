"""The compile target of a UR device, read from the device itself through ``urDeviceGetInfo``.

Triton's Intel backend reads these keys of ``GPUTarget.arch`` (``XPUBackend.parse_target`` in
``triton/backends/intel/compiler.py``): ``sub_group_sizes`` (the smallest is the DPAS
execution width), ``has_subgroup_2d_block_io`` and ``has_subgroup_matrix_multiply_accumulate``
(gate 2-D block loads and DPAS), ``has_bfloat16_conversions`` (native bf16 conversions, else
emulated), ``has_fp64``, ``max_work_group_size``, ``max_num_sub_groups``; the rest only enter
the compile cache key, so kernels built for one device or driver are not reused on another.
"""

from __future__ import annotations

from .. import _compat
from ..enums import ur_device_info_t
from ..errors import UNSUPPORTED, URError

WARP_SIZE = 32
"""``GPUTarget.warp_size``, as Intel's driver sets it; ``threads_per_warp`` is an option."""

# Device extension names (OpenCL's; UR reports them for every adapter) behind each property.
EXTENSION_PROPERTIES = {
    "has_subgroup_2d_block_io": "cl_intel_subgroup_2d_block_io",
    "has_subgroup_matrix_multiply_accumulate": "cl_intel_subgroup_matrix_multiply_accumulate",
    "has_subgroup_matrix_multiply_accumulate_tensor_float32":
        "cl_intel_subgroup_matrix_multiply_accumulate_tensor_float32",
    "has_bfloat16_conversions": "cl_intel_bfloat16_conversions",
}


def _optional(device, prop: ur_device_info_t, default):
    """A device property some adapters do not report (``UNSUPPORTED_*``): ``default`` then."""
    try:
        return device.info(prop)
    except URError as error:
        if error.result not in UNSUPPORTED:
            raise
        return default


def properties(device) -> dict:
    """``GPUTarget.arch`` for a ur_cffi :class:`~ur_cffi.Device` (JSON-serialisable values)."""
    extensions = device.extensions
    sub_group_sizes = sorted(int(size) for size in device.sub_group_sizes)
    if not sub_group_sizes:
        raise NotImplementedError(f"{device!r} reports no sub-group sizes; Triton's Intel "
                                  "backend needs them (UR_DEVICE_INFO_SUB_GROUP_SIZES_INTEL)")
    props = {
        "name": device.name,
        "vendor": device.vendor,
        "version": device.driver_version,
        "platform_name": device.platform.name,
        "backend": device.backend.name,
        "max_work_group_size": int(device.max_work_group_size),
        "max_num_sub_groups": int(_optional(
            device, ur_device_info_t.UR_DEVICE_INFO_MAX_NUM_SUB_GROUPS,
            device.max_work_group_size // sub_group_sizes[0])),
        "sub_group_sizes": sub_group_sizes,
        "has_fp16": device.has_fp16,
        "has_fp64": device.has_fp64,
    }
    for key, extension in EXTENSION_PROPERTIES.items():
        props[key] = extension in extensions
    # Level Zero reports native bf16 conversions as a device property as well.
    native_bf16 = _compat.enumerator("ur_device_info_t",
                                     "UR_DEVICE_INFO_BFLOAT16_CONVERSIONS_NATIVE")
    if native_bf16 is not None:  # UR 0.12; before it, the extension alone says
        props["has_bfloat16_conversions"] |= bool(_optional(device, native_bf16, False))
    return props


def gpu_target(device):
    """The ``triton.backends.compiler.GPUTarget`` for ``device``."""
    from triton.backends.compiler import GPUTarget

    return GPUTarget("xpu", properties(device), WARP_SIZE)
