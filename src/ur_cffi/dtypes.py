"""Element types: every numpy numeric dtype, plus bfloat16 and the float8 types Triton has.

The low-precision types come from ``ml_dtypes`` (what JAX and TensorFlow use for them): each
is a real numpy dtype, so numpy arrays of them copy to and from USM arrays as they are, and
Triton reads their names (``bfloat16``, ``float8_e5m2``, ...) as its own element types
(``tl.bfloat16``, ``tl.float8e5``, ...).
"""

from __future__ import annotations

import numpy as np

NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
"""The dtypes beyond numpy's own, by name: Triton's bf16, fp8e4nv, fp8e5, fp8e4b8, fp8e5b16.
``ml_dtypes`` is imported only when one is asked for (its import takes most of a second)."""

_NAME_SET = frozenset(NAMES)


def __getattr__(name: str):
    """``dtypes.bfloat16`` and the float8 types, from ``ml_dtypes`` on first use."""
    if name in _NAME_SET:
        import ml_dtypes

        return getattr(ml_dtypes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_number(value) -> bool:
    """Whether ``value`` is a numpy scalar of a numeric type: numpy's own, or one of
    :data:`NAMES` (``ml_dtypes``' scalars are ``np.generic`` of kind ``"V"``, not ``np.number``)."""
    return isinstance(value, (np.number, np.bool_)) or (
        isinstance(value, np.generic) and type(value).__name__ in _NAME_SET
        and type(value).__module__.startswith("ml_dtypes"))


_READ: dict = {}
"""Types and names read before (``np.float32``, ``"bfloat16"``) and their dtypes: reading one
again is a dictionary lookup (every array constructor reads its dtype)."""
_DTYPE_CLASSES: set = set()
"""The classes of numpy dtypes given before (``numpy.dtypes.Float32DType``...): a dtype of one
is read as itself without ``isinstance(value, np.dtype)``, which costs twice as much."""


def dtype(value) -> np.dtype:
    """``value`` (a dtype, type or name such as ``"bfloat16"``) as a numpy dtype; raises
    ``TypeError`` for None and for anything numpy cannot read."""
    if type(value) in _DTYPE_CLASSES:
        return value
    try:
        return _READ[value]
    except (KeyError, TypeError):  # not read yet, or unhashable (a structured dtype's list)
        pass
    if value is None:  # numpy would read it as float64
        raise TypeError("dtype None: name the element type")
    if isinstance(value, np.dtype):
        if value.kind in "SUV":  # strings, records, subarrays: sized, checked every time
            return _sized(value, _not_subarray(value, value))
        if len(_DTYPE_CLASSES) < 256:
            _DTYPE_CLASSES.add(type(value))
        return value
    if isinstance(value, str) and value in _NAME_SET:
        read = np.dtype(__getattr__(value))
    else:
        try:
            read = np.dtype(value)
        except (TypeError, ValueError) as error:
            read = _ml_dtypes_named(value)  # numpy reads its names once it is imported
            if read is None:
                raise TypeError(f"dtype {value!r} is not a numpy dtype ({error})") from None
        _not_subarray(value, read)
    _sized(value, read)
    if (isinstance(value, str) or isinstance(value, type)) and len(_READ) < 256:
        _READ[value] = read
    return read


def _ml_dtypes_named(value) -> np.dtype | None:
    """The dtype of ``ml_dtypes``' type named ``value`` (``"int4"``, ``"float4_e2m1fn"``...),
    else None: numpy reads those names only once something has imported ``ml_dtypes``."""
    if not isinstance(value, str) or not value.isidentifier():
        return None
    try:
        import ml_dtypes
    except ImportError:
        return None
    found = getattr(ml_dtypes, value, None)
    if not (isinstance(found, type) and issubclass(found, np.generic)):
        return None
    return np.dtype(found)


def _sized(value, read: np.dtype) -> np.dtype:
    if read.itemsize == 0:  # numpy's unsized str and bytes (``str``, ``"S"``), ``"V0"``
        raise TypeError(f"dtype {value!r} is {read}, of 0 bytes: it holds nothing; give its "
                        f"size (such as {read.kind}8)")
    return read


def _not_subarray(value, read: np.dtype) -> np.dtype:
    if read.subdtype is not None:  # numpy turns its shape into the array's last axes
        raise TypeError(f"dtype {value!r} is a subarray dtype: add its shape {read.shape} to the "
                        f"array's shape and use dtype {read.base}")
    return read


def _of_ml_dtypes(value: np.dtype) -> bool:
    return value.type.__module__ == "ml_dtypes"


def is_floating(value: np.dtype) -> bool:
    """Whether ``value`` is a floating-point dtype, numpy's or any of ``ml_dtypes``' (those of
    :data:`NAMES`, and ``float4_e2m1fn``, ``float6_*``... that arrays may hold as well)."""
    return value.kind == "f" or value.name in _NAME_SET or (
        _of_ml_dtypes(value) and value.name.startswith("float"))


def is_integer(value: np.dtype) -> bool:
    """Whether ``value`` is a bool or integer dtype, numpy's or ``ml_dtypes``' (``int4``...)."""
    return value.kind in "biu" or (_of_ml_dtypes(value)
                                   and value.name.startswith(("int", "uint")))


def is_complex(value: np.dtype) -> bool:
    """Whether ``value`` is a complex dtype, numpy's or ``ml_dtypes``' (``complex32``, and
    ``bcomplex32``, of numpy's kind ``"V"``)."""
    return value.kind == "c" or (_of_ml_dtypes(value) and "complex" in value.name)


def saturation_bound(value: np.dtype) -> float | None:
    """For a floating dtype that holds neither infinity nor NaN (``ml_dtypes``'
    ``float4_e2m1fn``, ``float6_*``: a conversion saturates, 1e6 makes 6), the magnitude from
    which a value rounds past its largest one; None for the others, whose overflow shows as
    infinity or NaN."""
    if not _of_ml_dtypes(value) or not is_floating(value):  # (complex32: 2**32 values)
        return None
    try:
        return _SATURATION[value]
    except KeyError:
        pass
    # ml_dtypes' types are of 1 or 2 bytes: every value, read once (numpy 1.26's finfo
    # refuses float8_e5m2, which ml_dtypes 0.5 gives the kind "f")
    every = np.arange(1 << 8 * value.itemsize, dtype=f"u{value.itemsize}").view(value)
    with np.errstate(invalid="ignore", over="ignore"):
        every = every.astype(np.float64)
        saturates = bool(np.isfinite(np.array(1e300).astype(value)))
    bound = None
    if saturates:
        top = np.unique(np.abs(every[np.isfinite(every)]))[-2:]
        bound = float(top[1] + (top[1] - top[0]) / 2)  # half a step past the largest
    _SATURATION[value] = bound
    return bound


_SATURATION: dict = {}


def integer_bounds(value: np.dtype) -> tuple[int, int]:
    """The smallest and largest value of an :func:`is_integer` dtype."""
    if value.kind == "b":
        return 0, 1
    if not _of_ml_dtypes(value):
        info = np.iinfo(value)
    else:
        import ml_dtypes

        info = ml_dtypes.iinfo(value)
    return int(info.min), int(info.max)

