"""Every detail of a compiled Triton kernel's argument ABI that changes between Triton versions,
in one place.

The launcher (``launcher.py``) asks :func:`current` for the rules of the installed Triton and
never looks at ``triton.__version__`` itself (the launch hooks that Triton 3.4+ passes to every
launcher are the launcher's call signature, not the kernel's ABI: ``launcher.py`` takes them).
What a rule set says, for one release series:

- how the launcher's ``*args`` line up with the kernel's parameters (``parameters``): which
  entries of ``src.signature`` are dropped (constexprs), how tuples flatten;
- the byte layout of each scalar type (``Rules.scalar_formats``): what the compiled
  SPIR-V's ``OpFunctionParameter`` takes, not what Intel's own launcher happens to pass;
- the hidden arguments after the user's (scratch pointers, then work-group local memory).

Rules are kept per Triton backend and release series:

=================  ==========================================================================
``intel`` 3.3      triton-xpu 3.3.0b1 (PyPI): ``triton/backends/intel/driver.py``
                   (``make_launcher``, ``sycl_kernel_launch``); run on the CPU device
``nvidia`` 3.3     the NVIDIA backend bundled in triton-xpu 3.3.0b1: one global-scratch pointer
                   after the user's arguments; compile-only (its ``CompiledKernel`` passes
                   ``build_flags``, which NVIDIA metadata lacks, so Triton 3.3 cannot load it)
``nvidia`` 3.6     Triton 3.6.0: ``triton/backends/nvidia/driver.py`` (``make_launcher``,
                   ``CudaLauncher``): global- and profile-scratch pointers, ``load_binary``
                   returns the maximum threads per block as a fifth value
=================  ==========================================================================

On NVIDIA, scalars take the width of the compiled kernel's parameter (its PTX ``.param``), as
on Intel: i1 is one byte, fp16 and bf16 two (Triton 3.3's own launcher passes i1 as int32 and
fp16/bf16 as a 4-byte float; 3.6 passes the kernel's widths).  Dynamic shared memory is not an
argument there but the launch's work-group memory (``cuda.py``).  ``tests/test_triton_abi.py``
and ``tests/test_triton_cuda.py`` check the rules against the kernels the installed compilers
emit.  Another series raises ``NotImplementedError`` until its rules are added here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

TESTED_VERSIONS = ("3.3.0b1", "3.6.0")
"""The ``triton.__version__`` values the test-suite ran against (3.6.0: NVIDIA only)."""

TARGET_BACKENDS = {"xpu": "intel", "cuda": "nvidia"}
"""``GPUTarget.backend`` to the Triton backend whose launch rules apply."""

CONSTEXPR = "constexpr"

# struct formats ('<' byte order, no padding) of the scalar parameter types, 3.3 series.
# Measured against the SPIR-V the 3.3.0b1 compiler emits (tests/test_triton_abi.py reads the
# kernel's OpFunctionParameter types):
# - i1 is an OpTypeBool parameter, which the CPU runtime takes as one byte (driver.py's
#   `ty_to_cpp("i1") == "int8_t"` agrees; the 3.3.0b1 git tag and 3.8 use int32);
# - fp16 is an IEEE half and bf16 its raw 16-bit pattern.  driver.py declares both "float",
#   which SYCL passes as 4 bytes; UR's OpenCL adapter rejects that size with
#   UR_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE, so the kernel's own width is used.
_SCALARS_3_3 = {
    "i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q",
    "u1": "B", "u8": "B", "u16": "H", "u32": "I", "u64": "Q",
    "fp16": "e", "bf16": "H", "fp32": "f", "f32": "f", "fp64": "d",
}


@dataclass(frozen=True)
class Rules:
    """The launch ABI of one Triton release series."""

    series: str
    """``"major.minor"`` of the Triton versions these rules describe."""
    scalar_formats: dict
    """Triton scalar type (``"i32"``, ``"fp16"``...) to ``struct`` format character."""
    scratch_pointers: int
    """Null pointers passed after the user's arguments (global/profile scratch, 3.5+)."""
    shared_memory_argument: bool
    """Whether a local-memory argument of ``metadata.shared`` bytes follows when it is > 0
    (else the launch's work-group memory carries it)."""
    backend: str = "intel"
    """The Triton backend (``triton.backends.backends`` key) these rules are for."""
    scratch_metadata: tuple = ()
    """For each scratch pointer, the ``metadata`` prefix of its size and alignment
    (``"global_scratch"`` reads ``global_scratch_size`` and ``global_scratch_align``)."""
    load_binary_values: int = 4
    """How many values Triton's ``CompiledKernel`` unpacks from ``utils.load_binary``."""

    def threads_per_warp(self, metadata) -> int:
        """Work-items per warp of a compiled kernel (Intel: an option; NVIDIA: 32)."""
        return getattr(metadata, "threads_per_warp", None) or metadata.target.warp_size

    def parameters(self, signature: dict) -> list[tuple[int, str, str]]:
        """``[(position, name, type)]`` of the kernel parameters Triton passes at launch.

        ``signature`` is ``src.signature`` (name to type, tuples nested).  ``position`` indexes
        the launcher's flattened ``*args``; constexprs are dropped (they are in ``*args`` but
        not in the kernel), as ``make_launcher`` does.  Tuple members are named ``t[0]``...
        """
        entries = list(_named(signature.items()))
        return [(position, name, ty) for position, (name, ty) in enumerate(entries)
                if ty != CONSTEXPR]

    def argument_count(self, signature: dict) -> int:
        """How many entries the launcher's flattened ``*args`` has (constexprs included)."""
        return sum(1 for _ in _flatten(signature.values()))

    def scalar_format(self, ty: str) -> str:
        """The ``struct`` format of scalar type ``ty``; ``NotImplementedError`` if unknown."""
        try:
            return self.scalar_formats[ty]
        except KeyError:
            raise NotImplementedError(f"ur_cffi.triton cannot pass a {ty!r} scalar argument "
                                      f"(Triton {self.series} rules)") from None

    @staticmethod
    def is_pointer(ty: str) -> bool:
        """Whether ``ty`` is a pointer type (``"*fp32"``, ``"*ki8"`` for const pointers)."""
        return ty.startswith("*")

    @staticmethod
    def pointer_element(ty: str) -> str:
        """The element type of pointer type ``ty``: ``"*kfp32"`` gives ``"fp32"``."""
        return ty[2:] if ty.startswith("*k") else ty[1:]


