"""ur_cffi: Intel's Unified Runtime from Python through cffi, and Triton kernels on UR devices.

Layers, each in its own place:
- ``ur_cffi.ffi`` / ``ur_cffi.lib``: the generated raw layer, 1:1 with ``ur_api.h``;
- ``ur_cffi.enums`` / ``ur_cffi.errors``: every UR enum and result code, derived from it;
- ``Device``, ``Context``, ``Queue``, ``Event``, USM arrays, ``Program``, ``Kernel``: the
  hand-written layer with owned handles and exact synchronization;
- ``Graph``: launches, copies and fills recorded once and replayed with one enqueue;
- ``ur_cffi.triton``: a Triton driver that launches on a ur_cffi queue, with no PyTorch.
"""

from . import _libraries

# Both must happen before the compiled module loads and before the first urAdapterGet.
_libraries.check_one_module()
_libraries.expose_cpu_runtime()
_libraries.preload_loader()

try:
    from ._ur import ffi, lib  # noqa: E402
except ImportError as error:
    _libraries.explain_failed_load(error)
    raise
from . import dtypes, enums, errors, info, loader  # noqa: E402

_libraries.check_loader(info.HEADER_FACTS.get("loader"))

from ._handle import ClosedError  # noqa: E402
from ._waiting import interruptible_waits, set_interruptible_waits  # noqa: E402
from ._compat import Backend  # noqa: E402
from .context import Context  # noqa: E402
from .device import Device, default_device, devices  # noqa: E402
from .errors import URError, check  # noqa: E402
from .loader import init  # noqa: E402
from .memory import Buffer, USMArray, asarray, empty, zeros  # noqa: E402
from .creation import (arange, empty_like, full, full_like, ones, ones_like,  # noqa: E402
                       zeros_like)
from .allocator import empty_cache, memory_stats, set_memory_limit  # noqa: E402
from . import interop  # noqa: E402
from .interop import from_dlpack, from_pointer  # noqa: E402
from .program import Kernel, Local, PreparedLaunch, Program  # noqa: E402
from .queue import Event, Queue  # noqa: E402
from .graph import Graph, GraphCommand  # noqa: E402

__all__ = [
    "ffi", "lib", "enums", "errors", "info", "loader", "init", "check", "URError",
    "ClosedError", "Backend", "Device", "devices", "default_device", "Context", "Queue", "Event",
    "USMArray", "Buffer", "asarray", "empty", "zeros", "Program", "Kernel", "Local",
    "PreparedLaunch", "set_interruptible_waits", "interruptible_waits", "Graph", "GraphCommand",
    "ones", "full", "arange", "empty_like", "zeros_like", "ones_like", "full_like",
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "empty_cache", "memory_stats", "set_memory_limit", "interop", "from_dlpack", "from_pointer",
]  # fmt: skip


def __getattr__(name: str):
    """``ur_cffi.bfloat16`` and the float8 dtypes, loaded with ``ml_dtypes`` on first use."""
    if name in dtypes.NAMES:
        return getattr(dtypes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
