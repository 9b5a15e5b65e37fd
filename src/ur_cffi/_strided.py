"""Strided layouts as plain integers: what an index, a reshape or a transpose makes of
``(shape, strides, offset)``, and which UR copies move the elements of such a layout.

Strides are in bytes, as numpy's.  Nothing here touches UR or allocates: ``memory.py`` turns
the results into views and enqueued copies, and the property tests compare them with numpy's.
"""

from __future__ import annotations

import collections.abc
import itertools
import math
import operator

import numpy as np

from . import _checks

INTP_MAX = np.iinfo(np.intp).max  # numpy's bound on extents and byte spans


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def is_contiguous(shape, strides, itemsize: int) -> bool:
    """Whether the layout is C-contiguous (extents of 1 and empty arrays: any stride), as
    PyTorch's ``is_contiguous()`` and numpy's ``C_CONTIGUOUS`` flag decide it."""
    if 0 in shape:
        return True
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1:
            if stride != step:
                return False
            step *= extent
    return True


def span(shape, strides, itemsize: int) -> tuple[int, int]:
    """``(lowest, highest + 1)`` byte offsets the layout touches, relative to its first element;
    ``(0, 0)`` for an empty array."""
    if 0 in shape:
        return 0, 0
    low = sum(stride * (extent - 1) for extent, stride in zip(shape, strides) if stride < 0)
    high = sum(stride * (extent - 1) for extent, stride in zip(shape, strides) if stride > 0)
    return low, high + itemsize


def _index(key) -> int | None:
    """``key`` as an int if it is an integer index (not a bool), else None."""
    if isinstance(key, (bool, np.bool_)):
        return None
    try:
        return operator.index(key)
    except TypeError:
        return None


def names_one_element(ndim: int, key) -> bool:
    """Whether ``key`` is an integer for each of ``ndim`` axes: numpy's element index, which
    takes one value, not a sequence (a 0-d view's ``...`` does)."""
    keys = key if isinstance(key, tuple) else (key,)
    return len(keys) == ndim and all(_index(k) is not None for k in keys)


def _advanced_index(key) -> bool:
    """Whether numpy takes ``key`` as an advanced (copying) index: a bool, a sequence (not a
    string), a buffer or an array."""
    if isinstance(key, (bool, np.bool_, np.ndarray, memoryview)) or (
            isinstance(key, collections.abc.Sequence) and not isinstance(key, (str, bytes))):
        return True
    return not isinstance(key, np.generic) and (
        hasattr(key, "__array__") or hasattr(key, "__array_interface__"))


def index(shape, strides, key) -> tuple[tuple, tuple, int]:
    """``(shape, strides, byte offset)`` of ``array[key]`` for basic indexing: integers,
    slices (any step), ``None`` and ``...``, as numpy computes them.  Raises ``IndexError``
    for an index out of range or of no index type (a float), ``TypeError`` for an advanced
    index (it copies in numpy; a USMArray view never copies)."""
    keys = key if isinstance(key, tuple) else (key,)
    ellipses = sum(1 for k in keys if k is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in keys if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices: the array is {len(shape)}-dimensional, but "
                         f"{used} were indexed")
    if not ellipses:
        keys = (*keys, Ellipsis)
    new_shape, new_strides, offset, dim = [], [], 0, 0
    for k in keys:
        if k is None:
            new_shape.append(1)
            new_strides.append(0)
        elif k is Ellipsis:
            for _ in range(len(shape) - used):
                new_shape.append(shape[dim])
                new_strides.append(strides[dim])
                dim += 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[dim])  # raises ValueError for step 0
            new_shape.append(len(range(start, stop, step)))
            # Past an index's range only where one element is left (its stride is unused):
            # the step clamped to an index and the stride wrapped, as numpy has them.
            step = max(-INTP_MAX, min(step, INTP_MAX))
            new_strides.append((strides[dim] * step + 2**63) % 2**64 - 2**63)
            offset += start * strides[dim] if new_shape[-1] else 0
            dim += 1
        else:
            position = _index(k)
            if position is None and not _advanced_index(k):
                raise IndexError(f"index {k!r} ({type(k).__name__}): only integers, slices "
                                 "(:), ellipsis (...) and None index a USMArray")
            if position is None:
                raise TypeError(
                    f"index {k!r} ({type(k).__name__}): a USMArray takes integers, slices, "
                    "None and ... (views never copy); for a boolean or integer-array index, "
                    "index the result of to_numpy()")
            if not -shape[dim] <= position < shape[dim]:
                raise IndexError(f"index {position} is out of bounds for axis {dim} with size "
                                 f"{shape[dim]}")
            offset += (position % shape[dim]) * strides[dim]
            dim += 1
    return tuple(new_shape), tuple(new_strides), offset


