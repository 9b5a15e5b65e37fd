"""Element types: every numpy numeric dtype, plus bfloat16 and the float8 types Triton has.

The low-precision types come from ``ml_dtypes`` (what JAX and TensorFlow use for them): each
is a real numpy dtype, so numpy arrays of them copy to and from USM arrays as they are, and
Triton reads their names (``bfloat16``, ``float8_e5m2``, ...) as its own element types
(``tl.bfloat16``, ``tl.float8e5``, ...).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = ml_dtypes.bfloat16
float8_e4m3fn = ml_dtypes.float8_e4m3fn  # Triton's fp8e4nv (tl.float8e4nv)
float8_e5m2 = ml_dtypes.float8_e5m2  # Triton's fp8e5 (tl.float8e5)
float8_e4m3fnuz = ml_dtypes.float8_e4m3fnuz  # Triton's fp8e4b8 (tl.float8e4b8)
float8_e5m2fnuz = ml_dtypes.float8_e5m2fnuz  # Triton's fp8e5b16 (tl.float8e5b16)

EXTRA = {np.dtype(t).name: np.dtype(t) for t in (
    bfloat16, float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz)}
"""The dtypes beyond numpy's own, by name."""

_FLOATING = frozenset(EXTRA.values())


def dtype(value) -> np.dtype:
    """``value`` (a dtype, type or name such as ``"bfloat16"``) as a numpy dtype; raises
    ``TypeError`` for None and for anything numpy cannot read."""
    if value is None:  # numpy would read it as float64
        raise TypeError("dtype None: name the element type")
    if isinstance(value, str) and value in EXTRA:
        return EXTRA[value]
    try:
        return np.dtype(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"dtype {value!r} is not a numpy dtype ({error})") from None


def is_floating(value: np.dtype) -> bool:
    """Whether ``value`` is a floating-point dtype, numpy's or ``ml_dtypes``'."""
    return value.kind == "f" or value in _FLOATING


def is_numeric(value: np.dtype) -> bool:
    """Whether USM arrays may hold ``value``: numbers (bool, integers, floats, complex, the
    low-precision floats), not Python objects, strings or records."""
    return value.kind in "biufc" or value in _FLOATING
