"""USM arrays (device, host, shared) and buffers on the CPU device: attributes, exact copies in
every direction, fills, partial copies, blocking and asynchronous forms, and the checks that
run before UR is called."""

import ctypes

import numpy as np
import pytest

import ur_cffi
from ur_cffi import errors, ffi, info
from ur_cffi.enums import ur_event_status_t, ur_mem_flag_t, ur_usm_alloc_info_t, ur_usm_type_t

KINDS = ("device", "host", "shared")
USM_TYPES = {"device": ur_usm_type_t.UR_USM_TYPE_DEVICE, "host": ur_usm_type_t.UR_USM_TYPE_HOST,
             "shared": ur_usm_type_t.UR_USM_TYPE_SHARED}
DTYPES = (np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.uint64, np.complex64, np.complex128, np.bool_)


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info_ = np.iinfo(dtype)
        return rng.integers(info_.min, info_.max, shape, dtype=dtype, endpoint=True)
    values = rng.standard_normal(shape) * 1e3
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def poisoned(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, True if dtype.kind == "b" else np.iinfo(dtype).min, dtype)


def host_view(array):
    """The contents of a host or shared USM array read in place, without any UR copy."""
    raw = (ctypes.c_char * array.nbytes).from_address(array.data_ptr())
    return np.frombuffer(raw, array.dtype).reshape(array.shape)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(1001,), (7, 13), (3, 5, 7), ()])
def test_usm_array_attributes(queue, context, kind, shape):
    array = ur_cffi.USMArray(queue, shape, np.float64, kind)
    assert array.shape == shape and array.kind == kind and array.queue is queue
    assert array.dtype == np.dtype(np.float64) and isinstance(array.dtype, np.dtype)
    assert array.size == int(np.prod(shape)) and array.nbytes == 8 * array.size
    assert array.context is context
    pointer = array.data_ptr()
    assert type(pointer) is int and pointer != 0
    # UR itself says which kind of memory it is.
    usm_type = info.query("urUSMGetMemAllocInfo", context.handle, ffi.cast("void *", pointer),
                          ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_TYPE)
    assert usm_type == USM_TYPES[kind]
    if shape:
        assert len(array) == shape[0]
    else:
        with pytest.raises(TypeError):
            len(array)
    assert kind in repr(array) and hex(pointer) in repr(array)
    array.close()
    assert "closed" in repr(array)


