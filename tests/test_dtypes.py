"""Every numpy numeric dtype plus bfloat16 and float8 (ml_dtypes) in USM arrays, the
constructors (``empty``, ``zeros``, ``ones``, ``full``, ``arange``, ``*_like``, ``copy``), and
Triton kernels receiving the matching element types, ``triton.reinterpret`` included."""


import warnings

import ml_dtypes
import numpy as np
import pytest

import ur_cffi

NUMPY = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64", "complex64", "complex128"]
LOW_PRECISION = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz"]
KINDS = ("device", "host", "shared")
COMPLEX32, BCOMPLEX32 = (getattr(ml_dtypes, name, None) for name in ("complex32", "bcomplex32"))
"""ml_dtypes' complex types, None in its versions before them (oneAPI 2025.0's numpy 1.26
environment): the cases that name one are left out there."""


def _with_dtypes(cases) -> list:
    """``cases`` but those whose dtype (their second item) this ml_dtypes lacks."""
    return [case for case in cases if case[1] is not None]


def values(rng, shape, dtype):
    dtype = ur_cffi.dtypes.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NUMPY + LOW_PRECISION)
def test_every_dtype_round_trips_and_constructs(queue, rng, name, kind):
    dtype = ur_cffi.dtypes.dtype(name)
    host = values(rng, (5, 7), name)
    array = ur_cffi.asarray(host, queue=queue, kind=kind)
    assert array.dtype == dtype and array.itemsize == dtype.itemsize
    assert array.to_numpy().tobytes() == host.tobytes()
    assert array.T.to_numpy().tobytes() == np.ascontiguousarray(host.T).tobytes()
    assert array.copy().to_numpy().tobytes() == host.tobytes()
    for made, expected in (
            (ur_cffi.zeros((2, 3), name, queue=queue, kind=kind), np.zeros((2, 3), dtype)),
            (ur_cffi.ones((2, 3), name, queue=queue, kind=kind), np.ones((2, 3), dtype)),
            (ur_cffi.full(4, 1, name, queue=queue, kind=kind), np.full(4, 1, dtype)),
            (ur_cffi.zeros_like(array), np.zeros((5, 7), dtype)),
            (ur_cffi.ones_like(array, kind="host"), np.ones((5, 7), dtype)),
            (ur_cffi.full_like(array[:, ::3], 1), np.full((5, 3), 1, dtype))):
        assert made.dtype == dtype and made.shape == expected.shape
        assert made.to_numpy().tobytes() == expected.tobytes()
    like = ur_cffi.empty_like(array)
    assert (like.shape, like.dtype, like.queue, like.kind) == ((5, 7), dtype, queue, kind)
    if dtype.kind != "b":
        ramp = ur_cffi.arange(0, 6, 2, dtype=name, queue=queue, kind=kind)
        assert ramp.to_numpy().tobytes() == np.arange(0, 6, 2, dtype=dtype).tobytes()


@pytest.mark.parametrize("kind", ["device", "host"])
def test_like_constructors_lay_out_as_numpy_does(queue, rng, kind):
    """numpy's order="K" (PyTorch's preserve_format): the result's axes go in the order of the
    input's strides, so a kernel given the input's strides for its output writes the right
    places (a transposed input gave a C-ordered output)."""
    host = rng.standard_normal((3, 4, 5))
    array = ur_cffi.asarray(host, queue=queue, kind=kind)
    for make_view in (lambda a: a, lambda a: a.T, lambda a: a.transpose(1, 0, 2),
                      lambda a: a[::-1, :, ::2], lambda a: a[:, 1:3].transpose(2, 0, 1),
                      lambda a: a[None, 0], lambda a: a[:, 0, ::-1].T):
        view, expected = make_view(array), make_view(host)
        for made in (ur_cffi.empty_like(view), ur_cffi.zeros_like(view),
                     ur_cffi.ones_like(view, dtype=np.float32),
                     ur_cffi.full_like(view, 2.5)):
            reference = np.empty_like(expected, dtype=made.dtype)
            assert made.shape == expected.shape and made.kind == kind
            assert made.strides == reference.strides, (view.strides, made.strides)
        assert np.array_equal(ur_cffi.full_like(view, 2.5).to_numpy(), np.full_like(expected, 2.5))
        assert not ur_cffi.zeros_like(view).to_numpy().any()
        assert ur_cffi.empty_like(view, order="C").strides == np.empty_like(expected,
                                                                            order="C").strides


