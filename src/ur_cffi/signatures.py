"""Where a kernel's argument count, its parameters and a program's kernel names come from.

Decided here, once, for every adapter; :class:`~ur_cffi.Program` and
:class:`~ur_cffi.Kernel` ask this module and nothing else.

==========================  ==========================================  ======================
adapter                     argument count of a kernel                  kernel names
==========================  ==========================================  ======================
Level Zero, OpenCL,         the adapter (``UR_KERNEL_INFO_NUM_ARGS``);  the adapter
Native CPU                  a declared signature is checked against it  (``..._KERNEL_NAMES``)
CUDA                        the binary: PTX ``.entry`` parameters or    the binary's entry
                            the cubin's ``EIATTR_KPARAM_INFO`` table    functions
                            (``nvidia_binary.py``); else the declared
                            signature
HIP                         the declared signature (ROCm code objects   none
                            are not read)
==========================  ==========================================  ======================

Why: the CUDA and HIP drivers cannot list a function's parameters, so these adapters answer
``UR_KERNEL_INFO_NUM_ARGS`` with the number of arguments set on the handle so far (0 after
``urKernelCreate``), and ``UR_PROGRAM_INFO_KERNEL_NAMES`` with ``UNSUPPORTED_ENUMERATION``
(``source/adapters/{cuda,hip}/{kernel,program}.cpp`` in Unified Runtime; measured for CUDA on
an NVIDIA H200, read from the source for HIP).  Where the binary states parameter sizes, a
launch also checks each by-value argument's size against them (the CUDA driver would read the
kernel's size from whatever bytes it is given).

A program made from SPIR-V (``Program.from_il``, on any adapter) also knows what each kernel
parameter is (:func:`ur_cffi.spirv.kernel_parameters`): a global pointer, a local one, a
bool, an integer or a float of a width.  A declared signature is checked against that once;
without one, each launch that packs its arguments checks them against it
(:func:`check_arguments`).
Why: Intel's CPU OpenCL runtime crashes the process when a ``Local`` is given for a global
pointer, and takes a float's bits for an integer parameter without a word (and any byte for a
bool: a bool parameter's value is checked, declared or not).
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import _compat, nvidia_binary, spirv


def backend_name(device) -> str:
    """``"CUDA"``, ``"OPENCL"``, ``"LEVEL_ZERO"``... for a ur_cffi Device."""
    return _compat.backend_name(device.backend)


def adapter_reports_arguments(device) -> bool:
    """Whether ``device``'s adapter reports argument counts and kernel names itself."""
    return _compat.reports_kernel_arguments(device.backend)


def binary_entries(device, binary: bytes) -> dict | None:
    """What a program made from ``binary`` for ``device`` remembers of its kernels: ``{name:
    parameter sizes}`` where the adapter cannot report them and the binary says, else None.

    Raises ``ValueError`` for a PTX or cubin whose kernel table cannot be read."""
    if adapter_reports_arguments(device):
        return None
    return nvidia_binary.entries(binary)


def argument_count(reported: int, reports: bool, entries: dict | None, name: str,
                   signature) -> tuple[int | None, tuple[int, ...] | None, str]:
    """``(count, parameter sizes or None, where the count came from)`` for kernel ``name``.

    ``reported`` is the adapter's ``UR_KERNEL_INFO_NUM_ARGS``; ``reports`` whether the adapter
    can be trusted with it (:func:`adapter_reports_arguments`); ``entries`` is the program's
    :func:`binary_entries`.  The source is ``"adapter"``, ``"binary"``, ``"signature"``, or
    ``"unknown"`` (count None: a launch then raises, asking for a signature).
    """
    if reports:
        return reported, None, "adapter"
    if entries is not None and name in entries:
        sizes = entries[name]
        return len(sizes), sizes, "binary"
    if signature is not None:
        return len(signature), None, "signature"
    return None, None, "unknown"


def count_error(kernel, given: int) -> TypeError:
    """The error for a launch of ``kernel`` with ``given`` arguments that it does not take."""
    if kernel.num_args is None:
        return TypeError(
            f"kernel {kernel.name!r}: the {backend_name(kernel.program.context.devices[0])} "
            "adapter cannot report how many arguments it takes and its binary does not say "
            "(PTX and cubin do); declare them: program.kernel(name, signature=(...))")
    hidden = len(kernel.hidden_args)
    if hidden:
        return TypeError(f"kernel {kernel.name!r} takes {kernel.num_args - hidden} arguments "
                         f"(and {hidden} hidden_args), {given} given")
    return TypeError(f"kernel {kernel.name!r} takes {kernel.num_args} arguments, {given} given")


