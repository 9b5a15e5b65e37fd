"""Devices on the real CPU UR device: discovery and filters, typed properties, contexts, and
``Device.synchronize()`` actually waiting for a long kernel."""

import ctypes
import gc
import re

import numpy as np
import pytest

import device_under_test
import ur_cffi
from lcg import LCG_A, LCG_C, lcg_reference
from ur_cffi import Backend, ffi
from ur_cffi._compat import BACKEND_PREFIX
from ur_cffi.enums import (
    ur_device_info_t,
    ur_device_type_t,
    ur_device_usm_access_capability_flag_t as usm_flag,
    ur_event_status_t,
)

def test_lcg_reference_matches_a_plain_loop():
    x = np.array([0, 1, -1, 2**31 - 1, -(2**31)], np.int32)
    expected = x.view(np.uint32).astype(np.uint64)
    for _ in range(37):
        expected = (expected * LCG_A + LCG_C) % 2**32
    assert np.array_equal(lcg_reference(x, 37), expected.astype(np.uint32).view(np.int32))


def test_devices_lists_the_test_device(device):
    everything = ur_cffi.devices()
    assert device in everything
    assert all(isinstance(d, ur_cffi.Device) for d in everything)
    assert ur_cffi.devices() == everything  # the same objects: enumeration is cached
    assert ur_cffi.devices("all") == everything
    assert ur_cffi.devices(ur_device_type_t.UR_DEVICE_TYPE_ALL) == everything
    of_its_type = ur_cffi.devices(device_under_test.TYPE)
    assert device in of_its_type and of_its_type == ur_cffi.devices(device_under_test.TYPE.upper())
    assert of_its_type == ur_cffi.devices(device.type)
    assert all(d.type == ur_device_type_t.UR_DEVICE_TYPE_CPU for d in ur_cffi.devices("cpu"))
    assert all(d.type == ur_device_type_t.UR_DEVICE_TYPE_GPU for d in ur_cffi.devices("gpu"))
    backend = device.backend.name.removeprefix(BACKEND_PREFIX).lower()
    assert device in ur_cffi.devices(backend=backend)
    assert device in ur_cffi.devices(device_under_test.TYPE, backend=device.backend)
    assert device not in ur_cffi.devices(backend="level_zero")
    assert all(d.backend == Backend[BACKEND_PREFIX + "LEVEL_ZERO"]
               for d in ur_cffi.devices(backend="level_zero"))
    if device_under_test.TYPE == "cpu":
        assert device.backend == Backend[BACKEND_PREFIX + "OPENCL"]


@pytest.mark.parametrize("kwargs, named", [({"device_type": "tpu"}, "'tpu'"),
                                           ({"backend": "vulkan"}, "'vulkan'")])
def test_unknown_filter_names_raise_value_error(kwargs, named):
    with pytest.raises(ValueError, match=named) as raised:
        ur_cffi.devices(**kwargs)
    assert "cpu" in str(raised.value) or "opencl" in str(raised.value)  # the choices are listed


@pytest.mark.parametrize("kwargs, named", [
    ({"device_type": -1}, "device_type must be a ur_device_type_t or its name, not int -1"),
    ({"device_type": 1.5}, "not float 1.5"), ({"device_type": True}, "not bool True"),
    ({"device_type": b"cpu"}, "not bytes b'cpu'"), ({"backend": ["opencl"]}, "backend must be"),
    # a member of another enum is not its number (swapped, these selected by 4 and 2)
    ({"backend": ur_device_type_t.UR_DEVICE_TYPE_CPU},
     f"backend must be a {Backend.__name__} or its name, not ur_device_type_t"),
    ({"device_type": Backend[BACKEND_PREFIX + "OPENCL"]},
     f"device_type must be a ur_device_type_t or its name, not {Backend.__name__}")])