def test_integer_shape_and_numpy_integers(queue):
    assert ur_cffi.empty(np.int64(5), queue=queue).shape == (5,)
    assert ur_cffi.empty([np.int32(2), 3], np.int8, queue=queue).shape == (2, 3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_is_exact(queue, rng, kind, dtype):
    x = random_array(rng, (37, 29), dtype)
    array = ur_cffi.asarray(x, queue=queue, kind=kind)
    assert array.shape == x.shape and array.dtype == x.dtype and array.nbytes == x.nbytes
    out = array.to_numpy()
    assert out.shape == x.shape and out.dtype == x.dtype
    assert np.array_equal(out, x)
    if kind != "device":
        assert np.array_equal(host_view(array), x)  # the bytes really are in that memory


def test_asarray_of_python_values_and_empty_shapes(queue):
    assert np.array_equal(ur_cffi.asarray([1.5, 2.5], queue=queue).to_numpy(), [1.5, 2.5])
    scalar = ur_cffi.asarray(np.float32(3.25), queue=queue)
    assert scalar.shape == () and scalar.to_numpy() == np.float32(3.25)
    assert scalar.tolist() == 3.25 and type(scalar.tolist()) is float
    matrix = ur_cffi.asarray(np.arange(6, dtype=np.int16).reshape(2, 3), queue=queue)
    assert matrix.T.tolist() == [[0, 3], [1, 4], [2, 5]]  # a view: only its elements
    for shape in [(0,), (0, 4)]:
        empty = ur_cffi.asarray(np.zeros(shape, np.float32), queue=queue)
        assert empty.shape == shape and empty.size == 0 and empty.nbytes == 0
        assert empty.to_numpy().shape == shape
        assert empty.fill(1.0).status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE


def test_non_contiguous_source_is_copied_in_order(queue, rng):
    x = rng.standard_normal((40, 30))
    view = x[::3, 1::2]
    array = ur_cffi.asarray(view, queue=queue)
    assert np.array_equal(array.to_numpy(), view)
    target = ur_cffi.empty(view.shape, np.float64, queue=queue)
    target.copy_from(view)
    assert np.array_equal(target.to_numpy(), view)


@pytest.mark.parametrize("source_kind", KINDS)
@pytest.mark.parametrize("target_kind", KINDS)
def test_usm_to_usm_copies(queue, rng, source_kind, target_kind):
    x = rng.standard_normal(1003).astype(np.float32)
    source = ur_cffi.asarray(x, queue=queue, kind=source_kind)
    target = ur_cffi.empty(1003, queue=queue, kind=target_kind)
    target.fill(np.nan)
    event = target.copy_from(source)
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert np.array_equal(target.to_numpy(), x)
    again = ur_cffi.empty(1003, queue=queue, kind=source_kind)
    again.fill(np.nan)
    target.copy_to(again)
    assert np.array_equal(again.to_numpy(), x)


def test_partial_copies_with_offsets(queue, rng):
    n = 1000
    x = rng.standard_normal(n)
    array = ur_cffi.asarray(x, queue=queue)
    expected = x.copy()

    part = rng.standard_normal(77)
    array.copy_from(part, offset=500)
    expected[500:577] = part
    array.copy_from(part[:3], offset=n - 3)  # up to the very end
    expected[n - 3:] = part[:3]
    assert np.array_equal(array.to_numpy(), expected)

    out = poisoned(123, np.float64)
    array.copy_to(out, offset=401)
    assert np.array_equal(out, expected[401:524])

    small = ur_cffi.empty(31, np.float64, queue=queue, kind="shared")
    small.fill(np.nan)
    array.copy_to(small, offset=969)  # a USM target smaller than the source
    assert np.array_equal(small.to_numpy(), expected[969:])

    small.copy_from(part[:31])
    array.copy_from(small, offset=17)  # a USM source into the middle
    expected[17:48] = part[:31]
    assert np.array_equal(array.to_numpy(), expected)

    # Over the flattened array for more dimensions.
    grid = ur_cffi.zeros((4, 6), np.int32, queue=queue)
    grid.copy_from(np.arange(1, 6, dtype=np.int32), offset=7)
    reference = np.zeros(24, np.int32)
    reference[7:12] = np.arange(1, 6)
    assert np.array_equal(grid.to_numpy(), reference.reshape(4, 6))


@pytest.mark.parametrize("dtype, value", [(np.float32, -2.5), (np.float64, np.pi),
                                          (np.int8, -7), (np.int16, 12345), (np.uint8, 255),
                                          (np.int64, -(2**62) - 5), (np.complex128, 3 - 4j),
                                          (np.float16, 0.1)])
def test_fill(queue, rng, dtype, value):
    n = 517
    x = random_array(rng, n, dtype)
    array = ur_cffi.asarray(x, queue=queue, kind="device")
    expected = x.copy()
    array.fill(value, offset=100, count=201)
    expected[100:301] = value
    assert np.array_equal(array.to_numpy(), expected)
    array.fill(value, offset=450)  # to the end
    expected[450:] = value
    assert np.array_equal(array.to_numpy(), expected)
    event = array.fill(value, offset=n, count=0)  # nothing to do, still an Event
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    array.fill(value)
    assert np.array_equal(array.to_numpy(), np.full(n, value, dtype))


def test_zeros_and_empty(queue):
    zeros = ur_cffi.zeros((3, 333), np.float64, queue=queue, kind="shared")
    assert zeros.shape == (3, 333) and np.array_equal(zeros.to_numpy(), np.zeros((3, 333)))
    assert ur_cffi.empty(11, np.int16, queue=queue, kind="host").dtype == np.int16


def test_copies_block_by_default_and_can_be_asynchronous(queue, rng):
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    array = ur_cffi.empty(n, queue=queue)
    event = array.copy_from(x)
    assert isinstance(event, ur_cffi.Event)
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    out = poisoned(n, np.float32)
    event = array.copy_to(out)
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert np.array_equal(out, x)

    y = rng.standard_normal(n).astype(np.float32)
    written = array.copy_from(y, blocking=False)
    out = poisoned(n, np.float32)
    read = array.copy_to(out, blocking=False, wait_for=[written])
    assert isinstance(read, ur_cffi.Event)
    read.wait()
    assert read.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert np.array_equal(out, y)
    filled = array.fill(7.0, blocking=False, wait_for=read)
    out = poisoned(n, np.float32)
    array.copy_to(out, wait_for=[filled])
    assert np.array_equal(out, np.full(n, 7.0, np.float32))


def test_an_async_copy_keeps_its_host_array_alive(queue, context, kernels, rng):
    """The copy waits behind a kernel the test releases, so it reads the temporary host copy
    (made for the strided source, owned by the Event alone) only after a collection."""
    import ctypes
    import gc

    import crash_probe

    n = 50_001
    x = rng.standard_normal(n)
    array = ur_cffi.full(n, np.nan, np.float64, queue=queue)
    program, spin = crash_probe.load(context, kernels, "spin")
    with program, spin:
        flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        gate = spin.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag,
                           ur_cffi.empty(1, np.int32, queue=queue), crash_probe.SPIN_LIMIT,
                           *crash_probe.spin_local())
        event = array.copy_from(x[::-1], blocking=False, wait_for=[gate])
        gc.collect()
        clobber = [np.full(n, np.nan) for _ in range(8)]  # reuse freed memory, were it freed
        ctypes.c_int32.from_address(flag.data_ptr()).value = 1
        event.wait()
    assert np.array_equal(array.to_numpy(), x[::-1])
    del clobber