def _named(items):
    for name, ty in items:
        if isinstance(ty, tuple):
            yield from _named((f"{name}[{i}]", member) for i, member in enumerate(ty))
        else:
            yield name, ty


def divisible_parameters(src) -> frozenset | None:
    """Names (as :meth:`Rules.parameters` gives them) of the parameters Triton compiled the
    kernel for as divisible by 16 (integers) or 16-byte aligned (pointers): its
    ``tt.divisibility`` attributes, keyed by their path in ``src.signature`` (3.3 to 3.6).
    None where ``src`` says nothing of them."""
    attrs = getattr(src, "attrs", None)
    if not isinstance(attrs, dict):
        return None
    names = list(src.signature)
    found = set()
    for path, values in attrs.items():
        if any(value and value[0] == "tt.divisibility" for value in values):
            found.add(_path_name(names, path))
    return frozenset(found)


def _path_name(names: list, path: tuple) -> str:
    """The name (as :meth:`Rules.parameters` gives it) of the parameter at ``path`` in a
    signature of ``names``: ``"t[0]"`` for ``(index of t, 0)``."""
    return names[path[0]] + "".join(f"[{index}]" for index in path[1:])


def compiled_constants(src) -> list[tuple[int, str, object]]:
    """``(position in the launcher's flattened *args, name, value)`` of each value Triton
    compiled in: constexpr parameters (numbers, dtypes, strings, tuples...), integers it
    specialized as 1 and arguments given as None (``src.constants``, keyed by their path in
    ``src.signature``; 3.3 to 3.6)."""
    constants = getattr(src, "constants", None)
    if not isinstance(constants, dict):
        return []
    names = list(src.signature)
    positions = {name: position for position, (name, _) in
                 enumerate(_named(src.signature.items()))}
    found = []
    for path, value in constants.items():
        if isinstance(path, tuple) and path:
            name = _path_name(names, path)
            if name in positions:
                found.append((positions[name], name, value))
    return found


def has_tuples(signature: dict) -> bool:
    """Whether any argument is a tuple (the launcher then flattens ``*args`` first)."""
    return any(isinstance(ty, tuple) for ty in signature.values())


def _flatten(values):
    for value in values:
        if isinstance(value, tuple):
            yield from _flatten(value)
        else:
            yield value


def flatten_arguments(args, signature: dict) -> list:
    """The launcher's ``*args`` with tuple arguments flattened where ``signature`` has a tuple
    (a constexpr tuple stays one argument, as there); ``TypeError`` where an argument has
    not the signature's shape (a kernel launched by hand: ``kernel[grid](...)`` of a compiled
    kernel)."""
    if len(args) != len(signature):
        raise TypeError(f"takes {len(signature)} arguments (constexprs included, a tuple as "
                        f"one), {len(args)} given")
    return list(_flatten_as(args, signature.values(), signature))


def _flatten_as(values, types, names):
    for value, ty, name in zip(values, types, names):
        if not isinstance(ty, tuple):
            yield value
        elif isinstance(value, (tuple, list)) and len(value) == len(ty):
            yield from _flatten_as(value, ty, [f"{name}[{i}]" for i in range(len(ty))])
        else:
            raise TypeError(f"argument {name!r} must be a tuple of {len(ty)}, as the kernel "
                            f"was compiled for, not {type(value).__name__} {value!r:.60}")