def test_filters_of_another_type_raise_type_error(kwargs, named):
    with pytest.raises(TypeError, match=re.escape(named)):
        ur_cffi.devices(**kwargs)
    assert ur_cffi.devices(int(ur_device_type_t.UR_DEVICE_TYPE_ALL)) == ur_cffi.devices()
    assert ur_cffi.devices(np.int64(ur_device_type_t.UR_DEVICE_TYPE_ALL)) == ur_cffi.devices()


def test_info_takes_its_own_enumeration(device):
    with pytest.raises(TypeError, match="info takes a ur_device_info_t, not int 1"):
        device.info(1)
    with pytest.raises(TypeError, match="info takes a ur_device_info_t, not ur_queue_info_t"):
        device.info(ur_cffi.enums.ur_queue_info_t.UR_QUEUE_INFO_CONTEXT)
    with pytest.raises(TypeError, match="info takes a ur_platform_info_t, not str 'name'"):
        device.platform.info("name")


def test_default_device_prefers_a_gpu():
    found = ur_cffi.devices()
    gpus = [d for d in found if d.type == ur_device_type_t.UR_DEVICE_TYPE_GPU]
    assert ur_cffi.default_device() is (gpus or found)[0]


def test_device_properties_have_their_python_types(device):
    assert isinstance(device.name, str) and device.name
    assert device.type is ur_device_type_t[f"UR_DEVICE_TYPE_{device_under_test.TYPE.upper()}"]
    assert isinstance(device.vendor, str) and device.vendor
    if device_under_test.TYPE == "cpu":
        assert "Intel" in device.vendor  # Intel's OpenCL runtime, whatever the processor
    assert isinstance(device.driver_version, str) and device.driver_version
    for size in (device.global_mem_size, device.local_mem_size, device.max_mem_alloc_size,
                 device.max_compute_units, device.max_work_group_size):
        assert type(size) is int and size > 0
    assert device.max_mem_alloc_size <= device.global_mem_size
    assert isinstance(device.max_work_item_sizes, list) and len(device.max_work_item_sizes) == 3
    assert all(type(s) is int and 0 < s for s in device.max_work_item_sizes)
    assert max(device.max_work_item_sizes) >= device.max_work_group_size
    assert isinstance(device.sub_group_sizes, list) and device.sub_group_sizes
    assert all(type(s) is int and s > 0 for s in device.sub_group_sizes)
    device.sub_group_sizes.clear()  # a caller's list: the cached one (Triton's target reads
    device.max_work_item_sizes[0] = 0  # it) was handed out, and changed for every later read
    assert device.sub_group_sizes and device.max_work_item_sizes[0] > 0
    assert isinstance(device.il_version, str) and device.il_version
    for flags in (device.usm_host_support, device.usm_device_support, device.usm_shared_support):
        assert isinstance(flags, usm_flag)
        assert usm_flag.UR_DEVICE_USM_ACCESS_CAPABILITY_FLAG_ACCESS in flags
    assert device.backend == device.platform.backend == device.platform.adapter.backend
    # Up to oneAPI 2025.2 an adapter's backend is another enum's (ur_adapter_backend_t), which
    # devices(backend=) refused.
    assert type(device.platform.adapter.backend) is Backend
    assert device in ur_cffi.devices(backend=device.platform.adapter.backend)
    assert isinstance(device.platform.name, str) and device.platform.name
    extensions = device.extensions
    assert isinstance(extensions, frozenset) and all(isinstance(e, str) for e in extensions)
    assert isinstance(device.has_fp16, bool) and isinstance(device.has_fp64, bool)
    assert device.info(ur_device_info_t.UR_DEVICE_INFO_NAME) == device.name
    assert device.info(ur_device_info_t.UR_DEVICE_INFO_MAX_WORK_GROUP_SIZE) == \
        device.max_work_group_size
    assert device.name in repr(device) and device.type.name in repr(device)
    if device_under_test.TYPE == "cpu":  # the OpenCL adapter over Intel's CPU runtime
        assert "SPIR-V_1.0" in device.il_version.split()
        assert device.backend is Backend[BACKEND_PREFIX + "OPENCL"]
        assert "cl_khr_il_program" in extensions
        assert device.has_fp16 is ("cl_khr_fp16" in extensions)
        assert device.has_fp64 is ("cl_khr_fp64" in extensions)


