"""Array constructors beyond ``empty``/``zeros``/``asarray`` (``memory.py``): ``ones``,
``full``, ``arange`` and the ``*_like`` family, with numpy's signatures plus ``queue`` and
``kind``."""

from __future__ import annotations

import math

import numpy as np

from . import _checks, _strided, dtypes
from .memory import USMArray, _dtype, _relaid, asarray, empty, zeros

__all__ = ["ones", "full", "arange", "empty_like", "zeros_like", "ones_like", "full_like"]


def ones(shape, dtype=np.float32, *, queue, kind: str = "device") -> USMArray:
    """A USMArray of ones."""
    return _filled("ones: the value", shape, 1, dtype, queue, kind)


def full(shape, fill_value, dtype=None, *, queue, kind: str = "device") -> USMArray:
    """A USMArray of ``fill_value``; ``dtype`` None takes the value's numpy dtype, as
    ``numpy.full`` does (a Python float gives float64)."""
    if dtype is None:
        if np.ndim(fill_value) != 0 or fill_value is None:
            raise TypeError(f"fill_value must be one number, not {type(fill_value).__name__} "
                            f"{fill_value!r}")
        dtype = np.asarray(fill_value).dtype
        if dtype.hasobject:
            raise TypeError(f"full: fill_value {fill_value!r} fits no numpy number type (numpy "
                            "would hold it as an object); give dtype=")
    return _filled("full: fill_value", shape, fill_value, dtype, queue, kind)


def _filled(name: str, shape, value, dtype, queue, kind: str) -> USMArray:
    array = USMArray(queue, shape, _dtype(dtype), kind)
    value = _checks.scalar(name, value, array.dtype)
    if array.size:
        array.fill(value[()])
    return array


def arange(start=None, stop=None, step=1, dtype=None, *, queue,
           kind: str = "device") -> USMArray:
    """Evenly spaced values in ``[start, stop)`` (``numpy.arange``, computed on the host;
    ``arange(stop=n)`` counts from 0, as numpy's and PyTorch's ``arange(end=n)``)."""
    if start is None and stop is not None:
        start = 0
    if start is None:
        raise TypeError("arange: start must be a number, not None")
    if step is None:  # as numpy reads it
        step = 1
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        if value is not None and (isinstance(value, (bool, np.bool_, str, bytes))
                                  or np.ndim(value) != 0):
            raise TypeError(f"arange: {name} must be a number, not {type(value).__name__} "
                            f"{value!r}")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    target = None if dtype is None else _dtype(dtype)
    numeric = target is not None and (dtypes.is_integer(target) or dtypes.is_floating(target)
                                      or dtypes.is_complex(target))
    if numeric:  # computed in float64 (numpy computes in a float32 argument's precision)
        start, stop, step = (float(value) if isinstance(value, np.floating) and
                             value.dtype.itemsize < 8 else value for value in (start, stop, step))
    given = [value for value in (start, stop, step) if value is not None]
    if numeric and not dtypes.is_complex(target) and \
            any(isinstance(value, (complex, np.complexfloating)) for value in given):
        raise TypeError(f"arange: a complex start, stop or step for {target} elements")
    if numeric and dtypes.is_integer(target) and all(map(_integral, given)):
        host = _integer_range(start, stop, step, target)
    else:
        # numpy steps by dtype(start + step) - dtype(start): bfloat16 from 256 repeats 256
        host = np.arange(start, stop, step, dtype=None if numeric else target)
        if numeric and host.dtype != target:
            host = _cast_range(host, target, (start, stop, step))
    if host.dtype.hasobject:
        raise TypeError(f"arange({start!r}, {stop!r}, {step!r}): numpy makes Python objects of "
                        f"{'these (numbers beyond 64 bits)' if dtype is None else 'dtype object'}"
                        "; device memory holds numbers")
    return asarray(host, queue=queue, kind=kind)


def _integral(value) -> bool:
    """Whether ``value`` is an integer, or a float with an integer's value."""
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, (float, np.floating)) and math.isfinite(value) and \
        value == math.floor(value)


def _integer_range(start, stop, step, dtype: np.dtype) -> np.ndarray:
    """``arange`` of integers (or floats of their values) into an integer dtype: exact
    (float64 loses them past 2**53), refusing values past the dtype's range."""
    first, last = (0, int(start)) if stop is None else (int(start), int(stop))
    values = range(first, last, int(step))
    if not values:
        return np.empty(0, dtype)
    _refuse_past_bounds((start, stop, step), values[0], values[-1], dtype)
    try:
        count = len(values)
    except OverflowError:
        raise ValueError(f"{_call((start, stop, step))}: more values than an array holds") \
            from None
    if dtype.kind not in "iu":  # bool, ml_dtypes' int4...: a few values
        return np.array(list(values)).astype(dtype)
    if all(-2**63 <= bound < 2**63 for bound in (first, last, values.step)):
        host = np.arange(first, last, values.step, dtype=np.int64)
        return host if dtype == host.dtype else host.astype(dtype)
    # Modulo 2**64, which holds every step between values of the dtype (numpy 1.26 takes no
    # bound past int64 in arange), then the dtype's low bits: exact, the values being in it.
    offsets = np.arange(count, dtype=np.uint64) * np.uint64(abs(values.step) % 2**64)
    origin = np.uint64(values[0] % 2**64)
    with np.errstate(over="ignore"):
        wrapped = origin + offsets if values.step > 0 else origin - offsets
    return wrapped.astype(dtype)