def check_sizes(kernel, words, count: int) -> None:
    """Raise ``TypeError`` if a by-value or pointer argument among the ``count`` entries of an
    argument block (``_compat.new_arguments``'s ``words``) does not have the size the binary
    declares for that parameter (``kernel.argument_sizes``)."""
    sizes = kernel.argument_sizes
    for index in range(count):
        kind, size, _ = _compat.read_argument(words, index)
        if kind in (_compat.VALUE, _compat.POINTER) and size != sizes[index]:
            raise TypeError(f"argument {index} of {kernel.name!r} is {sizes[index]} bytes in "
                            f"the binary, got {size} bytes; pass a numpy scalar of that size or "
                            "declare a signature")


def il_parameters(il: bytes) -> dict | None:
    """What a program made from ``il`` knows of its kernels' parameters: ``{name: (parameter,
    ...)}`` (:func:`ur_cffi.spirv.kernel_parameters`) for SPIR-V, else None.  Raises
    ``ValueError`` for a malformed SPIR-V module."""
    if il[:4] not in (spirv.MAGIC.to_bytes(4, "little"), spirv.MAGIC.to_bytes(4, "big")):
        return None
    return spirv.kernel_parameters(il)


_DESCRIPTIONS = {"ptr": "a pointer to global memory", "local": "a pointer to local memory"}


def _description(parameter: str) -> str:
    if parameter in _DESCRIPTIONS:
        return _DESCRIPTIONS[parameter]
    if parameter == "bool":
        return "a bool"
    article = "an" if _bits(parameter) == 8 else "a"
    return f"{article} {_bits(parameter)}-bit {'integer' if parameter[0] == 'i' else 'float'}"


def _takes(parameter: str) -> frozenset:
    """The kinds of number (:func:`_category`) a by-value argument for SPIR-V ``parameter``
    may be, besides its width: 8- and 16-bit integers also take the bits of ml_dtypes'
    bfloat16 and float8 (OpenCL C has no such types: kernels take ``ushort``), and a 16-bit
    float the bits of a bfloat16 in an unsigned integer (Triton's SPIR-V types a bf16
    parameter as a 16-bit float).  A bool takes one-byte integers (its value is checked at
    each launch: :func:`_is_truth_value`)."""
    if parameter == "bool":
        return _INTEGERS
    if parameter.startswith("int"):
        return _INTEGERS | ({"ml"} if _bits(parameter) <= 16 else set())
    return frozenset({"float"}) | ({"ml", "unsigned"} if _bits(parameter) == 16 else set())


_INTEGERS = frozenset({"signed", "unsigned"})
_BOOL_VALUE = object()  # in argument_checks: the value is checked (_is_truth_value)


def _is_truth_value(value) -> bool:
    """Whether a by-value argument for a bool parameter is a bool or a one-byte integer
    (declared: a Python int) that is 0 or 1: the kernel takes the byte as it is."""
    if isinstance(value, ctypes._SimpleCData):
        if value._type_ not in "?bB":
            return False
        value = value.value
    elif isinstance(value, np.generic):
        if value.dtype.kind not in "biu" or value.dtype.itemsize != 1:
            return False
    elif type(value) not in (bool, int):
        return False
    return bool(value == 0 or value == 1)


def _bits(parameter: str) -> int:
    if parameter == "bool":
        return 8
    return int(parameter.removeprefix("int").removeprefix("float"))


def _category(value) -> str:
    """``"signed"``, ``"unsigned"``, ``"float"`` (numpy's and C's) or ``"ml"`` (ml_dtypes'
    low-precision floats) for a by-value argument (a numpy scalar or a numeric ctypes value)
    or a numpy dtype."""
    if isinstance(value, ctypes._SimpleCData):
        code = value._type_
        return "float" if code in "fd" else "unsigned" if code in "BHILQ?" else "signed"
    dtype = value if isinstance(value, np.dtype) else value.dtype
    kind = dtype.kind
    if dtype.type.__module__.startswith("ml_dtypes"):  # (some give float8 the kind "f")
        return "signed" if dtype.name.startswith("int") else "unsigned" \
            if dtype.name.startswith("uint") else "ml"
    if kind == "f":
        return "float"
    if kind in "ub":
        return "unsigned"
    if kind == "i":
        return "signed"
    return "ml"