def test_root_devices_are_not_closed_by_close_or_with(device):
    with device as same:
        assert same is device
    device.close()
    assert not device.closed
    assert device.name  # still usable: root devices are released at loader teardown


def test_create_context(device):
    with device.create_context() as context:
        assert isinstance(context, ur_cffi.Context)
        assert context.devices == (device,)
        assert not context.closed
        assert "1 device" in repr(context)
    assert context.closed and "closed" in repr(context)
    with ur_cffi.Context([device]) as context:
        assert context.devices == (device,)
    with pytest.raises(ValueError, match="at least one device"):
        ur_cffi.Context([])
    with pytest.raises(ValueError, match="name a device twice"):
        ur_cffi.Context([device, device])


def test_synchronize_waits_for_a_long_kernel(device, context, build_triton, rng, monkeypatch):
    """A kernel of a few hundred ms writes host USM; right after ``synchronize()`` it is done.

    The output is read straight from host memory, not through a queue, so only the
    synchronization can have made it complete.  On the CPU device ``urDeviceWaitExp`` is
    unsupported and the documented fallback (finish every ur_cffi queue) must be what ran;
    where the device supports it (CUDA), the device-wide wait alone.
    """
    program, compiled = build_triton("lcg_steps", BLOCK=1024)
    kernel = program.kernel(compiled.name, ("ptr", "ptr", "int32", "int32"),
                            **compiled.options)
    n, steps = 200_003, 300_000
    x = rng.integers(-(2**31), 2**31, n, dtype=np.int32)
    finished = []  # the UR handles of the queues synchronize() finished
    wait = ur_cffi._waiting.wait

    def recording_wait(blocking_call, name, *args, **kwargs):
        if name == "urQueueFinish":
            finished.append(int(ur_cffi.ffi.cast("uintptr_t", args[0])))
        return wait(blocking_call, name, *args, **kwargs)

    monkeypatch.setattr(ur_cffi._waiting, "wait", recording_wait)
    queue = ur_cffi.Queue(context, device)
    try:
        source = ur_cffi.asarray(x, queue=queue)
        out = ur_cffi.empty(n, np.int32, queue=queue, kind="host")
        out.fill(np.iinfo(np.int32).min)
        finished.clear()
        event = kernel.launch(queue, -(-n // 1024) * compiled.local_size, compiled.local_size,
                              source, out, n, steps)
        device.synchronize()
        status = event.status
        result = np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(out.data_ptr())).copy()
        handle = int(ur_cffi.ffi.cast("uintptr_t", queue.handle))
        if device_under_test.TYPE == "cpu":
            assert not device.synchronize_uses_device_wait and handle in finished  # fallback
        elif device.synchronize_uses_device_wait:
            assert handle not in finished
        assert status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
        assert np.array_equal(result, lcg_reference(x, steps))
    finally:
        queue.close()


def test_synchronize_skips_closed_queues(device, context):
    queue = ur_cffi.Queue(context, device)
    queue.close()
    device.synchronize()  # must not touch the closed queue
    assert device.synchronize_uses_device_wait is (device_under_test.TYPE != "cpu")


