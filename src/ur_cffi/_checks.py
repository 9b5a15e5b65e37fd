"""Argument checks shared by the public API: each raises a built-in exception whose message names
the argument and the value, before UR sees anything.

Arithmetic on what a caller passes is done on Python integers: numpy integers wrap
(``np.uint64(2**64 - 1) + 1 == 0``), and a wrapped bound lets a copy run past an allocation.
"""

from __future__ import annotations

import cmath
import ctypes
import math
import operator
import os

import numpy as np

from . import dtypes

SIZE_MAX = 2**64 - 1


def integer(name: str, value, minimum: int = 0, maximum: int = SIZE_MAX) -> int:
    """``value`` as a Python int in ``[minimum, maximum]``; bools and non-integers are refused."""
    if isinstance(value, (bool, np.bool_, np.timedelta64)) or \
            not isinstance(value, (int, np.integer)):  # (timedelta64: an np.integer, no index)
        raise TypeError(f"{name} must be an integer, not {type(value).__name__} {value!r}")
    number = operator.index(value)
    if not minimum <= number <= maximum:
        raise ValueError(f"{name} {value!r} is out of range [{minimum}, {maximum}]")
    return number


def no_nul(name: str, text) -> bytes:
    """``text`` (a str) encoded, refusing embedded NUL characters, which C would cut it at."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, not {type(text).__name__} {text!r}")
    if "\0" in text:
        raise ValueError(f"{name} {text!r} contains a NUL character")
    try:
        return text.encode()
    except UnicodeEncodeError as error:  # a lone surrogate ("\udc80", from surrogateescape)
        raise ValueError(f"{name} {text!r} is not valid Unicode text: {error.reason} at "
                         f"position {error.start}") from None


_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class SwitchError(ValueError):
    """An environment variable of ur_cffi's that is neither a switch on nor off."""


def env_flag(name: str, default: bool) -> bool:
    """The switch in environment variable ``name``: 1/true/yes/on or 0/false/no/off (any
    case), ``default`` where it is unset or empty; :class:`SwitchError` naming it otherwise
    (a ``false`` read as "not 0" would turn the switch on)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _ON or value in _OFF:
        return value in _ON
    raise SwitchError(f"{name}={os.environ[name]!r}: a switch is one of {'/'.join(_ON)} or "
                     f"{'/'.join(_OFF)}")


def flag(name: str, value) -> bool:
    """``value`` as a bool; ``TypeError`` naming ``name`` for anything but True and False
    (numpy's too): a string such as "false" would read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
    return bool(value)


def optional_flag(name: str, value) -> bool | None:
    """:func:`flag`, or None for None (``copy=``: the array API's "copy where needed")."""
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True, False or None, not {type(value).__name__} "
                        f"{value!r}")
    return None if value is None else bool(value)  # (np.False_ is not False)