def test_like_constructors_of_overlapping_elements_are_c_contiguous(queue, rng):
    # A broadcast's like (strides (0, 4)) was column-major, numpy's order="K": a kernel that
    # took its rows to be contiguous, as the input's are and PyTorch's preserve_format makes
    # them, wrote each row over the others (examples/tutorial_softmax_strided.py, silently).
    row = ur_cffi.asarray(rng.standard_normal(8).astype(np.float32), queue=queue)
    rows = ur_cffi.from_pointer(row.data_ptr(), (4, 8), np.float32, queue=queue,
                                strides=(0, 4), owner=row)
    for made in (ur_cffi.empty_like(rows), ur_cffi.zeros_like(rows),
                 ur_cffi.full_like(rows, 1.5), ur_cffi.empty_like(rows.T)):
        assert made.is_contiguous() and made.shape in ((4, 8), (8, 4))
    matrix = ur_cffi.zeros((8, 8), np.float32, queue=queue)
    for shape, strides in (((2, 4), (0, 16)), ((2, 4), (0, -16)), ((2, 2, 4), (0, 64, 4)),
                           ((2, 2, 2), (4, 4, 100)), ((3, 2), (4, 8))):  # (with gaps too)
        over = ur_cffi.from_pointer(matrix.data_ptr() + (48 if strides[1] < 0 else 0), shape,
                                    np.float32, queue=queue, strides=strides, owner=matrix)
        assert ur_cffi.empty_like(over).is_contiguous(), strides
    host = np.zeros((8, 8), np.float32)
    for pick in (lambda a: a[:, ::2], lambda a: a[::2].T, lambda a: a[::-1, 1::3]):
        assert ur_cffi.empty_like(pick(matrix)).strides == np.empty_like(pick(host)).strides


def test_constructor_defaults_and_checks(queue):
    assert ur_cffi.full(3, 7, queue=queue).dtype == np.int64  # numpy.full's inference
    assert ur_cffi.full(3, 0.5, queue=queue).dtype == np.float64
    assert ur_cffi.ones(3, queue=queue).dtype == np.float32  # as empty and zeros
    ramp = ur_cffi.arange(5, queue=queue)
    assert ramp.dtype == np.arange(5).dtype and list(ramp.to_numpy()) == [0, 1, 2, 3, 4]
    assert np.allclose(ur_cffi.arange(0.0, 1.0, 0.25, queue=queue).to_numpy(),
                       [0, 0.25, 0.5, 0.75])
    assert ur_cffi.zeros(2, ur_cffi.bfloat16, queue=queue).dtype == ml_dtypes.bfloat16
    assert ur_cffi.zeros(2, "bfloat16", queue=queue).dtype == ml_dtypes.bfloat16
    with pytest.raises(ValueError, match="300 does not fit in int8"):
        ur_cffi.full(3, 300, np.int8, queue=queue)
    with pytest.raises(TypeError, match="fill_value must be one number"):
        ur_cffi.full(3, [1, 2], queue=queue)
    with pytest.raises(TypeError, match="arange: start must be a number, not str"):
        ur_cffi.arange("3", queue=queue)
    with pytest.raises(TypeError, match="takes a USMArray, not ndarray"):
        ur_cffi.zeros_like(np.zeros(3))
    with pytest.raises(TypeError, match="dtype 'bfloat17' is not a numpy dtype"):
        ur_cffi.ones(3, "bfloat16"[:-1] + "7", queue=queue)