def test_the_runtimes_default_type_and_objects_made_by_hand(device, queue):
    """``devices("default")`` filtered on a type no device reports (always empty); a Device or
    Event made by hand with a wrong partner took its handle (released later, twice if the
    caller released it too) before an AttributeError."""
    defaults = ur_cffi.devices("default")
    assert defaults and set(defaults) <= set(ur_cffi.devices())
    if ur_cffi.devices() == [device]:
        assert defaults == [device]
    for handle, platform in ((0, None), (device.handle, None), (ur_cffi.ffi.NULL, device.platform)):
        with pytest.raises(TypeError, match="Device takes a non-null ur_device_handle_t and its "
                                            "loader.Platform"):
            ur_cffi.Device(handle, platform)
    raw = ur_cffi.ffi.new("ur_event_handle_t *")
    ur_cffi.check(ur_cffi.lib.urEnqueueEventsWait(queue.handle, 0, ur_cffi.ffi.NULL, raw),
                  "urEnqueueEventsWait")
    for wrong in (None, queue.context, "queue"):
        with pytest.raises(TypeError, match="Event's queue must be the ur_cffi Queue"):
            ur_cffi.Event(raw[0], wrong)
    event = ur_cffi.Event(raw[0], queue)  # the handle was not taken above: taken once here
    event.wait()
    event.close()


def test_struct_properties_own_their_memory():
    """``info.decode`` returned struct elements of a temporary array: once it was freed, they
    read whatever reused its memory."""
    name = "ur_device_partition_property_t"
    raw = bytes(ur_cffi.ffi.buffer(ur_cffi.ffi.new(f"{name}[2]", [
        {"type": 4230, "value": {"equally": 7}}, {"type": 4231, "value": {"count": 9}}])))
    values = ur_cffi.info.decode("UR_DEVICE_INFO_PARTITION_TYPE", raw)
    assert all(ur_cffi.ffi.typeof(v) is ur_cffi.ffi.typeof(f"{name} *") for v in values)
    gc.collect()
    junk = [ur_cffi.ffi.new(f"{name}[]", [{"type": 0x1111, "value": {"equally": 0x2222}}] * 2)
            for _ in range(2000)]
    assert [(v.type, v.value.equally) for v in values] == [(4230, 7), (4231, 9)]
    del junk


def test_an_adapter_made_from_a_handle_holds_a_reference_of_its_own(device):
    # It took over the loader's (as of UR_PLATFORM_INFO_ADAPTER's handle): each collected
    # wrapper released the loader's adapter, whose queries then failed and whose teardown
    # crashed.
    from ur_cffi import loader

    handle = device.platform.adapter.handle  # (the loader's reference is the platform's)
    for _ in range(6):
        wrapper = loader.Adapter(handle)
        assert wrapper.backend == device.backend
        del wrapper
        gc.collect()
    assert device.platform.adapter.backend == device.backend
    for wrong in (None, ffi.NULL, "opencl", device.handle):
        with pytest.raises(TypeError, match="Adapter takes a non-null ur_adapter_handle_t"):
            loader.Adapter(wrong)


def test_a_device_handle_has_one_owner_and_a_root_synchronizes_its_sub_devices(device,
                                                                              kernels):
    """A second Device of one handle (a sub-device read back from its context, say) made two
    owners, each releasing it: dropping one crashed the process at the other's next use.
    Without urDeviceWaitExp, root.synchronize() finished the root's own queues only: it
    returned while a kernel still ran on a sub-device's queue."""
    import threading

    import crash_probe
    from ur_cffi.device import Device

    with pytest.raises(ValueError, match="is owned already, by <Device"):
        Device(device.handle, device.platform)
    sub_devices = device_under_test.partition(device, "BY_COUNTS", 1, 1)
    if not sub_devices:
        pytest.skip(f"{device!r} is not partitioned by counts here (the CUDA adapter's GPUs)")
    (sub,) = sub_devices
    with pytest.raises(ValueError, match="is owned already"):
        Device(sub.handle, device.platform)
    # Of one platform, through another Platform object of it (each platforms() makes new
    # ones): refused as of two platforms, compared by object.
    again = [p for p in device.platform.adapter.platforms()
             if p.handle == device.platform.handle]
    (of_another_object,) = device_under_test.partition(device, "BY_COUNTS", 1, 1, again[0])
    assert again[0] is not device.platform
    ur_cffi.Context([device, of_another_object]).close()
    with device.create_context() as context, \
            pytest.raises(ValueError, match=r"Queue: device <Device .*> \(handle .*\) is not one "
                                            r"of the context's devices \(handles \[<cdata"):
        ur_cffi.Queue(context, sub)  # (their reprs are alike: the handles tell them apart)
    local = crash_probe.LOCAL_SIZE
    with sub.create_context() as context, ur_cffi.Queue(context, sub) as queue:
        program, spin = crash_probe.load(context, kernels, "spin")
        flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        out = ur_cffi.empty(1, np.int32, queue=queue)
        event = spin.launch(queue, local, local, flag, out, crash_probe.SPIN_LIMIT,
                            *crash_probe.spin_local())
        release = threading.Timer(
            0.3, lambda: setattr(ctypes.c_int32.from_address(flag.data_ptr()), "value", 1))
        release.start()
        device.synchronize()
        assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
        release.join()
        spin.close()
        program.close()