def new_shape(shape_args, size: int, itemsize: int) -> tuple[int, ...]:
    """A reshape's target shape from ``reshape(2, 3)``, ``reshape((2, 3))`` or ``-1`` for one
    inferred extent; raises unless it holds ``size`` elements (of ``itemsize`` bytes) within
    numpy's bounds."""
    if len(shape_args) == 1 and not isinstance(shape_args[0], (int, np.integer)):
        shape_args = shape_args[0]
    if isinstance(shape_args, (int, np.integer)):
        shape_args = (shape_args,)
    try:
        shape = tuple(shape_args)
    except TypeError:
        raise TypeError(f"shape {shape_args!r} must be integers") from None
    shape = tuple(_checks.integer(f"shape {shape} extent", extent, minimum=-1,
                                  maximum=INTP_MAX) for extent in shape)
    unknown = [i for i, extent in enumerate(shape) if extent == -1]
    if len(unknown) > 1:
        raise ValueError(f"shape {shape}: only one extent can be -1")
    known = math.prod(extent for extent in shape if extent != -1)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
        shape = tuple(size // known if extent == -1 else extent for extent in shape)
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
    if not size:
        check_empty_span(f"shape {shape}", shape, itemsize)
    return shape


def check_empty_span(what: str, shape: tuple, itemsize: int) -> None:
    """Raise ``ValueError`` (``what`` first) where the extents of ``shape``, which holds no
    elements, other than its 0s span more bytes than numpy's index holds: numpy refuses such a
    shape, and DLPack's int64 products overflow on it."""
    if math.prod(filter(None, shape)) * itemsize > INTP_MAX:
        raise ValueError(f"{what}: its extents other than 0 span more bytes than an index "
                         f"holds ({INTP_MAX}); numpy refuses it too")


def reshaped_strides(shape, strides, target, itemsize: int) -> tuple | None:
    """Strides for viewing ``(shape, strides)`` as ``target`` without copying, or None where
    the elements cannot be reached with strides (numpy's ``_attempt_nocopy_reshape``, C order)."""
    if math.prod(shape) == 0 or is_contiguous(shape, strides, itemsize):
        return contiguous_strides(target, itemsize)
    old = [(e, s) for e, s in zip(shape, strides) if e != 1]  # extents of 1: any stride
    old_shape, old_strides = [e for e, _ in old], [s for _, s in old]
    new_strides = [0] * len(target)
    oi = ni = 0
    # Runs of old and new axes holding equal element counts: the old run must be contiguous
    # in itself, and the new run's strides follow from the old run's innermost stride.
    while ni < len(target) and oi < len(old_shape):
        nj, oj = ni + 1, oi + 1
        new_count, old_count = target[ni], old_shape[oi]
        while new_count != old_count:
            if new_count < old_count:
                new_count *= target[nj]
                nj += 1
            else:
                old_count *= old_shape[oj]
                oj += 1
        for k in range(oi, oj - 1):
            if old_strides[k] != old_shape[k + 1] * old_strides[k + 1]:
                return None
        new_strides[nj - 1] = old_strides[oj - 1]
        for k in range(nj - 1, ni, -1):
            new_strides[k - 1] = new_strides[k] * target[k]
        ni, oi = nj, oj
    last = new_strides[ni - 1] if ni else itemsize
    for k in range(ni, len(target)):  # trailing extents of 1
        new_strides[k] = last
    return tuple(new_strides)


def axes(ndim: int, given, what: str) -> tuple[int, ...]:
    """A permutation of ``range(ndim)`` from ``given`` (negative axes allowed)."""
    if len(given) == 1 and not isinstance(given[0], (int, np.integer)):
        if isinstance(given[0], (str, bytes)) or not hasattr(given[0], "__iter__"):
            raise TypeError(f"{what}: axes must be integers, not {type(given[0]).__name__} "
                            f"{given[0]!r}")
        given = tuple(given[0])
    order = tuple(axis_index(ndim, a, what) for a in given)
    if sorted(order) != list(range(ndim)):
        raise ValueError(f"{what}: axes {tuple(given)} are not a permutation of the "
                         f"{ndim} axes")
    return order


def axis_set(ndim: int, given, what: str) -> set[int]:
    """The axes ``given`` names (an int or a sequence of them, negative allowed), each once."""
    single = isinstance(given, (int, np.generic)) or (isinstance(given, np.ndarray)
                                                      and given.ndim == 0)
    try:
        listed = [given] if single else list(given)
    except TypeError:  # (a float: "'float' object is not iterable")
        raise TypeError(f"{what}: axis must be an integer or a sequence of integers, not "
                        f"{type(given).__name__} {given!r}") from None
    axes = [axis_index(ndim, a, what) for a in listed]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{what}: axis {tuple(listed)} repeats an axis")
    return set(axes)


def axis_index(ndim: int, axis, what: str) -> int:
    """``axis`` as an index in ``range(ndim)``; raises naming ``what`` (out of range: numpy's
    ``AxisError``, a ``ValueError`` and the ``IndexError`` PyTorch raises)."""
    if isinstance(axis, np.ndarray) and axis.ndim == 0:
        axis = axis[()]  # one axis, as numpy reads it
    number = _checks.integer(f"{what}: axis", axis, minimum=-(2**63))
    if not -ndim <= number < ndim:
        raise np.exceptions.AxisError(f"{what}: axis {axis} is out of range for {ndim} "
                                      "dimensions")
    return number % ndim


# --------------------------------------------------------------------------------------------
# Copies

def may_overlap(shape, strides, itemsize: int) -> bool:
    """Whether two elements may share bytes: unless each axis (of more than one element), by
    the size of its stride, steps past all the elements of the axes of smaller strides."""
    reach = 0  # the last byte offset those axes reach, less an element
    for extent, stride in sorted(((e, abs(s)) for e, s in zip(shape, strides) if e > 1),
                                 key=lambda dim: dim[1]):
        if stride < reach + itemsize:
            return True
        reach += stride * (extent - 1)
    return False


def overlaps_itself(shape, strides, itemsize: int) -> bool | None:
    """Whether two elements share bytes, where :func:`may_overlap` says they may: a stride of
    0 along an axis of more than one element surely; otherwise, up to ``OVERLAP_ELEMENTS``
    elements, by their offsets ((3, 2) with strides (8, 12): none); beyond, None (unknown)."""
    if any(stride == 0 and extent > 1 for extent, stride in zip(shape, strides)):
        return True
    if math.prod(shape) > OVERLAP_ELEMENTS:
        return None
    offsets = np.zeros(1, np.int64)
    for extent, stride in zip(shape, strides):
        offsets = (offsets[:, None] + np.arange(extent, dtype=np.int64) * stride).ravel()
    return bool((np.diff(np.sort(offsets)) < itemsize).any())


OVERLAP_ELEMENTS = 1 << 20


def is_dense(shape, strides, itemsize: int) -> bool:
    """Whether the elements tile the bytes of their :func:`span` exactly, each once (a
    contiguous array with its axes permuted or reversed, as ``a.T`` or ``a[::-1]``)."""
    if 0 in shape:
        return True
    step = itemsize
    for extent, stride in sorted(((e, abs(s)) for e, s in zip(shape, strides) if e != 1),
                                 key=lambda dim: dim[1]):
        if stride != step:
            return False
        step *= extent
    return True


def copy_rows(shape, dst_strides, src_strides, itemsize: int) -> int:
    """How many rows the copies of :func:`copy_plan` move (plain copies count one each): the
    adapters' cost grows with them (the CPU runtime's: a few microseconds a row)."""
    if 0 in shape:
        return 0
    merged, _, height, _, _ = _copy_axes(shape, dst_strides, src_strides, itemsize)
    return math.prod(extent for extent, _, _ in merged) * height


def _copy_axes(shape, dst_strides, src_strides, itemsize: int) -> tuple:
    """``(outer axes [extent, dst stride, src stride], row width, height, dst pitch, src
    pitch)`` of :func:`copy_plan`."""
    dims = [(e, d, s) for e, d, s in zip(shape, dst_strides, src_strides) if e != 1]
    dims.sort(key=lambda dim: (abs(dim[1]), abs(dim[2])), reverse=True)
    merged: list[list[int]] = []
    for extent, dst, src in dims:
        if merged and merged[-1][1] == dst * extent and merged[-1][2] == src * extent:
            merged[-1] = [merged[-1][0] * extent, dst, src]
        else:
            merged.append([extent, dst, src])
    width = itemsize
    if merged and merged[-1][1] == itemsize and merged[-1][2] == itemsize:
        width *= merged.pop()[0]
    height, dst_pitch, src_pitch = 1, 0, 0
    if merged and merged[-1][1] >= width and merged[-1][2] >= width:
        height, dst_pitch, src_pitch = merged.pop()
    return merged, width, height, dst_pitch, src_pitch


def copy_plan(shape, dst_strides, src_strides, itemsize: int) -> list[tuple]:
    """The copies that move every element of ``shape`` from a layout with ``src_strides`` to
    one with ``dst_strides``: ``(dst offset, src offset, width, height, dst pitch, src pitch)``
    in bytes, each a 2D copy of ``height`` rows of ``width`` bytes (``height`` 1: a plain copy).

    Axes are ordered by the destination's strides, axes contiguous in both layouts merged, the
    innermost contiguous run made the row and the next axis the rows' pitch where both strides
    are positive; outer axes are looped over.  A contiguous pair gives one copy."""
    if 0 in shape:
        return []
    merged, width, height, dst_pitch, src_pitch = _copy_axes(shape, dst_strides, src_strides,
                                                             itemsize)
    plan = []
    for position in itertools.product(*(range(extent) for extent, _, _ in merged)):
        dst = sum(i * dim[1] for i, dim in zip(position, merged))
        src = sum(i * dim[2] for i, dim in zip(position, merged))
        plan.append((dst, src, width, height, dst_pitch, src_pitch))
    return plan