@pytest.mark.parametrize("value, dtype, error", _with_dtypes([
    # Fractions of every float kind into integer and bool elements, NaN and infinity too.
    (ml_dtypes.bfloat16(0.5), "bool", "0.5 is not an integer"),
    (ml_dtypes.float8_e5m2(-0.25), "bool", "-0.25 is not an integer"),
    (ml_dtypes.bfloat16(1.5), "int32", "1.5 is not an integer"),
    (ml_dtypes.bfloat16("nan"), "int8", "nan is not an integer"),
    (ml_dtypes.bfloat16("inf"), "int8", "inf is not an integer"),
    (1.5, ml_dtypes.int4, "1.5 is not an integer"),
    (9, ml_dtypes.int4, "9 does not fit in int4"),
    # A finite value beyond the type, a NaN or infinity the type cannot hold.
    (np.longdouble("1e400"), "float32", "does not fit in float32"),
    (10**6, ml_dtypes.float8_e4m3, "does not fit in float8_e4m3"),
    (2**70, ml_dtypes.float8_e4m3, "does not fit in float8_e4m3"),
    (float("nan"), ml_dtypes.float4_e2m1fn, "holds no NaN"),
    (1e6, ml_dtypes.float4_e2m1fn, "does not fit in float4_e2m1fn"),  # (it saturates: 6)
    (2**70, ml_dtypes.float4_e2m1fn, "does not fit in float4_e2m1fn"),
    (float("inf"), "float8_e4m3fn", "holds no infinity"),
    # (float4 and float6 saturate: an infinity compared in the type itself read as 6 on both
    # sides, and full() stored 6.0)
    (float("inf"), ml_dtypes.float4_e2m1fn, "holds no infinity"),
    (-float("inf"), ml_dtypes.float4_e2m1fn, "holds no infinity"),
    (float("inf"), ml_dtypes.float6_e2m3fn, "holds no infinity"),
    (np.float32("-inf"), ml_dtypes.float6_e3m2fn, "holds no infinity"),
    # Values that are no number of the type.
    (np.timedelta64(5, "s"), "bfloat16", "must be a number, not timedelta64"),
    (np.datetime64("2020-01-01T10:00"), "M8", "cannot be stored as datetime64"),
    (np.timedelta64(5, "h"), "m8", "cannot be stored as timedelta64"),
    # ...nor one its unit does not hold: numpy truncated 1500 ms to 1 s, wrapped past its range
    (np.datetime64(1500, "ms"), "M8[s]", "not exactly a datetime64.s.*would store .*00:00:01"),
    (np.datetime64(-1500, "ms"), "M8[s]", "not exactly a datetime64.s."),
    (np.timedelta64(1500, "ms"), "m8[s]", "not exactly a timedelta64.s."),
    (np.timedelta64(10**10, "D"), "m8[ns]",  # (numpy wraps it, or raises OverflowError)
     "not exactly a timedelta64.ns.|does not fit in timedelta64.ns."),
    (np.float64(2.7), "m8[s]", "not exactly a timedelta64.s..*would store .*2,'s'"),
    (np.uint64(2**64 - 1), "m8[s]", "not exactly a timedelta64.s."),  # (it wrapped to -1 s)
    (np.float32(3.5), "M8[D]", "not exactly a datetime64.D."),
    # ...nor a datetime for a timedelta or the other way: numpy took the count (1500 s)
    (np.datetime64(1500, "ms"), "m8[s]", "is a datetime64; the elements are timedelta64.s."),
    (np.timedelta64(3, "D"), "M8[D]", "is a timedelta64; the elements are datetime64.D."),
    # Strings and records: numpy truncated the text (12345 into U2 stored "12") and stored
    # a fraction in each integer field
    ("abcdef", "U2", "does not fit in <U2: numpy would store .*'ab'"),
    (12345, "U2", "does not fit in <U2: numpy would store .*'12'"),
    (1.5, "S2", "does not fit in |S2: numpy would store .*b'1.'"),
    (1.5, "i4,f4", "\\(into field 'f0'\\) 1.5 is not an integer"),
    # ...nor a record of other fields that numpy converts each unchecked: (inf, 44) was stored
    (np.array((1e300, 300), "f8,i8")[()], "f4,i1", "\\(into field 'f0'\\) .*1e\\+300.* does "
     "not fit in float32"),
    (np.array((2.5, -1), "f8,i8")[()], "i4,u1", "\\(into field 'f0'\\) .*2.5.* is not an "
     "integer"),
    (np.array((1, 2, 3), "i4,i4,i4")[()], "i4,i4", "has 3 fields; the elements are"),
    (-1, "u1,f4", "\\(into field 'f0'\\) -1 does not fit in uint8"),
    # ml_dtypes' bcomplex32 is of numpy's kind "V": its complex values were refused as complex,
    # and an overflow stored infinity
    (1e39, BCOMPLEX32, "does not fit in bcomplex32"),
    (complex(1, 1e39), COMPLEX32, "does not fit in complex32"),
]))
def test_fill_values_are_refused_where_they_would_change(queue, value, dtype, error):
    """``full`` and ``fill`` store a value exactly or refuse it, naming it: a fraction is no
    integer whatever its float type (an ml_dtypes scalar was truncated: 0.5 made False), a
    finite value does not become infinity (a long double beyond float64 did), and a type
    without NaN or infinity does not make another value of them (NaN became -0 in float4);
    a datetime in its unit does not go into a unit-less datetime array (its count was kept,
    its unit lost)."""
    kind = TypeError if "number" in error or "stored as" in error or "the elements are" in \
        error else ValueError
    with pytest.raises(kind, match=error):
        ur_cffi.full(3, value, dtype, queue=queue)
    array = ur_cffi.zeros(3, dtype, queue=queue)
    with pytest.raises(kind, match=error):
        array.fill(value)
    assert array.to_numpy().tobytes() == np.zeros(3, array.dtype).tobytes()


