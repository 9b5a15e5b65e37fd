"""The original ctypes demo's whole flow, through the generated raw layer only.

Run as a script (by tests/test_raw_flow.py) so that loader init and teardown are its own:
``python raw_flow.py compile OUT`` writes a Triton scale kernel's SPIR-V;
``python raw_flow.py run SPV`` runs the flow and prints the checks as JSON.
torch is blocked before anything is imported, and its absence is part of the output.
"""

import json
import sys

sys.modules["torch"] = None  # any `import torch` now raises ImportError


def compile_scale_kernel(out_path: str) -> None:
    import ur_cffi.triton
    from kernels import scale_addresses

    signature = {"x_addr": "i64", "y_addr": "i64", "a": "fp32", "n": "i32", "BLOCK": "constexpr"}
    kernel = ur_cffi.triton.compile(scale_addresses, signature, {"BLOCK": 128}, num_warps=1,
                                    threads_per_warp=16)
    assert kernel.metadata.name == "scale_addresses" and kernel.metadata.shared == 0
    with open(out_path, "wb") as f:
        f.write(kernel.asm["spv"])


def run(spv_path: str) -> dict:
    import numpy as np

    from ur_cffi import ffi, lib, spirv
    from ur_cffi import enums
    from ur_cffi.enums import ur_device_type_t, ur_mem_flag_t

    def ok(result, name):
        assert result == 0, f"{name} returned {result}"

    checks = {}
    ok(lib.urLoaderInit(0, ffi.NULL), "urLoaderInit")
    count = ffi.new("uint32_t *")
    ok(lib.urAdapterGet(0, ffi.NULL, count), "urAdapterGet")
    adapters = ffi.new("ur_adapter_handle_t[]", count[0])
    ok(lib.urAdapterGet(count[0], adapters, ffi.NULL), "urAdapterGet")
    checks["adapters"] = count[0]
    # Up to oneAPI 2025.2 urPlatformGet takes an array of adapters and its length.
    takes_list = ffi.typeof(lib.urPlatformGet).args[0] == ffi.typeof("ur_adapter_handle_t *")
    lead = (adapters, count[0]) if takes_list else None
    device_out = ffi.new("ur_device_handle_t *")
    for index in range(checks["adapters"]):  # the first platform with a CPU device
        ok(lib.urPlatformGet(*(lead or (adapters[index],)), 0, ffi.NULL, count), "urPlatformGet")
        platforms = ffi.new("ur_platform_handle_t[]", max(count[0], 1))
        if count[0]:
            ok(lib.urPlatformGet(*(lead or (adapters[index],)), count[0], platforms, ffi.NULL),
               "urPlatformGet")
        found = [platforms[i] for i in range(count[0])
                 if lib.urDeviceGet(platforms[i], ur_device_type_t.UR_DEVICE_TYPE_CPU, 1,
                                    device_out, ffi.NULL) == 0]
        if found or lead:
            break
    assert found, "no CPU device"
    device = device_out[0]
    context_out = ffi.new("ur_context_handle_t *")
    ok(lib.urContextCreate(1, device_out, ffi.NULL, context_out), "urContextCreate")
    context = context_out[0]
    queue_out = ffi.new("ur_queue_handle_t *")
    ok(lib.urQueueCreate(context, device, ffi.NULL, queue_out), "urQueueCreate")
    queue = queue_out[0]

    n = 1000
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    nbytes = x.nbytes
    pointers = [ffi.new("void **") for _ in range(2)]
    for pointer in pointers:
        ok(lib.urUSMDeviceAlloc(context, device, ffi.NULL, ffi.NULL, nbytes, pointer),
           "urUSMDeviceAlloc")
    x_dev, y_dev = pointers[0][0], pointers[1][0]
    ok(lib.urEnqueueUSMMemcpy(queue, True, x_dev, ffi.from_buffer(x), nbytes, 0, ffi.NULL,
                              ffi.NULL), "urEnqueueUSMMemcpy")
    nan = np.float32(np.nan)
    ok(lib.urEnqueueUSMFill(queue, y_dev, 4, ffi.from_buffer(nan), nbytes, 0, ffi.NULL,
                            ffi.NULL), "urEnqueueUSMFill")

    # The original demo's buffer objects, written and read back.
    buffer_out = ffi.new("ur_mem_handle_t *")
    ok(lib.urMemBufferCreate(context, ur_mem_flag_t.UR_MEM_FLAG_READ_WRITE, nbytes, ffi.NULL,
                             buffer_out), "urMemBufferCreate")
    ok(lib.urEnqueueMemBufferWrite(queue, buffer_out[0], True, 0, nbytes, ffi.from_buffer(x),
                                   0, ffi.NULL, ffi.NULL), "urEnqueueMemBufferWrite")
    from_buffer = np.full(n, np.nan, np.float32)
    ok(lib.urEnqueueMemBufferRead(queue, buffer_out[0], True, 0, nbytes,
                                  ffi.from_buffer(from_buffer), 0, ffi.NULL, ffi.NULL),
       "urEnqueueMemBufferRead")
    checks["buffer_round_trip"] = bool(np.array_equal(from_buffer, x))

    il = spirv.drop_capabilities(open(spv_path, "rb").read())
    program_out = ffi.new("ur_program_handle_t *")
    ok(lib.urProgramCreateWithIL(context, il, len(il), ffi.NULL, program_out),
       "urProgramCreateWithIL")
    ok(lib.urProgramBuild(context, program_out[0], b""), "urProgramBuild")
    kernel_out = ffi.new("ur_kernel_handle_t *")
    ok(lib.urKernelCreate(program_out[0], b"scale_addresses", kernel_out), "urKernelCreate")

    a = np.float32(2.5)
    values = [ffi.new("uint64_t *", int(ffi.cast("uintptr_t", x_dev))),
              ffi.new("uint64_t *", int(ffi.cast("uintptr_t", y_dev))),
              ffi.new("float *", a), ffi.new("int32_t *", n)]
    block, work_group = 128, 16  # BLOCK elements per program, num_warps * threads_per_warp
    groups = -(-n // block)
    global_size = ffi.new("size_t[3]", [groups * work_group, 1, 1])
    local_size = ffi.new("size_t[3]", [work_group, 1, 1])
    event_out = ffi.new("ur_event_handle_t *")
    if hasattr(lib, "urEnqueueKernelLaunchWithArgsExp"):  # oneAPI 2026 and later
        args = ffi.new("ur_exp_kernel_arg_properties_t[4]")
        for index, value in enumerate(values):
            args[index].stype = enums.ur_structure_type_t.UR_STRUCTURE_TYPE_EXP_KERNEL_ARG_PROPERTIES
            args[index].type = enums.ur_exp_kernel_arg_type_t.UR_EXP_KERNEL_ARG_TYPE_VALUE
            args[index].index = index
            args[index].size = ffi.sizeof(ffi.typeof(value).item)
            args[index].value.value = value
        ok(lib.urEnqueueKernelLaunchWithArgsExp(queue, kernel_out[0], 1, ffi.NULL, global_size,
                                                local_size, 4, args, ffi.NULL, 0, ffi.NULL,
                                                event_out), "urEnqueueKernelLaunchWithArgsExp")
    else:  # arguments set on the kernel, then a launch of 9, 10 or 11 parameters
        for index, value in enumerate(values):
            ok(lib.urKernelSetArgValue(kernel_out[0], index, ffi.sizeof(ffi.typeof(value).item),
                                       ffi.NULL, value), "urKernelSetArgValue")
        properties = {9: (), 10: (ffi.NULL,), 11: (0, ffi.NULL)}[
            len(ffi.typeof(lib.urEnqueueKernelLaunch).args)]
        ok(lib.urEnqueueKernelLaunch(queue, kernel_out[0], 1, ffi.NULL, global_size, local_size,
                                     *properties, 0, ffi.NULL, event_out),
           "urEnqueueKernelLaunch")
    ok(lib.urQueueFinish(queue), "urQueueFinish")  # no sleeping: the kernel ran on this queue
    y = np.full(n, np.nan, np.float32)
    ok(lib.urEnqueueUSMMemcpy(queue, True, ffi.from_buffer(y), y_dev, nbytes, 0, ffi.NULL,
                              ffi.NULL), "urEnqueueUSMMemcpy")
    reference = x.astype(np.float64) * 2.5
    checks["max_abs_error"] = float(np.max(np.abs(y - reference)))
    checks["max_abs_reference"] = float(np.max(np.abs(reference)))
    checks["nan_left"] = int(np.isnan(y).sum())

    ok(lib.urEventRelease(event_out[0]), "urEventRelease")
    ok(lib.urKernelRelease(kernel_out[0]), "urKernelRelease")
    ok(lib.urProgramRelease(program_out[0]), "urProgramRelease")
    ok(lib.urMemRelease(buffer_out[0]), "urMemRelease")
    for pointer in (x_dev, y_dev):
        ok(lib.urUSMFree(context, pointer), "urUSMFree")
    ok(lib.urQueueRelease(queue), "urQueueRelease")
    ok(lib.urContextRelease(context), "urContextRelease")
    ok(lib.urDeviceRelease(device), "urDeviceRelease")
    for index in range(checks["adapters"]):
        ok(lib.urAdapterRelease(adapters[index]), "urAdapterRelease")
    ok(lib.urLoaderTearDown(), "urLoaderTearDown")
    checks["torch_imported"] = "torch" in sys.modules and sys.modules["torch"] is not None
    return checks


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        compile_scale_kernel(sys.argv[2])
    else:
        print(json.dumps(run(sys.argv[2])))
