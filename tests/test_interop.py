"""Zero-copy interchange on the CPU device: numpy views of host and shared USM, DLPack round
trips with numpy, wrapping USM pointers, and sharing memory with dpctl (its OpenCL context,
its ``__sycl_usm_array_interface__``)."""

import gc
import sys
import threading
import types
import weakref

import ml_dtypes
import ctypes

import numpy as np
import pytest

import ur_cffi
import device_under_test
from concurrency import run_in_threads
from ur_cffi import ffi, interop, lib

NUMPY_2_1 = np.lib.NumpyVersion(np.__version__) >= "2.1.0"
"""np.from_dlpack(device=, copy=) and read-only DLPack exports came with numpy 2.1."""


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_host_and_shared_usm_are_numpy_views(queue, rng, kind):
    host = rng.standard_normal((6, 8)).astype(np.float32)
    array = ur_cffi.asarray(host, queue=queue, kind=kind)
    view = np.asarray(array)
    assert view.__array_interface__["data"][0] == array.data_ptr()
    assert np.array_equal(view, host)
    strided = np.asarray(array[1::2, ::-3])
    assert strided.__array_interface__["data"][0] == array[1::2, ::-3].data_ptr()
    assert np.array_equal(strided, host[1::2, ::-3])
    view[2, 3] = 42.0  # the same memory: the device sees the write
    assert array[2, 3].item() == 42.0
    alive = weakref.ref(array)
    del array
    gc.collect()
    assert alive() is not None  # the numpy view keeps the USM array
    bf = np.asarray(ur_cffi.ones(4, ur_cffi.bfloat16, queue=queue, kind=kind))
    assert bf.dtype == ml_dtypes.bfloat16 and np.array_equal(bf, np.ones(4))


@pytest.mark.parametrize("export", ["asarray", "from_dlpack"])
def test_closing_an_array_leaves_its_memory_to_numpy_views(context, device, rng, export):
    """Closing gave the memory back while a numpy view still read it: the next array of the
    size took it (the view showed its data), and after empty_cache() reading the view ended
    the process."""
    with ur_cffi.Queue(context, device) as queue:
        values = rng.standard_normal(4096).astype(np.float32)
        array = ur_cffi.asarray(values, queue=queue, kind="host")
        seen = np.asarray(array[::2]) if export == "asarray" else np.from_dlpack(array[::2])
        before, address = ur_cffi.memory_stats()["allocated_bytes"], array.data_ptr()
        array.close()
        with pytest.raises(ur_cffi.ClosedError):
            array.data_ptr()
        other = ur_cffi.full(4096, -7.0, np.float32, queue=queue, kind="host")
        assert other.data_ptr() != address and np.array_equal(seen, values[::2])
        ur_cffi.empty_cache()
        assert np.array_equal(seen, values[::2])
        assert ur_cffi.memory_stats()["allocated_bytes"] == before + other.nbytes
        del seen
        gc.collect()
        assert ur_cffi.memory_stats()["allocated_bytes"] == before + other.nbytes - 4096 * 4
        other.close()
        # A capsule nobody took (numpy refuses device memory and drops it) holds nothing.
        device_array = ur_cffi.zeros(4096, np.float32, queue=queue)
        with pytest.raises((BufferError, RuntimeError, TypeError)):
            np.from_dlpack(device_array)
        device_array.close()
        assert ur_cffi.memory_stats()["allocated_bytes"] == before - 4096 * 4


def test_device_usm_refuses_numpy_and_names_to_numpy(queue):
    array = ur_cffi.zeros(4, queue=queue)
    with pytest.raises(TypeError, match=r"to_numpy\(\)"):
        np.asarray(array)
    with pytest.raises(TypeError, match=r"to_numpy\(\)"):
        np.add(array, 1)
    with pytest.raises(TypeError, match=r"np.array\(\) take no device array.*to_numpy\(\)"):
        np.array(array)  # (numpy 2 asks for a copy: CuPy and PyTorch refuse it too)


def test_dlpack_round_trips_with_numpy(queue, rng):
    host = rng.standard_normal((5, 7))
    array = ur_cffi.asarray(host, queue=queue, kind="host")
    assert array.__dlpack_device__() == (interop.KDL_CPU, 0)
    imported = np.from_dlpack(array[:, 2:])  # no copy: numpy reads the host USM
    assert imported.__array_interface__["data"][0] == array[:, 2:].data_ptr()
    assert np.array_equal(imported, host[:, 2:])
    back = ur_cffi.from_dlpack(imported, queue=queue)  # USM of this context: wrapped again
    if imported.flags.writeable:
        assert back.data_ptr() == array[:, 2:].data_ptr() and back.strides == imported.strides
    else:  # numpy before 2: np.from_dlpack's arrays are read-only, so imported as a copy
        assert back.data_ptr() != array[:, 2:].data_ptr()
    assert np.array_equal(back.to_numpy(), host[:, 2:])
    copied = ur_cffi.from_dlpack(host[::2], queue=queue)  # plain numpy memory: copied
    assert copied.kind == "device" and np.array_equal(copied.to_numpy(), host[::2])
    with pytest.raises(BufferError, match="copy=False"):
        ur_cffi.from_dlpack(host, queue=queue, copy=False)
    if NUMPY_2_1:  # numpy's refusal of another byte order stands, read-only or not
        swapped = host.astype(">f8")
        swapped.flags.writeable = False
        with pytest.raises(BufferError):
            ur_cffi.from_dlpack(swapped, queue=queue)
    gc.collect()
    exported = len(interop._exported)
    del imported, back
    gc.collect()
    assert len(interop._exported) == exported - 1  # numpy's deleter call released it


@pytest.mark.parametrize("kind", ["device", "shared"])
def test_dlpack_of_device_usm_follows_the_oneapi_convention(queue, rng, kind):
    array = ur_cffi.asarray(rng.standard_normal(10).astype(ml_dtypes.bfloat16), queue=queue,
                            kind=kind)
    device_type, device_id = array.__dlpack_device__()
    assert device_type == interop.KDL_ONEAPI
    assert ur_cffi.devices()[device_id] == array.device
    again = ur_cffi.from_dlpack(array[3:], queue=queue)
    assert again.dtype == ml_dtypes.bfloat16 and again.data_ptr() == array[3:].data_ptr()
    assert again.to_numpy().tobytes() == array.to_numpy()[3:].tobytes()
    if kind == "device":  # asked for kDLCPU, device USM comes as a host copy
        floats = ur_cffi.asarray(rng.standard_normal(10), queue=queue, kind=kind)
        if NUMPY_2_1:  # np.from_dlpack(device=): numpy 2.1 on
            on_host = np.from_dlpack(floats[::2], device="cpu")
            assert np.array_equal(on_host, floats.to_numpy()[::2])
        wrapped = ur_cffi.from_dlpack(array.__dlpack__(dl_device=(1, 0)), queue=queue)
        assert wrapped.kind == "device" and wrapped.data_ptr() != array.data_ptr()
        assert wrapped.to_numpy().tobytes() == array.to_numpy().tobytes()
    # Asked for a copy on the host: a copy, also of shared USM, which the host reads in place
    # (np.from_dlpack(array, device="cpu", copy=True) asks this way).
    host_copy = ur_cffi.from_dlpack(array.__dlpack__(dl_device=(interop.KDL_CPU, 0), copy=True),
                                    queue=queue)
    assert host_copy.data_ptr() != array.data_ptr()
    assert host_copy.to_numpy().tobytes() == array.to_numpy().tobytes()
    with pytest.raises(TypeError, match="copy must be True, False or None, not str 'no'"):
        array.__dlpack__(copy="no")
    capsule = array.__dlpack__()
    with pytest.raises(TypeError, match="unused DLPack capsule"):
        ur_cffi.from_dlpack(object(), queue=queue)
    del capsule  # an unconsumed capsule deletes its tensor
    gc.collect()


def test_a_usmarray_owner_of_a_wrap_keeps_its_memory_past_its_close(queue, context, rng):
    # Its close gave the memory back to the cache while the wrap lived: the next allocation
    # got it, and the wrap read and wrote the new array's data.
    host = rng.standard_normal(64).astype(np.float32)
    other = ur_cffi.Queue(context)
    owner = ur_cffi.asarray(host, queue=queue)
    address = owner.data_ptr()
    wrap = ur_cffi.from_pointer(address, (8, 8), np.float32, queue=other, owner=owner)
    owner.close()
    fresh = [ur_cffi.full(64, 5.0, np.float32, queue=queue) for _ in range(4)]
    assert all(array.data_ptr() != address for array in fresh)
    np.testing.assert_array_equal(wrap.to_numpy(), host.reshape(8, 8))
    wrap[...] = -1.0
    assert all(np.all(array.to_numpy() == 5.0) for array in fresh)
    wrap.close()
    del wrap, fresh
    gc.collect()
    again = [ur_cffi.empty(64, np.float32, queue=queue) for _ in range(8)]
    assert any(array.data_ptr() == address for array in again)  # given back with the wrap
    with pytest.raises(ur_cffi.ClosedError):
        ur_cffi.from_pointer(address, 8, np.float32, queue=queue, owner=owner)
    other.close()


