"""Every UR enum as a Python ``IntEnum`` (``IntFlag`` for ``*_flag_t``), built from the raw layer.

The members and values come from the compiled module's own enum types, which the generator
took from ``ur_api.h``: nothing here is typed out by hand.  Names are UR's:
``enums.ur_result_t.UR_RESULT_ERROR_INVALID_KERNEL_NAME``.  The ``*_FORCE_UINT32`` sentinels,
which only fix the enums' C size, are left out.
"""

from __future__ import annotations

import enum

from ._ur import ffi


def _build(type_name: str) -> type[enum.IntEnum]:
    # cffi's relements lists every enumerator, aliases included, last first.
    members = [(name, value) for name, value in reversed(ffi.typeof(type_name).relements.items())
               if not name.endswith("_FORCE_UINT32")]
    base = enum.IntFlag if type_name.endswith("_flag_t") else enum.IntEnum
    return base(type_name, members, module=__name__)


ENUM_TYPE_NAMES = sorted(name for name in ffi.list_types()[0] if ffi.typeof(name).kind == "enum")
"""The typedef names of every enum in the header, e.g. ``ur_result_t``."""

globals().update({name: _build(name) for name in ENUM_TYPE_NAMES})
__all__ = ENUM_TYPE_NAMES

