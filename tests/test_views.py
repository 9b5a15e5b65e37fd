"""Strided USM arrays on the CPU device, against numpy on the same data: indexing, reshaping,
transposing and dtype views (property-based, every kind of USM and every dtype), copies of
non-contiguous views both ways, assignment into views, lifetime of views, and views as kernel
arguments (``Kernel.launch`` and Triton)."""

import gc
import warnings
import weakref

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ur_cffi
from ur_cffi import _strided, memory
from ur_cffi.enums import ur_event_status_t

KINDS = ("device", "host", "shared")
DTYPES = [np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")] + [
    np.dtype(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                          ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz)]
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.fixture(scope="module")
def q(context, device):
    with ur_cffi.Queue(context, device) as queue:
        yield queue


def reshaped_without_copy(array: np.ndarray, shape):
    """numpy's view of ``array`` as ``shape``, or None where that needs a copy."""
    try:
        return np.reshape(array, shape, copy=False)
    except ValueError:  # a copy is needed
        return None
    except TypeError:  # numpy before 2.1: no copy=
        view = array.view()
        try:
            view.shape = shape
        except AttributeError:  # a copy is needed
            return None
        return view


def random_host(rng, shape, dtype):
    """Random elements of ``dtype`` (random bytes for the float types would hold NaNs, which
    compare unequal: numbers drawn as float64 instead)."""
    if dtype.kind == "b":
        return np.asarray(rng.integers(0, 2, shape)).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.asarray(rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True))
    values = rng.standard_normal(shape) * 4
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return np.asarray(values).astype(dtype)


def same(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def strides_that_matter(array) -> tuple:
    """The strides of axes longer than 1 of a non-empty array (numpy's others are arbitrary)."""
    if not array.size:
        return ()
    return tuple(s for e, s in zip(array.shape, array.strides) if e > 1)


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)


@st.composite
def index_keys(draw, shape):
    """A basic index for ``shape``: integers, slices with any step, None and one ``...``."""
    ndim = len(shape)
    lead = draw(st.integers(0, ndim))
    ellipsis = draw(st.booleans())
    trail = draw(st.integers(0, ndim - lead)) if ellipsis else 0

    def part(extent):
        if draw(st.integers(0, 2)) == 0 and extent:
            return draw(st.integers(-extent, extent - 1))
        step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
        start = draw(st.none() | st.integers(-extent - 1, extent + 1))
        stop = draw(st.none() | st.integers(-extent - 1, extent + 1))
        return slice(start, stop, step)

    parts = [part(extent) for extent in shape[:lead]]
    if ellipsis:
        parts.append(Ellipsis)
        parts += [part(extent) for extent in shape[ndim - trail:]]
    for _ in range(draw(st.integers(0, 2))):
        parts.insert(draw(st.integers(0, len(parts))), None)
    return tuple(parts) if draw(st.booleans()) or len(parts) != 1 else parts[0]


@SETTINGS
@given(data=st.data(), shape=shapes, dtype=st.sampled_from(DTYPES),
       kind=st.sampled_from(KINDS))
