"""The UR device the tests run on: the CPU device unless ``UR_CFFI_TEST_DEVICE`` names another
device type (``gpu``).  Light on purpose: child processes import it before anything else."""

import os

TYPE = os.environ.get("UR_CFFI_TEST_DEVICE", "cpu")
"""The ``ur_cffi.devices`` name of the device type under test."""

NO_TRITON = ("its kernels come from Triton, and Triton is not installed (triton-xpu has wheels "
             "for Python 3.11 and 3.12)")
"""Why a test that needs Triton's kernels skips where Triton is missing (Python 3.10)."""


def get():
    """The first UR device of type :data:`TYPE`."""
    import ur_cffi

    found = ur_cffi.devices(TYPE)
    if not found:
        raise LookupError(f"UR lists no {TYPE} device (UR_CFFI_TEST_DEVICE={TYPE})")
    return found[0]


def partition(device, kind: str, value: int, count: int, platform=None) -> list:
    """``count`` sub-devices of ``device`` from ``urDevicePartition`` by ``kind``
    (``"EQUALLY"`` or ``"BY_COUNTS"``) with ``value``, as ur_cffi Devices (of ``platform``,
    default the device's); empty where the device cannot be partitioned so (the CUDA
    adapter's GPUs)."""
    import pytest

    from ur_cffi import Device, ffi, lib, loader
    from ur_cffi.enums import ur_device_partition_t, ur_structure_type_t

    if loader.validation_enabled():
        pytest.skip("UR's leak checker does not track urDevicePartition's handles: their "
                    "correct release is reported as of a nonexistent handle")

    part = ffi.new("ur_device_partition_property_t[1]")
    part[0].type = ur_device_partition_t[f"UR_DEVICE_PARTITION_{kind}"]
    setattr(part[0].value, "equally" if kind == "EQUALLY" else "count", value)
    properties = ffi.new("ur_device_partition_properties_t *", {
        "stype": ur_structure_type_t.UR_STRUCTURE_TYPE_DEVICE_PARTITION_PROPERTIES,
        "pProperties": part, "PropCount": 1})
    handles = ffi.new("ur_device_handle_t[]", count)
    if lib.urDevicePartition(device.handle, properties, count, handles, ffi.NULL) or \
            any(handle == ffi.NULL for handle in handles):
        for handle in handles:
            if handle != ffi.NULL:
                lib.urDeviceRelease(handle)
        return []
    return [Device(handle, platform or device.platform) for handle in handles]