def check_declared(name: str, declared: tuple, parameters: tuple) -> None:
    """Raise ``ValueError`` if signature entry ``declared[i]`` of kernel ``name`` cannot be
    its SPIR-V parameter ``parameters[i]``."""
    for index, (entry, parameter) in enumerate(zip(declared, parameters)):
        if entry is None or parameter is None:
            continue
        if isinstance(entry, str):
            fits = parameter == ("local" if entry == "local" else "ptr")
        else:
            fits = parameter != "ptr" and parameter != "local" and \
                entry.itemsize * 8 == _bits(parameter) and _category(entry) in _takes(parameter)
        if not fits:
            raise ValueError(f"signature of {name!r}: entry {index} is {str(entry)!r}; the "
                             f"kernel's SPIR-V declares {_description(parameter)} there")


def argument_checks(parameters: tuple, declared: int) -> tuple:
    """What :func:`check_arguments` checks, worked out once per kernel from its SPIR-V
    ``parameters``: ``(index, argument kinds taken, size in bytes or 0, the kinds of number
    taken, _BOOL_VALUE or None)`` of each parameter that is known, after the ``declared``
    first (those a signature declares), and of each bool parameter."""
    checks = []
    for index, parameter in enumerate(parameters):
        if parameter == "bool":
            checks.append((index, (_compat.VALUE,), 1, _BOOL_VALUE))
            continue
        if index < declared:
            continue
        if parameter == "ptr":
            checks.append((index, (_compat.POINTER, _compat.MEM_OBJ), 0, None))
        elif parameter == "local":
            checks.append((index, (_compat.LOCAL,), 0, None))
        elif parameter is not None:
            checks.append((index, (_compat.VALUE,), _bits(parameter) // 8, _takes(parameter)))
    return tuple(checks)


def check_arguments(kernel, args: tuple, words) -> None:
    """Raise ``TypeError`` if an argument of a launch of ``kernel`` (a hidden one or a
    bool's only, where it has a signature) is not what its SPIR-V parameter is
    (``kernel.parameters``, checked as its ``_argument_checks``): the runtime would crash on a
    ``Local`` for a global pointer, or read a float's bits as an integer.  ``words``: the
    launch's argument block (``_compat.new_arguments``), packed from ``args``, which end
    with the kernel's ``hidden_args`` (an integer of a pointer's size for a pointer is packed
    as one: the kernel's ``_declared``)."""
    given = len(args) - len(kernel.hidden_args)
    for index, kinds, size, takes in kernel._argument_checks:
        kind, given_size, _ = _compat.read_argument(words, index)
        arg = args[index]
        if kind in kinds and (not size or given_size == size) and (
                takes is None or (_is_truth_value(arg) if takes is _BOOL_VALUE
                                  else _category(arg) in takes)):
            continue
        raise _argument_error(kernel, index, arg, kernel.parameters[index], given)


def _argument_error(kernel, index: int, arg, parameter: str, given: int) -> TypeError:
    if parameter == "ptr":
        hint = "pass a USMArray (an address needs a signature that declares 'ptr')"
    elif parameter == "local":
        hint = "pass a ur_cffi.Local of its size in bytes"
    elif parameter == "bool":
        hint = "pass np.bool_(x) (or a one-byte integer, 0 or 1)"
    elif parameter.startswith("int"):
        hint = f"pass np.int{_bits(parameter)}(x) or np.uint{_bits(parameter)}(x)" + (
            " (or a bfloat16's or float8's bits)" if _bits(parameter) <= 16 else "")
    else:
        hint = f"pass np.float{_bits(parameter)}(x)" + (
            " (or a bfloat16, or its bits as np.uint16)" if _bits(parameter) == 16 else "")
    text = f"{arg.dtype} {arg!r}" if isinstance(arg, np.generic) else repr(arg) \
        if type(arg).__name__ in repr(arg) else f"{type(arg).__name__} {arg!r}"
    where = f"argument {index}" if index < given else \
        f"hidden_args[{index - given}] (argument {index})"
    return TypeError(f"{where} of {kernel.name!r} is {_description(parameter)} in the "
                     f"kernel's SPIR-V, got {text}: {hint}")
