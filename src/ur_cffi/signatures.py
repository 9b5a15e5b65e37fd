"""Where a kernel's argument count and a program's kernel names come from, adapter by adapter.

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
"""

from __future__ import annotations

from . import _release, nvidia_binary
from ._release import BACKEND_PREFIX

ADAPTERS_COUNTING_SET_ARGUMENTS = frozenset({"CUDA", "HIP"})
"""Backends (``ur_backend_t`` names without the prefix) whose adapters cannot report argument
counts or kernel names."""


def backend_name(device) -> str:
    """``"CUDA"``, ``"OPENCL"``, ``"LEVEL_ZERO"``... for a ur_cffi Device."""
    return device.backend.name.removeprefix(BACKEND_PREFIX)


def adapter_reports_arguments(device) -> bool:
    """Whether ``device``'s adapter reports argument counts and kernel names itself."""
    return backend_name(device) not in ADAPTERS_COUNTING_SET_ARGUMENTS


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
    argument block (``_release.new_arguments``'s ``words``) does not have the size the binary
    declares for that parameter (``kernel.argument_sizes``)."""
    sizes = kernel.argument_sizes
    for index in range(count):
        base = index * _release.ARGUMENT_SIZE // 8
        kind, size = words[base + 2] & 0xFFFFFFFF, words[base + 3]
        if kind in (_release.VALUE, _release.POINTER) and size != sizes[index]:
            raise TypeError(f"argument {index} of {kernel.name!r} is {sizes[index]} bytes in "
                            f"the binary, got {size} bytes; pass a numpy scalar of that size or "
                            "declare a signature")