def test_indexing_matches_numpy(q, data, shape, dtype, kind):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    host = random_host(rng, shape, dtype)
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    assert strides_that_matter(array) == strides_that_matter(host)
    assert array.stride() == tuple(s // dtype.itemsize for s in array.strides)
    key = data.draw(index_keys(shape))
    expected = np.asarray(host[key])
    view = array[key]
    assert view.base is array and view.shape == expected.shape
    if expected.ndim:
        assert strides_that_matter(view) == strides_that_matter(host[key])
        assert view.is_contiguous() == expected.flags.c_contiguous
    if isinstance(host[key], np.ndarray) and expected.size:  # numpy's own view: same offset
        assert view.data_ptr() - array.data_ptr() == \
            expected.__array_interface__["data"][0] - host.__array_interface__["data"][0]
    assert same(view.to_numpy(), np.array(expected, order="C"))
    again = data.draw(index_keys(view.shape))  # a view of a view
    assert same(view[again].to_numpy(), np.array(np.asarray(expected[again]), order="C"))


@SETTINGS
@given(data=st.data(), shape=shapes, dtype=st.sampled_from(DTYPES),
       kind=st.sampled_from(KINDS))
def test_reshape_transpose_and_dtype_views_match_numpy(q, data, shape, dtype, kind):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    host = random_host(rng, shape, dtype)
    array, expected = ur_cffi.asarray(host, queue=q, kind=kind), host
    for _ in range(data.draw(st.integers(1, 4))):
        operation = data.draw(st.sampled_from(["index", "T", "permute", "swapaxes", "reshape",
                                               "view_shape", "view_dtype"]))
        if operation == "index":
            key = data.draw(index_keys(expected.shape))
            array, expected = array[key], expected[key]
            expected = np.asarray(expected)
        elif operation == "T":
            array, expected = array.T, expected.T
        elif operation == "permute" and expected.ndim:
            order = data.draw(st.permutations(range(expected.ndim)))
            array, expected = array.permute(*order), expected.transpose(order)
        elif operation == "swapaxes" and expected.ndim:
            a, b = (data.draw(st.integers(-expected.ndim, expected.ndim - 1)) for _ in "ab")
            array, expected = array.swapaxes(a, b), expected.swapaxes(a, b)
        elif operation in ("reshape", "view_shape"):
            target = data.draw(st.permutations(_factors(expected.size)))
            if target and data.draw(st.booleans()):
                target = (*target[:-1], -1)
            no_copy = reshaped_without_copy(expected, target)
            if operation == "view_shape":
                if no_copy is None:
                    with pytest.raises(ValueError, match="needs a copy; use reshape"):
                        array.view(*target)
                    continue
                array = array.view(*target)
            else:
                root = array.base if array.base is not None else array
                array = array.reshape(target)
                assert (array.base is root) == (no_copy is not None) or not expected.size
            expected = expected.reshape(target)
        elif operation == "view_dtype":
            new = data.draw(st.sampled_from(DTYPES))
            if new.kind == "b" and expected.dtype.kind != "b":
                continue  # bytes other than 0 and 1 as bool: numpy's copies normalize them
            try:
                reference = expected.view(new)
            except ValueError:
                continue
            if any(s % new.itemsize for s, n in zip(reference.strides, reference.shape)
                   if n > 1) or (
                    expected.ndim and expected.shape[-1] != 1 and expected.strides[-1] !=
                    expected.itemsize and new.itemsize != expected.itemsize):
                continue  # numpy allows strides PyTorch-style element strides cannot express
            array, expected = array.view(new), reference
        assert array.shape == expected.shape and array.dtype == expected.dtype
        assert same(array.to_numpy(), np.array(expected, order="C"))


def _factors(n: int) -> list[int]:
    """``n`` split into prime factors (and a 1 now and then): shapes holding n elements."""
    factors, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1 or not factors:
        factors.append(n)
    return factors


@SETTINGS
@given(data=st.data(), shape=shapes.filter(lambda s: len(s) >= 1),
       dtype=st.sampled_from(DTYPES), kind=st.sampled_from(KINDS))
def test_assignment_into_views_matches_numpy(q, data, shape, dtype, kind):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    host = random_host(rng, shape, dtype)
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    key = data.draw(index_keys(shape))
    target = np.asarray(host[key])
    assume(target.ndim)  # numpy's scalar result cannot be assigned through
    value = random_host(rng, target.shape, dtype)
    source = data.draw(st.sampled_from(["numpy", "strided numpy", "usm", "scalar"]))
    if source == "scalar":
        value = random_host(rng, (), dtype)[()]
        array[key] = value
    elif source == "usm":
        array[key] = ur_cffi.asarray(value, queue=q, kind=data.draw(st.sampled_from(KINDS)))
    elif source == "strided numpy":
        padded = random_host(rng, (*target.shape[:-1], 2 * target.shape[-1]), dtype)
        padded[..., ::2] = value
        array[key] = padded[..., ::2]
    else:
        array[key] = value
    host[key] = value
    assert same(array.to_numpy(), host)


@pytest.mark.parametrize("kind", KINDS)
def test_copies_of_non_contiguous_views_both_ways(q, rng, kind):
    host = rng.standard_normal((7, 9, 5)).astype(np.float32)
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    # device view -> contiguous and strided numpy, and many-copy views (the span is read)
    for key in [(slice(None), slice(1, 8, 2)), (Ellipsis, 3), (slice(None, None, -2),),
                (slice(None), slice(None), slice(None, None, 2))]:
        view, expected = array[key], host[key]
        assert np.array_equal(view.to_numpy(), expected)
        out = np.full((*expected.shape, 3), np.nan, np.float32)[..., 1]  # strided destination
        view.copy_to(out)
        assert np.array_equal(out, expected)
    transposed = array.permute(2, 0, 1)
    assert np.array_equal(transposed.to_numpy(), host.transpose(2, 0, 1))
    # numpy -> view, contiguous and strided sources
    view = array[1:6, ::3]
    value = rng.standard_normal(view.shape).astype(np.float32)
    view.copy_from(value[::-1][::-1])
    host[1:6, ::3] = value
    assert np.array_equal(array.to_numpy(), host)
    view.copy_from(np.asfortranarray(value * 2))
    host[1:6, ::3] = value * 2
    assert np.array_equal(array.to_numpy(), host)
    # view -> view on the device, and copy() of a view
    other = ur_cffi.full((9, 7, 5), np.nan, np.float32, queue=q, kind=kind)
    other.transpose(1, 0, 2).copy_from(array)
    assert np.array_equal(other.to_numpy(), host.transpose(1, 0, 2))
    duplicate = array[:, ::2].copy()
    assert duplicate.base is None and duplicate.is_contiguous()
    assert np.array_equal(duplicate.to_numpy(), host[:, ::2])
    with pytest.raises(ValueError, match="overlap"):
        array[:4].copy_from(array[3:7])
    with pytest.raises(ValueError, match="shape .* does not match"):
        array[:, ::2].copy_from(np.zeros((7, 4, 5), np.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_reversed_and_transposed_views_copy_through_their_span_exactly(q, rng, kind):
    """Such views move as one copy of the bytes they span (memory.py, _through_span), not
    one UR copy per element; a write does so only where no gap between the elements would be
    overwritten, a read where it reads at most twice the elements' bytes, or, on a device
    that copies row by row, less than 4 KiB a row (a[:, ::3] of 3000 x 3000 floats took
    17.5 s as 3,000,000 copies)."""
    host = rng.standard_normal((30, 40))
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    reversed_rows, reversed_columns = np.s_[::-1], np.s_[:, ::-1]
    every_other_row, a_quarter_of_each_row = np.s_[::-2], np.s_[:, :10]
    every_third_column = np.s_[:, ::3]
    by_rows = q.device.copies_rows_one_by_one
    for key, spanned in ((reversed_rows, True), (reversed_columns, True),
                         (every_other_row, True), (a_quarter_of_each_row, by_rows),
                         (every_third_column, by_rows)):
        view, expected = array[key], host[key]
        through_span = memory._through_span(view, np.empty(view.shape), reading=True, blocking=True)
        assert through_span == spanned
        out = np.full(expected.shape, np.nan)
        view.copy_to(out)
        assert np.array_equal(out, expected) and np.array_equal(view.to_numpy(), expected)
    for view_of in (lambda a: a.T, lambda a: a[::-1, ::-1], lambda a: a[:, ::-2]):
        view, value = view_of(array), rng.standard_normal(view_of(host).shape)
        assert memory._through_span(view, value, reading=False, blocking=True) == _strided.is_dense(
            view.shape, view.strides, view.itemsize)
        view.copy_from(value)
        view_of(host)[...] = value
        assert np.array_equal(array.to_numpy(), host)  # the gaps of a[:, ::-2] kept
    # A span past _SPAN_PART_BYTES is read in parts along its outermost axis (the host holds
    # one part's bytes at a time): made small here, the views above read in many.
    part_bytes, memory._SPAN_PART_BYTES = memory._SPAN_PART_BYTES, 1000
    try:
        for key in (every_third_column, np.s_[::-3, ::-2], np.s_[5:, 1::7]):
            view = array[key]
            if memory._through_span(view, np.empty(view.shape), reading=True, blocking=True):
                out = np.full(view.shape, np.nan)
                view.copy_to(out)
                assert np.array_equal(out, host[key]), key
        # Overlapping rows (a sliding window: numpy's sliding_window_view, torch's unfold)
        # span no less in a part than in the whole: the parts recursed forever.
        flat = rng.standard_normal(600)
        base = ur_cffi.asarray(flat, queue=q, kind=kind)
        for shape, strides in (((2, 550), (8, 8)), ((550, 40), (8, 8)), ((3, 290), (16, 8))):
            window = ur_cffi.from_pointer(base.data_ptr(), shape, np.float64, queue=q,
                                          strides=strides, owner=base)
            assert memory._through_span(window, np.empty(shape), reading=True,
                                        blocking=True)
            expected = np.lib.stride_tricks.as_strided(flat, shape, strides)
            assert np.array_equal(window.to_numpy(), expected), (shape, strides)
    finally:
        memory._SPAN_PART_BYTES = part_bytes
    wide = ur_cffi.asarray(rng.standard_normal((4, 100_000)), queue=q, kind=kind)
    column = wide[:, :1]  # 4 rows of 8 bytes over 2.4 MB: row by row
    assert not memory._through_span(column, np.empty(column.shape), reading=True,
                                      blocking=True)
    assert np.array_equal(column.to_numpy(), np.asarray(wide.to_numpy()[:, :1]))
    records = ur_cffi.zeros((4, 4), np.dtype([("a", np.uint8), ("b", np.float32)], align=True),
                            queue=q, kind=kind).T  # padding the host side would not hold
    assert not memory._through_span(records, np.empty(records.shape, records.dtype), True,
                                      True)
    assert _strided.is_dense((3, 4), (-32, 8), 8) and _strided.is_dense((4, 3), (8, 32), 8)
    assert not _strided.is_dense((3, 4), (64, 8), 8) and not _strided.is_dense((3, 4), (0, 8), 8)


@pytest.mark.parametrize("kind", KINDS)
def test_non_blocking_copies_of_views_with_many_short_rows_go_through_the_span(q, device, rng,
                                                                                kind):
    """Not blocking, a copy between numpy and a view that UR would make as many short rows,
    each a copy of its own (the CPU device), goes through the view's span too, and returns
    with the copy done: it took one UR copy per element (a[::-1] of 100,000 floats, 0.9 s
    against 2 ms blocking, 2026-12-07).  Few long rows, or a device that makes a 2D copy
    one (CUDA), keep UR's copies, which run after the call."""
    host = rng.standard_normal((200, 300))
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    wide = ur_cffi.asarray(rng.standard_normal((40, 2000)), queue=q, kind=kind)
    for source, key, spanned in ((array, np.s_[::-1, ::-1], True), (array, np.s_[:, ::-2], True),
                                 (array, np.s_[::-1], True), (wide, np.s_[::-1], False)):
        view, expected = source[key], source.to_numpy()[key]
        spanned = spanned and device.copies_rows_one_by_one
        out = np.full(view.shape, np.nan)
        assert memory._through_span(view, out, reading=True, blocking=False) == spanned
        event = view.copy_to(out, blocking=False)
        if spanned:  # (done in the call)
            assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
        event.wait()
        assert np.array_equal(out, expected), key
    for key in (np.s_[::-1, ::-1], np.s_[:, ::-1]):  # dense: a write through the span
        values = rng.standard_normal(host[key].shape)
        assert memory._through_span(array[key], values, reading=False, blocking=False) == \
            device.copies_rows_one_by_one
        array.copy_from(np.full(host.shape, np.nan), blocking=False)  # earlier work, in order
        array[key].copy_from(values, blocking=False).wait()
        expected = np.full(host.shape, np.nan)
        expected[key] = values
        assert np.array_equal(array.to_numpy(), expected, equal_nan=True), key
    gapped = array[:, ::-2]  # a write would rewrite its gaps: UR's copies
    assert not memory._through_span(gapped, np.empty(gapped.shape), reading=False,
                                    blocking=False)


@pytest.mark.parametrize("kind", KINDS)
def test_usm_views_with_many_short_rows_copy_through_the_host_exactly(q, context, device, rng,
                                                                       kind):
    """A copy between USM views that UR would make row by row (a.T: one row per element, a
    few microseconds each on the CPU device, whose OpenCL adapter copies a 2D copy's rows one
    by one) goes as two plain copies of the spans (memory.py, _staged_on_host), after what it
    waits for, even when asked not to block; a destination with gaps between its elements,
    or few long rows, keeps UR's copies."""
    host = rng.standard_normal((200, 300)).astype(np.float32)
    cube = rng.standard_normal((20, 30, 40))
    source = ur_cffi.asarray(host, queue=q, kind=kind)
    source3 = ur_cffi.asarray(cube, queue=q, kind=kind)
    wide = ur_cffi.asarray(rng.standard_normal((40, 2000)), queue=q, kind=kind)
    cases = ((source, lambda a: a.T, True), (source, lambda a: a[::-1, ::-1], True),
             (source, lambda a: a[:, ::-1], True), (source3, lambda a: a.transpose(2, 0, 1), True),
             (source, lambda a: a[::-1], True),  # 200 rows of 1,200 bytes
             (wide, lambda a: a[::-1], False),  # 40 rows of 16,000 bytes: UR's copies
             (source, lambda a: a[:20, 5:15], False))  # 20 rows
    for array, view_of, staged in cases:
        view, expected = view_of(array), view_of(array.to_numpy())
        contiguous = ur_cffi.full(view.shape, np.nan, view.dtype, queue=q, kind=kind)
        assert memory._staged_on_host(contiguous, view) == (
            staged and device.copies_rows_one_by_one)  # (CUDA: a 2D copy is one)
        transposed = ur_cffi.full(view.shape[::-1], np.nan, view.dtype, queue=q, kind=kind).T
        for target in (contiguous, transposed):  # dense, in two layouts
            for blocking in (True, False):
                target.fill(np.nan)
                event = target.copy_from(view, blocking=blocking)
                event.wait()
                assert np.array_equal(target.to_numpy(), expected)
    gapped = ur_cffi.full((300, 400), np.nan, np.float32, queue=q, kind=kind)
    assert not memory._staged_on_host(gapped[:, ::2][:, :200].T, source)
    gapped[:, ::2][:, :200].T.copy_from(source)  # the gaps stay NaN
    result = gapped.to_numpy()
    assert np.array_equal(result[:, ::2][:, :200].T, host) and np.isnan(result[:, 1::2]).all()
    # After earlier work: a copy queued just before writes the source; another queue's
    # copy is waited for through wait_for.
    for _ in range(2):
        values = rng.standard_normal(host.shape).astype(np.float32)
        source.copy_from(values, blocking=False)
        target = ur_cffi.full((300, 200), np.nan, np.float32, queue=q, kind=kind)
        target.copy_from(source.T, blocking=False).wait()
        assert np.array_equal(target.to_numpy(), values.T)
    with ur_cffi.Queue(context, device) as other:
        values = rng.standard_normal(host.shape).astype(np.float32)
        written = source.copy_from(values, queue=other, blocking=False)
        target.copy_from(source.T, wait_for=[written])
        assert np.array_equal(target.to_numpy(), values.T)


def test_a_write_through_the_span_reads_its_source_after_earlier_work(q, rng):
    """The span's staging copy of the numpy source is made when the copy would run: a copy
    into that memory queued just before (here into shared USM, read through np.asarray)
    has completed.  It read the source at once: millions of zeros (a review's repro)."""
    n = 1 << 22
    values = rng.standard_normal(n).astype(np.float32)
    shared = ur_cffi.zeros(n, np.float32, queue=q, kind="shared")
    target = ur_cffi.full(n, np.nan, np.float32, queue=q)
    filled = shared.copy_from(values, blocking=False)
    target[::-1].copy_from(np.asarray(shared), wait_for=[filled])
    assert np.array_equal(target.to_numpy(), values[::-1])
    shared.fill(0.0)
    shared.copy_from(values * 2, blocking=False)
    target[::-1].copy_from(np.asarray(shared))  # in order after it, with no wait_for
    assert np.array_equal(target.to_numpy(), (values * 2)[::-1])


def test_new_memory_of_a_reshape_flatten_or_like_goes_with_its_close(q):
    """They made views of a fresh copy: closing one closed only the view, the memory stayed
    allocated until the copy was collected (4 MiB per 'with' block in a review's repro)."""
    array = ur_cffi.zeros((256, 1024), np.float32, queue=q)
    before = ur_cffi.memory_stats()["allocated_bytes"]
    for make in (lambda: array.T.reshape(-1), lambda: array.T.flatten(),
                 lambda: ur_cffi.empty_like(array.T), lambda: ur_cffi.full_like(array.T, 1.0)):
        with make() as made:
            assert made.base is None
        assert ur_cffi.memory_stats()["allocated_bytes"] == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_source_copied_into_the_destination_shape_waits_as_the_copy_does(q, context, device,
                                                                          rng, kind):
    """A whole-array copy from a source no view of which has the destination's shape copies
    it into that shape first: on the copy's queue, after its wait_for.  It was made on the
    source's own queue at once: a write into the source still running on another queue was
    read half done (millions of stale zeros), and a closed source queue raised although
    queue= was given."""
    n = 1500
    ballast = np.ones(1 << 25, np.float32)  # keeps the other queue busy for a while
    with ur_cffi.Queue(context, device) as other, \
            ur_cffi.empty(ballast.size, np.float32, queue=other) as busy:
        for _ in range(3):
            source = ur_cffi.zeros((n, n), np.float32, queue=q, kind=kind)
            values = rng.standard_normal((n, n)).astype(np.float32)
            busy.copy_from(ballast, blocking=False)
            written = source.copy_from(values, queue=other, blocking=False)
            flat = ur_cffi.full(n * n, np.nan, np.float32, queue=q, kind=kind)
            flat.copy_from(source.T, wait_for=[written])
            assert np.array_equal(flat.to_numpy(), values.T.reshape(-1))
        host = np.full((n, n), np.nan, np.float32)
        read = source.copy_to(host, queue=other, blocking=False)  # numpy, written later
        flat.fill(np.nan)
        flat.copy_from(host.T, wait_for=[read])
        assert np.array_equal(flat.to_numpy(), values.T.reshape(-1))
    closed_queue = ur_cffi.Queue(context, device)
    small = ur_cffi.asarray(values[:40, :30], queue=closed_queue, kind=kind)
    closed_queue.close()
    flat = ur_cffi.empty(40 * 30, np.float32, queue=q, kind=kind)
    flat.copy_from(small.T, queue=q)
    assert np.array_equal(flat.to_numpy(), values[:40, :30].T.reshape(-1))


def test_numpy_sources_copied_on_the_host_are_read_after_what_the_copy_waits_for(
        q, context, device, rng):
    """A numpy source that must be copied on the host first (another layout or dtype, a view
    of the destination's own memory, a cast or broadcast in assignment, ``asarray`` and
    ``Buffer.write`` of a strided array) is read once the copy's wait list and its queue's
    earlier work are done, as UR reads a contiguous one.  It was read at the call: the zeros
    a pending ``copy_to`` into it had yet to overwrite (a review's audit, 5 of 5 trials)."""
    n = 512
    ballast = ur_cffi.empty(1 << 25, np.float32, queue=q)
    ballast_host = np.empty(1 << 25, np.float32)

    def pending(values, host, queue):
        """``host`` zeroed, then written with ``values`` by a copy that waits behind 128 MiB
        on ``queue``: its Event."""
        host[...] = 0
        source = ur_cffi.asarray(values, queue=queue)
        ballast.copy_to(ballast_host, queue=queue, blocking=False)
        return source.copy_to(host, queue=queue, blocking=False)

    with ur_cffi.Queue(context, device) as other:
        values = rng.standard_normal((n, n)).astype(np.float32)
        host = np.zeros((n, n), np.float32)
        target = ur_cffi.full(n, np.nan, np.float32, queue=q)
        written = pending(values, host, other)
        target.copy_from(host[:, 0], wait_for=[written])  # a column: copied on the host
        assert np.array_equal(target.to_numpy(), values[:, 0])
        gapped = ur_cffi.full(2 * n, np.nan, np.float32, queue=q)
        written = pending(values, host, other)
        gapped[::2].copy_from(host[::-1, 0], wait_for=[written], blocking=False).wait()
        assert np.array_equal(gapped.to_numpy()[::2], values[::-1, 0])
        buffer = ur_cffi.Buffer(context, 4 * n)
        written = pending(values, host, other)
        buffer.write(q, host[:, 0], wait_for=[written])
        read = np.empty(n, np.float32)
        buffer.read(q, read)
        assert np.array_equal(read, values[:, 0])
        buffer.close()
    # The same queue's earlier work: assignment and asarray take no wait_for.
    for write, expected in ((lambda h: target.__setitem__(..., h[:, 0]), values[:, 0]),
                            (lambda h: target.__setitem__(..., h[0].astype(np.float64)),
                             values[0]),  # a cast
                            (lambda h: target.copy_from(h[:, 0]), values[:, 0])):
        pending(values, host, q)
        target.fill(np.nan)
        write(host)
        assert np.array_equal(target.to_numpy(), expected)
    pending(values, host, q)
    assert np.array_equal(ur_cffi.asarray(host[:, 0], queue=q).to_numpy(), values[:, 0])
    pending(values, host, q)  # a list of numpy rows, converted on the host
    assert np.array_equal(ur_cffi.asarray([host[0], host[1]], queue=q).to_numpy(), values[:2])
    rows = ur_cffi.full((2, n), np.nan, np.float32, queue=q)
    pending(values, host, q)
    rows[...] = [host[2], host[3]]
    assert np.array_equal(rows.to_numpy(), values[2:4])
    shared = ur_cffi.zeros(n + 1, np.float32, queue=q, kind="shared")
    shared[1:].copy_from(values[0])
    ballast.copy_to(ballast_host, blocking=False)
    shared[1:].copy_from(values[1], blocking=False)  # pending when the next copy reads
    shared[:-1].copy_from(np.asarray(shared)[1:])  # a view of its own memory: copied first
    assert np.array_equal(shared.to_numpy()[:-1], values[1])


def test_a_usm_value_cast_or_broadcast_is_read_on_the_operations_queue(q, context, device,
                                                                       rng):
    """``a[key] = v`` that casts or broadcasts ``v``, and ``asarray(v, dtype, queue=q)``, read
    ``v`` on ``a``'s queue or ``q``, as they do without a cast; they read it on ``v``'s own
    queue, before a copy into it pending on ``q`` (5 of 5 trials in a review's audit)."""
    n = 256
    ballast = ur_cffi.empty(1 << 25, np.float32, queue=q)
    ballast_host = np.empty(1 << 25, np.float32)
    with ur_cffi.Queue(context, device) as other:
        values = rng.standard_normal((1, n)).astype(np.float32)
        value = ur_cffi.zeros((1, n), np.float32, queue=other)
        target = ur_cffi.full((4, n), np.nan, np.float32, queue=q)
        ballast.copy_to(ballast_host, blocking=False)
        value.copy_from(values, queue=q, blocking=False)
        target[...] = value  # a broadcast: through the host, after q's copy
        assert np.array_equal(target.to_numpy(), np.repeat(values, 4, axis=0))
        doubles = ur_cffi.full((1, n), np.nan, np.float64, queue=q)
        value.fill(0.0)
        ballast.copy_to(ballast_host, blocking=False)
        value.copy_from(values, queue=q, blocking=False)
        doubles[...] = value  # a cast
        assert np.array_equal(doubles.to_numpy(), values.astype(np.float64))
        value.fill(0.0)
        ballast.copy_to(ballast_host, blocking=False)
        value.copy_from(values, queue=q, blocking=False)
        cast = ur_cffi.asarray(value, np.float64, queue=q)
        assert np.array_equal(cast.to_numpy(), values.astype(np.float64))


def test_copies_of_the_whole_array_take_shapes_that_differ_by_axes_of_one(q, rng):
    """numpy's copyto broadcasts (1, 4, 6) against (4, 6); ur_cffi takes the whole array in
    any shape with the same extents but for axes of 1, or flat, on either side, strided or
    not; a view of the destination where it is written."""
    host = rng.standard_normal((4, 6))
    array = ur_cffi.asarray(host, queue=q)
    out = np.full((1, 4, 6), np.nan)
    array.copy_to(out)
    assert np.array_equal(out[0], host)
    transposed = np.full((6, 1, 4), np.nan)
    array.T.copy_to(transposed)
    assert np.array_equal(transposed[:, 0], host.T)
    target = ur_cffi.full((6, 4), np.nan, np.float64, queue=q)
    target.T.copy_from(host.reshape(1, 4, 6))
    assert np.array_equal(target.to_numpy(), host.T)
    strided = np.full(48, np.nan)[::2]
    array.T.copy_to(strided)
    assert np.array_equal(strided, host.T.ravel())
    flat = ur_cffi.asarray(host.ravel(), queue=q)  # into layouts no flat view shows: the
    for destination in (ur_cffi.full((6, 4), np.nan, np.float64, queue=q), np.full((6, 4),
                                                                                   np.nan)):
        flat.copy_to(destination.T)  # source is copied into the destination's shape first
        result = destination.to_numpy() if isinstance(destination, ur_cffi.USMArray) \
            else destination
        assert np.array_equal(result.T, host)
    closed = ur_cffi.zeros((4, 6), queue=q)
    closed.close()
    with pytest.raises(ur_cffi.ClosedError):  # (it said the source overlaps)
        ur_cffi.zeros((4, 6), queue=q).copy_from(closed)
    reused = ur_cffi.zeros((4, 6), queue=q)  # (the allocator may give it closed's memory)
    for call in (lambda: closed[::-1].copy_to(reused), lambda: closed.copy_to(reused),
                 lambda: closed.copy_to(np.zeros((4, 6)))):
        with pytest.raises(ur_cffi.ClosedError):  # (copy_to said the source overlaps)
            call()


def test_fill_of_a_non_contiguous_view(q):
    array = ur_cffi.zeros((4, 6), np.int32, queue=q)
    array[:, 1::2].fill(7)
    array[2] = 5
    expected = np.zeros((4, 6), np.int32)
    expected[:, 1::2] = 7
    expected[2] = 5
    assert np.array_equal(array.to_numpy(), expected)
    with pytest.raises(ValueError, match="offset and count need a contiguous array"):
        array[:, ::2].fill(1, offset=1)


def test_an_empty_or_single_last_axis_changes_item_size_as_numpy_does(q):
    # Found by hypothesis on the GPU run: a zero-length slice with a step keeps a stride other
    # than the item size, which numpy ignores on an axis of length 0 or 1.
    bytes_ = np.arange(8, dtype=np.uint8).reshape(2, 4)
    words = np.arange(8, dtype=np.uint16).reshape(2, 4) * 257
    for host, key, dtype in [(bytes_, (0, slice(None, 0, 2)), np.int16),
                             (bytes_, (slice(None), slice(0, 0)), np.int32),
                             (words, (slice(None), slice(1, 4, 4)), np.uint8)]:
        array = ur_cffi.asarray(host, queue=q)
        expected, view = host[key].view(dtype), array[key].view(dtype)
        assert view.shape == expected.shape and view.dtype == expected.dtype
        assert same(view.to_numpy(), np.array(expected, order="C"))
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        ur_cffi.asarray(bytes_, queue=q)[:, ::2].view(np.int16)
    # Of the same size, a dtype aligned more strictly needs its alignment as much (numpy
    # would make an unaligned array; kernels load each element whole).
    base = ur_cffi.zeros(32, np.float32, queue=q)
    for view in (ur_cffi.from_pointer(base.data_ptr() + 4, (4,), np.complex64, queue=q,
                                      owner=base),
                 ur_cffi.from_pointer(base.data_ptr(), (3,), np.complex64, strides=(12,), queue=q,
                                      owner=base),
                 ur_cffi.from_pointer(base.data_ptr() + 4, (4,), "V8", queue=q, owner=base)):
        with pytest.raises(ValueError, match=f"view as float64: the address 0x{view.data_ptr():x} "
                                             f"or strides .* alignment, 8 bytes"):
            view.view(np.float64)
    for aligned, wider in ((base[:8].view(np.complex64), np.float64),
                           (base[2:10].view(np.complex64), np.int64),
                           (ur_cffi.from_pointer(base.data_ptr() + 8, (2,), "V4", queue=q,
                                                 owner=base), np.float32)):
        assert aligned.view(wider).data_ptr() == aligned.data_ptr()
    # Of another size, the dtype's alignment too (it was its size: complex128 needed 16
    # bytes where numpy and kernels take 8, S3 3 where they take 1).
    floats = ur_cffi.zeros(9, np.float64, queue=q)
    assert floats[1:].view(np.complex128).shape == (4,)
    text = ur_cffi.zeros((3, 16), np.uint8, queue=q)[:, 1:13].view("S3")
    assert (text.shape, text.strides) == ((3, 4), (16, 3))
    with pytest.raises(ValueError, match="the address 0x.* is not a multiple of its "
                                         "alignment, 8 bytes"):
        ur_cffi.zeros(36, np.uint8, queue=q)[4:].view(np.complex128)


@pytest.mark.parametrize("name, value", [
    ("shape", (4, 3)), ("dtype", np.dtype(np.float64)), ("size", 6), ("nbytes", 8),
    ("kind", "host"), ("queue", None), ("strides", (12, 4))])
def test_what_the_layout_rests_on_cannot_be_assigned(q, rng, name, value):
    # numpy re-lays an array on `a.shape = ...`; an assignment here changed that attribute
    # alone: reads past the end, and a fill wrote past the allocation (a crash).
    data = rng.standard_normal((3, 4)).astype(np.float32)
    array = ur_cffi.asarray(data, queue=q)
    view = array[1:]
    with pytest.raises(AttributeError, match=rf"USMArray.{name} is read-only|has no setter|"
                                             rf"can't set attribute"):  # (Python 3.10's)
        setattr(array, name, value)
    with pytest.raises(AttributeError):
        setattr(view, name, value)
    assert (array.shape, array.strides, array.size, array.nbytes) == ((3, 4), (16, 4), 12, 48)
    assert array.kind == "device" and array.queue is q and array.dtype == np.float32
    array[...] = 7.0
    np.testing.assert_array_equal(view.to_numpy(), np.full((2, 4), 7.0, np.float32))


def test_shape_and_stride_accessors(q):
    array = ur_cffi.empty((3, 4, 5), np.float64, queue=q)
    assert (array.ndim, array.size, array.numel(), array.itemsize, array.element_size(),
            array.nbytes) == (3, 60, 60, 8, 8, 480)
    assert array.strides == (160, 40, 8) and array.stride() == (20, 5, 1)
    assert array.stride(0) == 20 and array.stride(-1) == 1 and array.is_contiguous()
    t = array.T
    assert t.shape == (5, 4, 3) and t.stride() == (1, 5, 20) and not t.is_contiguous()
    assert array.transpose(0, 2, 1).shape == (3, 5, 4)
    assert array.swapaxes(0, 2).stride() == (1, 5, 20)
    assert array.device is q.device and array.data is array
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        array.stride(3)
    for out_of_range in (lambda: array.stride(-4), lambda: array.squeeze(3),  # PyTorch catches
                         lambda: array.swapaxes(3, 0), lambda: array.unsqueeze(4)):  # IndexError
        with pytest.raises(np.exceptions.AxisError, match="is out of range for"):
            out_of_range()
    with pytest.raises(ValueError, match="not a permutation"):
        array.transpose(0, 2)  # numpy's meaning; PyTorch's swap is swapaxes
    matrix = array[0]  # PyTorch code's transpose(0, 1) or (-2, -1) of a matrix kept it as is
    for axes in ((0, 1), (-2, -1), (0, -1)):
        with pytest.raises(ValueError, match=rf"PyTorch's swaps the two: a.swapaxes\({axes[0]}"):
            matrix.transpose(*axes)
    assert matrix.transpose((0, 1)).stride() == (5, 1)  # numpy's spelling of the same order
    assert matrix.transpose(1, 0).stride() == matrix.T.stride() == (1, 5)
    with pytest.raises(TypeError, match="advanced indexing|integer-array index"):
        array[[0, 1]]
    with pytest.raises(TypeError, match="boolean"):
        array[True]
    for key in (1.0, "0", (0, 1.5), np.float32(0)):  # numpy's IndexError (was TypeError)
        with pytest.raises(IndexError, match="only integers, slices"):
            array[key]
    for key in (range(2), memoryview(np.arange(2)), [0, 1]):  # numpy copies: refused
        with pytest.raises(TypeError, match="views never copy"):
            array[key]
    with pytest.raises(IndexError, match="out of bounds"):
        array[3]
    with pytest.raises(IndexError, match="too many indices"):
        array[0, 0, 0, 0]
    with pytest.raises(ValueError, match="cannot reshape an array of size 60"):
        array.reshape(7, -1)
    with pytest.raises(ValueError, match="only one extent can be -1"):
        array.reshape(-1, -1)
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        array.T.view(np.float32)
    assert array[1, 2, 3].shape == () and array[1, 2, 3].data_ptr() == \
        array.data_ptr() + 8 * (20 + 10 + 3)


def test_a_view_keeps_its_base_alive_and_closing_the_base_closes_views(q, rng):
    host = rng.standard_normal(100).astype(np.float32)
    array = ur_cffi.asarray(host, queue=q)
    base = weakref.ref(array)
    view = array[10:20].reshape(2, 5)
    del array
    gc.collect()
    assert base() is not None  # the view holds it
    assert np.array_equal(view.to_numpy(), host[10:20].reshape(2, 5))
    view.close()  # closes only the view
    assert view.closed and not base().closed
    with pytest.raises(ur_cffi.ClosedError):
        view.data_ptr()
    other = base()[::2]
    views = (other, other[1:], other.T, other.view(np.int32))
    base().close()
    for closed in views:
        assert closed.closed
        with pytest.raises(ur_cffi.ClosedError):
            closed.data_ptr()
        with pytest.raises(ur_cffi.ClosedError):
            closed.to_numpy()
    with pytest.raises(ur_cffi.ClosedError):
        other[1]


def test_kernel_launch_takes_a_view_at_its_own_address(q, rng, build_triton, context):
    program, compiled = build_triton("add", BLOCK=128)
    kernel = program.kernel(compiled.name, **compiled.options)
    n = 300
    x = ur_cffi.asarray(rng.standard_normal(n + 7).astype(np.float32), queue=q)
    y = ur_cffi.asarray(rng.standard_normal((2, n)).astype(np.float32), queue=q)
    out = ur_cffi.full(n + 3, np.nan, np.float32, queue=q)
    args = (x[7:], y[1], out[3:], np.int32(n))
    if compiled.shared:
        args += (ur_cffi.Local(compiled.shared),)
    kernel.launch(q, 3 * compiled.local_size, compiled.local_size, *args)
    result = out.to_numpy()
    expected = x.to_numpy()[7:].astype(np.float64) + y.to_numpy()[1]
    assert np.isnan(result[:3]).all()
    np.testing.assert_allclose(result[3:], expected, rtol=1e-6)




def test_triton_softmax_over_a_strided_view(triton_queue, rng):
    import triton

    from kernels import softmax

    q = triton_queue
    host = rng.standard_normal((40, 75)).astype(np.float32)
    x = ur_cffi.asarray(host, queue=q)
    view = x[::2, 3:70]  # every other row, columns 3..69: address and strides of its own
    out = ur_cffi.full(view.shape, np.nan, np.float32, queue=q)
    rows, cols = view.shape
    softmax[(rows,)](out, view, view.stride(0), out.stride(0), cols,
                     BLOCK=triton.next_power_of_2(cols))
    q.finish()
    part = host[::2, 3:70].astype(np.float64)
    reference = np.exp(part - part.max(axis=1, keepdims=True))
    reference /= reference.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out.to_numpy(), reference, rtol=1e-5, atol=1e-7)


def test_triton_alignment_specialization_follows_the_view_address(triton_queue):
    from triton.backends.compiler import BaseBackend

    if not hasattr(BaseBackend, "get_arg_specialization"):
        pytest.skip("Triton 3.3's Python specializer (3.6 specializes in C, from data_ptr())")

    x = ur_cffi.empty(64, np.float32, queue=triton_queue)
    assert x.data_ptr() % 16 == 0
    assert BaseBackend.get_arg_specialization(x, "tensor", align=True) == "D"
    assert BaseBackend.get_arg_specialization(x[4:], "tensor", align=True) == "D"
    assert BaseBackend.get_arg_specialization(x[1:], "tensor", align=True) == ""


def test_triton_scale_on_a_misaligned_view(triton_queue, rng):
    from kernels import scale

    q = triton_queue
    host = rng.standard_normal(1000).astype(np.float32)
    x = ur_cffi.asarray(host, queue=q)
    y = ur_cffi.full(1000, np.nan, np.float32, queue=q)
    scale[(4,)](x[1:], y[3:], 2.0, 997, BLOCK=256)  # addresses 4 and 12 bytes past alignment
    q.finish()
    result = y.to_numpy()
    assert np.isnan(result[:3]).all()
    np.testing.assert_allclose(result[3:], 2.0 * host[1:998].astype(np.float64), rtol=1e-6)


def test_triton_takes_any_object_with_data_ptr_and_dtype(triton_queue, rng):
    from kernels import scale

    q = triton_queue
    host = rng.standard_normal(300).astype(np.float32)
    x = ur_cffi.asarray(host, queue=q)
    y = ur_cffi.full(300, np.nan, np.float32, queue=q)

    class Foreign:  # what another library's tensor offers Triton
        def __init__(self, array):
            self.array, self.dtype = array, array.dtype

        def data_ptr(self):
            return self.array.data_ptr()

    scale[(2,)](Foreign(x[100:]), Foreign(y), 3.0, 200, BLOCK=128)
    q.finish()
    np.testing.assert_allclose(y.to_numpy()[:200], 3.0 * host[100:].astype(np.float64),
                               rtol=1e-6)
    assert np.isnan(y.to_numpy()[200:]).all()


def test_triton_explains_an_integer_given_for_a_pointer(triton_queue):
    from kernels import scale

    x = ur_cffi.zeros(300, np.float32, queue=triton_queue)
    with pytest.raises(TypeError, match=r"'x_ptr', 'y_ptr' got an int.*data_ptr\(\).*"
                                        r"tl.pointer_type"):
        scale[(2,)](x.data_ptr(), x.data_ptr(), 3.0, 300, BLOCK=128)
    n = 100_000  # a large int that is no address: not named, and no other error blamed on it
    with pytest.raises(TypeError, match=r"kernel 'scale': 'x_ptr' got an int"):
        scale[(2,)](x.data_ptr(), x, 3.0, n, BLOCK=128)
    with pytest.raises(Exception) as raised:  # a BLOCK that is no power of 2
        scale[(2,)](x, x, 3.0, n, BLOCK=100)
    assert "got an int" not in str(raised.value), raised.value


def test_assignment_broadcasts_and_casts_as_numpy_does(q, rng):
    expected = np.zeros((2, 3), np.float32)
    array = ur_cffi.zeros((2, 3), np.float32, queue=q)
    row = rng.standard_normal(3).astype(np.float32)
    array[...] = ur_cffi.asarray(row, queue=q)  # a USMArray value is broadcast too
    expected[...] = row
    assert np.array_equal(array.to_numpy(), expected)
    array[:, 1] = ur_cffi.asarray(np.float64(2.5), queue=q)  # and cast
    expected[:, 1] = 2.5
    assert np.array_equal(array.to_numpy(), expected)
    with pytest.raises(ValueError, match="broadcast"):
        array[...] = ur_cffi.asarray(np.zeros((3, 2), np.float32), queue=q)
    small = ur_cffi.zeros(4, np.uint8, queue=q)
    for value in ([300], [-1]):
        reference = np.zeros(4, np.uint8)
        try:
            with warnings.catch_warnings():  # numpy 1.24 to 1.26 warn and wrap
                warnings.simplefilter("error", DeprecationWarning)
                reference[0:1] = value
        except DeprecationWarning:
            error = DeprecationWarning
        except OverflowError:  # numpy 2
            error = OverflowError
        with pytest.raises(error, match="out of bounds|out-of-bound"), warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            small[0:1] = value
    with pytest.raises(ValueError, match="NaN"):
        ur_cffi.zeros(2, np.int32, queue=q)[0:1] = [float("nan")]
    with pytest.raises(TypeError, match="complex"):
        ur_cffi.zeros(2, np.float32, queue=q)[0:1] = [1 + 2j]
    assert np.array_equal(small.to_numpy(), np.zeros(4, np.uint8))
    # One value, as numpy assigns it (it went through fill(), which refuses inexact values):
    for dtype, value in ((np.int32, 2.5), (np.uint8, np.int64(-1)), (np.float16, 1e10),
                         (ur_cffi.bfloat16, 1e300), (np.bool_, 0.5), (np.int32, True),
                         (np.float32, "1.5"), (np.float32, 1 + 0j), (np.uint8, 300)):
        reference, array = np.zeros(3, dtype), ur_cffi.zeros(3, dtype, queue=q)
        try:
            with np.errstate(over="ignore"):
                reference[1:] = value
        except (TypeError, ValueError, OverflowError) as error:
            with pytest.raises(type(error)):
                array[1:] = value
        else:
            with np.errstate(over="ignore"):
                array[1:] = value
        assert np.array_equal(array.to_numpy(), reference), (dtype, value)


@pytest.mark.parametrize("kind", KINDS)
def test_assignment_between_overlapping_views_reads_the_value_first(q, rng, kind):
    host = rng.standard_normal(12)
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    array[1:9] = array[0:8]
    host[1:9] = host[0:8].copy()
    array[::-1] = array[:]
    host[::-1] = host.copy()
    assert np.array_equal(array.to_numpy(), host)


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_copies_with_a_numpy_view_of_the_same_memory_are_exact(q, rng, kind):
    host = rng.standard_normal(8)
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    array[::-1].copy_from(np.asarray(array))
    host = host[::-1].copy()
    assert np.array_equal(array.to_numpy(), host)
    array[1:].copy_from(np.asarray(array)[:-1])
    host[1:] = host[:-1].copy()
    assert np.array_equal(array.to_numpy(), host)
    array[:4].copy_to(np.asarray(array)[2:6])
    host[2:6] = host[:4].copy()
    assert np.array_equal(array.to_numpy(), host)
    array.copy_to(np.asarray(array)[4:], offset=2)
    host[4:] = host[2:6].copy()
    assert np.array_equal(array.to_numpy(), host)


def test_overlapping_copies_between_views_are_refused_by_name(q):
    array = ur_cffi.asarray(np.arange(8, dtype=np.float32), queue=q)
    with pytest.raises(ValueError, match="copy_to: the part from offset 2 overlaps"):
        array.copy_to(array[1:4], offset=2)
    with pytest.raises(ValueError, match="copy_to: the part from offset 0 overlaps"):
        array[2:6].copy_to(array[3:5], offset=0)
    with pytest.raises(ValueError, match="copy_to: the source's bytes and the destination's "
                                         "overlap or interleave"):
        array.copy_to(array)
    assert np.array_equal(array.to_numpy(), np.arange(8, dtype=np.float32))


def test_element_strides_that_are_not_whole_elements_are_refused(q):
    """Strides aligned to the dtype (complex64: 4 bytes) but not whole elements (8 bytes)."""
    base = ur_cffi.asarray(np.arange(16, dtype=np.float32), queue=q, kind="host")
    odd = ur_cffi.from_pointer(base.data_ptr(), (4,), np.complex64, queue=q, strides=(12,))
    assert np.array_equal(odd.to_numpy(), np.lib.stride_tricks.as_strided(
        np.arange(16, dtype=np.float32).view(np.complex64), (4,), (12,)))
    with pytest.raises(ValueError, match="12 bytes is not a whole number of 8-byte"):
        odd.stride()
    with pytest.raises(ValueError, match="12 bytes"):
        odd.stride(0)
    with pytest.raises(BufferError, match="12 bytes"):
        np.from_dlpack(odd)


@pytest.mark.parametrize("kind", KINDS)
def test_pytorchs_in_place_names(q, rng, kind):
    host = rng.standard_normal((4, 6))
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    twin = array.clone()
    assert twin.data_ptr() != array.data_ptr() and np.array_equal(twin.to_numpy(), host)
    for view in (array.T, array[:, ::-2], array[1:, 1:3].T):  # laid out as PyTorch's clone
        cloned = view.clone()  # (code that passes one array's strides for both: it was C order)
        assert cloned.stride() == ur_cffi.empty_like(view).stride()
        assert cloned.base is None and np.array_equal(cloned.to_numpy(), view.to_numpy())
    assert array.T.clone().stride() == (1, 6)
    assert array[:, ::2].zero_() is not None and not array.to_numpy()[:, ::2].any()
    assert np.array_equal(array.to_numpy()[:, 1::2], host[:, 1::2])
    assert array.copy_(twin) is array and np.array_equal(array.to_numpy(), host)
    array.copy_(np.arange(6.0))  # broadcast, as PyTorch's copy_
    assert np.array_equal(array.to_numpy(), np.broadcast_to(np.arange(6.0), (4, 6)))
    assert array.zero_() is array and not array.to_numpy().any()


def test_numpys_other_spellings_of_axes_values_and_its_dimension_bound(q, rng):
    # A 0-d array as an axis failed with "iteration over a 0-d array"; an np.matrix value with
    # numpy's internal error; 65 and more dimensions were made, and failed in to_numpy().
    host = rng.standard_normal((1, 6))
    array = ur_cffi.asarray(host, queue=q)
    assert np.array_equal(array.flip(np.array(1)).to_numpy(), np.flip(host, np.array(1)))
    assert array.squeeze(np.array(0)).shape == (6,)
    assert (array.swapaxes(np.array(0), 1).shape, array.unsqueeze(np.array(0)).shape,
            array.flip((np.array(0),)).shape, array.stride(np.array(0))) == ((6, 1), (1, 1, 6),
                                                                           (1, 6), 6)
    with pytest.raises(TypeError, match="flip: axis must be an integer, not float64"):
        array.flip(np.array(0.5))
    for method in ("flip", "squeeze"):  # ("'float' object is not iterable")
        with pytest.raises(TypeError, match=f"{method}: axis must be an integer or a sequence "
                                            "of integers, not float 1.5"):
            getattr(array, method)(axis=1.5)
    row = ur_cffi.zeros(4, np.float32, queue=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # np.matrix's own
        row[:] = np.matrix([[1, 2, 3, 4]])
    assert np.array_equal(row.to_numpy(), np.arange(1, 5, dtype=np.float32))
    limit = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
    for make in (lambda: array.reshape((1,) * limit + (6,)),
                 lambda: array.T.reshape((1,) * limit + (6,)),  # (a copy)
                 lambda: array[(None,) * (limit - 1)],
                 lambda: ur_cffi.empty((1,) * (limit + 1), queue=q)):
        with pytest.raises(ValueError, match=f"dimensions: numpy's arrays have at most {limit}"):
            make()
    assert array[(None,) * (limit - 2)].to_numpy().shape == (1,) * (limit - 1) + (6,)


@pytest.mark.parametrize("dtype, value", [("U2", "ab"), ("S2", b"cd")])
def test_zero_of_a_strided_view_of_strings_zeroes_its_bytes(q, dtype, value):
    # It filled with 0, which a str array reads as the text "0".
    array = ur_cffi.full((3, 4), value, dtype, queue=q)
    array[:, ::2].zero_()
    array.T[1].zero_()
    expected = np.full((3, 4), value, dtype)
    expected[:, ::2] = expected[:, 1] = np.zeros((), dtype)
    assert np.array_equal(array.to_numpy(), expected) and len(array.to_numpy()[0, 0]) == 0


def test_axes_of_a_0d_array_and_empty_views_as_numpy_has_them(q):
    """0-d arrays have no axis -1 (permute(-1) was taken, stride(-1) and swapaxes(-1, -1) raised
    a bare IndexError); an empty array takes view(dtype) as numpy's does."""
    scalar = ur_cffi.zeros((), np.float32, queue=q)
    for call in (lambda: scalar.stride(-1), lambda: scalar.swapaxes(-1, -1),
                 lambda: scalar.permute(-1), lambda: scalar.transpose(0)):
        with pytest.raises(ValueError, match="axis .* is out of range for 0 dimensions"):
            call()
    assert scalar.permute().shape == () and scalar.T.shape == ()
    for shape in ((0, 0), (0, 4), (3, 0)):
        empty = ur_cffi.zeros(shape, np.bool_, queue=q)
        assert empty.view(ur_cffi.bfloat16).shape == \
            np.zeros(shape, np.bool_).view(ur_cffi.bfloat16).shape


def test_asarray_of_a_usm_array_copies_it_where_numpy_would(q, rng):
    """As numpy.asarray: the array itself where it is what was asked for (it was copied
    always; before that it went through np.asarray, which device USM refuses)."""
    values = rng.standard_normal((3, 4))
    source = ur_cffi.asarray(values, queue=q)
    assert ur_cffi.asarray(source, queue=q) is source
    assert ur_cffi.asarray(source.T, np.float64, queue=q, kind="device").base is source
    for kind, dtype in (("device", None), ("host", None), ("shared", None),
                        ("device", np.float32)):
        copied = ur_cffi.asarray(source.T, dtype, queue=q, kind=kind,
                                 copy=True if kind == "device" else None)
        assert copied.kind == kind and copied.data_ptr() != source.data_ptr()
        assert copied.dtype == (dtype or np.float64)
        assert np.array_equal(copied.to_numpy(), values.T.astype(dtype or np.float64))
    with ur_cffi.Queue(q.context, q.device) as another:
        with pytest.raises(ValueError, match="asarray\\(copy=False\\) needs a copy: the array "
                                             "is made on another queue, host USM, not device"):
            ur_cffi.asarray(ur_cffi.asarray(values, queue=q, kind="host"), queue=another,
                            copy=False)
    with pytest.raises(ValueError, match="ndarray memory is not USM"):
        ur_cffi.asarray(values, queue=q, copy=False)
    assert ur_cffi.asarray([1, 2, 300], np.int16, queue=q).to_numpy().tolist() == [1, 2, 300]
    other = ur_cffi.Queue(q.device.create_context(), q.device)
    assert np.array_equal(ur_cffi.asarray(source, queue=other).to_numpy(), values)


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_and_pytorch_shape_methods(q, rng, kind):
    """squeeze, unsqueeze (expand_dims), flip, ravel, flatten, contiguous and dim, against
    numpy on the same data; views where numpy makes views."""
    host = rng.standard_normal((3, 1, 4, 1))
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    for made, expected in ((array.squeeze(), host.squeeze()),
                           (array.squeeze(1), host.squeeze(1)),
                           (array.squeeze((1, -1)), host.squeeze((1, -1))),
                           (array.unsqueeze(0), np.expand_dims(host, 0)),
                           (array.unsqueeze(-1), np.expand_dims(host, -1)),
                           (array.unsqueeze(2), np.expand_dims(host, 2)),
                           (array.flip(), np.flip(host)), (array.flip(2), np.flip(host, 2)),
                           (array.flip((0, -2)), np.flip(host, (0, -2))),
                           (array.T.ravel(), host.T.ravel()), (array.ravel(), host.ravel()),
                           (array[:, :, ::2].flatten(), host[:, :, ::2].flatten())):
        assert made.shape == expected.shape
        assert np.array_equal(made.to_numpy(), expected)
    assert array.squeeze().base is array and array.flip(0).base is array
    squeezed = array.squeeze()  # the new axis's stride is PyTorch's (numpy's a[..., None]: 0)
    assert squeezed.unsqueeze(-1).stride() == (4, 1, 1)
    assert squeezed.unsqueeze(0).stride() == (12, 4, 1)
    assert squeezed.unsqueeze(1).stride() == (4, 4, 1)
    assert array.ravel().base is array and array.flatten().base is not array
    assert array.contiguous() is array and array.T.contiguous().is_contiguous()
    assert array.dim() == 4
    assert np.array_equal(array.flip([0, 2]).to_numpy(), np.flip(host, [0, 2]))
    with pytest.raises(ValueError, match="squeeze: axis 0 has extent 3, not 1"):
        array.squeeze(0)
    with pytest.raises(ValueError, match=r"flip: axis \(1, -3\) repeats an axis"):
        array.flip((1, -3))
    with pytest.raises(ValueError, match="unsqueeze: axis 6 is out of range for 5"):
        array.unsqueeze(6)


def test_conversions_to_python_scalars_never_read_the_device(q):
    """bool() raises (an array was always true, whatever it held); float() and int() are not
    there: a conversion that read the device deadlocked a Triton launch packing a one-element
    array under its lock.  item() reads it."""
    for array in (ur_cffi.zeros(1, queue=q), ur_cffi.zeros(3, queue=q)):
        with pytest.raises(ValueError, match="the truth value of a USMArray .* is a read of "
                                             "device memory: use bool\\(a.item\\(\\)\\)"):
            bool(array)
        with pytest.raises(TypeError):
            float(array)
        with pytest.raises(TypeError, match="'in' compares the elements of a USMArray"):
            0.0 in array  # noqa: B015 - Python's fallback said False
    assert ur_cffi.asarray(np.array([[2.5]]), queue=q).item() == 2.5


@pytest.mark.parametrize("kind", KINDS)
def test_edges_of_iteration_axes_steps_and_shapes_as_numpy_has_them(q, rng, kind):
    """Found by an audit: a 0-d array iterated as an empty sequence (Python's fallback to
    __getitem__); transpose took no array of axes; a step past an index's range on an axis
    left with one element made a view nothing could read; reshape of an empty array took
    extents numpy refuses; view(dtype) checked the unused stride of an axis of one element;
    view() read a structured dtype's list as a shape."""
    host = rng.standard_normal((3, 4, 2))
    array = ur_cffi.asarray(host, queue=q, kind=kind)
    rows = list(array)
    assert [row.shape for row in rows] == [(4, 2)] * 3 and all(r.base is array for r in rows)
    assert np.array_equal(np.stack([row.to_numpy() for row in rows]), host)
    for zero_d in (array[1, 2, 0], ur_cffi.asarray(np.float32(5), queue=q, kind=kind)):
        with pytest.raises(TypeError, match="iteration over a 0-d USMArray"):
            list(zero_d)
    order = np.array([2, 0, 1])
    assert np.array_equal(array.transpose(order).to_numpy(), host.transpose(order))
    for axes in (None, 1.5, "ab"):
        with pytest.raises(TypeError, match="permute: axes must be integers"):
            array.permute(axes)
    for key in (np.s_[:, ::2**62], np.s_[::2**70, 1:2:2**63, ::-2**62]):
        view, expected = array[key], host[key]
        assert view.strides == expected.strides
        assert np.array_equal(view.to_numpy(), expected)
        assert np.array_equal(view.T.to_numpy(), expected.T)
    empty = ur_cffi.zeros(0, queue=q, kind=kind)
    for shape in ((2**63, 0), (2**62, 2**62, 0)):
        with pytest.raises(ValueError, match=r"out of range|span more bytes than an index"):
            empty.reshape(shape)
        with pytest.raises(ValueError):
            np.zeros(0).reshape(shape)
    halves = rng.standard_normal((10, 3)).astype(np.float16)
    part = ur_cffi.asarray(halves, queue=q, kind=kind)[0:1, 0:2]  # row stride 6 bytes
    assert np.array_equal(part.view(np.float32).to_numpy(), halves[0:1, 0:2].view(np.float32))
    record = [("x", "<f4"), ("y", "<f4")]
    pairs = ur_cffi.asarray(host.astype(np.float32), queue=q, kind=kind).view(record)
    assert pairs.dtype == np.dtype(record) and pairs.shape == (3, 4, 1)
    assert pairs.to_numpy().tobytes() == host.astype(np.float32).view(record).tobytes()


def test_constructors_name_a_value_numpy_has_no_number_type_for(q):
    with pytest.raises(TypeError, match="arange: start must be a number, not None"):
        ur_cffi.arange(None, queue=q)
    counted = ur_cffi.arange(stop=5, queue=q)  # numpy's arange(stop=n): a TypeError before
    assert counted.dtype == np.arange(stop=5).dtype and counted.to_numpy().tolist() == [0, 1, 2,
                                                                                    3, 4]
    with pytest.raises(TypeError, match=f"full: fill_value {2**70} fits no numpy number type"):
        ur_cffi.full(3, 2**70, queue=q)
    assert ur_cffi.full(3, 2**70, np.float64, queue=q).to_numpy().tolist() == [2.0**70] * 3


@pytest.mark.parametrize("write", ["copy_from", "assignment", "fill", "copy_to"])
def test_writes_into_elements_that_share_memory_are_refused(q, rng, write):
    """A stride of 0 (from_pointer, a DLPack producer's expand()) makes elements share
    memory: writing three different rows into one kept an unspecified one of them, with no
    word (numpy's broadcast views are read-only; PyTorch refuses writes to expanded ones).
    Reading such an array, and writing views whose elements are apart, still work."""
    row = rng.standard_normal(4).astype(np.float32)
    base = ur_cffi.asarray(row, queue=q)
    rows = ur_cffi.from_pointer(base.data_ptr(), (3, 4), np.float32, queue=q, strides=(0, 4),
                                owner=base)
    values = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(ValueError, match=r"strides \(0, 4\)\) share memory"):
        if write == "copy_from":
            rows.copy_from(values)
        elif write == "assignment":
            rows[...] = values
        elif write == "fill":
            rows.fill(1.0)
        else:  # (the message named copy_from, and a flat destination's shape)
            ur_cffi.asarray(values, queue=q).copy_to(rows)
    if write == "copy_to":
        with pytest.raises(ValueError, match=r"^copy_to: the elements of this array \(shape "
                                             r"\(3, 4\), strides \(0, 4\)\) share memory"):
            ur_cffi.asarray(values.ravel(), queue=q).copy_to(rows)
    assert np.array_equal(base.to_numpy(), row)  # nothing written
    np.testing.assert_array_equal(rows.to_numpy(), np.broadcast_to(row, (3, 4)))
    if write == "copy_from":  # past the elements whose offsets are counted: refused too (it
        under = ur_cffi.empty(2048, np.float32, queue=q)  # was written, each over others)
        windows = ur_cffi.from_pointer(under.data_ptr(), (1025, 1024), np.float32, queue=q,
                                       strides=(4, 4), owner=under)
        with pytest.raises(ValueError, match=r"strides \(4, 4\)\) may share memory \(past "
                                             r"1048576 elements it is not counted\)"):
            windows.copy_from(np.zeros((1025, 1024), np.float32))
    columns = ur_cffi.full((4, 6), np.nan, np.float32, queue=q)[:, ::2]
    columns[...] = values.T
    np.testing.assert_array_equal(columns.to_numpy(), values.T)
    # Interleaved but apart (byte offsets 0, 8, 12, 16, 20, 28): written, as numpy writes it.
    under = ur_cffi.full(8, np.nan, np.float32, queue=q)
    woven = ur_cffi.from_pointer(under.data_ptr(), (3, 2), np.float32, queue=q,
                                 strides=(8, 12), owner=under)
    expected = np.full(8, np.nan, np.float32)
    woven_host = np.lib.stride_tricks.as_strided(expected, (3, 2), (8, 12))
    woven_host[...] = values[:, :2]
    for write in (lambda: woven.copy_from(values[:, :2]), lambda: woven.fill(2.0),
                  lambda: woven.__setitem__(..., values[:, :2])):
        write()
    woven_host[...] = values[:, :2]
    np.testing.assert_array_equal(under.to_numpy(), expected)


def test_view_and_reshape_without_arguments_and_item_sizes_as_numpy(queue):
    """``a.view()`` of a one-element array was 0-d and of others a reshape error; ``view(
    dtype=)`` was refused; a smaller item size that does not divide the array's was taken
    (numpy refuses it); an empty array's view(dtype) was refused for a reversed last axis."""
    host = np.arange(6, dtype=np.int64).reshape(2, 3)
    a = ur_cffi.asarray(host, queue=queue)
    for array, reference in ((a, host), (a[:1, :1], host[:1, :1]), (a[0, :1], host[0, :1])):
        same = array.view()
        assert same.shape == reference.view().shape and same.strides == reference.strides
        assert same.data_ptr() == array.data_ptr()
        assert np.array_equal(same.to_numpy(), reference)
    as_int32 = a.view(dtype=np.int32)
    assert np.array_equal(as_int32.to_numpy(), host.view(dtype=np.int32))
    with pytest.raises(TypeError, match="view takes a dtype or a shape"):
        a.view(3, 2, dtype=np.int32)
    for none in ((None,), ()):  # numpy reads None as float64: refused, not a plain view
        with pytest.raises(TypeError):
            a.view(*none, **({} if none else {"dtype": None}))
    with pytest.raises(TypeError, match="reshape takes the new shape"):
        a.reshape()
    with pytest.raises(ValueError):  # numpy: "its size must be a divisor of ..."
        host.view(np.dtype("V6"))
    with pytest.raises(ValueError, match="a smaller item size must divide the array's, 8 bytes"):
        a.view(np.dtype("V6"))
    empty_host = np.zeros((0, 2), np.uint8)[:, ::-1]
    empty = ur_cffi.zeros((0, 2), np.uint8, queue=queue)[:, ::-1]
    assert empty.view(np.int16).shape == empty_host.view(np.int16).shape == (0, 1)


def test_copy_to_a_reversed_numpy_array_names_its_strides(queue):
    a = ur_cffi.asarray(np.arange(6, dtype=np.float32), queue=queue)
    target = np.zeros(6, np.float32)[::-1]
    with pytest.raises(ValueError, match=r"non-negative strides, not strides \(-4,\) \(shape "
                                         r"\(6,\)\): read into a new one"):
        a.copy_to(target)



def test_copy_to_takes_a_negative_stride_on_an_axis_of_one_element(queue, rng):
    """numpy gives ``full((3, 1, 2))[:, ::-1]`` strides (16, -16, 8) and calls it
    C-contiguous; the stride never steps, and copy_to of a view refused it."""
    values = rng.standard_normal((3, 2, 4))
    array = ur_cffi.asarray(values, queue=queue)
    target = np.full((3, 1, 2), np.nan)[:, ::-1]
    assert target.strides == (16, -16, 8)
    array[:, :1, ::2].copy_to(target)
    assert np.array_equal(target, values[:, :1, ::2])


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_np_asarray_reads_records_whose_fields_are_out_of_order(queue, rng, kind):
    """numpy has no array-interface descr for them ("dtype.descr is not defined for types
    with overlapping or out-of-order fields"): np.asarray raised; to_numpy() read them."""
    record = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f2"], "offsets": [4, 0],
                       "itemsize": 8})
    values = np.zeros(5, record)
    values["a"] = rng.integers(-1000, 1000, 5)
    values["b"] = rng.standard_normal(5)
    array = ur_cffi.asarray(values, queue=queue, kind=kind)
    host = np.asarray(array)
    assert host.dtype == record and host.tobytes() == values.tobytes()
    assert host.ctypes.data == array.data_ptr()  # a view, not a copy


def test_a_strided_view_reshapes_without_a_copy_where_numpy_does(queue, rng):
    # Splitting the one axis of a[::2] into (3, 4), (4, 3) and (2, 2, 3) (drawn by no
    # property run of the reshape test: a wrong stride for the outer axis went unseen).
    host = rng.standard_normal(24)
    array = ur_cffi.asarray(host, queue=queue)
    for shape in ((3, 4), (4, 3), (2, 2, 3)):
        view = array[::2].view(*shape)
        assert view.base is not None
        np.testing.assert_array_equal(view.to_numpy(), host[::2].reshape(shape))


@pytest.mark.parametrize("shape, key", [((10,), np.s_[5:2]), ((10,), np.s_[10:]),
                                        ((3, 4), np.s_[2:1, 3:]), ((3, 4), np.s_[1:2, 4:])],
                         ids=str)
def test_an_empty_view_is_where_numpys_is(queue, shape, key):
    host = np.zeros(shape)
    array = ur_cffi.asarray(host, queue=queue)
    view = array[key]
    assert view.size == 0
    assert view.data_ptr() - array.data_ptr() == host[key].ctypes.data - host.ctypes.data


@pytest.mark.parametrize("shape, dst, src", [((4, 5), (40, 4), (0, 4)),
                                             ((4, 5), (40, 4), (8, 4)),
                                             ((4, 5), (0, 4), (20, 4))])
def test_rectangular_copies_have_pitches_of_at_least_a_row(shape, dst, src):
    # UR's validation layer refuses a 2D copy whose pitch is less than its width
    # (UR_RESULT_ERROR_INVALID_SIZE); the CPU adapter copied such rows right.
    for *_, width, height, dst_pitch, src_pitch in _strided.copy_plan(shape, dst, src, 4):
        assert height == 1 or (dst_pitch >= width and src_pitch >= width)


def test_a_copy_between_views_that_only_touch_is_made(queue, rng):
    host = rng.standard_normal(40).astype(np.float32)
    array = ur_cffi.asarray(host, queue=queue)
    source = array[:20].view(2, 10)[:, ::2]  # bytes [0, 76)
    destination = array[19:39].view(2, 10)[:, ::2]  # bytes [76, 152)
    destination.copy_from(source)
    expected = host.copy()
    expected[19:39].reshape(2, 10)[:, ::2] = host[:20].reshape(2, 10)[:, ::2]
    np.testing.assert_array_equal(array.to_numpy(), expected)


def test_fill_of_a_strided_view_refuses_offset_and_count(queue):
    # Without the check it filled the whole view, not the count asked for.
    array = ur_cffi.zeros(8, np.float32, queue=queue)
    for part in ({"count": 2}, {"offset": 1}):
        with pytest.raises(ValueError, match="offset and count need a contiguous array"):
            array[::2].fill(1.0, **part)
    assert not array.to_numpy().any()


@pytest.mark.parametrize("kind", KINDS)
def test_astype_casts_as_numpy_and_keeps_the_layout(q, rng, kind):
    """Casting needed ``ur_cffi.asarray(a, dtype, queue=a.queue)`` (no ``astype``, PyTorch's
    ``to(dtype)``): a new array laid out as the view is, on its queue, of its kind."""
    base = rng.uniform(-300, 300, (6, 10))
    for source, target in zip(rng.permutation(DTYPES), rng.permutation(DTYPES)):
        host = base.astype(source)[1:, ::-3].T  # a stepped, reversed, transposed view
        array = ur_cffi.asarray(base.astype(source), queue=q, kind=kind)[1:, ::-3].T
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (numpy's overflow warnings: the same casts)
            cast, expected = array.astype(target), host.astype(target)
        assert (cast.dtype, cast.shape, cast.kind, cast.queue) == (target, host.shape, kind, q)
        assert cast.strides == expected.strides, (source, target)
        assert cast.to_numpy().tobytes() == np.ascontiguousarray(expected).tobytes(), \
            (source, target)
        assert array.astype(source, copy=False) is array
        kept = array.astype(source)
        assert kept is not array and kept.data_ptr() != array.data_ptr()
        assert kept.to_numpy().tobytes() == np.ascontiguousarray(host).tobytes()
    with pytest.raises(TypeError, match="astype: copy must be True or False, not str 'no'"):
        array.astype(np.float32, copy="no")
    with pytest.raises(TypeError, match="not understood|dtype"):
        array.astype("float33")
    array.base.close() if array.base is not None else array.close()
    with pytest.raises(ur_cffi.ClosedError):
        array.astype(np.float32, copy=False)