def test_fill_values_that_fit_are_stored_as_numpy_stores_them(queue):
    """Values that round to a type's largest are stored (a check for saturating types
    refused them for every float type), and a complex whose magnitude passes float64's."""
    for value, dtype in ((3.4028235e38, "float32"), (3.40282347e38, "float32"),  # FLT_MAX
                         (65505.0, "float16"), (60000.0, "float8_e5m2"),  # round to the
                         (450.0, "float8_e4m3fn"), (6.5, ml_dtypes.float4_e2m1fn),  # largest
                         (complex(1.7e308, 1.7e308), "complex128"),
                         (ml_dtypes.bfloat16(1.0), "bool"), (ml_dtypes.bfloat16(-2), "int32"),
                         (-8, ml_dtypes.int4), (10**400, np.longdouble),
                         (float("inf"), "float16"), (complex(np.inf, 1), "complex64"),
                         (np.datetime64("2020-01-01T10:00"), "M8[m]"), ("ab", "U4"),
                         (np.datetime64(2000, "ms"), "M8[s]"), (np.timedelta64(5, "us"), "m8[ns]"),
                         # (the ml_dtypes complex types: complex32's check listed its 2**32
                         # values, 32 GiB; bcomplex32's refused complex values; byte-swapped
                         # datetimes compared the swapped count)
                         (complex(1, 2), COMPLEX32), (1.5, COMPLEX32),
                         (complex(1, 2), BCOMPLEX32), (1, ">M8[s]"),
                         (np.int64(86400), ">m8[ms]"), ("abc", "S3"), (12, "U2"),
                         (7, "i4,f4"), (5, [("a", "f4", (3,)), ("b", "i4")]),
                         (np.zeros((), ">i4,>f4")[()], "<i4,<f4"),
                         (np.array((7, 300), "i8,i8")[()], "i4,i2")):
        if dtype is None:
            continue
        expected = np.full(3, value, ur_cffi.dtypes.dtype(dtype))
        made = ur_cffi.full(3, value, dtype, queue=queue)
        assert made.dtype == expected.dtype
        assert np.array_equal(made.to_numpy(), expected), (value, dtype)  # (not the bytes:
        # a long double's padding is whatever was there)
    assert np.isnat(ur_cffi.full(3, np.datetime64("NaT", "ms"), "M8[s]", queue=queue)
                    .to_numpy()).all()


