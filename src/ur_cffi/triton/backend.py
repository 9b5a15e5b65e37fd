"""Which Triton backend compiles for a UR device, and what follows from it, decided here once.

==================  ===============  =========================  ===================================
UR backend          Triton backend   ``GPUTarget``              binary, and how UR loads it
==================  ===============  =========================  ===================================
Level Zero, OpenCL  ``intel``        ``("xpu", properties,      SPIR-V through
                                     32)``, ``target.py``       ``urProgramCreateWithIL``, adapted
                                                                and cached (``programs.py``)
CUDA                ``nvidia``       ``("cuda", capability,     cubin through
                                     32)``, ``cuda.py``         ``urProgramCreateWithBinary``
==================  ===============  =========================  ===================================

The launch ABI of each backend, per Triton version, is in ``abi.py``; the launcher picks it
by the compiled kernel's ``metadata.target.backend``.  Any other UR backend (HIP, Native CPU)
raises ``NotImplementedError`` naming it.
"""

from __future__ import annotations

import os

from triton.runtime.errors import OutOfResources

from .. import signatures
from ..program import Kernel

TRITON_BACKENDS = {"LEVEL_ZERO": "intel", "OPENCL": "intel", "CUDA": "nvidia"}
"""UR backend name (``ur_backend_t`` without its prefix) to Triton backend."""


def triton_backend(device) -> str:
    """``"intel"`` or ``"nvidia"``: the Triton backend that compiles for ``device``."""
    name = signatures.backend_name(device)
    try:
        return TRITON_BACKENDS[name]
    except KeyError:
        raise NotImplementedError(
            f"ur_cffi.triton compiles for Level Zero and OpenCL devices (Triton's Intel "
            f"backend) and CUDA devices (its NVIDIA backend), not for {name} ({device!r})") \
            from None


def gpu_target(device):
    """The ``GPUTarget`` Triton compiles for on ``device``."""
    if triton_backend(device) == "nvidia":
        from . import cuda

        return cuda.gpu_target(device)
    from . import target

    return target.gpu_target(device)


def load(name: str, binary: bytes, flags: str, device_key) -> tuple:
    """``(program, kernel)`` of compiled kernel ``name`` in the key's ``(context, device)``."""
    from . import programs

    context, device = device_key
    if triton_backend(device) == "nvidia":
        program = programs.load_binary(context, device, binary)
    else:
        program = programs.load(context, device, binary, flags)
    return program, Kernel(program, name)


class _RefusedConfig(OutOfResources):
    """A kernel configuration ur_cffi.triton cannot launch.  Also Triton's ``OutOfResources``,
    which ``@triton.autotune`` takes as "skip this config" and benchmarks the others."""

    def __init__(self, message: str):
        # Not OutOfResources.__init__: its required/limit/name message does not fit these.
        Exception.__init__(self, message)
        self.required = self.limit = None
        self.name = message

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return type(self), self.args


class UnlaunchableConfig(_RefusedConfig, ValueError):
    """``num_warps`` and ``threads_per_warp`` the device cannot run as one work-group."""


class UnsupportedConfig(_RefusedConfig, NotImplementedError):
    """A launch feature ur_cffi.triton does not do: ``num_ctas > 1`` (clusters)."""


def check_num_ctas(num_ctas) -> None:
    """Raise :class:`UnsupportedConfig` unless ``num_ctas`` is 1: a launch runs one work-group
    per program (Triton's Intel backend lays out ``num_ctas > 1`` for work-groups nobody
    launches, so most of the output would go unwritten)."""
    if num_ctas != 1:
        raise UnsupportedConfig(f"num_ctas={num_ctas}: ur_cffi.triton launches one work-group "
                                "per program (no thread-block clusters); use num_ctas=1")


def check_options(target, options: dict) -> None:
    """Raise ``TypeError`` naming the ``options`` Triton's backend for ``target`` does not take:
    its ``parse_options`` drops them unread (``num_warp=8`` compiled 4 warps)."""
    from dataclasses import fields

    from triton.compiler.compiler import make_backend

    refuse_target_option(options, target)
    known = {field.name for field in fields(make_backend(target).parse_options({}))}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown compile option(s) {', '.join(unknown)} for Triton's "
                        f"{target.backend} backend; it takes {', '.join(sorted(known))}")


def refuse_target_option(options: dict, target) -> None:
    """Raise ``TypeError`` for an ``arch`` option other than ``target``'s own: Triton's NVIDIA
    backend would take it for its target (``arch=90`` failed in its parser, ``arch="sm80"``
    compiled for another GPU).  Its own (``sm90``, or ``TRITON_OVERRIDE_ARCH``) is in the
    options it parsed, which Triton's ``compile`` parses again."""
    if "arch" in options and not (target.backend == "cuda" and options["arch"] in (
            f"sm{target.arch}", os.environ.get("TRITON_OVERRIDE_ARCH"))):
        raise TypeError(f"compile option arch={options['arch']!r}: ur_cffi.triton compiles "
                        "for the device's own target; ur_cffi.triton.cuda.compile(arch=...) "
                        "compiles for another compute capability")


def check_work_group(device_name, sub_group_sizes, largest: int, num_warps: int,
                     threads_per_warp: int) -> None:
    """Raise :class:`UnlaunchableConfig` unless a device of ``sub_group_sizes`` and work-groups
    of at most ``largest`` runs ``num_warps`` warps of ``threads_per_warp``."""
    if sub_group_sizes and threads_per_warp not in sub_group_sizes:
        raise UnlaunchableConfig(f"threads_per_warp={threads_per_warp!r} is not a sub-group size "
                                 f"of {device_name!r} (it has {sorted(sub_group_sizes)})")
    if largest and num_warps * threads_per_warp > largest:
        raise UnlaunchableConfig(f"num_warps={num_warps} x threads_per_warp={threads_per_warp} "
                                 f"exceeds the largest work-group of {device_name!r} "
                                 f"({largest})")


def install_option_check(patches) -> None:
    """Check launch options where Triton parses them (each backend's ``parse_options``),
    before it compiles: an unlaunchable ``threads_per_warp`` otherwise fails deep in Triton's
    compiler, and an autotune config that cannot run would end the whole autotune."""
    from triton.backends import backends

    for name in ("intel", "nvidia"):
        if name in backends:
            compiler = backends[name].compiler
            patches.replace(compiler, "parse_options", _checked(compiler.parse_options))


def _checked(parse_options):
    def checked_parse_options(self, options):
        # Before Triton's own: for GPUs older than sm_90 it refuses num_ctas > 1 with a plain
        # ValueError, which would end an autotune instead of skipping the config.
        check_num_ctas(options.get("num_ctas", 1))
        refuse_target_option(options, self.target)
        parsed = parse_options(self, options)
        arch = self.target.arch
        if isinstance(arch, dict):  # Intel: the device's properties (target.py)
            check_work_group(arch.get("name"), arch.get("sub_group_sizes"),
                             arch.get("max_work_group_size"), parsed.num_warps,
                             parsed.threads_per_warp)
        return parsed

    return checked_parse_options
