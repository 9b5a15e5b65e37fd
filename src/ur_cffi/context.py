"""Contexts: the scope in which UR memory, programs and queues live."""

from __future__ import annotations

from . import _handle
from ._interrupts import section
from ._ur import ffi, lib
from .errors import check


class Context(_handle.Resource):
    """A UR context over one or more devices of one platform (``urContextCreate``)."""

    __slots__ = ("devices",)
    _release_function = "urContextRelease"

    def __init__(self, devices):
        """Create a context for ``devices`` (a list of :class:`~ur_cffi.Device`)."""
        from .device import Device

        if isinstance(devices, Device):
            devices = [devices]
        if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
            raise TypeError(f"devices must be a list of ur_cffi Devices, not "
                            f"{type(devices).__name__} {devices!r}")
        devices = list(devices)
        if not devices:
            raise ValueError("a Context needs at least one device")
        for device in devices:
            if not isinstance(device, Device):
                raise TypeError(f"devices must be ur_cffi Devices, not {type(device).__name__} "
                                f"{device!r}")
        platforms = [device.platform.handle for device in devices]
        if any(platform != platforms[0] for platform in platforms):
            # (the runtime's refusal was UR_RESULT_ERROR_UNKNOWN, naming nothing)
            raise ValueError(f"a Context's devices must be of one platform: " + ", ".join(
                f"{d!r} of {d.platform!r} ({p!r})" for d, p in zip(devices, platforms)))
        if len(set(map(id, devices))) != len(devices):  # (the runtime takes it as two)
            raise ValueError(f"devices {devices!r} name a device twice")
        handles = ffi.new("ur_device_handle_t[]", [d.handle for d in devices])
        out = ffi.new("ur_context_handle_t *")
        self.devices = tuple(devices)
        with section:
            check(lib.urContextCreate(len(devices), handles, ffi.NULL, out), "urContextCreate")
            self._own(out[0], parents=self.devices)

    def close(self) -> None:
        """Release the context now, and first the caching allocator's memory of it (its UR
        pools hold references on it); closing twice is harmless."""
        if self._handle is None:
            return
        from . import allocator

        allocator.wait_for_cached_work_of(self)  # (Ctrl-C there leaves the context open)
        try:
            allocator.release_pools_of(self)
        finally:
            super().close()

    def __repr__(self) -> str:
        return f"<Context of {len(self.devices)} device(s){' closed' if self.closed else ''}>"