def test_a_signalling_nan_is_stored_as_its_bits_without_a_warning(queue):
    # numpy says nothing; the check's widening warned "invalid value encountered in cast",
    # an error where warnings are (pytest's filterwarnings = error).
    quiet, signalling = (np.uint16(bits).view(ml_dtypes.bfloat16) for bits in (0x7FC1, 0x7F81))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for value in (quiet, signalling):
            array = ur_cffi.full(3, value, ml_dtypes.bfloat16, queue=queue)
            array[1:] = value
            array.fill(value)
            assert (array.to_numpy().view(np.uint16) == value.view(np.uint16)).all()


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_nan_is_stored_after_an_overflow_elsewhere(queue, name):
    # An overflow in libm (numpy's exp) leaves the C errno at ERANGE, and CPython 3.11's
    # abs() of a complex NaN read it: the check took NaN for a finite value too large.
    dtype = np.dtype(getattr(ml_dtypes, name))
    array = ur_cffi.zeros(4, dtype, queue=queue)

    def assigned(value):
        array[:] = value
        return array

    def filled(value):
        array.fill(value)
        return array

    for nan in (float("nan"), np.array(np.nan, dtype)[()]):
        for store in (filled, assigned, lambda value: ur_cffi.full(4, value, dtype, queue=queue)):
            array.fill(0)
            with np.errstate(over="ignore"):
                np.exp(np.float64(1000.0))
            assert np.isnan(store(nan).to_numpy().astype(np.float64)).all(), (store, nan)


@pytest.mark.parametrize("dtype", [str, bytes, "S0", "U0", "V0", np.dtype(str),
                                   np.dtype("S0"), np.dtype("V0")])
def test_a_dtype_of_no_bytes_is_refused(queue, dtype):
    """numpy's unsized ``str`` and ``bytes``: an array of them was made of 0 bytes, and a fill
    of ``"ab"`` wrote 8 bytes per element past it (given as a numpy dtype it still passed)."""
    with pytest.raises(TypeError, match="of 0 bytes: it holds nothing; give its size"):
        ur_cffi.empty(200, dtype, queue=queue)
    with pytest.raises(TypeError, match="of 0 bytes"):
        ur_cffi.full(3, "ab", dtype, queue=queue)
    with pytest.raises(TypeError, match="of 0 bytes"):
        ur_cffi.zeros(4, np.uint8, queue=queue).view(dtype)


def test_arange_rounds_once_and_refuses_what_full_refuses(queue):
    # numpy steps by dtype(start + step) - dtype(start): in bfloat16 from 256 that is 0
    for start, stop, step, dtype in ((256, 300, 1, "bfloat16"), (16, 40, 1, "float8_e4m3fn"),
                                     (2048, 2060, 1, "float16"), (2**24, 2**24 + 6, 1,
                                                                  "float32"),
                                     (0.1, 2.3, 0.1, "float16"), (10, -10, -3, "int8"),
                                     (2**63, 2**63 + 4, 1, "uint64"), (0, 2, 1, "bool"),
                                     (0, 4, 1, COMPLEX32 or "complex64"), (5, 5, 1, "int8"),
                                     # (exact past 2**53: float64 made 2**63 three times)
                                     (2**64 - 4, 2**64, 1, "uint64"), (-7, 9, 4, ml_dtypes.int4),
                                     (5, None, 1, "int16"), (0, 5, 2**64, "int16"),
                                     (2**63 - 3, 2**63, 1, "int64"),
                                     # (integral floats: exact too; numpy repeated 2**53, and
                                     # computed in a float32 argument's own precision)
                                     (2.0**53, 2.0**53 + 6, 1.0, "int64"),
                                     (np.float32(2**24), 2**24 + 4, 1, "int32"),
                                     (np.float32(2**24), 2**24 + 4, 1, "float64")):
        if all(float(value).is_integer() for value in (start, stop, step) if value is not None):
            bounds = (0, int(start)) if stop is None else (int(start), int(stop))
            expected = np.array(list(range(*bounds, int(step))), dtype=object)  # Python's
        else:
            expected = np.arange(start, stop, step)
        expected = expected.astype(ur_cffi.dtypes.dtype(dtype))
        made = ur_cffi.arange(start, stop, step, dtype=dtype, queue=queue).to_numpy()
        assert made.dtype == expected.dtype and made.tobytes() == expected.tobytes(), \
            (start, stop, step, dtype)
    for args, dtype, error in (((120, 135), "int8", r"from 120 to 134 do not all fit in int8"),
                               ((250, 260), "uint8", "do not all fit in uint8"),
                               ((0, 1, 0.25), "int64", "its values are not all integers"),
                               ((440, 480, 8), "float8_e4m3fn", "do not all fit"),
                               ((6e4, 7e4, 1e3), "float16", "do not all fit in float16"),
                               ((2**63, 2**63 + 3), "int64", "do not all fit in int64")):
        with pytest.raises(ValueError, match=rf"arange\(.*{error}"):
            ur_cffi.arange(*args, dtype=dtype, queue=queue)
    with pytest.raises(ValueError, match=r"arange\(0, 18446744073709551615, 1\): more values "
                                         "than an array holds"):
        ur_cffi.arange(0, 2**64 - 1, dtype="uint64", queue=queue)
    for dtype in ("float32", "int32"):  # (numpy's step 1+0j made no values, with a warning)
        with pytest.raises(TypeError, match=f"arange: a complex start, stop or step for {dtype}"):
            ur_cffi.arange(0, 5, 1 + 0j, dtype=dtype, queue=queue)


