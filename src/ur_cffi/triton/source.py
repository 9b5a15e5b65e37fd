"""The ``triton.compiler.ASTSource`` that :func:`ur_cffi.triton.compile` and
:func:`ur_cffi.triton.cuda.compile` build from a user's signature and constants, checked
first: Triton reads the signature's entries in order, not by name, so a dict written in
another order than the parameters compiles the wrong types, and a missing, unknown or
mistyped entry fails deep in its compiler with a bare ``KeyError`` or ``IndexError``."""

from __future__ import annotations

from . import abi


def checked_source(fn, signature, constants):
    """``ASTSource(fn, signature, constants)`` with ``signature`` in the order of ``fn``'s
    parameters; ``TypeError``/``ValueError`` naming the entry where it cannot compile."""
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise TypeError(f"compile takes a @triton.jit function, not {type(fn).__name__} {fn!r}")
    if not isinstance(signature, dict):
        raise TypeError(f"signature must be a dict of parameter name to Triton type "
                        f"({{'x': '*fp32', 'BLOCK': 'constexpr'}}), not "
                        f"{type(signature).__name__} {signature!r}")
    constants = {} if constants is None else constants
    if not isinstance(constants, dict):
        raise TypeError(f"constants must be a dict of parameter name to value, not "
                        f"{type(constants).__name__} {constants!r}")
    parameters = fn.arg_names
    for name in signature:
        if name not in parameters:
            raise ValueError(f"signature names {name!r}, which is no parameter of "
                             f"{fn.__name__}{tuple(parameters)}")
    for name in constants:
        if isinstance(name, str) and name not in parameters:
            raise ValueError(f"constants name {name!r}, which is no parameter of "
                             f"{fn.__name__}{tuple(parameters)}")
    missing = [name for name in parameters if name not in signature]
    if missing:
        raise ValueError(f"signature lacks {', '.join(map(repr, missing))} of "
                         f"{fn.__name__}{tuple(parameters)} (a constexpr is given as "
                         f"'constexpr', its value in constants)")
    for name in parameters:
        try:
            abi.signature_type(signature[name])
        except ValueError as error:
            raise ValueError(f"signature[{name!r}]: {error} (one like '*fp32', 'i32', "
                             f"'fp16' or 'constexpr')") from None
        if signature[name] == abi.CONSTEXPR and name not in constants:
            raise ValueError(f"signature[{name!r}] is 'constexpr' but constants gives it no "
                             f"value")
    return ASTSource(fn, {name: signature[name] for name in parameters}, constants)
