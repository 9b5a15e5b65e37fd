"""List every UR device ur_cffi can see, with the properties that matter for running kernels.

    python examples/devices.py
    ONEAPI_DEVICE_SELECTOR=opencl:cpu python examples/devices.py   # filter, as in SYCL
"""

import ur_cffi


def gib(nbytes):
    return f"{nbytes / 2**30:.1f} GiB"


def main():
    found = ur_cffi.devices()
    if not found:
        print("no UR device found; `python -m ur_cffi` explains what is missing")
        return 1
    default = ur_cffi.default_device()
    for index, device in enumerate(found):
        print(f"[{index}] {device.name}{'  (default)' if device is default else ''}")
        print(f"    type {device.type.name}, backend {device.backend.name}, "
              f"platform {device.platform.name!r}")
        print(f"    vendor {device.vendor}, driver {device.driver_version}")
        print(f"    {device.max_compute_units} compute units, work-groups up to "
              f"{device.max_work_group_size}, sub-groups {device.sub_group_sizes}")
        print(f"    memory {gib(device.global_mem_size)}, largest allocation "
              f"{gib(device.max_mem_alloc_size)}, local {device.local_mem_size // 1024} KiB")
        print(f"    IL {device.il_version}")
        print(f"    fp16 {device.has_fp16}, fp64 {device.has_fp64}, USM host/device/shared "
              f"{bool(device.usm_host_support)}/{bool(device.usm_device_support)}/"
              f"{bool(device.usm_shared_support)}, {len(device.extensions)} extensions")
    print(f"CPU devices: {len(ur_cffi.devices('cpu'))}, GPU devices: {len(ur_cffi.devices('gpu'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