def test_from_pointer_wraps_usm_without_owning_it(queue, context, device):
    out = ffi.new("void **")
    assert lib.urUSMSharedAlloc(context.handle, device.handle, ffi.NULL, ffi.NULL, 4096,
                                out) == 0
    address = int(ffi.cast("uintptr_t", out[0]))
    try:
        owner = type("Owner", (), {})()
        alive = weakref.ref(owner)
        array = ur_cffi.from_pointer(address, (4, 8), np.float64, queue=queue, owner=owner)
        del owner
        assert array.kind == "shared" and alive() is not None
        array[...] = np.arange(32.0).reshape(4, 8)
        assert np.array_equal(np.asarray(array.T), np.arange(32.0).reshape(4, 8).T)
        t = ur_cffi.from_pointer(address, (8, 4), np.float64, queue=queue, strides=(8, 64))
        assert np.array_equal(t.to_numpy(), np.arange(32.0).reshape(4, 8).T)
        array.close()
        t.close()
        gc.collect()
        assert alive() is None
        with pytest.raises(ValueError, match="is not USM memory"):
            ur_cffi.from_pointer(np.zeros(4).ctypes.data, 4, np.float64, queue=queue)
        with pytest.raises(ValueError, match="run past the USM allocation"):
            ur_cffi.from_pointer(address, 4096, np.float64, queue=queue)
        with pytest.raises(ValueError, match="address .* is out of range"):
            ur_cffi.from_pointer(0, 4, np.float64, queue=queue)
        with pytest.raises(ValueError, match="is not aligned to float64's 8 bytes"):
            ur_cffi.from_pointer(address + 4, 4, np.float64, queue=queue)  # kernels misread
        assert ur_cffi.from_pointer(address + 4, 4, np.float32, queue=queue).shape == (4,)
        with pytest.raises(ValueError, match=r"strides \(3,\) are not multiples of uint16's "
                                             r"alignment \(2 bytes\)"):
            ur_cffi.from_pointer(address, 3, np.uint16, queue=queue, strides=(3,))
        assert ur_cffi.from_pointer(address, (1, 2), np.uint16, queue=queue,
                                    strides=(3, 2)).shape == (1, 2)  # one row: no such step
    finally:
        queue.finish()
        assert lib.urUSMFree(context.handle, out[0]) == 0


NO_DPCTL = ("dpctl is not installed (the test extra installs it, with the 2026.2 runtime it "
            "requires)")


@pytest.fixture(scope="module")
def dpctl_queue():
    dpctl = pytest.importorskip("dpctl", reason=NO_DPCTL)
    return dpctl.SyclQueue("opencl:cpu")


def test_a_context_and_queue_from_dpctl_share_its_memory(dpctl_queue, rng):
    import dpctl.memory as dpm

    context = interop.context_from_dpctl(dpctl_queue)
    assert interop.context_from_dpctl(dpctl_queue) is context  # one per SYCL context
    queue = interop.queue_from_dpctl(dpctl_queue)
    # dpctl's memory in ur_cffi, without a copy
    memory = dpm.MemoryUSMShared(64 * 4, queue=dpctl_queue)
    values = rng.standard_normal(64).astype(np.float32)
    memory.copy_from_host(values.view(np.uint8))
    array = interop.from_sycl_usm_array_interface(memory, queue=queue).view(np.float32)
    assert array.kind == "shared" and array.shape == (64,)
    assert np.array_equal(array.to_numpy(), values)
    array[::2] = 0.0
    values[::2] = 0.0
    assert np.array_equal(memory.copy_to_host().view(np.float32), values)
    # ur_cffi's memory in dpctl, without a copy
    for dtype, typestr in ((ur_cffi.bfloat16, "|V2"), (ur_cffi.float8_e5m2, "|V1"),
                           (np.float32, "<f4")):  # raw bytes where numpy has no name
        interface = ur_cffi.zeros(4, dtype, queue=queue).__sycl_usm_array_interface__
        assert interface["typestr"] == typestr
    mine = ur_cffi.asarray(values * 3, queue=queue)
    interface = mine.__sycl_usm_array_interface__
    assert interface["syclobj"] is dpctl_queue and interface["data"][0] == mine.data_ptr()
    seen = dpm.as_usm_memory(mine)
    assert seen._pointer == mine.data_ptr() and seen.get_usm_type() == "device"
    assert np.array_equal(seen.copy_to_host().view(np.float32), values * 3)
    mine.close()  # dpctl holds the array object: its memory stays with dpctl
    after = ur_cffi.full(64, -1.0, np.float32, queue=queue)  # (the allocator reused it before)
    assert after.data_ptr() != seen._pointer
    assert np.array_equal(seen.copy_to_host().view(np.float32), values * 3)
    shown = weakref.ref(mine)
    del mine, seen
    gc.collect()
    assert shown() is None  # (its pin held it: every array shown stayed allocated)
    odd = ur_cffi.from_pointer(after.data_ptr(), (2,), np.complex64, queue=queue, strides=(12,))
    with pytest.raises(AttributeError, match="a stride of 12 bytes is not a whole number"):
        odd.__sycl_usm_array_interface__  # (it went out as 1 element: 8 bytes)
    assert not hasattr(odd, "__sycl_usm_array_interface__")  # dpctl then tries DLPack
    default = interop.from_sycl_usm_array_interface(memory)  # queue made from the syclobj
    assert default.context is context
    with pytest.raises(AttributeError, match="context_from_dpctl"):
        ur_cffi.zeros(3, queue=ur_cffi.Queue(ur_cffi.default_device().create_context()))\
            .__sycl_usm_array_interface__


@pytest.fixture(scope="module")
def shim_cache(tmp_path_factory):
    """A cache of its own for the SYCL shim that to_dpctl compiles."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UR_CFFI_CACHE_DIR", str(tmp_path_factory.mktemp("shim_cache")))
        yield


def test_a_dpctl_queue_over_a_ur_cffi_queue_shares_its_order_and_memory(queue, shim_cache,
                                                                           build_triton, rng):
    dpctl = pytest.importorskip("dpctl", reason=NO_DPCTL)
    import dpctl.memory as dpm

    from kernels import lcg_reference

    sycl_queue = interop.to_dpctl(queue)
    assert isinstance(sycl_queue, dpctl.SyclQueue)
    assert sycl_queue.sycl_device.name == queue.device.name
    assert sycl_queue.sycl_device.backend.name == "opencl"
    # One native queue: a copy submitted through dpctl runs after a kernel ur_cffi launched,
    # with no wait between them (the kernel runs long enough to be caught otherwise).
    program, compiled = build_triton("lcg_steps", BLOCK=1024)
    kernel = program.kernel(compiled.name, ("ptr", "ptr", "int32", "int32"))
    n, steps = 100_003, 2000
    x = rng.integers(-(2**31), 2**31, n, dtype=np.int32)
    source = ur_cffi.asarray(x, queue=queue)
    out = ur_cffi.full(n, np.iinfo(np.int32).min, np.int32, queue=queue)
    queue.finish()
    kernel.launch(queue, -(-n // 1024) * compiled.local_size, compiled.local_size, source, out,
                  n, steps, event=False)
    interface = out.__sycl_usm_array_interface__
    assert interface["syclobj"] is sycl_queue and interface["data"][0] == out.data_ptr()
    seen = dpm.as_usm_memory(out)  # ur_cffi's memory in dpctl, without a copy
    assert seen._pointer == out.data_ptr() and seen.get_usm_type() == "device"
    assert np.array_equal(seen.copy_to_host().view(np.int32), lcg_reference(x, steps))
    # dpctl's writes into it, and dpctl's memory in ur_cffi
    values = rng.standard_normal(64).astype(np.float32)
    memory = dpm.MemoryUSMDevice(values.nbytes, queue=sycl_queue)
    memory.copy_from_host(values.view(np.uint8))
    theirs = interop.from_sycl_usm_array_interface(memory, queue=queue).view(np.float32)
    assert theirs.context is queue.context and np.array_equal(theirs.to_numpy(), values)
    mine = ur_cffi.zeros(64, np.float32, queue=queue)
    dpm.as_usm_memory(mine).copy_from_host((values * 2).view(np.uint8))
    assert np.array_equal(mine.to_numpy(), values * 2)
    assert interop.to_dpctl(queue) is sycl_queue  # one per queue


def opencl_reference_counts(queue) -> tuple[int, int]:
    """The OpenCL reference counts of ``queue``'s native queue and context."""
    from ur_cffi import ffi, lib

    opencl = ctypes.CDLL("libOpenCL.so.1")  # loaded by the OpenCL adapter already
    native = ffi.new("ur_native_handle_t *")
    counts = []
    for get, handle, info, query in (
            (lib.urQueueGetNativeHandle, (queue.handle, ffi.NULL), 0x1092,
             "clGetCommandQueueInfo"),
            (lib.urContextGetNativeHandle, (queue.context.handle,), 0x1080, "clGetContextInfo")):
        assert get(*handle, native) == 0
        count = ctypes.c_uint()
        assert getattr(opencl, query)(ctypes.c_void_p(int(native[0])), info, 4,
                                      ctypes.byref(count), None) == 0
        counts.append(count.value)
    return tuple(counts)