def test_ones_takes_no_dtype_none_and_huge_empty_shapes_are_refused(queue):
    with pytest.raises(TypeError, match="dtype None: name the element type"):
        ur_cffi.ones(3, dtype=None, queue=queue)  # int64 before (full's inference from 1)
    with pytest.raises(ValueError, match="extents other than 0 span more bytes than an index"):
        ur_cffi.empty((0, 2**62, 4), np.float64, queue=queue)
    assert ur_cffi.empty((0, 2**40), np.float64, queue=queue).strides == (2**43, 8)


def test_a_value_that_does_not_fit_is_named_by_the_function_called(queue):
    # ones, ones_like and full_like all said "full: fill_value".
    small = ur_cffi.zeros(2, np.int8, queue=queue)
    cases = [(lambda: ur_cffi.full_like(small, 300),
              "full_like: fill_value 300 does not fit in int8")]
    if hasattr(ml_dtypes, "int1"):  # (holds -1 and 0; from ml_dtypes 0.5)
        cases += [(lambda: ur_cffi.ones(2, ml_dtypes.int1, queue=queue),
                   "ones: the value 1 does not fit in int1"),
                  (lambda: ur_cffi.ones_like(small, ml_dtypes.int1),
                   "ones_like: the value 1 does not fit in int1")]
    for make, message in cases:
        with pytest.raises(ValueError, match=message):
            make()


def test_assignment_drops_a_values_leading_axes_of_one_as_numpy_does(queue, rng):
    host = rng.standard_normal((1, 1, 3)).astype(np.float32)
    for value in (host, ur_cffi.asarray(host[0], queue=queue)):
        target = ur_cffi.full(3, np.nan, np.float32, queue=queue)
        target[...] = value
        assert np.array_equal(target.to_numpy(), host.reshape(3))
    target = ur_cffi.full((2, 3), np.nan, np.float32, queue=queue)
    target.copy_(host)
    assert np.array_equal(target.to_numpy(), np.broadcast_to(host[0], (2, 3)))
    with pytest.raises(ValueError, match=r"shape \(2, 1, 3\) does not broadcast to the "
                                         r"target's shape \(3,\)"):
        target[0] = np.ones((2, 1, 3), np.float32)
    with pytest.raises(ValueError, match=r"shape \(1, 3\) does not broadcast"):
        target[0] = [[1.0, 2.0, 3.0]]  # numpy drops them for all but nested sequences (this
    for array_like in (memoryview(host[0].copy()), ArrayLike(host[0])):  # one was taken)
        target.fill(np.nan)
        target[1] = array_like
        assert np.array_equal(target.to_numpy()[1], host.reshape(3))



