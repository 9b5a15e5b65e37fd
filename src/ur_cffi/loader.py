"""The UR loader's lifetime: initialised once on first use, torn down at interpreter exit.

``init()`` calls ``urLoaderInit`` (optionally with UR's validation and leak-checking layers) and
``urAdapterGet``; ``teardown()`` releases everything ur_cffi still owns, newest first, then
calls ``urLoaderTearDown``.  After a teardown the next use initialises again.
"""

from __future__ import annotations

import atexit
import os
import threading

from . import _handle
from ._ur import ffi, lib
from .enums import ur_adapter_info_t, ur_platform_info_t
from .errors import check
from .info import query

VALIDATION_ENV = "UR_CFFI_VALIDATION"
"""Set to ``1`` to initialise with UR's full validation and leak-checking layers."""

VALIDATION_LAYERS = ("UR_LAYER_FULL_VALIDATION", "UR_LAYER_LEAK_CHECKING")

_lock = threading.RLock()
_state: dict = {"adapters": None, "validation": False, "atexit": False, "generation": 0}


class Adapter(_handle.Resource):
    """One UR adapter (Level Zero, OpenCL, CUDA, HIP, ...) as returned by ``urAdapterGet``."""

    __slots__ = ()
    _release_function = "urAdapterRelease"

    def __init__(self, handle):
        self._own(handle)

    @property
    def backend(self):
        """The adapter's ``ur_backend_t``."""
        return query("urAdapterGetInfo", self.handle, ur_adapter_info_t.UR_ADAPTER_INFO_BACKEND)

    @property
    def version(self) -> int:
        """The adapter's own version number."""
        return query("urAdapterGetInfo", self.handle, ur_adapter_info_t.UR_ADAPTER_INFO_VERSION)

    def platforms(self) -> list[Platform]:
        """The adapter's platforms (``urPlatformGet``)."""
        count = ffi.new("uint32_t *")
        check(lib.urPlatformGet(self.handle, 0, ffi.NULL, count), "urPlatformGet")
        handles = ffi.new("ur_platform_handle_t[]", count[0])
        check(lib.urPlatformGet(self.handle, count[0], handles, ffi.NULL), "urPlatformGet")
        return [Platform(handles[i], self) for i in range(count[0])]

    def close(self) -> None:
        """Adapters live as long as the loader; they are released at :func:`teardown`."""


class Platform:
    """A UR platform; UR does not reference-count platforms, so there is nothing to release."""

    __slots__ = ("handle", "adapter")

    def __init__(self, handle, adapter: Adapter):
        self.handle, self.adapter = handle, adapter

    def info(self, prop: ur_platform_info_t):
        """Any ``ur_platform_info_t`` property, decoded."""
        return query("urPlatformGetInfo", self.handle, prop)

    @property
    def name(self) -> str:
        """The platform's name."""
        return self.info(ur_platform_info_t.UR_PLATFORM_INFO_NAME)

    @property
    def backend(self):
        """The platform's ``ur_backend_t``."""
        return self.info(ur_platform_info_t.UR_PLATFORM_INFO_BACKEND)

    @property
    def version(self) -> str:
        """The platform's version string."""
        return self.info(ur_platform_info_t.UR_PLATFORM_INFO_VERSION)

    def __repr__(self) -> str:
        return f"<Platform {self.name!r}>"


def init(validation: bool | None = None) -> list[Adapter]:
    """Initialise the loader once and return its adapters; later calls return the same list.

    ``validation`` (default: the ``UR_CFFI_VALIDATION`` variable) enables UR's full validation
    and leak-checking layers; it can only be chosen before the first initialisation.
    """
    if validation is None:
        validation = os.environ.get(VALIDATION_ENV, "") not in ("", "0")
    with _lock:
        if _state["adapters"] is not None:
            if validation and not _state["validation"]:
                raise RuntimeError("the UR loader is already initialised without validation")
            return _state["adapters"]
        _loader_init(validation)
        count = ffi.new("uint32_t *")
        check(lib.urAdapterGet(0, ffi.NULL, count), "urAdapterGet")
        handles = ffi.new("ur_adapter_handle_t[]", count[0])
        check(lib.urAdapterGet(count[0], handles, ffi.NULL), "urAdapterGet")
        _state["adapters"] = [Adapter(handles[i]) for i in range(count[0])]
        _state["validation"] = validation
        _state["generation"] += 1
        if not _state["atexit"]:
            # Registered before any finalizer of ours, so it runs after them at exit.
            atexit.register(teardown)
            _state["atexit"] = True
        return _state["adapters"]


def _loader_init(validation: bool) -> None:
    config = ffi.NULL
    if validation:
        config_ptr = ffi.new("ur_loader_config_handle_t *")
        check(lib.urLoaderConfigCreate(config_ptr), "urLoaderConfigCreate")
        config = config_ptr[0]
    try:
        for layer in VALIDATION_LAYERS if validation else ():
            check(lib.urLoaderConfigEnableLayer(config, layer.encode()),
                  "urLoaderConfigEnableLayer", layer)
        check(lib.urLoaderInit(0, config), "urLoaderInit")
    finally:
        if config != ffi.NULL:
            lib.urLoaderConfigRelease(config)


def initialized() -> bool:
    """Whether the loader is initialised now."""
    return _state["adapters"] is not None


def generation() -> int:
    """Counts initialisations, so caches of handles know when they went stale."""
    return _state["generation"]


def validation_enabled() -> bool:
    """Whether the loader was initialised with the validation and leak-checking layers."""
    return _state["validation"]


def teardown() -> None:
    """Release every object ur_cffi still owns (newest first) and call ``urLoaderTearDown``."""
    with _lock:
        if _state["adapters"] is None or _handle._forked:
            return
        _handle.release_all()
        _state["adapters"] = None
        check(lib.urLoaderTearDown(), "urLoaderTearDown")


def adapters() -> list[Adapter]:
    """The loader's adapters, initialising it on first use."""
    return init()