def _call(arguments: tuple) -> str:
    return f"arange{tuple(argument for argument in arguments if argument is not None)!r}"


def _refuse_past_bounds(arguments: tuple, first, last, dtype: np.dtype) -> None:
    """Raise unless values from ``first`` to ``last`` fit in integer ``dtype``."""
    low, high = dtypes.integer_bounds(dtype)
    if not (low <= min(first, last) and max(first, last) <= high):
        raise ValueError(f"{_call(arguments)}: its values from {first} to {last} do not all "
                         f"fit in {dtype}")


def _cast_range(host: np.ndarray, dtype: np.dtype, arguments: tuple) -> np.ndarray:
    """``arange``'s values, computed wide, in ``dtype``, refusing what ``full`` refuses:
    fractions or values past an integer dtype's range, values past a float dtype's."""
    call = _call(arguments)
    if not host.size:
        return host.astype(dtype)
    if dtypes.is_integer(dtype):
        if host.dtype.kind in "fc" and not np.all(np.trunc(host) == host):
            raise ValueError(f"{call}: its values are not all integers; the elements are "
                             f"{dtype}")
        _refuse_past_bounds(arguments, host[0], host[-1], dtype)
        return host.astype(dtype)
    if host.dtype.kind == "c" and not dtypes.is_complex(dtype):
        raise ValueError(f"{call}: its values are complex; the elements are {dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = host.astype(dtype)
    bound = dtypes.saturation_bound(dtype)
    if not np.all(np.isfinite(cast.astype(np.complex128 if dtypes.is_complex(dtype) else
                                          np.float64))) or \
            (bound is not None and max(abs(host[0]), abs(host[-1])) >= bound):
        raise ValueError(f"{call}: its values from {host[0]} to {host[-1]} do not all fit "
                         f"in {dtype}")
    return cast


def _like(array, dtype, queue, kind, order, make) -> USMArray:
    """``make(shape, dtype, queue, kind)`` for ``array``'s shape, laid out as ``order`` says:
    ``"K"`` (numpy's default, PyTorch's ``preserve_format``) as ``array`` is, its axes in the
    order of their strides' sizes (a transposed view's like is transposed too, with positive
    strides), but C-contiguous where its elements overlap (a broadcast's stride of 0), as
    PyTorch's (numpy's would put that axis innermost); ``"C"`` contiguous."""
    if not isinstance(array, USMArray):
        raise TypeError(f"a *_like constructor takes a USMArray, not {type(array).__name__}")
    if order not in ("K", "C"):
        raise ValueError(f"order must be 'K' (as the array is laid out) or 'C', not {order!r}")
    dtype = array.dtype if dtype is None else _dtype(dtype)
    queue = array.queue if queue is None else queue
    kind = array.kind if kind is None else kind
    axes = sorted(range(array.ndim), key=lambda axis: -abs(array.strides[axis]))  # stable
    if order == "C" or array.is_contiguous() or axes == list(range(array.ndim)) or \
            _strided.may_overlap(array.shape, array.strides, array.itemsize):
        return make(array.shape, dtype, queue, kind)
    laid = make(tuple(array.shape[axis] for axis in axes), dtype, queue, kind)
    return _relaid(laid, array.shape, [laid.strides[axes.index(axis)]
                                       for axis in range(array.ndim)])


def empty_like(array, dtype=None, *, queue=None, kind=None, order="K") -> USMArray:
    """An uninitialised array of ``array``'s shape, laid out as it is (``order="C"``:
    contiguous; see :func:`_like`), and of its dtype, queue and kind unless given."""
    return _like(array, dtype, queue, kind, order,
                 lambda shape, dtype, queue, kind: empty(shape, dtype, queue=queue, kind=kind))


def zeros_like(array, dtype=None, *, queue=None, kind=None, order="K") -> USMArray:
    """Zeros shaped and laid out like ``array``."""
    return _like(array, dtype, queue, kind, order,
                 lambda shape, dtype, queue, kind: zeros(shape, dtype, queue=queue, kind=kind))


def ones_like(array, dtype=None, *, queue=None, kind=None, order="K") -> USMArray:
    """Ones shaped and laid out like ``array``."""
    return _like(array, dtype, queue, kind, order,
                 lambda shape, dtype, queue, kind: _filled("ones_like: the value", shape, 1, dtype,
                                                           queue, kind))


def full_like(array, fill_value, dtype=None, *, queue=None, kind=None, order="K") -> USMArray:
    """``fill_value`` shaped and laid out like ``array``."""
    return _like(array, dtype, queue, kind, order, lambda shape, dtype, queue, kind: _filled(
        "full_like: fill_value", shape, fill_value, dtype, queue, kind))