def test_one_element_takes_one_value_as_numpy_has_it(queue):
    target, host = ur_cffi.zeros((2, 2), queue=queue), np.zeros((2, 2))
    for key in ((0, 1), (np.int64(1), -1)):
        for value in (np.array([5.0]), [5.0], np.ones((1, 1)),
                      ur_cffi.ones(1, queue=queue)):
            with pytest.raises(ValueError, match="setting an array element with a seq"):
                target[key] = value
            with warnings.catch_warnings():  # numpy 1.25 and 1.26 deprecate it
                warnings.simplefilter("error", DeprecationWarning)
                with pytest.raises((ValueError, DeprecationWarning)):
                    host[key] = value.to_numpy() if isinstance(value, ur_cffi.USMArray) \
                        else value
            if isinstance(value, list):  # into a 0-d view: refused by numpy, and here
                for array in (host, target):
                    with pytest.raises(ValueError):
                        array[(*key, ...)] = value
                continue
            target[(*key, ...)] = value  # a 0-d view takes an array that broadcasts to it
            host[(*key, ...)] = value.to_numpy() if isinstance(value, ur_cffi.USMArray) \
                else value
            assert np.array_equal(target.to_numpy(), host)
        target[key] = np.array(7.0)  # a value of no dimensions
        host[key] = 7.0
        assert np.array_equal(target.to_numpy(), host)
    cell = ur_cffi.zeros((), queue=queue)
    with pytest.raises(ValueError, match="setting an array element with a seq"):
        cell[()] = np.array([2.0])
    cell[...] = np.array([2.0])
    assert cell.item() == 2.0

class ArrayLike:
    """An object numpy reads through ``__array__`` (a CPU tensor of another library, say)."""

    def __init__(self, values):
        self.values = values

    def __array__(self, dtype=None, copy=None):
        return self.values


def test_a_dtype_is_kept_as_given(queue):
    # Read dtypes are cached; a dtype equal to a cached one (the metadata does not take part
    # in equality) is still the one given, not the cached one.
    plain = np.dtype(np.float32)
    tagged = np.dtype(np.float32, metadata={"unit": "m"})
    assert ur_cffi.empty(2, plain, queue=queue).dtype is plain
    assert ur_cffi.empty(2, tagged, queue=queue).dtype.metadata == {"unit": "m"}
    swapped = np.dtype(">f4")
    assert ur_cffi.dtypes.dtype(swapped) is swapped
    assert ur_cffi.dtypes.dtype(np.float32) is plain and ur_cffi.dtypes.dtype("<f4") == plain


def test_bfloat16_rounds_as_ml_dtypes_does(queue):
    host = np.array([1.0, 1.00390625, 3.14159, -2.5e-3, 65504.0], np.float32)
    array = ur_cffi.asarray(host.astype(ml_dtypes.bfloat16), queue=queue)
    assert array.to_numpy().tobytes() == host.astype(ml_dtypes.bfloat16).tobytes()
    filled = ur_cffi.full(3, 3.14159, ur_cffi.bfloat16, queue=queue)
    assert filled.to_numpy()[0] == ml_dtypes.bfloat16(3.14159)


# --- Triton ----------------------------------------------------------------------------------

try:
    import triton
    import triton.language as tl
except ImportError:  # without the "triton" extra
    triton = None
else:
    @triton.jit
    def widen(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
        tl.store(out_ptr + offsets, x * 2.0, mask=mask)




@pytest.mark.parametrize("name", ["bfloat16", "float16", "int8", "uint16", "float64",
                                  "float8_e5m2", "float8_e4m3fn"])
def test_triton_gets_the_element_type(triton_queue, rng, name):
    dtype = ur_cffi.dtypes.dtype(name)
    n = 300
    host = values(rng, n, name) if dtype.kind in "iu" else (rng.standard_normal(n) * 3).astype(
        dtype)
    x = ur_cffi.asarray(host, queue=triton_queue)
    out = ur_cffi.full(n, np.nan, np.float32, queue=triton_queue)
    widen[(3,)](x, out, n, BLOCK=128)
    triton_queue.finish()
    expected = 2.0 * host.astype(np.float64)
    np.testing.assert_allclose(out.to_numpy(), expected.astype(np.float32), rtol=1e-6)
    from ur_cffi.triton.launcher import element_type

    assert element_type(x.dtype) == {"bfloat16": "bf16", "float16": "fp16", "int8": "i8",
                                     "uint16": "u16", "float64": "fp64",
                                     "float8_e5m2": "fp8e5",
                                     "float8_e4m3fn": "fp8e4nv"}[name]


def test_triton_reinterpret_on_ur_arrays(triton_queue, rng):
    host = (rng.standard_normal(200) * 3).astype(ml_dtypes.bfloat16)
    bits = ur_cffi.asarray(host.view(np.uint16), queue=triton_queue)  # bfloat16 bits as uint16
    out = ur_cffi.full(200, np.nan, np.float32, queue=triton_queue)
    widen[(2,)](triton.reinterpret(bits, tl.bfloat16), out, 200, BLOCK=128)
    triton_queue.finish()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * host.astype(np.float64), rtol=1e-6)
    as_view = bits.view(ur_cffi.bfloat16)  # the same without Triton: a dtype view
    assert as_view.dtype == ml_dtypes.bfloat16 and as_view.data_ptr() == bits.data_ptr()
    widen[(2,)](as_view, out, 200, BLOCK=128)
    triton_queue.finish()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * host.astype(np.float64), rtol=1e-6)