def test_another_queue_of_the_same_context(queue, context, device, rng):
    x = rng.standard_normal(333)
    array = ur_cffi.empty(333, np.float64, queue=queue)
    with ur_cffi.Queue(context, device, out_of_order=True) as other:
        array.copy_from(x, queue=other)
        assert np.array_equal(array.to_numpy(queue=other), x)
        array.fill(2.0, queue=other)
    assert np.array_equal(array.to_numpy(), np.full(333, 2.0))


def test_sizes_are_checked_before_ur_is_called(queue):
    array = ur_cffi.empty(10, np.float32, queue=queue)
    with pytest.raises(ValueError, match=r"copy_from: 11 element\(s\) at offset 0 do not fit"):
        array.copy_from(np.zeros(11, np.float32), offset=0)
    with pytest.raises(ValueError, match=r"5 element\(s\) at offset 8 do not fit in 10"):
        array.copy_from(np.zeros(5, np.float32), offset=8)
    with pytest.raises(ValueError, match=r"offset -1 is out of range"):
        array.copy_from(np.zeros(2, np.float32), offset=-1)
    with pytest.raises(ValueError, match=r"copy_to: 4 element\(s\) at offset 7 do not fit in 10"):
        array.copy_to(np.zeros(4, np.float32), offset=7)
    with pytest.raises(ValueError, match=r"fill: 6 element\(s\) at offset 5 do not fit in 10"):
        array.fill(1.0, offset=5, count=6)
    with pytest.raises(ValueError, match=r"fill: offset 11 is past the end of 10 elements"):
        array.fill(1.0, offset=11)
    big = ur_cffi.empty(11, np.float32, queue=queue)
    with pytest.raises(ValueError, match=r"11 element\(s\) at offset 0 do not fit in 10"):
        array.copy_from(big, offset=0)
    with pytest.raises(ValueError, match=r"copy_to: 11 element\(s\) at offset 0 do not fit in 10"):
        array.copy_to(big, offset=0)
    # Without offset=, a copy is of the whole array: a smaller source, or one of the same size
    # in another shape (a forgotten transpose), copied part of it or the wrong elements.
    grid = ur_cffi.full((4, 6), np.nan, np.float32, queue=queue)
    for other in (np.zeros(12, np.float32), np.zeros((6, 4), np.float32),
                  ur_cffi.zeros((6, 4), np.float32, queue=queue)):
        with pytest.raises(ValueError, match=r"copy_from: shape \(\d+, ?\d*\) does not match "
                                             r"\(4, 6\); for part of a contiguous array, pass "
                                             "offset="):
            grid.copy_from(other)
        with pytest.raises(ValueError, match=r"copy_to: shape .* does not match \(4, 6\)"):
            grid.copy_to(other)
    assert np.isnan(grid.to_numpy()).all()
    grid.copy_from(np.arange(24, dtype=np.float32))  # flat, as many elements: whole
    grid.copy_from(np.zeros(12, np.float32), offset=12)  # a part, asked for
    assert np.array_equal(grid.to_numpy().ravel(), np.r_[np.arange(12), np.zeros(12)])
    with pytest.raises(ValueError, match=r"copy_to: 10 element\(s\) at offset 1 do not fit in 10"):
        array.copy_to(ur_cffi.empty(10, np.float32, queue=queue), offset=1)


