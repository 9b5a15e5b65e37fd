"""UR's two-call info queries (size, then value), typed from the header's own comments.

``ur_api.h`` documents each info enumerator's value type in its comment (``[char[]]``,
``[::ur_bool_t]``, ``[size_t[]]``, ``[::ur_queue_flags_t]``); the generator stored those in the
compiled module, and :func:`decode` turns the raw bytes into the matching Python value.
"""

from __future__ import annotations

import functools
import json

from . import enums
from ._ur import ffi, lib
from .errors import check

HEADER_FACTS: dict = json.loads(ffi.string(lib.ur_cffi_header_facts).decode())
"""What the generator wrote at build time: the ``header`` path, its ``version``, the
``info_types`` it read from it, and the ``loader`` it built against (checked at import)."""

VALUE_TYPES: dict[str, str] = HEADER_FACTS["info_types"]
"""Each info enumerator's documented value type, e.g. ``{"UR_DEVICE_INFO_NAME": "char[]"}``."""

_INVALID_SIZE = int(enums.ur_result_t.UR_RESULT_ERROR_INVALID_SIZE)
_BYTES = frozenset({"UR_PROGRAM_INFO_IL"})  # the header's char[] "not null-terminated"


def _element_type(type_text: str) -> tuple[str, bool]:
    """``"::ur_bool_t"`` -> (``"ur_bool_t"``, False); ``"size_t[]"`` -> (``"size_t"``, True)."""
    text = type_text.replace("::", "").strip()
    if text.endswith("]"):
        return text[: text.index("[")].strip(), True
    return text, False


def _convert(ctype_name: str, cdata):
    """One C value to Python: enums and flags to their IntEnum/IntFlag, bools to bool."""
    if ctype_name == "ur_bool_t":
        return bool(cdata)
    if ctype_name.endswith("_flags_t"):
        flag_enum = getattr(enums, ctype_name[: -len("_flags_t")] + "_flag_t", None)
        return flag_enum(cdata) if flag_enum else int(cdata)
    enum_type = getattr(enums, ctype_name, None)
    if enum_type is not None:
        try:
            return enum_type(cdata)
        except ValueError:
            return int(cdata)
    ctype = ffi.typeof(ctype_name)
    if ctype.kind in ("primitive",):
        return cdata
    if ctype.kind == "pointer":
        return cdata if ctype_name.endswith("_handle_t") else int(ffi.cast("uintptr_t", cdata))
    # A struct: a copy that owns its memory (an element of the caller's array would point
    # into it once it is freed); its fields read as the struct's.
    return ffi.new(f"{ctype_name} *", cdata)


def decode(prop_name: str, raw: bytes):
    """Turn the raw bytes of info property ``prop_name`` into a Python value."""
    type_text = VALUE_TYPES.get(prop_name)
    if type_text is None or type_text == "unsigned char *[]" or prop_name in _BYTES:
        return raw
    element, is_array = _element_type(type_text)
    if element == "char" and is_array:
        return raw.split(b"\0", 1)[0].decode(errors="replace")
    if element in ("uint8_t", "unsigned char") and is_array:
        return raw
    try:
        size = ffi.sizeof(element)
    except (ffi.error, TypeError):
        return raw
    count = len(raw) // size
    values = ffi.new(f"{element}[]", count)
    ffi.memmove(values, raw, count * size)
    converted = [_convert(element, values[i]) for i in range(count)]
    if is_array:
        return converted
    return converted[0] if converted else None


@functools.cache
def _scalar_ctype(prop_name: str) -> str | None:
    """The C type of a property that is one fixed-size value (no size query needed), or None."""
    type_text = VALUE_TYPES.get(prop_name)
    if type_text is None:
        return None
    element, is_array = _element_type(type_text)
    try:
        kind = ffi.typeof(element).kind
    except (ffi.error, TypeError):
        return None
    return None if is_array or kind == "struct" else element


@functools.cache
def _parameters(function: str, count: int) -> tuple[str, tuple[int, ...]]:
    """The name of the info enum info function ``function`` takes after ``count`` arguments,
    and the positions of the handles among those."""
    parameters = ffi.typeof(getattr(lib, function)).args
    if len(parameters) < 4 or parameters[-4].kind != "enum" or \
            [p.cname for p in parameters[-3:]] != ["size_t", "void *", "size_t *"]:
        raise TypeError(f"{function} is no info query (a function that takes a property, "
                        "its size, a value and the size returned, as urDeviceGetInfo)")
    if count != len(parameters) - 4:  # (..., the property, its size, value, size returned)
        raise TypeError(f"{function} takes {len(parameters) - 4} argument(s) before the "
                        f"property, not {count}")
    return parameters[count].cname.removeprefix("enum "), tuple(
        index for index, parameter in enumerate(parameters[:count])
        if parameter.kind == "pointer" and parameter.cname.endswith("_handle_t_ *"))


def query(function: str, *args_and_prop):
    """Read an info property with ``function(*args, prop, size, value, &size_ret)``, decoded.

    ``args_and_prop`` ends with the info enumerator, e.g.
    ``query("urDeviceGetInfo", device_handle, enums.ur_device_info_t.UR_DEVICE_INFO_NAME)``.
    A single fixed-size value takes one call; anything else UR's two calls (size, then value).
    Raises the :mod:`ur_cffi.errors` class of whatever UR returns.
    """
    *args, prop = args_and_prop
    enum_name, handles = _parameters(function, len(args))
    if type(prop).__name__ != enum_name:
        raise TypeError(f"{function} takes a {enum_name}, not {type(prop).__name__} {prop!r}")
    prop_name = prop._name_
    if prop_name == "UR_PROGRAM_INFO_BINARIES":
        raise ValueError("UR_PROGRAM_INFO_BINARIES is read into buffers of the caller's: "
                         "read Program.binaries")
    for index in handles:
        if args[index] == ffi.NULL:
            parameter = ffi.typeof(getattr(lib, function)).args[index].cname
            raise ValueError(f"{function}: its {parameter} is NULL")
    element = _scalar_ctype(prop_name)
    if element is None:
        return decode(prop_name, query_bytes(function, *args_and_prop))
    value = ffi.new(element + " *")
    # int(): cffi converts an IntEnum argument about ten times slower than a plain int.
    result = getattr(lib, function)(*args, int(prop), ffi.sizeof(element), value, ffi.NULL)
    if result:
        if result == _INVALID_SIZE:
            # UR's OpenCL adapter answers this to a property it lacks, whatever the size: the
            # two calls tell which (UNSUPPORTED_ENUMERATION, or the size it does have).
            data = query_bytes(function, *args_and_prop)
            if len(data) == ffi.sizeof(element):
                return decode(prop_name, data)
        check(result, function, prop_name)
    return _convert(element, value[0])


def query_bytes(function: str, *args_and_prop) -> bytes:
    """The raw bytes of an info property, by UR's two-call pattern."""
    call = getattr(lib, function)
    size = ffi.new("size_t *")
    check(call(*args_and_prop, 0, ffi.NULL, size), function, args_and_prop[-1].name)
    if size[0] == 0:
        return b""
    buffer = ffi.new("char[]", size[0])
    check(call(*args_and_prop, size[0], buffer, ffi.NULL), function, args_and_prop[-1].name)
    return ffi.buffer(buffer, size[0])[:]