def test_ml_dtypes_names_read_alike_before_and_after_its_import():
    """numpy reads ml_dtypes' names ("int4", "float4_e2m1fn") only once something imported
    ml_dtypes: ur_cffi.zeros(4, "int4") raised before, and worked after."""
    import crash_probe

    done = crash_probe.run_child(code=(
        "import sys, ur_cffi, device_under_test\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "queue = ur_cffi.Queue(device_under_test.get().create_context())\n"
        "for name in ('int4', 'float4_e2m1fn', 'float8_e4m3'):\n"
        "    array = ur_cffi.full(4, 1, name, queue=queue)\n"
        "    print(array.dtype.name, array.to_numpy().astype(float).tolist())\n"),
        check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["int4 [1.0, 1.0, 1.0, 1.0]",
                                          "float4_e2m1fn [1.0, 1.0, 1.0, 1.0]",
                                          "float8_e4m3 [1.0, 1.0, 1.0, 1.0]"]


@pytest.mark.parametrize("value", [complex(1, 2), np.complex64(1 + 2j), np.complex128(-3j)])
def test_a_complex_value_is_refused_for_real_elements_unless_its_imaginary_part_is_zero(
        queue, value):
    # Its imaginary part would be dropped (numpy warns, ComplexWarning).
    array = ur_cffi.zeros(4, np.float32, queue=queue)
    with pytest.raises(ValueError, match="is complex; the elements are float32"):
        array.fill(value)
    with pytest.raises(ValueError, match="is complex; the elements are int32"):
        ur_cffi.full(4, value, np.int32, queue=queue)
    with pytest.raises(ValueError, match="is complex"):
        array[1:3].fill(value)
    assert not array.to_numpy().any()
    array.fill(complex(2, 0))
    np.testing.assert_array_equal(array.to_numpy(), np.full(4, 2.0))


@pytest.mark.parametrize("name, value", [("float4_e2m1fn", 7.5), ("float6_e3m2fn", 31.0)])
def test_a_value_past_half_a_step_beyond_a_saturating_types_largest_is_refused(queue, name,
                                                                                   value):
    # float4_e2m1fn's largest is 6, its step there 2: from 7 on a value rounds past it, and
    # the type saturates (7.5 would be stored as 6); float6_e3m2fn's is 28 (step 4).
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    dtype = getattr(ml_dtypes, name)
    with pytest.raises(ValueError, match=f"does not fit in {name}"):
        ur_cffi.full(2, value, dtype, queue=queue)
    with pytest.raises(ValueError, match=f"do not all fit in {name}"):
        ur_cffi.arange(value, value + 1, dtype=dtype, queue=queue)


def test_arange_counts_down_past_int64s_range(queue):
    top = 2**64 - 1
    assert ur_cffi.arange(top, top - 5, -1, dtype=np.uint64, queue=queue).to_numpy().tolist() \
        == [top, top - 1, top - 2, top - 3, top - 4]
    assert ur_cffi.arange(2**63 + 6, 2**63 - 3, -3, dtype=np.uint64,
                          queue=queue).to_numpy().tolist() == [2**63 + 6, 2**63 + 3, 2**63]
