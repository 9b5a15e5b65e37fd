"""Programs for Triton kernels: one UR program per (context, binary), adapted and cached.

- **In memory**: one :class:`~ur_cffi.Program` per (context, device, SPIR-V, build options),
  shared by every kernel that loads that binary; :func:`clear` drops them, :func:`forget` those
  of closed contexts (the driver calls it: a program would keep its context alive in UR).
- **Adaptation**: Triton's SPIR-V declares ``SPV_INTEL_kernel_attributes`` (capability 5892)
  for its ``MaxWorkgroupSizeINTEL`` execution mode.  Some runtimes refuse it (Intel's CPU
  OpenCL runtime: "SPIRV module requires unsupported capability 5892"); UR cannot be asked
  which SPIR-V capabilities a device takes, so the module is built as it is first, and only
  when that build fails and the module declares what :func:`ur_cffi.spirv.drop_capabilities`
  removes is it adapted and rebuilt.  The outcome is remembered per device, so later kernels
  on a device that needs it are adapted before the first build.
- **Build options**: GRF-size options (``-cl-intel-256-GRF-per-thread``... from Triton's
  ``grf_mode``) are for Intel GPUs; other devices refuse them ("Unrecognized build options"),
  so they are dropped unless the device is a GPU.
- **On disk**: the native binary (``Program.binaries``) is stored in Triton's cache directory
  (``TRITON_CACHE_DIR``, through Triton's own cache manager), keyed by a SHA-256 of the
  SPIR-V as Triton produced it, the build options, and the device's name, backend and driver
  version.  A second process builds from it (``urProgramCreateWithBinary``: a few ms instead
  of hundreds); a binary the runtime refuses is rebuilt from SPIR-V and replaced.
"""

from __future__ import annotations

import hashlib

from .. import _forking, spirv
from ..enums import ur_device_type_t
from ..errors import ProgramBuildFailureError, URError
from ..program import Program

BINARY_FILE = "native.bin"
"""The file name of a native binary inside its Triton cache entry."""

_GRF_MARKERS = ("GRF", "register-file")

_lock = _forking.lock(reentrant=True)
_programs: dict = {}
_needs_adaptation: dict = {}  # device -> whether its runtime refuses Triton's capabilities

stats = {"from_il": 0, "from_binary": 0, "adapted": 0, "binary_unreadable": 0,
         "binary_refused": 0}
"""How this process's programs were made: built from SPIR-V (``adapted`` of them after
:func:`ur_cffi.spirv.drop_capabilities`) or from a native binary found on disk; and how often
a binary on disk could not be read or was refused by the runtime."""


def build_options(flags: str, device) -> str:
    """Triton's ``metadata.build_flags`` as UR build options for ``device``."""
    options = (flags or "").split()
    if device.type != ur_device_type_t.UR_DEVICE_TYPE_GPU:
        options = [o for o in options if not any(marker in o for marker in _GRF_MARKERS)]
    return " ".join(options)


def binary_key(il: bytes, options: str, device) -> str:
    """The on-disk cache key of the native binary of ``il`` built with ``options``."""
    digest = hashlib.sha256()
    for part in (il, options.encode(), device.name.encode(), device.backend.name.encode(),
                 device.driver_version.encode()):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def load(context, device, il: bytes, flags: str = "") -> Program:
    """The built program of Triton SPIR-V ``il`` in ``context`` for ``device``.

    Raises ``ProgramBuildFailureError`` (with the build log) if it cannot be built.
    """
    options = build_options(flags, device)
    il_hash = hashlib.sha256(il).digest()
    key = (context, device, il_hash, options)
    with _lock:
        program = _programs.get(key)
        if program is not None and not program.closed:
            return program
        program = _from_disk(context, device, il, options) or _from_il(context, device, il,
                                                                       options)
        _forget_closed_contexts()
        _programs[key] = program
        return program


def load_binary(context, device, binary: bytes, options: str = "") -> Program:
    """The built program of a native ``binary`` (a cubin, for the CUDA adapter) in ``context``
    for ``device``: one per context, device, binary and options.  No SPIR-V, no adaptation,
    nothing on disk (Triton's cache holds the binary already)."""
    key = (context, device, hashlib.sha256(binary).digest(), options)
    with _lock:
        program = _programs.get(key)
        if program is None or program.closed:
            _forget_closed_contexts()
            program = _programs[key] = Program.from_binary(context, binary, options, device)
        return program


def _forget_closed_contexts() -> None:
    """Drop the programs of contexts closed since (hand launches never say when; each program
    holds its context's UR handle until it goes).  Call under ``_lock``."""
    for key in [key for key in _programs if key[0].closed]:
        del _programs[key]


def _from_il(context, device, il: bytes, options: str) -> Program:
    adapted = spirv.drop_capabilities(il)  # `il` itself when there is nothing to drop
    program = None
    if adapted is il or not _needs_adaptation.get(device):
        try:
            program = Program.from_il(context, il, options)
        except ProgramBuildFailureError:
            if adapted is il:
                raise
        else:
            _needs_adaptation.setdefault(device, False)
    if program is None:
        program = Program.from_il(context, adapted, options)
        _needs_adaptation[device] = True
        stats["adapted"] += 1
    stats["from_il"] += 1
    _to_disk(program, il, options, device)
    return program


def _cache_entry(il: bytes, options: str, device):
    from triton.runtime.cache import get_cache_manager

    return get_cache_manager(binary_key(il, options, device))


def _from_disk(context, device, il: bytes, options: str) -> Program | None:
    path = _cache_entry(il, options, device).get_file(BINARY_FILE)
    if path is None:
        return None
    try:
        with open(path, "rb") as file:
            binary = file.read()
    except OSError:
        stats["binary_unreadable"] += 1
        return None
    try:
        program = Program.from_binary(context, binary, options, device)
    except URError:
        stats["binary_refused"] += 1  # another runtime's build, say: rebuilt from SPIR-V
        return None
    stats["from_binary"] += 1
    return program


def _to_disk(program: Program, il: bytes, options: str, device) -> None:
    index = program.context.devices.index(device)
    try:
        binary = program.binaries[index]
    except URError:
        return  # the adapter cannot hand out binaries: the next process builds from SPIR-V
    if binary:
        _cache_entry(il, options, device).put(binary, BINARY_FILE, binary=True)


def needs_adaptation(device) -> bool | None:
    """Whether ``device``'s runtime refused Triton's SPIR-V as is (None: not built yet)."""
    return _needs_adaptation.get(device)


def cached_programs() -> int:
    """How many programs are cached in memory."""
    return len(_programs)


def clear() -> None:
    """Forget the cached programs (kernels already loaded keep theirs alive)."""
    with _lock:
        _programs.clear()


def forget(contexts) -> None:
    """Forget the cached programs of ``contexts`` (a set of Contexts); each is released once
    no kernel holds it."""
    with _lock:
        for key in [key for key in _programs if key[0] in contexts]:
            del _programs[key]