def test_types_are_checked_before_ur_is_called(queue, context, device):
    array = ur_cffi.empty(10, np.float32, queue=queue)
    with pytest.raises(TypeError, match="dtype float64 does not match the USM array's float32"):
        array.copy_from(np.zeros(10))
    with pytest.raises(TypeError, match="dtype int32 does not match"):
        array.copy_to(np.zeros(10, np.int32))
    with pytest.raises(TypeError, match="dtype float64 does not match float32"):
        array.copy_from(ur_cffi.empty(10, np.float64, queue=queue))
    with pytest.raises(TypeError, match="copy_to: dtype float32 does not match the "
                                        "destination's float64"):  # it named copy_from
        array.copy_to(ur_cffi.empty(10, np.float64, queue=queue))
    with pytest.raises(TypeError, match="not list"):
        array.copy_from([1.0] * 10)
    strided = np.full((10, 2), np.nan, np.float32)  # strides are honoured now (issue 12)
    array.copy_from(np.arange(10, dtype=np.float32))
    array.copy_to(strided[:, 0])
    assert np.array_equal(strided[:, 0], np.arange(10)) and np.isnan(strided[:, 1]).all()
    read_only = np.zeros(10, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        array.copy_to(read_only)
    with pytest.raises(ValueError, match="kind must be one of"):
        ur_cffi.empty(3, queue=queue, kind="pinned")
    with pytest.raises(ValueError, match="extent -1 is out of range"):
        ur_cffi.empty((3, -1), queue=queue)
    with pytest.raises(TypeError, match=r"shape \(2.5,\) extent must be an integer, not float"):
        ur_cffi.empty((2.5,), queue=queue)
    for shape in (True, (3, np.bool_(True)), "3"):
        with pytest.raises(TypeError, match="must be an integer"):
            ur_cffi.empty(shape, queue=queue)
    with pytest.raises(TypeError, match="shape 2.5 must be an integer or a sequence"):
        ur_cffi.empty(2.5, queue=queue)  # a TypeError, as from numpy.empty(2.5)
    with pytest.raises(TypeError, match="queue must be a ur_cffi Queue"):
        ur_cffi.USMArray(context, 3)
    with device.create_context() as other_context, ur_cffi.Queue(other_context) as other:
        foreign = ur_cffi.empty(10, np.float32, queue=other)
        with pytest.raises(ValueError, match="another context"):
            array.copy_from(foreign)
        with pytest.raises(ValueError, match="another context"):
            array.copy_to(ur_cffi.empty(5, np.float32, queue=other))
        with pytest.raises(ValueError, match="not of the context"):
            array.fill(0.0, queue=other)
        foreign.close()


def test_python_objects_are_refused(queue, context):
    """Their bytes are PyObject pointers without references: read back, they crash Python."""
    with pytest.raises(TypeError, match="asarray: a numpy array of dtype object holds Python "
                                        "objects"):  # (it named USMArray, not asarray)
        ur_cffi.asarray(np.array([[1, 2], None], dtype=object), queue=queue)
    with pytest.raises(TypeError, match=r"arange\(18446744073709551616, 18446744073709551619, "
                                        r"1\): numpy makes Python objects"):
        ur_cffi.arange(2**64, 2**64 + 3, queue=queue)
    with pytest.raises(TypeError, match=r"arange\(0, 3, 1\): numpy makes Python objects of "
                                        "dtype object"):
        ur_cffi.arange(0, 3, dtype=object, queue=queue)
    with pytest.raises(TypeError, match="holds Python objects"):
        ur_cffi.empty(3, np.dtype([("x", np.float32), ("o", object)]), queue=queue)
    buffer = ur_cffi.Buffer(context, 64)
    with pytest.raises(TypeError, match="write: dtype object holds Python objects"):
        buffer.write(queue, [None, 1])
    with pytest.raises(TypeError, match="read: dtype object holds Python objects"):
        buffer.read(queue, np.empty(2, object))
    with pytest.raises(TypeError, match="read needs a numpy array, not bytearray"):
        buffer.read(queue, bytearray(8))


def test_structured_and_byte_string_dtypes(queue, rng):
    pairs = np.zeros(101, [("a", np.float32), ("b", np.int16), ("c", np.float64)])
    pairs["a"], pairs["b"] = rng.standard_normal(101), rng.integers(-99, 99, 101)
    array = ur_cffi.asarray(pairs, queue=queue)
    assert array.nbytes == pairs.nbytes and np.array_equal(array.to_numpy(), pairs)
    words = ur_cffi.empty(9, "S3", queue=queue)
    words.fill(b"abc")
    assert words.to_numpy().tolist() == [b"abc"] * 9


def test_an_allocation_beyond_the_device_limit_raises(queue, device):
    with pytest.raises(errors.URError) as raised:
        ur_cffi.empty(device.max_mem_alloc_size + 1, np.uint8, queue=queue)
    assert isinstance(raised.value, (ValueError, MemoryError))
    assert raised.value.function == "urUSMDeviceAlloc"


def test_buffer_write_read(queue, context, rng):
    n = 1001
    x = rng.standard_normal(n)
    buffer = ur_cffi.Buffer(context, x.nbytes)
    assert buffer.nbytes == x.nbytes and buffer.context is context
    event = buffer.write(queue, x)
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    out = poisoned(n, np.float64)
    buffer.read(queue, out)
    assert np.array_equal(out, x)

    part = rng.standard_normal(10)
    buffer.write(queue, part, offset=8 * 990)  # the last 11 elements, 10 overwritten
    expected = x.copy()
    expected[990:1000] = part
    tail = poisoned(11, np.float64)
    buffer.read(queue, tail, offset=8 * 990)
    assert np.array_equal(tail, expected[990:])

    y = rng.standard_normal(n)
    written = buffer.write(queue, y, blocking=False)
    out = poisoned(n, np.float64)
    read = buffer.read(queue, out, blocking=False, wait_for=[written])
    read.wait()
    assert np.array_equal(out, y)
    buffer.close()
    assert buffer.closed


def test_buffer_checks_and_flags(queue, context, device):
    buffer = ur_cffi.Buffer(context, 64, ur_mem_flag_t.UR_MEM_FLAG_READ_ONLY)
    with pytest.raises(ValueError, match="72 bytes at offset 0 do not fit in 64"):
        buffer.write(queue, np.zeros(9))
    with pytest.raises(ValueError, match="8 bytes at offset 60 do not fit in 64"):
        buffer.read(queue, np.zeros(1), offset=60)
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        buffer.read(queue, np.zeros((4, 2))[:, 0])
    for size in (0, -8):
        with pytest.raises(ValueError, match=f"Buffer size {size} is out of range"):
            ur_cffi.Buffer(context, size)
    for size in (2.5, True, np.float64(8)):
        with pytest.raises(TypeError, match="Buffer size must be an integer"):
            ur_cffi.Buffer(context, size)
    with device.create_context() as other_context, ur_cffi.Queue(other_context) as other:
        with pytest.raises(ValueError, match="not of this buffer's context"):
            buffer.write(other, np.zeros(2))


@pytest.mark.cpu_device("asks the OpenCL library about the handle")
def test_buffer_native_handle_is_the_opencl_mem_object(context):
    buffer = ur_cffi.Buffer(context, 4096 + 12)
    handle = buffer.native_handle()
    assert type(handle) is int and handle != 0
    assert buffer.native_handle(context.devices[0]) == handle
    # Ask OpenCL itself (the library the adapter already loaded) for the object's size.
    opencl = ctypes.CDLL("libOpenCL.so.1")
    size = ctypes.c_size_t()
    CL_MEM_SIZE = 0x1102
    assert opencl.clGetMemObjectInfo(ctypes.c_void_p(handle), CL_MEM_SIZE,
                                     ctypes.sizeof(size), ctypes.byref(size), None) == 0
    assert size.value == 4096 + 12


def test_zeros_of_any_dtype_are_zero_bytes_as_in_numpy(queue):
    for dtype in ("S4", "U2", "V3", [("a", np.float32), ("b", np.int16)], np.complex64, "?"):
        array = ur_cffi.zeros(3, dtype, queue=queue)
        assert array.to_numpy().tobytes() == np.zeros(3, dtype).tobytes()
    assert ur_cffi.zeros((), np.float64, queue=queue).item() == 0.0


@pytest.mark.parametrize("dtype", ["(2,3)f4", np.dtype("(2,3)f4"), np.dtype("(2,)i8")])
def test_a_subarray_dtype_is_refused_with_its_shape(queue, dtype):
    with pytest.raises(TypeError, match=r"subarray dtype: add its shape \((2, 3|2,)\)"):
        ur_cffi.empty(2, dtype, queue=queue)


def test_small_cases_numpy_users_expect(queue):
    array = ur_cffi.full(3, np.array(3.5), queue=queue)  # a 0-d array is a number to numpy
    array.fill(np.array(-2.0))
    assert np.array_equal(array.to_numpy(), np.full(3, -2.0, np.float32))
    for kind in (0, ""):
        with pytest.raises(ValueError, match="kind must be one of"):
            array.copy(kind=kind)
    with pytest.raises(TypeError, match="asarray: int 1180591620717411303424 makes numpy objects"):
        ur_cffi.asarray(2**70, queue=queue)