def test_a_dpctl_queue_outlives_the_ur_cffi_queue_it_was_made_over(device, shim_cache, rng):
    """SYCL keeps native handles without a reference of its own: to_dpctl holds one, so the
    SyclQueue still works after ur_cffi's queue and context are closed."""
    pytest.importorskip("dpctl", reason=NO_DPCTL)
    import dpctl.memory as dpm

    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    before = opencl_reference_counts(queue)
    sycl_queue = interop.to_dpctl(queue)
    assert opencl_reference_counts(queue) == (before[0] + 1, before[1] + 1)
    queue.close()
    context.close()
    values = rng.standard_normal(100)
    memory = dpm.MemoryUSMDevice(values.nbytes, queue=sycl_queue)
    memory.copy_from_host(values.view(np.uint8))
    assert np.array_equal(memory.copy_to_host().view(np.float64), values)


def test_a_to_dpctl_that_fails_leaves_no_reference_behind(queue, tmp_path, monkeypatch):
    # The references for SYCL were taken before the shim was built: each failed call kept one
    # more on the native queue and context.  A wrong argument to the from_dpctl functions
    # raised an AttributeError naming neither.
    pytest.importorskip("dpctl", reason=NO_DPCTL)
    from ur_cffi import _sycl_shim

    monkeypatch.setattr(_sycl_shim, "_library", None)  # built anew, by a compiler that fails
    monkeypatch.setenv("UR_CFFI_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    before = opencl_reference_counts(queue)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="compiling the SYCL shim failed"):
            interop.to_dpctl(queue)
    assert opencl_reference_counts(queue) == before
    for function in (interop.context_from_dpctl, interop.queue_from_dpctl):
        for wrong in (None, queue, queue.context):
            with pytest.raises(TypeError, match=f"{function.__name__}: sycl_queue must be a "
                                                f"dpctl SyclQueue, not {type(wrong).__name__}"):
                function(wrong)


def test_to_dpctl_on_a_context_made_from_dpctl_keeps_its_queue(dpctl_queue, shim_cache):
    queue = interop.queue_from_dpctl(dpctl_queue)
    made = interop.to_dpctl(queue)
    assert made is not dpctl_queue
    array = ur_cffi.zeros(4, queue=queue)
    assert array.__sycl_usm_array_interface__["syclobj"] is dpctl_queue


def test_to_dpctl_refuses_what_it_cannot_make(queue, shim_cache, monkeypatch, tmp_path):
    pytest.importorskip("dpctl", reason=NO_DPCTL)
    from ur_cffi import _sycl_shim

    with pytest.raises(TypeError, match="queue"):
        interop.to_dpctl("opencl:cpu")
    closed = ur_cffi.Queue(queue.context, queue.device)
    closed.close()
    with pytest.raises(ur_cffi.ClosedError):
        interop.to_dpctl(closed)
    monkeypatch.setattr(_sycl_shim, "_library", None)  # built anew, with no compiler
    monkeypatch.setenv("UR_CFFI_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler")
    with pytest.raises(RuntimeError, match="needs a C\\+\\+ compiler: 'no-such-compiler'"):
        interop.to_dpctl(queue)
    monkeypatch.setenv("CXX", "c++ -O2")  # (a command, as make reads it: "not on PATH")
    cache_file = tmp_path / "a file"
    cache_file.touch()
    monkeypatch.setenv("UR_CFFI_CACHE_DIR", str(cache_file))  # (a bare FileExistsError)
    with pytest.raises(RuntimeError, match="the SYCL shim's cache folder '.*a file' "
                                           "\\(UR_CFFI_CACHE_DIR, default ~/.cache/ur_cffi\\) "
                                           "cannot be made"):
        interop.to_dpctl(queue)
    monkeypatch.setenv("UR_CFFI_CACHE_DIR", str(tmp_path))
    assert interop.to_dpctl(queue).sycl_device.is_cpu


def test_usm_queries_refuse_what_is_no_address(queue):
    # They cast any number to void *: 2**64 more, or a float, read as the allocation's.
    address = ur_cffi.zeros(4, np.float32, queue=queue).data_ptr()
    for query in (interop.usm_kind, interop.allocation_bounds):
        for wrong, error in ((address + 2**64, ValueError), (address - 2**64, ValueError),
                             (float(address), TypeError)):
            with pytest.raises(error, match=f"{query.__name__}: address"):
                query(queue.context, wrong)
    assert interop.usm_kind(queue.context, address) == "device"
    for query in (interop.usm_kind, interop.allocation_bounds):
        for wrong in (None, queue):
            with pytest.raises(TypeError, match=f"{query.__name__}: context must be a ur_cffi "
                                                f"Context, not {type(wrong).__name__}"):
                query(wrong, address)


@pytest.mark.parametrize("strides", [(-4,), (-(1 << 40),), (4,)])
def test_from_pointer_refuses_elements_outside_the_allocation(queue, strides):
    array = ur_cffi.zeros(4, np.float32, queue=queue)
    base, size = interop.allocation_bounds(queue.context, array.data_ptr())
    # one element before the start, or one past the end, of what UR calls the allocation (the
    # allocator's block here; a UR pool's chunk, holding other arrays too, on the CUDA adapter)
    start, shape = (base, (2,)) if strides[0] < 0 else (array.data_ptr(), (
        (base + size - array.data_ptr()) // 4 + 1,))
    with pytest.raises(ValueError, match="run past the USM allocation"):
        ur_cffi.from_pointer(start, shape, np.float32, queue=queue, strides=strides)
    backwards = ur_cffi.from_pointer(array[3:].data_ptr(), (4,), np.float32, queue=queue,
                                     strides=(-4,))
    backwards.copy_from(np.arange(4, dtype=np.float32))
    assert np.array_equal(array.to_numpy(), np.arange(4, dtype=np.float32)[::-1])


def test_from_pointer_refuses_a_range_over_two_allocations(queue):
    first, second = (ur_cffi.zeros(8, np.float32, queue=queue) for _ in range(2))
    low, high = sorted((first.data_ptr(), second.data_ptr()))
    shape = ((high - low) // 4 + 8,)
    bounds = [interop.allocation_bounds(queue.context, a) for a in (low, high)]
    if bounds[0] != bounds[1]:  # two UR allocations (the CPU device's: no UR pool)
        with pytest.raises(ValueError, match="run past the USM allocation"):
            ur_cffi.from_pointer(low, shape, np.float32, queue=queue)
    else:  # one UR pool allocation holds both: UR cannot tell them apart
        assert ur_cffi.from_pointer(low, shape, np.float32, queue=queue).size == shape[0]
    assert not first.to_numpy().any() and not second.to_numpy().any()


def test_from_dlpack_copies_when_asked_and_keeps_0d_shapes(queue, rng):
    host = rng.standard_normal(4).astype(np.float32)
    array = ur_cffi.asarray(host, queue=queue)
    copied = ur_cffi.from_dlpack(array, queue=queue, copy=True)
    assert copied.data_ptr() != array.data_ptr()
    copied.fill(np.nan)
    assert np.array_equal(array.to_numpy(), host)
    scalar = ur_cffi.from_dlpack(np.array(3.5), queue=queue)
    assert scalar.shape == () and scalar.item() == 3.5


def test_dlpack_refuses_what_it_cannot_describe(queue):
    """longdouble went out as an IEEE kDLFloat of 128 bits (clongdouble: 0 bits); extents of
    2**63 and more, which numpy refuses too, wrapped to negative ones."""
    for dtype in (np.longdouble, np.clongdouble):
        with pytest.raises(BufferError, match="DLPack has no type for.*not longdouble"):
            ur_cffi.zeros(4, dtype, queue=queue).__dlpack__()
    for dtype in ("U3", "S2", [("a", np.int32)], "datetime64[s]", ">U3", ">M8[s]"):  # (blamed
        # longdouble; big-endian ones, their byte order)
        with pytest.raises(BufferError, match="holds numbers and booleans .not strings"):
            ur_cffi.zeros(4, dtype, queue=queue).__dlpack__()
    with pytest.raises(ValueError, match=r"extent 9223372036854775808 is out of range"):
        ur_cffi.empty((2**63, 0), np.float32, queue=queue)
    assert ur_cffi.empty((2**63 - 1, 0), np.uint8, queue=queue).size == 0
    with pytest.raises(ValueError, match="span more bytes than an index holds"):
        ur_cffi.empty((2**63 - 1, 0), np.float32, queue=queue)  # (as numpy: 4 bytes each)


def test_a_dlpack_import_of_a_ur_cffi_array_closes_with_it(queue, rng):
    values = rng.standard_normal(4)
    source = ur_cffi.asarray(values, queue=queue)
    with ur_cffi.Queue(queue.context, queue.device) as other:
        assert ur_cffi.from_dlpack(source, queue=other).queue is other
    imported = ur_cffi.from_dlpack(source, queue=queue)
    capsule = source.__dlpack__()
    assert imported.data_ptr() == source.data_ptr() and imported.base is source
    source.close()
    assert imported.closed
    with pytest.raises(ur_cffi.ClosedError):
        imported.to_numpy()
    # A capsule taken before the close holds the memory (test_a_capsule_taken_before_close_...)
    assert np.array_equal(ur_cffi.from_dlpack(capsule, queue=queue).to_numpy(), values)


def test_numpy_refusing_device_memory_keeps_its_error_and_leaks_nothing(queue):
    array = ur_cffi.zeros(4, np.float32, queue=queue)
    before = len(interop._exported)
    with pytest.raises((RuntimeError, BufferError), match="Unsupported device"):  # numpy's
        np.from_dlpack(array)
    alive = weakref.ref(array)
    del array
    ur_cffi.zeros(1, np.float32, queue=queue, kind="host").__dlpack__()  # forgets unused ones
    gc.collect()
    assert alive() is None and len(interop._exported) <= before + 1  # (the new capsule's)


def test_a_numpy_import_freed_while_its_expression_fails_keeps_the_error(queue):
    # numpy calls the deleter with the IndexError or TypeError pending: it used to be lost
    # (SystemError) where Python code ran in the deleter
    array = ur_cffi.zeros(16, np.float32, queue=queue, kind="host")
    with pytest.raises(IndexError, match="out of bounds"):
        np.from_dlpack(array)[100]
    with pytest.raises(TypeError):
        np.from_dlpack(array) + "x"
    assert not array._exports  # each deleter call released its export
    array.close()


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_every_extension_dtype_is_a_numpy_view(queue, rng, kind):
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn):
        host = rng.standard_normal(6).astype(dtype)
        array = ur_cffi.asarray(host, queue=queue, kind=kind)
        view = np.asarray(array)
        assert view.dtype == dtype and view.__array_interface__["data"][0] == array.data_ptr()
        assert view.tobytes() == host.tobytes()


class _Interface:
    def __init__(self, **interface):
        self.__sycl_usm_array_interface__ = interface


def test_a_sycl_usm_array_interface_with_negative_strides(queue, rng):
    host = rng.standard_normal(4).astype(np.float32)
    array = ur_cffi.asarray(host, queue=queue)
    reversed_view = _Interface(data=(array.data_ptr(), False), shape=(4,), typestr="<f4",
                               strides=(-1,), offset=3, version=1)  # dpnp's a[::-1]
    imported = interop.from_sycl_usm_array_interface(reversed_view, queue=queue)
    assert np.array_equal(imported.to_numpy(), host[::-1])


@pytest.mark.skipif(not NUMPY_2_1,
                    reason="numpy before 2.1 exports no read-only array through DLPack")
def test_memory_marked_read_only_is_copied_not_wrapped(queue, rng):
    host = rng.standard_normal(6).astype(np.float32)
    array = ur_cffi.asarray(host, queue=queue, kind="host")
    read_only = np.asarray(array)  # numpy's DLPack export carries its read-only flag
    read_only.flags.writeable = False
    imported = ur_cffi.from_dlpack(read_only, queue=queue)
    assert imported.data_ptr() != array.data_ptr()
    imported.fill(np.nan)
    queue.finish()
    assert np.array_equal(read_only, host)  # the producer's memory is untouched
    with pytest.raises(BufferError, match=r"copy=False.*read-only"):
        ur_cffi.from_dlpack(read_only, queue=queue, copy=False)
    assert ur_cffi.from_dlpack(np.asarray(array), queue=queue, copy=False).data_ptr() == \
        array.data_ptr()


def test_a_malformed_sycl_usm_array_interface_is_named(queue):
    array = ur_cffi.zeros(4, np.float32, queue=queue)
    good = {"data": (array.data_ptr(), False), "shape": (4,), "typestr": "<f4", "version": 1}
    for change, message in (({"typestr": None}, "no 'typestr'"),
                            ({"data": None}, "data must be"),
                            ({"offset": None}, "offset must be an integer"),
                            ({"strides": (1.5,)}, "stride must be an integer, not float 1.5"),
                            # (it said "from_pointer: strides (4, 4)", in bytes)
                            ({"strides": (1, 1)}, r"from_sycl_usm_array_interface: the "
                                                  r"interface's strides \(1, 1\) do not "
                                                  r"match its shape \(4,\)"),
                            ({"typestr": "zz"}, "from_sycl_usm_array_interface: the "
                                                "interface's dtype 'zz' is not"),
                            ({"shape": "abc"}, "from_sycl_usm_array_interface: the "
                                               "interface's shape 'abc' must be"),
                            ({"typestr": "O"}, "from_sycl_usm_array_interface: the "
                                               "interface's typestr: dtype object")):
        interface = {**good, **change}
        if change.get("typestr", 0) is None:
            del interface["typestr"]
        with pytest.raises((TypeError, ValueError), match=message):
            interop.from_sycl_usm_array_interface(_Interface(**interface), queue=queue)
    for interface in ([1, 2], None):  # (it said "has no __sycl_usm_array_interface__")
        holder = types.SimpleNamespace(__sycl_usm_array_interface__=interface)
        with pytest.raises(TypeError, match=f"__sycl_usm_array_interface__ of SimpleNamespace "
                                            f"must be a dict, not {type(interface).__name__}"):
            interop.from_sycl_usm_array_interface(holder, queue=queue)


class _Capsule:
    """Hands numpy a capsule made earlier (as a consumer that holds one before taking it)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (interop.KDL_CPU, 0)


def test_a_capsule_held_but_not_yet_consumed_survives_other_exports(queue, rng):
    host = rng.standard_normal(6)
    array = ur_cffi.asarray(host, queue=queue, kind="host")
    capsule = array.__dlpack__()
    for _ in range(3):  # each export or import looks at the unconsumed capsules
        ur_cffi.zeros(2, queue=queue, kind="host").__dlpack__()
        ur_cffi.from_dlpack(np.zeros(2), queue=queue)
    assert np.array_equal(np.from_dlpack(_Capsule(capsule)), host)
    ur_cffi.zeros(2, queue=queue, kind="host").__dlpack__()
    assert len(interop._unconsumed) == 1  # the consumed one is its consumer's now


def test_a_view_that_lives_keeps_the_memory_while_others_come_and_go(queue):
    """The pins were counted in two steps: a close between them (another thread making and
    dropping views) released the memory under a view that lived on (15 of 300 trials)."""
    from ur_cffi import _handle

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        released = 0
        for _ in range(200):
            array = ur_cffi.zeros(1024, np.float32, queue=queue, kind="host")
            kept = np.asarray(array)
            stop = []

            def churn(array=array, stop=stop):
                while not stop:
                    try:
                        np.asarray(array)
                    except ur_cffi.ClosedError:
                        return

            thread = threading.Thread(target=churn)
            thread.start()
            array.close()
            stop.append(True)
            thread.join()
            released += array._serial not in _handle._live
            del kept
        assert released == 0
    finally:
        sys.setswitchinterval(switch)


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _flags(capsule) -> int:
    """DLPack 1.x's flags of a versioned capsule (after version, manager_ctx and deleter)."""
    return ctypes.c_uint64.from_address(_get_pointer(capsule, b"dltensor_versioned") + 24).value


def test_dlpack_marks_the_copies_it_makes(queue, rng):
    """DLPack 1.x's IS_COPIED flag (numpy sets it for copy=True): every capsule carried 0."""
    array = ur_cffi.asarray(rng.standard_normal(4), queue=queue)
    host = ur_cffi.asarray(rng.standard_normal(4), queue=queue, kind="host")
    assert _flags(array.__dlpack__(max_version=(1, 0), copy=True)) == 2
    assert _flags(array.__dlpack__(max_version=(1, 0), dl_device=(interop.KDL_CPU, 0))) == 2
    assert _flags(host.__dlpack__(max_version=(1, 0), copy=True)) == 2
    assert _flags(array.__dlpack__(max_version=(1, 0))) == 0
    assert _flags(host.__dlpack__(max_version=(1, 0), copy=False)) == 0
    copied = np.from_dlpack(host, copy=True) if NUMPY_2_1 else np.from_dlpack(host).copy()
    assert np.array_equal(copied, host.to_numpy())


class _Foreign:
    """A DLPack producer of hand-made tensors (as PyTorch or CuPy export them, or broken)."""

    def __init__(self, data, shape, device=(interop.KDL_CPU, 0), ndim=None, shape_pointer=True,
                 strides=None, dtype=(2, 32), byte_offset=0):
        self.deleted = 0
        self.shape = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        tensor = interop._DLTensor(data, interop._DLDevice(*device),
                                   len(shape) if ndim is None else ndim,
                                   interop._DLDataType(*dtype, 1),
                                   self.shape if shape_pointer else None, self.strides,
                                   byte_offset)
        self.deleter = interop._DELETER(self._delete)
        self.managed = interop._DLManagedTensorVersioned(interop._DLPackVersion(1, 0), None,
                                                         self.deleter, 0, tensor)

    def _delete(self, _address):
        self.deleted += 1

    def __dlpack__(self, **_):
        return _new_capsule(ctypes.addressof(self.managed), b"dltensor_versioned", None)


def test_from_dlpack_takes_empty_tensors_whose_data_is_null(queue):
    """PyTorch and CuPy export an empty tensor with a NULL pointer: one of kDLOneAPI was
    refused as "memory at 0x0 is not USM"."""
    for device in ((interop.KDL_CPU, 0), (interop.KDL_ONEAPI, 0)):
        producer = _Foreign(0, (0, 3), device)
        imported = ur_cffi.from_dlpack(producer, queue=queue)
        assert imported.shape == (0, 3) and imported.dtype == np.float32
        assert imported.to_numpy().shape == (0, 3)
        gc.collect()
        assert producer.deleted == 1


def test_from_dlpack_refuses_malformed_tensors_naming_the_field(queue):
    """A NULL data pointer with elements gave an array of whatever memory held, ndim -1 a 0-d
    array, a NULL shape "NULL pointer access"; each is refused before the capsule is taken."""
    values = np.arange(3, dtype=np.float32)
    for producer, message in (
            (_Foreign(0, (4,)), r"shape \(4,\) with a NULL data pointer"),
            (_Foreign(values.ctypes.data, (3,), ndim=-1), "ndim -1"),
            (_Foreign(values.ctypes.data, (3,), shape_pointer=False), "a NULL shape pointer"),
            (_Foreign(values.ctypes.data, (-3,)), r"shape \(-3,\)"),
            # (its shape was read first: 2**30 entries of a 1-entry array crashed the process)
            (_Foreign(values.ctypes.data, (3,), ndim=1 << 30), "ndim 1073741824: numpy's"),
            (_Foreign(values.ctypes.data, (3,), ndim=1000), "ndim 1000: numpy's")):
        with pytest.raises(BufferError, match=message):
            ur_cffi.from_dlpack(producer, queue=queue)
        assert producer.deleted == 0  # not taken: its producer's to delete


def test_from_dlpack_refuses_tensors_numpy_cannot_index_naming_them(queue):
    """They were taken, then failed inside numpy ("cannot fit 'int' into an index-sized
    integer", "array is too big"), naming neither from_dlpack nor the field."""
    values = np.arange(3, dtype=np.float32)
    for producer, message in (
            (_Foreign(0, (2**62, 0)), r"shape \(4611686018427387904, 0\) of float32 spans"),
            (_Foreign(values.ctypes.data, (2**62,)), r"shape \(4611686018427387904,\) of"),
            (_Foreign(values.ctypes.data, (2,), strides=(2**61,)),
             r"shape \(2,\), strides \(2305843009213693952,\) of float32 spans")):
        with pytest.raises(BufferError, match="from_dlpack: a DLPack tensor of " + message):
            ur_cffi.from_dlpack(producer, queue=queue)
        assert producer.deleted == 0  # not taken: its producer's to delete


@pytest.mark.parametrize("copy", ["False", 0, 1, []])
def test_from_dlpack_takes_copy_as_a_bool_or_none(queue, copy):
    host = ur_cffi.zeros(4, queue=queue, kind="host")
    with pytest.raises(TypeError, match=f"from_dlpack: copy must be True, False or None, not "
                                        f"{type(copy).__name__}"):
        ur_cffi.from_dlpack(host, queue=queue, copy=copy)  # "False" copied, 0 did not


def test_numpys_false_means_no_copy(queue):
    """``copy=np.False_`` passed the check and then read as "copy allowed" (not ``is False``)."""
    with pytest.raises(BufferError, match="copy=False"):
        ur_cffi.from_dlpack(np.arange(3.0), queue=queue, copy=np.False_)
    with pytest.raises(BufferError, match="copy=False"):
        ur_cffi.zeros(4, queue=queue).__dlpack__(dl_device=(interop.KDL_CPU, 0), copy=np.False_)
    host = ur_cffi.zeros(4, queue=queue, kind="host")
    assert ur_cffi.from_dlpack(host, queue=queue, copy=np.False_).data_ptr() == host.data_ptr()
    with pytest.raises(ValueError, match=r"asarray\(copy=False\)"):  # (it copied)
        ur_cffi.asarray(np.arange(3.0), queue=queue, copy=np.False_)
    with pytest.raises(ValueError, match=r"asarray\(copy=False\) needs a copy"):
        ur_cffi.asarray(host, np.float64, queue=queue, copy=np.False_)


def test_strides_that_are_no_sequence_are_named(queue):
    array = ur_cffi.zeros(16, np.float32, queue=queue)
    with pytest.raises(TypeError, match="from_pointer: strides must be a sequence of integers "
                                        "or None, not int 4"):
        ur_cffi.from_pointer(array.data_ptr(), (4,), np.float32, queue=queue, strides=4)
    interface = _Interface(data=(array.data_ptr(), False), shape=(4,), typestr="<f4",
                           strides=1, version=1)
    with pytest.raises(TypeError, match="from_sycl_usm_array_interface: strides must be a "
                                        "sequence"):
        interop.from_sycl_usm_array_interface(interface, queue=queue)
    with pytest.raises(ValueError, match=r"max_version.*-1"):
        array.__dlpack__(max_version=(-1, 5))  # a pair of integers: the value is named


def test_a_stream_for_memory_exported_as_kdlcpu_is_refused(queue):
    """DLPack: a device without streams takes stream=None only (numpy refuses others)."""
    host = ur_cffi.zeros(4, queue=queue, kind="host")
    for stream in (5, "garbage", object()):
        with pytest.raises(BufferError, match="stream must be None for memory exported as "
                                              "kDLCPU"):
            host.__dlpack__(stream=stream)
        with pytest.raises(BufferError, match="stream must be None"):
            ur_cffi.zeros(4, queue=queue).__dlpack__(stream=stream,
                                                    dl_device=(interop.KDL_CPU, 0))
    assert np.array_equal(np.from_dlpack(host), np.zeros(4, np.float32))


def test_threads_exporting_at_once_forget_dropped_capsules_without_error(queue):
    """Two threads forgetting dropped capsules at once: one took a capsule out between the
    other's look-up and its count (``KeyError``, 7 to 13 times in 40,000 exports)."""
    array = ur_cffi.zeros(4, np.float32, queue=queue)
    errors = []

    def export_and_drop(_):
        for _ in range(200):
            try:
                batch = [array.__dlpack__() for _ in range(50)]
                del batch  # unconsumed: the next export forgets them
            except Exception as error:  # noqa: BLE001 - each is the failure
                errors.append(error)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        run_in_threads(export_and_drop, 2)
    finally:
        sys.setswitchinterval(switch)
    assert errors == []
    array.__dlpack__()
    assert len(interop._unconsumed) == 1 and len(interop._exported) == 1


def test_an_array_probed_for_its_sycl_interface_is_freed_when_dropped(dpctl_queue):
    """Reading ``__sycl_usm_array_interface__`` (dpctl's ``hasattr`` probe too) made a cycle of
    the array and its pin: ``del`` freed nothing until a cyclic collection."""
    queue = interop.queue_from_dpctl(dpctl_queue)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for make_view in (False, True):
            array = ur_cffi.zeros(1 << 16, np.float32, queue=queue)
            shown = array[::2] if make_view else array
            alive = weakref.ref(array)
            assert hasattr(shown, "__sycl_usm_array_interface__")
            del array, shown
            assert alive() is None
        array = ur_cffi.asarray(np.arange(8.0), queue=queue)
        array.__sycl_usm_array_interface__  # noqa: B018
        address = array.data_ptr()
        array.close()  # its consumers hold the object: the memory stays theirs
        assert ur_cffi.empty(8, np.float64, queue=queue).data_ptr() != address
        del array
        assert ur_cffi.empty(8, np.float64, queue=queue).data_ptr() == address
    finally:
        if collecting:
            gc.enable()


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_an_export_read_on_the_host_waits_for_work_queued_on_the_array(context, device, kind):
    """DLPack's kDLCPU has no stream, so the producer synchronizes (the array API says so):
    numpy read a copy still running, 13 to 33 million stale elements of 33.5 million."""
    n = 1 << 24
    with ur_cffi.Queue(context, device) as queue:
        source = ur_cffi.full(n, 7.0, np.float32, queue=queue)
        for _ in range(3):
            array = ur_cffi.full(n, np.nan, np.float32, queue=queue, kind=kind)
            queue.finish()
            array.copy_from(source, blocking=False)
            seen = np.from_dlpack(array if kind == "host" else _OnTheHost(array))
            assert np.count_nonzero(seen != 7.0) == 0
            del seen
            array.close()


class _OnTheHost:
    """What numpy 2.1's ``np.from_dlpack(x, device="cpu")`` asks of ``x``, on any numpy."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(dl_device=(interop.KDL_CPU, 0))

    def __dlpack_device__(self):
        return interop.KDL_CPU, 0


def test_from_dlpack_copies_usm_it_cannot_wrap_unless_copy_is_false(queue, device, rng):
    """Misaligned USM (a numpy view of host USM at an odd byte) raised a ValueError naming
    from_pointer even with copy=True; USM of another context raised BufferError with
    copy=True, where its producer gives a copy on the host."""
    raw = ur_cffi.asarray(rng.integers(0, 256, 64, dtype=np.uint8), queue=queue, kind="host")
    expected = raw.to_numpy()[1:17].view(np.float32)
    for copy in (None, True):
        imported = ur_cffi.from_dlpack(np.asarray(raw)[1:17].view(np.float32), queue=queue,
                                       copy=copy)
        assert imported.data_ptr() % 4 == 0 and imported.kind == "host"
        assert np.array_equal(imported.to_numpy(), expected, equal_nan=True)
    with pytest.raises(BufferError, match=r"copy=False.*not aligned to float32"):
        ur_cffi.from_dlpack(np.asarray(raw)[1:17].view(np.float32), queue=queue, copy=False)

    device_bytes = ur_cffi.asarray(raw.to_numpy(), queue=queue)  # device USM, a foreign export
    capsule = interop._capsule(device_bytes.data_ptr() + 1, (4,), (4,), np.dtype(np.float32),
                               device_bytes.__dlpack_device__(), device_bytes, (1, 1), False)
    imported = ur_cffi.from_dlpack(capsule, queue=queue)
    assert imported.kind == "device" and imported.data_ptr() % 4 == 0
    assert np.array_equal(imported.to_numpy(), expected, equal_nan=True)

    values = rng.standard_normal(6).astype(np.float32)
    with ur_cffi.Context([device]) as other, ur_cffi.Queue(other, device) as elsewhere:
        for kind in ("device", "shared"):
            array = ur_cffi.asarray(values, queue=elsewhere, kind=kind)
            for copy in (None, True):
                copied = ur_cffi.from_dlpack(array, queue=queue, copy=copy)
                assert copied.context is queue.context
                assert np.array_equal(copied.to_numpy(), values)
            if interop.usm_kind(queue.context, array.data_ptr()) is None:
                with pytest.raises(BufferError,
                                   match="not USM of the queue's context.*copy=False"):
                    ur_cffi.from_dlpack(array, queue=queue, copy=False)
            else:  # (the CUDA adapter: one address space for the device's contexts)
                wrapped = ur_cffi.from_dlpack(array, queue=queue, copy=False)
                assert wrapped.data_ptr() == array.data_ptr()
                assert np.array_equal(wrapped.to_numpy(), values)


def test_strides_of_axes_of_one_element_do_not_stop_an_export(queue):
    """A stride an axis of one element never steps (6 bytes of float32) raised BufferError
    from __dlpack__ and ValueError from stride(); numpy exports such a layout."""
    view = ur_cffi.zeros((1, 6), np.uint8, queue=queue, kind="host")[:, 0:4].view(np.float32)
    assert view.strides == (6, 4) and view.stride() == (1, 1)
    assert np.from_dlpack(view).shape == (1, 1)
    assert ur_cffi.from_dlpack(view, queue=queue).shape == (1, 1)


@pytest.mark.parametrize("name", ["float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
                                  "float8_e8m0fnu"])
def test_every_float8_type_of_dlpack_1_1_travels(queue, device, rng, name):
    if not hasattr(ml_dtypes, name) or not hasattr(ml_dtypes, "float4_e2m1fn"):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name} or float4_e2m1fn")
    dtype = np.dtype(getattr(ml_dtypes, name))
    values = rng.integers(0, 256, 16, dtype=np.uint8).view(dtype)
    array = ur_cffi.asarray(values, queue=queue, kind="host")
    with ur_cffi.Context([device]) as other, ur_cffi.Queue(other, device) as elsewhere:
        imported = ur_cffi.from_dlpack(array, queue=elsewhere)
        assert imported.dtype == dtype
        assert np.array_equal(imported.to_numpy().view(np.uint8), values.view(np.uint8))
    with pytest.raises(BufferError, match="a byte per element"):
        ur_cffi.zeros(4, ml_dtypes.float4_e2m1fn, queue=queue).__dlpack__()


def test_complex32_travels_as_dlpacks_32_bit_complex_and_others_of_ml_dtypes_are_named(
        queue, device, rng):
    # complex32 (two float16s, PyTorch's too) and int4 were refused, both "a byte per element;
    # DLPack's float4/float6 codes count 4 or 6 bits".
    if not hasattr(ml_dtypes, "complex32") or not hasattr(ml_dtypes, "int4"):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no complex32 or int4")
    values = rng.standard_normal(16).astype(np.float16).view(ml_dtypes.complex32)
    array = ur_cffi.asarray(values, queue=queue, kind="host")
    with ur_cffi.Context([device]) as other, ur_cffi.Queue(other, device) as elsewhere:
        imported = ur_cffi.from_dlpack(array, queue=elsewhere)
        assert imported.dtype == np.dtype(ml_dtypes.complex32)
        assert np.array_equal(imported.to_numpy().view(np.uint16), values.view(np.uint16))
    with pytest.raises(BufferError, match="no type for int4 .*a byte per element, where "
                                          "DLPack's codes count the element's own bits"):
        ur_cffi.zeros(4, ml_dtypes.int4, queue=queue).__dlpack__()
    if hasattr(ml_dtypes, "bcomplex32"):
        with pytest.raises(BufferError, match="DLPack has no type for bcomplex32$"):
            ur_cffi.zeros(4, ml_dtypes.bcomplex32, queue=queue).__dlpack__()


def test_imports_onto_a_closed_queue_raise_before_taking_the_capsule(context, device):
    array = ur_cffi.zeros(4, np.float64, queue=ur_cffi.Queue(context, device), kind="shared")
    closed = ur_cffi.Queue(context, device)
    closed.close()
    capsule = array.__dlpack__()
    with pytest.raises(ur_cffi.ClosedError):
        ur_cffi.from_dlpack(capsule, queue=closed)
    with pytest.raises(ur_cffi.ClosedError):
        ur_cffi.from_pointer(array.data_ptr(), (4,), np.float64, queue=closed)
    assert ur_cffi.from_dlpack(capsule, queue=array.queue).shape == (4,)  # still unused


def test_importing_a_ur_cffi_array_of_the_context_waits_for_nothing(context, device, kernels):
    """from_dlpack(a, queue=q) of a host array of q's context went through the kDLCPU export,
    which waits for a's queued work: 1.9 s for a kernel the host released later (it would
    deadlock where the host releases it after the import).  It is a view, as before."""
    import crash_probe

    program, spin = crash_probe.load(context, kernels, "spin")
    with program, spin, ur_cffi.Queue(context, device) as queue:
        flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        out = ur_cffi.zeros(4, np.int32, queue=queue, kind="host")
        event = spin.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag, out,
                            crash_probe.SPIN_LIMIT, *crash_probe.spin_local())
        try:
            imported = ur_cffi.from_dlpack(out, queue=queue)
            assert imported.base is out
            assert event.status != ur_cffi.enums.ur_event_status_t.UR_EVENT_STATUS_COMPLETE
        finally:
            ctypes.c_int32.from_address(flag.data_ptr()).value = 1
        event.wait()


def test_importing_a_ur_cffi_array_refuses_what_dlpack_cannot_describe(queue):
    """from_dlpack of an array of the queue's context, a view without the capsule, skipped
    the capsule's checks: longdouble and structured arrays came back as views."""
    for dtype in (np.longdouble, np.dtype([("a", np.int32), ("b", np.float32)])):
        with pytest.raises(BufferError, match="DLPack has no type for"):
            ur_cffi.from_dlpack(ur_cffi.zeros(4, dtype, queue=queue), queue=queue)


def _two_sub_devices(device):
    """Two sub-devices of ``device`` (a partition into equal parts), or a skip where the
    device cannot be partitioned (the CUDA adapter's GPUs)."""
    sub_devices = device_under_test.partition(device, "EQUALLY", 1, 2)
    if not sub_devices:
        pytest.skip(f"{device!r} is not partitioned into two equal sub-devices here")
    return sub_devices


def test_wrapping_device_usm_of_another_device_of_the_context_is_refused(device, rng):
    # A context of several devices (SYCL's default context of the GPUs): device USM of one
    # is not memory kernels of the other read.  Two sub-devices of the CPU stand for them.
    first, second = _two_sub_devices(device)
    host = rng.standard_normal(16).astype(np.float32)
    with ur_cffi.Context([first, second]) as context, ur_cffi.Queue(context, first) as mine, \
            ur_cffi.Queue(context, second) as other:
        array = ur_cffi.asarray(host, queue=mine)
        with pytest.raises(ValueError, match=r"another device of the context .*devices\[0\]"):
            ur_cffi.from_pointer(array.data_ptr(), (16,), np.float32, queue=other)
        with pytest.raises(ValueError, match="another device of the context"):
            ur_cffi.from_dlpack(array, queue=other)
        shared = ur_cffi.asarray(host, queue=mine, kind="shared")  # any device's to read
        wrapped = ur_cffi.from_pointer(shared.data_ptr(), (16,), np.float32, queue=other)
        assert np.array_equal(wrapped.to_numpy(), host)
        same = ur_cffi.from_pointer(array.data_ptr(), (16,), np.float32, queue=mine)
        assert np.array_equal(same.to_numpy(), host)


@pytest.mark.parametrize("kind, how", [("host", {"copy": True}),
                                       ("shared", {"dl_device": (interop.KDL_CPU, 0),
                                                   "copy": True}),
                                       ("device", {"dl_device": (interop.KDL_CPU, 0)})])
def test_an_export_that_copies_waits_for_the_queues_record_queue_noted(context, device, kernels,
                                                                       kind, how):
    """An export as kDLCPU reads after the work of the queues ``record_queue`` noted; those
    that copied (``copy=True``, device USM to the host) read at once: before a kernel on
    such a queue had written the array."""
    import crash_probe

    program, spin = crash_probe.load(context, kernels, "spin")
    with program, spin, ur_cffi.Queue(context, device) as own, \
            ur_cffi.Queue(context, device) as other:
        array = ur_cffi.zeros(64, np.int32, queue=own, kind=kind)
        array.record_queue(other)
        flag = ur_cffi.zeros(1, np.int32, queue=own, kind="host")
        own.finish()
        spin.launch(other, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag, array,
                    crash_probe.SPIN_LIMIT, *crash_probe.spin_local(), event=False)
        release = threading.Timer(0.3, lambda: setattr(
            ctypes.c_int32.from_address(flag.data_ptr()), "value", 1))
        release.start()
        try:
            exported = np.from_dlpack(_Capsule(array.__dlpack__(**how)))
        finally:
            ctypes.c_int32.from_address(flag.data_ptr()).value = 1
            release.join()
        other.finish()
        assert exported[0] > 0  # the kernel's round count: read after it was written


@pytest.mark.parametrize("runs_on", ["its queue", "a queue it records",
                                     "its queue, the enqueue lock taken"])
def test_a_closed_import_gives_its_memory_back_once_its_queued_work_is_done(context, device,
                                                                           kernels, runs_on):
    """close() of an array over a producer's memory ran the producer's deleter at once, while
    a kernel queued on it still wrote it (a producer frees or reuses the memory there); then
    once its own queue's work was done, not that of a queue record_queue noted; and at once
    again where another thread held the enqueue lock for a moment."""
    import crash_probe
    from ur_cffi.queue import raw_enqueue_lock

    program, spin = crash_probe.load(context, kernels, "spin")
    with program, spin, ur_cffi.Queue(context, device) as queue, \
            ur_cffi.Queue(context, device) as other:
        backing = ur_cffi.zeros(64, np.int32, queue=queue, kind="host")  # the producer's
        producer = _Foreign(backing.data_ptr(), (64,), (interop.KDL_ONEAPI, 0))
        imported = ur_cffi.from_dlpack(producer, queue=queue)
        flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        kernel_queue = other if runs_on == "a queue it records" else queue
        if kernel_queue is other:
            imported.record_queue(other)
        spin.launch(kernel_queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag,
                    imported, crash_probe.SPIN_LIMIT, *crash_probe.spin_local(), event=False)
        held, go = threading.Event(), threading.Event()

        def hold_the_enqueue_lock():
            with raw_enqueue_lock:
                held.set()
                go.wait(30)

        holder = threading.Thread(target=hold_the_enqueue_lock)
        if runs_on.endswith("taken"):
            holder.start()
            assert held.wait(30)
        try:
            imported.close()
            go.set()
            gc.collect()
            assert producer.deleted == 0  # the kernel still runs on its memory
            with ur_cffi.Queue(context, device) as spare:
                spare.finish()  # (a finish looks at what waits: a deferred release put late)
            gc.collect()
            assert producer.deleted == 0
        finally:
            go.set()
            ctypes.c_int32.from_address(flag.data_ptr()).value = 1
            if holder.is_alive():
                holder.join()
        for _ in range(2):  # (a finish gives back what waited for its queue's work)
            other.finish()
            queue.finish()
        assert backing.to_numpy()[0] > 0  # the kernel's round count
        gc.collect()
        assert producer.deleted == 1


def test_a_capsule_of_another_contexts_device_memory_says_to_pass_the_array(queue, device,
                                                                              rng):
    host = rng.standard_normal(10)
    array = ur_cffi.asarray(host, queue=queue)
    other = ur_cffi.Queue(device.create_context(), device)
    assert np.array_equal(ur_cffi.from_dlpack(array, queue=other).to_numpy(), host)  # a copy
    if interop.usm_kind(other.context, array.data_ptr()) is not None:
        pytest.skip(f"{device!r}: the contexts of a device share its memory here (the CUDA "
                    "adapter's do): a capsule of it is wrapped, not refused")
    with pytest.raises(BufferError, match="a capsule cannot give one: pass the array"):
        ur_cffi.from_dlpack(array.__dlpack__(), queue=other)  # (it named the producer's copy)


def test_arrays_imported_from_one_sycl_queue_share_one_queue(dpctl_queue, rng):
    """Each import without queue= made a UR queue of its own: a fill of one array ran after
    the copy from it into another (stale values), and 200 imports kept 200 queues."""
    import dpctl.memory as dpm

    n = 1 << 20
    first, second = (interop.from_sycl_usm_array_interface(
        dpm.MemoryUSMDevice(4 * n, queue=dpctl_queue)).view(np.float32) for _ in range(2))
    assert first.queue is second.queue
    for value in rng.standard_normal(3).astype(np.float32):
        first.fill(value, blocking=False)
        second[...] = first
        assert np.array_equal(second.to_numpy(), np.full(n, value, np.float32))
    with interop.queue_from_dpctl(dpctl_queue) as own:  # the caller's: closing it closes
        assert own is not first.queue                  # no import's queue
    assert np.array_equal(second.to_numpy(), np.full(n, value, np.float32))
    queue = first.queue
    queue.close()
    third = interop.from_sycl_usm_array_interface(dpm.MemoryUSMDevice(4, queue=dpctl_queue))
    assert third.queue is not queue and not third.queue.closed  # a closed one is not given


def test_contexts_from_dpctl_take_no_opencl_reference_each(dpctl_queue):
    """SYCL's get_native adds a reference to the cl_context it returns: every
    context_from_dpctl and queue_from_dpctl kept one more, and the context could never go."""
    opencl = ctypes.CDLL("libOpenCL.so.1")

    def references(cl_context):
        count = ctypes.c_uint()
        assert opencl.clGetContextInfo(ctypes.c_void_p(cl_context), 0x1080,  # REFERENCE_COUNT
                                       ctypes.sizeof(count), ctypes.byref(count), None) == 0
        return count.value

    context = interop.context_from_dpctl(dpctl_queue)
    native = ffi.new("ur_native_handle_t *")
    assert lib.urContextGetNativeHandle(context.handle, native) == 0
    before = references(int(native[0]))
    for _ in range(5):
        assert interop.context_from_dpctl(dpctl_queue) is context
        interop.queue_from_dpctl(dpctl_queue).close()
    assert references(int(native[0])) == before


def test_a_producer_that_gives_no_capsule_is_named(queue):
    class Junk:
        def __dlpack__(self, **_):
            return 42

    with pytest.raises(TypeError, match=r"from_dlpack: Junk.__dlpack__\(\) returned int, not a "
                                        "DLPack capsule"):  # (it said Junk had no __dlpack__)
        ur_cffi.from_dlpack(Junk(), queue=queue)
    with pytest.raises(TypeError, match="needs an object with __dlpack__ or an unused DLPack "
                                        "capsule, not int"):
        ur_cffi.from_dlpack(42, queue=queue)


def test_memory_of_a_sub_device_has_no_dlpack_device(device):
    """kDLOneAPI numbers root devices only: memory of a sub-device (made with the raw layer)
    said (kDLOneAPI, 0), its parent's."""
    sub, _ = _two_sub_devices(device)
    with ur_cffi.Context([sub]) as context, ur_cffi.Queue(context, sub) as queue:
        array = ur_cffi.zeros(4, queue=queue)
        with pytest.raises(BufferError, match="is not among ur_cffi.devices"):
            array.__dlpack_device__()
        assert ur_cffi.zeros(4, queue=queue, kind="host").__dlpack_device__() == \
            (interop.KDL_CPU, 0)


@pytest.mark.parametrize("kind", ["host", "device"])
def test_a_capsule_taken_before_close_imports_as_numpy_would(queue, rng, kind):
    """close() leaves the memory to DLPack capsules already taken: numpy imported one, and
    ur_cffi.from_dlpack raised ClosedError after using it up."""
    values = rng.standard_normal(8)
    gc.collect()  # (garbage of earlier tests freed now, not inside the count)
    before = ur_cffi.memory_stats()["allocated_bytes"]
    array = ur_cffi.asarray(values, queue=queue, kind=kind)
    capsule = array.__dlpack__()
    array.close()
    imported = ur_cffi.from_dlpack(capsule, queue=queue)
    assert np.array_equal(imported.to_numpy(), values)
    del capsule, imported
    gc.collect()
    assert ur_cffi.memory_stats()["allocated_bytes"] == before  # the memory came back


def test_from_pointer_strides_stay_within_int64_elements(queue):
    """A stride of an axis of one element is never used to step, so any was taken: 2**64 - 4
    made stride() a number past int64, which DLPack and Triton read as int64."""
    array = ur_cffi.zeros(4, np.float32, queue=queue)
    top = 1 << 62
    assert ur_cffi.from_pointer(array.data_ptr(), (1,), np.float32, queue=queue, strides=(top,),
                                owner=array).stride() == (top // 4,)
    for wrong in (top + 4, (1 << 64) - 4):
        with pytest.raises(ValueError, match=f"from_pointer: stride {wrong} is out of range"):
            ur_cffi.from_pointer(array.data_ptr(), (1,), np.float32, queue=queue,
                                 strides=(wrong,), owner=array)
    with pytest.raises(ValueError, match=r"shape \(0, 4611686018427387904, 4611686018427387904"
                                         r"\) of float32: its extents other than 0 span"):
        ur_cffi.from_pointer(array.data_ptr(), (0, top, top), np.float32, queue=queue)  # (numpy
    # and DLPack failed on it later, as ur_cffi.empty refuses it)


DEFERRED_AT_TEARDOWN = """
import atexit, ctypes, sys, threading
after_ur_cffi = []  # registered first: runs after ur_cffi's teardown at exit
atexit.register(lambda: [then() for then in after_ur_cffi])
import numpy as np
import ur_cffi, crash_probe, device_under_test
from test_interop import _Foreign
from ur_cffi import interop
from ur_cffi.queue import raw_enqueue_lock

kernels, end, how = crash_probe.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
device = device_under_test.get()
context = device.create_context()
queue = ur_cffi.Queue(context, device)
_, spin = crash_probe.load(context, kernels, "spin")
backing = ur_cffi.zeros(64, np.int32, queue=queue, kind="host")
flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
producer = _Foreign(backing.data_ptr(), (64,), (interop.KDL_ONEAPI, 0))
written = ctypes.c_int32.from_address(backing.data_ptr())
producer._delete = lambda _address: print("deleted after the kernel:", written.value > 0,
                                          flush=True)
producer.deleter = interop._DELETER(producer._delete)
producer.managed.deleter = producer.deleter
imported = ur_cffi.from_dlpack(producer, queue=queue)
if how == "enqueue lock taken":
    spin.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag, imported,
                crash_probe.SPIN_LIMIT, *crash_probe.spin_local(), event=False)
    with raw_enqueue_lock:  # another thread's enqueue, say: the close's barrier is put later
        imported.close()
else:  # the kernel on a queue that another thread drops: its collection finishes it
    holder = [ur_cffi.Queue(context, device)]
    imported.record_queue(holder[0])
    spin.launch(holder[0], crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag, imported,
                crash_probe.SPIN_LIMIT, *crash_probe.spin_local(), event=False)
    ref = holder[0].ref
    threading.Thread(target=holder.clear, daemon=True).start()
    while ref() is not None:  # (its finish goes on until the flag is set)
        threading.Event().wait(0.001)
    imported.close()
del imported
release_the_kernel = lambda: setattr(ctypes.c_int32.from_address(flag.data_ptr()), "value", 1)
if end == "exit" and how == "queue being collected":
    after_ur_cffi.append(release_the_kernel)  # the other thread still finishes at the exit
else:
    threading.Timer(0.5, release_the_kernel).start()
if end == "teardown":
    ur_cffi.loader.teardown()
"""


@pytest.mark.parametrize("end", ["teardown", "exit"])
@pytest.mark.parametrize("how", ["enqueue lock taken", "queue being collected"])
def test_a_release_put_late_waits_for_its_queue_at_teardown(kernels, end, how):
    """A closed import whose barrier waited for the enqueue lock, or for a queue another
    thread's collection was finishing: the teardown (and the exit's) dropped it before that
    work was done, and the producer's deleter ran while a kernel still wrote the memory.  At
    the exit with that thread still finishing, nothing is released (the deleter never runs)."""
    import crash_probe

    done = crash_probe.run_child([kernels, end, how], code=DEFERRED_AT_TEARDOWN, check=False,
                                 timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    released = not (end == "exit" and how == "queue being collected")
    assert done.stdout.strip() == ("deleted after the kernel: True" if released else ""), \
        done.stdout


# DLPack 1.1's DLDataTypeCode (dlpack.h): kDLFloat8_e3m4 = 7 ... kDLFloat8_e8m0fnu = 14.
DLPACK_FLOAT8_CODES = {"float8_e3m4": 7, "float8_e4m3": 8, "float8_e4m3b11fnuz": 9,
                       "float8_e4m3fn": 10, "float8_e4m3fnuz": 11, "float8_e5m2": 12,
                       "float8_e5m2fnuz": 13, "float8_e8m0fnu": 14}


@pytest.mark.parametrize("name", sorted(DLPACK_FLOAT8_CODES))
def test_float8_types_travel_with_dlpacks_own_codes(queue, rng, name):
    # Round trips through ur_cffi alone would not see two codes swapped, which another
    # library (PyTorch) would read as the other type.
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    dtype = np.dtype(getattr(ml_dtypes, name))
    array = ur_cffi.zeros(4, dtype, queue=queue, kind="host")
    capsule = array.__dlpack__(max_version=(1, 1))
    managed = interop._DLManagedTensorVersioned.from_address(
        _get_pointer(capsule, b"dltensor_versioned"))
    assert (managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits) == \
        (DLPACK_FLOAT8_CODES[name], 8)
    del capsule
    values = rng.integers(0, 256, 8, dtype=np.uint8)
    imported = ur_cffi.from_dlpack(
        _Foreign(values.ctypes.data, (8,), dtype=(DLPACK_FLOAT8_CODES[name], 8)), queue=queue)
    assert imported.dtype == dtype
    assert np.array_equal(imported.to_numpy().view(np.uint8), values)


@pytest.mark.parametrize("kind", [None, "host"])
def test_from_dlpack_starts_at_the_tensors_byte_offset(queue, rng, kind):
    # (PyTorch exports a view as its storage's address and the view's byte_offset.)
    values = rng.standard_normal(16).astype(np.float32)
    if kind is None:  # numpy's memory: copied
        keep, data = values, values.ctypes.data
    else:  # host USM of the queue's context: wrapped
        keep = ur_cffi.asarray(values, queue=queue, kind=kind)
        data = keep.data_ptr()
    imported = ur_cffi.from_dlpack(_Foreign(data, (4,), byte_offset=8), queue=queue)
    np.testing.assert_array_equal(imported.to_numpy(), values[2:6])
    del imported, keep
    gc.collect()


def test_from_pointer_takes_the_whole_allocation_and_not_a_byte_more(queue):
    array = ur_cffi.zeros(100, np.uint8, queue=queue)
    base, size = interop.allocation_bounds(queue.context, array.data_ptr())
    assert ur_cffi.from_pointer(base, (size,), np.uint8, queue=queue).size == size
    for start, count in ((base, size + 1), (base + 1, size)):
        with pytest.raises(ValueError, match="run past the USM allocation"):
            ur_cffi.from_pointer(start, (count,), np.uint8, queue=queue)