_RULES = {
    ("intel", "3.3"): Rules("3.3", _SCALARS_3_3, scratch_pointers=0,
                            shared_memory_argument=True),
    ("nvidia", "3.3"): Rules("3.3", _SCALARS_3_3, scratch_pointers=1,
                             shared_memory_argument=False, backend="nvidia",
                             scratch_metadata=("global_scratch",)),
    ("nvidia", "3.6"): Rules("3.6", _SCALARS_3_3, scratch_pointers=2,
                             shared_memory_argument=False, backend="nvidia",
                             scratch_metadata=("global_scratch", "profile_scratch"),
                             load_binary_values=5),
}


def series(version: str) -> str:
    """``"3.3"`` for ``"3.3.0b1"`` (the key of :data:`_RULES`)."""
    return ".".join(version.split(".")[:2])


def rules_for(version: str, backend: str = "intel") -> Rules:
    """The rules for Triton ``version``'s ``backend`` (``"intel"``, ``"nvidia"``, or a
    ``GPUTarget.backend``: ``"xpu"``, ``"cuda"``); ``NotImplementedError`` if unknown."""
    backend = TARGET_BACKENDS.get(backend, backend)
    try:
        return _RULES[backend, series(version)]
    except KeyError:
        known = ", ".join(f"{name} {number}" for name, number in sorted(_RULES))
        raise NotImplementedError(
            f"ur_cffi.triton knows the launch ABI of Triton {known} (tested: "
            f"{', '.join(TESTED_VERSIONS)}); the installed Triton is {version} and the kernel's "
            f"backend {backend}. Add its rules to ur_cffi/triton/abi.py") from None


def current(backend: str = "intel") -> Rules:
    """The rules for the installed Triton's ``backend``."""
    import triton

    return rules_for(triton.__version__, backend)


def check_installed() -> None:
    """Raise ``NotImplementedError`` unless the installed Triton has a backend with known rules
    (called before ``activate()`` changes anything)."""
    import triton
    from triton.backends import backends

    usable = [name for name in backends if (name, series(triton.__version__)) in _RULES]
    if not usable:
        current(next((name for name in ("intel", "nvidia") if name in backends), "intel"))


def bfloat16_bits(value: float) -> int:
    """``value`` rounded once to bfloat16 (nearest, ties to even), as its 16-bit pattern.
    Raises ``OverflowError`` where a finite value rounds to infinity (as ``struct`` does for
    float16) and ``struct.error`` for what is not a number."""
    single = struct.pack("<f", value)
    bits = struct.unpack("<I", single)[0]
    if (bits & 0x7F800000) == 0x7F800000:
        return (bits >> 16) | 0x0040 if bits & 0x007FFFFF else bits >> 16  # NaN stays quiet
    exact = struct.unpack("<f", single)[0]
    if exact != value:
        # Rounded to float32 first: make that rounding "to odd" (truncate, then set the last
        # bit), which leaves the rounding to bfloat16 below the only one that counts.
        if abs(exact) > abs(value):
            bits -= 1
        bits |= 1
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    if (rounded & 0x7F80) == 0x7F80:
        raise OverflowError(f"{value!r} is too large for bfloat16")
    return rounded


def boolean_value(value) -> int:
    """An ``i1`` argument as its byte: True, False, 1 or 0.  Raises ``OverflowError`` for other
    integers (the kernel reads one bit: 2 would be False) and ``TypeError`` for the rest."""
    if value is True or value is False or type(value) is int and 0 <= value <= 1:
        return int(value)
    if isinstance(value, (np.bool_, np.integer)) and 0 <= value <= 1:
        return int(value)
    if isinstance(value, (int, np.integer)):
        raise OverflowError(f"{value!r} is not a truth value (True, False, 1 or 0)")
    raise TypeError(f"{type(value).__name__} {value!r} is not a truth value")


CONVERSIONS = {"bf16": bfloat16_bits, "i1": boolean_value, "u1": boolean_value}
"""Scalar types whose values are converted (and checked) before ``struct`` packs them
(Triton 3.6 types a bool, and a ``tl.int1`` parameter, as ``u1``; 3.3 as ``i1``)."""


def signature_type(text):
    """Triton's type for one ``ASTSource`` signature entry (``"*fp32"``, ``"i32"``,
    ``"constexpr"``, or a tuple of them); raises ``ValueError`` where Triton has no such type.
    ``triton.language.str_to_ty`` takes the entry alone in 3.3 and also a constexpr's value
    from 3.4 on."""
    import inspect

    from triton import language

    parse = language.str_to_ty
    takes_value = len(inspect.signature(parse).parameters) > 1
    try:
        return parse(text, None) if takes_value else parse(text)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise ValueError(f"{text!r} is not a Triton type") from None
