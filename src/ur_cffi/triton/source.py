"""The ``triton.compiler.ASTSource`` that :func:`ur_cffi.triton.compile` and
:func:`ur_cffi.triton.cuda.compile` build from a user's signature and constants, checked
first: Triton reads the signature's entries in order, not by name, so a dict written in
another order than the parameters compiles the wrong types, and a missing, unknown or
mistyped entry fails deep in its compiler with a bare ``KeyError`` or ``IndexError``."""

from __future__ import annotations

import inspect

from . import abi


def checked_source(fn, signature, constants):
    """``ASTSource(fn, signature, constants)`` with ``signature`` in the order of ``fn``'s
    parameters; ``TypeError``/``ValueError`` naming the entry where it cannot compile.

    A constexpr parameter with a default may be left out of both (its default is taken, as
    ``kernel[grid]`` takes it); ``constants`` may name a parameter by its position path
    (``{(2,): 128}``, Triton's own form).  A signature may also be a comma-separated string
    of types in the parameters' order (``"*fp32, *fp32, i32, constexpr"``), which Triton 3.3
    takes and 3.6 does not."""
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise TypeError(f"compile takes a @triton.jit function, not {type(fn).__name__} {fn!r}")
    constants = {} if constants is None else constants
    if not isinstance(constants, dict):
        raise TypeError(f"constants must be a dict of parameter name to value, not "
                        f"{type(constants).__name__} {constants!r}")
    parameters = fn.arg_names
    named = f"{fn.__name__}{tuple(parameters)}"
    if isinstance(signature, str):
        types = [entry.strip() for entry in signature.split(",")]
        if len(types) != len(parameters):
            raise ValueError(f"signature {signature!r} gives {len(types)} types for the "
                             f"{len(parameters)} parameters of {named}")
        signature = dict(zip(parameters, types))
    if not isinstance(signature, dict):
        raise TypeError(f"signature must be a dict of parameter name to Triton type "
                        f"({{'x': '*fp32', 'BLOCK': 'constexpr'}}), not "
                        f"{type(signature).__name__} {signature!r}")
    for name in signature:
        if name not in parameters:
            raise ValueError(f"signature names {name!r}, which is no parameter of {named}")
    given = set()  # the parameters constants gives values for, by name or position path
    for key in constants:
        if isinstance(key, str):
            if key not in parameters:
                raise ValueError(f"constants name {key!r}, which is no parameter of {named}")
            given.add(key)
        elif isinstance(key, tuple) and key and \
                all(type(index) is int and index >= 0 for index in key) and \
                key[0] < len(parameters) and (len(key) == 1 or not _is_constexpr(fn, key[0])):
            given.add(parameters[key[0]])
        else:
            raise ValueError(f"constants key {key!r} is neither a parameter of {named} nor "
                             "a position path such as (2,)")
    signature, constants = dict(signature), dict(constants)
    for param in fn.params:  # constexprs left out that have defaults: their defaults
        default = getattr(param, "default", inspect.Parameter.empty)
        if param.name not in signature and param.is_constexpr and \
                default is not inspect.Parameter.empty:
            signature[param.name] = abi.CONSTEXPR
            if param.name not in given:
                constants[param.name] = default
                given.add(param.name)
    missing = [name for name in parameters if name not in signature]
    if missing:
        raise ValueError(f"signature lacks {', '.join(map(repr, missing))} of {named} (a "
                         f"constexpr is given as 'constexpr', its value in constants)")
    for position, name in enumerate(parameters):
        try:
            abi.signature_type(signature[name])
        except ValueError as error:
            raise ValueError(f"signature[{name!r}]: {error} (one like '*fp32', 'i32', "
                             f"'fp16' or 'constexpr')") from None
        if signature[name] == abi.CONSTEXPR and name not in given:
            raise ValueError(f"signature[{name!r}] is 'constexpr' but constants gives it no "
                             f"value")
        if _is_constexpr(fn, position) and name not in given:
            raise ValueError(f"{name!r} is a tl.constexpr of {named}: give it as 'constexpr' "
                             f"in signature and its value in constants, not "
                             f"{signature[name]!r} without a value")
    return ASTSource(fn, {name: signature[name] for name in parameters}, constants)


def _is_constexpr(fn, position: int) -> bool:
    """Whether parameter ``position`` of ``fn`` is annotated ``tl.constexpr``."""
    return fn.params[position].is_constexpr