HAND_MADE_DEVICES = """
import gc, sys
import numpy as np
import ur_cffi
from ur_cffi import ffi, lib, loader
from ur_cffi.device import Device
from ur_cffi.enums import ur_device_type_t

def first_device():  # (the first platform with a device, a handle of its first device)
    for adapter in loader.init():  # (some releases list adapters without platforms first)
        for platform in adapter.platforms():
            handles = ffi.new("ur_device_handle_t[1]")
            if not lib.urDeviceGet(platform.handle, ur_device_type_t.UR_DEVICE_TYPE_ALL, 1,
                                   handles, ffi.NULL):
                return platform, handles[0]
    raise LookupError("no device")

stale, handle = first_device()
lib.urDeviceRelease(handle)
loader.teardown()
platform, handle = first_device()
try:
    Device(handle, stale)  # a platform of the loader torn down
except ur_cffi.ClosedError:
    print("refused")
gc.collect()  # (the Device that failed released the handle here: a crash at its next use)
mine = Device(handle, platform)  # made by hand before devices() enumerates
assert ur_cffi.devices()[0] is mine and ur_cffi.devices()[0] is mine
with mine.create_context() as context, ur_cffi.Queue(context) as queue:
    print(ur_cffi.asarray(np.arange(3.0), queue=queue).to_numpy().tolist())
"""


def test_devices_made_by_hand_own_their_handle_only_once_made(tmp_path):
    """A Device whose construction failed (a platform of a loader torn down) had taken the
    handle: collected, it released the caller's reference, and the process crashed at its
    next use; a Device made by hand of a root handle before devices() enumerated made every
    devices() call raise ("owned already"), from inside.  Under UR's leak checker."""
    import crash_probe

    done = crash_probe.run_child(code=HAND_MADE_DEVICES, timeout=120,
                                 env=crash_probe.child_env(UR_CFFI_VALIDATION="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["refused", "[0.0,", "1.0,", "2.0]"], done.stdout


def test_sub_devices_made_while_the_root_synchronizes(device):
    """Devices made of a root's partitions are noted on the root, which synchronize() reads:
    without a lock, "Set changed size during iteration" (0.9 s of two threads)."""
    import sys
    import threading
    import time

    if not device_under_test.partition(device, "BY_COUNTS", 1, 1):
        pytest.skip(f"{device!r} is not partitioned by counts here (the CUDA adapter's GPUs)")
    errors, stop = [], threading.Event()
    kept = [device_under_test.partition(device, "BY_COUNTS", 1, 1) for _ in range(300)]

    def make():
        while not stop.is_set():
            kept.append(device_under_test.partition(device, "BY_COUNTS", 1, 1))
            del kept[:-600]

    def synchronize():
        try:
            while not stop.is_set():
                device.synchronize()
        except Exception as error:  # noqa: BLE001 - what the test looks for
            errors.append(error)

    threads = [threading.Thread(target=make), threading.Thread(target=synchronize)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # (threads switch inside the loops)
    try:
        for thread in threads:
            thread.start()
        time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
    assert errors == []
