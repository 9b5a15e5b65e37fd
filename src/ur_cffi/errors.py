"""UR result codes as Python exceptions, one class per ``ur_result_t`` error, derived at import.

``URError`` carries the result (a ``ur_result_t`` member) and the UR function that returned it.
Each error code has its own subclass named from the enum (``UR_RESULT_ERROR_INVALID_KERNEL_NAME``
is ``InvalidKernelNameError``); where a built-in exception fits, the class also derives from it,
so ``except MemoryError`` catches ``UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY``.
"""

from __future__ import annotations

from .enums import ur_result_t


class URError(Exception):
    """A UR call returned something other than ``UR_RESULT_SUCCESS``."""

    def __init__(self, result: int, function: str, detail: str = ""):
        try:
            self.result = ur_result_t(result)
            result_name = self.result.name
        except ValueError:
            self.result, result_name = result, f"unknown ur_result_t {result}"
        self.function = function
        self.detail = detail
        message = f"{function} returned {result_name}"
        super().__init__(f"{message}: {detail}" if detail else message)

    def __reduce__(self):
        return type(self), (int(self.result), self.function, self.detail)


# Built-ins mixed in by the result name's words, checked in this order.
_BUILTIN_BY_WORDS = (
    ("OUT_OF_HOST_MEMORY", (MemoryError,)),
    ("OUT_OF_DEVICE_MEMORY", (MemoryError,)),
    ("OUT_OF_RESOURCES", (MemoryError,)),
    ("ALLOCATION_FAILURE", (MemoryError,)),
    # What UR returns for an allocation beyond the device's largest: bad input, and no memory.
    ("INVALID_USM_SIZE", (ValueError, MemoryError)),
    ("UNSUPPORTED", (NotImplementedError,)),
    ("NOT_AVAILABLE", (NotImplementedError,)),
    ("INVALID", (ValueError,)),
    ("MISALIGNED", (ValueError,)),
)


def _class_name(result_name: str) -> str:
    words = result_name.removeprefix("UR_RESULT_").removeprefix("ERROR_").split("_")
    return "".join(word.capitalize() for word in words) + "Error"


def _make_class(member: ur_result_t) -> type[URError]:
    builtins = next((b for words, b in _BUILTIN_BY_WORDS if words in member.name), ())
    also = " and ".join(f"``{b.__name__}``" for b in builtins)
    doc = f"``{member.name}``" + (f"; also a {also}." if builtins else ".")
    bases = (URError, *builtins)
    return type(_class_name(member.name), bases, {"__doc__": doc, "__module__": __name__})


by_result: dict[ur_result_t, type[URError]] = {
    member: _make_class(member) for member in ur_result_t if member != ur_result_t.UR_RESULT_SUCCESS
}
"""The exception class for each error result."""

globals().update({cls.__name__: cls for cls in by_result.values()})
__all__ = ["URError", "UNSUPPORTED", "check", "by_result",
           *(cls.__name__ for cls in by_result.values())]


UNSUPPORTED = frozenset({
    ur_result_t.UR_RESULT_ERROR_UNSUPPORTED_FEATURE,
    ur_result_t.UR_RESULT_ERROR_UNSUPPORTED_ENUMERATION,
    ur_result_t.UR_RESULT_ERROR_INVALID_ENUMERATION,
})
"""Results by which an adapter says it lacks a feature or an info query."""


def check(result: int, function: str, detail: str = "") -> None:
    """Raise the exception class for ``result`` naming ``function``; return if it is success."""
    if result:
        if result == ur_result_t.UR_RESULT_ERROR_ADAPTER_SPECIFIC:
            from .loader import adapter_specific_messages  # (loader imports this module)

            detail = "; ".join(filter(None, (detail, *adapter_specific_messages())))
        raise by_result.get(result, URError)(result, function, detail)