def scalar(name: str, value, dtype: np.dtype) -> np.ndarray:
    """``value`` as a 0-d array of ``dtype``, refusing what would not convert exactly: None,
    sequences and strings, a fraction or out-of-range number for an integer dtype, a finite
    number that overflows a float dtype, a complex number for a real one."""
    if isinstance(value, ctypes._SimpleCData):
        value = value.value
    elif isinstance(value, np.ndarray) and value.ndim == 0:  # numpy takes them as scalars
        value = value[()]
    text = isinstance(value, (str, bytes, np.str_, np.bytes_))
    if value is None or np.ndim(value) != 0 or (text and dtype.kind not in "SU"):
        raise TypeError(f"{name} must be one number, not {type(value).__name__} {value!r}")
    if isinstance(value, (bool, np.bool_)) and dtype.kind != "b":
        raise TypeError(f"{name} {value!r} is a bool; the elements are {dtype}")
    numeric = dtype.kind in "biufc" or dtypes.is_floating(dtype) or dtypes.is_integer(dtype)
    if (not isinstance(value, (int, float, complex, np.generic)) and not text) or (
            numeric and isinstance(value, (np.datetime64, np.timedelta64, np.void))):
        raise TypeError(f"{name} must be a number, not {type(value).__name__} {value!r}")
    if isinstance(value, (complex, np.complexfloating)) and not dtypes.is_complex(dtype):
        if value.imag:
            raise ValueError(f"{name} {value!r} is complex; the elements are {dtype}")
        value = value.real
    if dtypes.is_integer(dtype):
        number = value
        if not isinstance(value, (int, np.integer)):  # floats: numpy's, ml_dtypes' (exact)
            if not isinstance(value, np.floating):
                number = float(value)
            if not np.isfinite(number) or number != np.trunc(number):
                raise ValueError(f"{name} {value!r} is not an integer; the elements are {dtype}")
        number = int(number)
        low, high = dtypes.integer_bounds(dtype)
        if not low <= number <= high:
            raise ValueError(f"{name} {value!r} does not fit in {dtype}")
        return np.array(number, dtype=dtype)
    if dtype.names and not (isinstance(value, np.void) and
                            np.can_cast(value.dtype, dtype, "safe")):  # (byte-swapped, aligned)
        _check_fields(name, value, dtype)
    if dtype.kind not in "fc" and not dtypes.is_floating(dtype) and not dtypes.is_complex(dtype):
        if isinstance(value, (np.datetime64, np.timedelta64)) and \
                dtype.kind != ("M" if isinstance(value, np.datetime64) else "m"):
            raise TypeError(f"{name} {value!r} is a {type(value).__name__}; the elements "
                            f"are {dtype}")  # (numpy casts one's count into the other)
        try:
            converted = np.array(value, dtype=dtype)
        except OverflowError:  # (past the unit's range, in the numpy versions that do not wrap)
            raise ValueError(f"{name} {value!r} does not fit in {dtype}") from None
        except (TypeError, ValueError):
            raise TypeError(f"{name} {value!r} cannot be stored as {dtype}") from None
        if converted.dtype != dtype:  # a datetime's unit into a generic datetime64
            raise TypeError(f"{name} {value!r} cannot be stored as {dtype} (numpy makes it "
                            f"{converted.dtype})")
        if dtype.kind in "mM" and not text and (
                converted.astype(value.dtype) != value and not np.isnat(value)
                if isinstance(value, (np.datetime64, np.timedelta64))
                else int(converted.astype(dtype.newbyteorder("=")).view(np.int64)) != value):
            raise ValueError(f"{name} {value!r} is not exactly a {dtype} (a finer unit, a "
                             f"fraction, or out of its range): numpy would store "
                             f"{converted[()]!r}")
        if dtype.kind in "SU" and converted != np.array(value, dtype=dtype.kind):
            raise ValueError(f"{name} {value!r} does not fit in {dtype}: numpy would store "
                             f"{converted[()]!r}")
        return converted
    if isinstance(value, (int, np.integer)):
        finite = True
    elif isinstance(value, (np.floating, np.complexfloating)):  # long doubles beyond float64
        finite = bool(np.isfinite(value))
    else:
        try:  # (not abs(): CPython 3.11's of a complex NaN raised with a stale C errno)
            finite = cmath.isfinite(complex(value))
        except OverflowError:  # a finite number beyond float64 (a Fraction)
            finite = True
    try:
        with np.errstate(over="ignore"):
            converted = np.array(value, dtype=dtype)
    except (OverflowError, TypeError):
        if not isinstance(value, int):  # (numpy 1.26 takes no int beyond 64 bits for
            raise  # ml_dtypes' types: TypeError "expected number, got int")
        try:
            converted = np.array(float(value), dtype=dtype)
        except OverflowError:  # beyond float64
            converted = np.array(np.inf, dtype=dtype)
    if finite and not np.all(np.isfinite(converted)):
        raise ValueError(f"{name} {value!r} does not fit in {dtype}")
    bound = dtypes.saturation_bound(dtype) if finite else None
    if bound is not None:  # (float4_e2m1fn: 1e6 would make 6)
        try:
            magnitude = abs(float(value))
        except OverflowError:  # an int beyond float64
            magnitude = math.inf
        if magnitude >= bound:
            raise ValueError(f"{name} {value!r} does not fit in {dtype}")
    if not finite:  # compared wide: float4_e2m1fn's own == saturates inf to 6 on both sides
        with np.errstate(invalid="ignore"):  # (a signalling NaN's widening warns)
            wide = converted.astype(np.complex128 if dtypes.is_complex(dtype) else np.float64)
        holds = bool(np.isnan(wide)) if value != value else bool(wide == value)
    if not finite and not holds:
        raise ValueError(f"{name} {value!r} cannot be stored in {dtype}, which holds no "
                         f"{'NaN' if value != value else 'infinity'} (it would read "
                         f"{converted[()]!r})")
    return converted


def _check_fields(name: str, value, dtype: np.dtype) -> None:
    """Raise unless each field of record ``dtype`` holds its part of ``value`` exactly: a number
    goes into every field (each element of an array field), a record of other fields field by
    field, in order; raw-byte fields are numpy's to fill."""
    record = isinstance(value, np.void) and value.dtype.names is not None
    if record and len(value.dtype.names) != len(dtype.names):
        raise TypeError(f"{name} {value!r} has {len(value.dtype.names)} fields; the elements "
                        f"are {dtype}, of {len(dtype.names)}")
    for index, field in enumerate(dtype.names):
        base = dtype.fields[field][0].base
        part = value[index] if record else value
        if record and np.ndim(part):
            raise TypeError(f"{name} {value!r}: its field {index} is an array; the elements "
                            f"are {dtype} (give a record of that dtype)")
        if base.kind != "V" or base.names:
            scalar(f"{name} (into field {field!r})", part, base)


def read_only(owner: str, name: str, what: str) -> property:
    """A property reading ``_name`` that refuses assignment: ``owner.name`` is state that the
    object's other state (or its UR handle) was made for, which assignment would change
    alone."""
    def refuse(obj, value):
        raise AttributeError(f"{owner}.{name} is read-only: {what}")
    return property(operator.attrgetter("_" + name), refuse, doc=what[0].upper() + what[1:]
                    + ".")
