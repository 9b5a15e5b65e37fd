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
