"""Devices: discovery across every adapter, typed properties and device-wide synchronization."""

from __future__ import annotations

import enum as _enum
import math
import operator
import weakref

from . import _compat, _durations, _forking, _handle, _interrupts, _waiting, loader
from ._compat import Backend
from ._ur import ffi, lib
from .enums import ur_device_info_t, ur_device_type_t, ur_result_t
from .errors import UNSUPPORTED, URError, check
from .info import query


def _device_info(prop_name: str, doc: str) -> property:
    """A property read once per device: these never change while the device exists."""
    prop = ur_device_info_t[prop_name]

    def read(self):
        value = self._properties.get(prop_name)
        if value is None:
            value = self._properties[prop_name] = self.info(prop)
        return list(value) if type(value) is list else value  # (not the cached list itself)

    return property(read, doc=doc)


_DEVICE_HANDLE = ffi.typeof("ur_device_handle_t")


class Device(_handle.Resource):
    """A UR device.  Those ``ur_cffi.devices()`` lists are released at ``loader.teardown()``;
    one made by hand (a sub-device from ``urDevicePartition``) owns the caller's reference,
    released when it is collected or at the teardown.  ``close()`` releases neither."""

    __slots__ = ("platform", "queues_lock", "queue_handles_lock", "_queues", "_unfinished",
                 "_device_wait",
                 "_properties", "pageable_copies_wait", "copies_rows_one_by_one",
                 "_sub_devices")
    _release_function = "urDeviceRelease"

    def __init__(self, handle, platform: loader.Platform):
        """Own ``handle``, the caller's reference to a device of ``platform``."""
        if not isinstance(handle, ffi.CData) or ffi.typeof(handle) is not _DEVICE_HANDLE or \
                handle == ffi.NULL or not isinstance(platform, loader.Platform):
            raise TypeError(f"Device takes a non-null ur_device_handle_t and its "
                            f"loader.Platform, not {handle!r} and {platform!r} (ur_cffi.devices() "
                            "lists the devices)")
        key = int(ffi.cast("uintptr_t", handle))
        owner = _devices_by_handle.get(key)
        if owner is not None and not owner.closed:  # (each would release it: a crash)
            raise ValueError(f"Device: handle {handle!r} is owned already, by {owner!r}: use "
                             "that Device")
        # What can raise comes before the handle is taken: a Device that failed must not
        # release the caller's reference when it is collected.
        backend = platform.backend  # (ClosedError: a platform of a loader torn down)
        try:
            parent = query("urDeviceGetInfo", handle,
                           ur_device_info_t.UR_DEVICE_INFO_PARENT_DEVICE)
        except URError:  # (an adapter that cannot say: synchronize() finds no parent)
            parent = ffi.NULL
        parent_device = _devices_by_handle.get(int(ffi.cast("uintptr_t", parent))) \
            if parent != ffi.NULL else None
        self.platform = platform
        self._queues = weakref.WeakSet()  # ur_cffi's open queues on this device
        self._unfinished = set()  # the QueueRefs of its queues whose release has yet to finish
        self._sub_devices = weakref.WeakSet()  # Devices made of its partitions (queues_lock)
        self.queues_lock = _forking.lock(reentrant=True)
        """Held to add to the queues and to list them (and the sub-devices).  Reentrant: a
        queue collected while its thread holds the lock removes itself under it."""
        self.queue_handles_lock = _forking.lock(reentrant=True)
        """Held around a queue's ``urQueueRelease``, and by code that retains the handle of a
        queue another thread may close (:meth:`synchronize`, the allocator) to read and
        retain it.  Reentrant: a signal handler or profile hook run under it may start a
        collection that releases another queue."""
        # Is urDeviceWaitExp supported?  Learnt on first use where the UR release has it.
        self._device_wait: bool | None = None if _compat.HAS_DEVICE_WAIT else False
        self._properties: dict = {}
        self.pageable_copies_wait = _compat.pageable_copies_wait(backend)
        """Whether a copy between this device and pageable host memory waits in its enqueue
        for the queue's earlier work (``_compat.pageable_copies_wait``)."""
        self.copies_rows_one_by_one = _compat.copies_rows_one_by_one(backend)
        """Whether a 2D copy on this device costs a copy per row
        (``_compat.copies_rows_one_by_one``)."""
        self._own(handle)
        _devices_by_handle[key] = self
        if parent_device is not None:
            with parent_device.queues_lock:  # its synchronize() finishes ours too
                parent_device._sub_devices.add(self)

    def close(self) -> None:
        """Root devices live as long as the loader; they are released at ``loader.teardown()``."""

    def info(self, prop: ur_device_info_t):
        """Any ``ur_device_info_t`` property, decoded to its documented Python type; a
        handle (``UR_DEVICE_INFO_PLATFORM``, ``UR_DEVICE_INFO_PARENT_DEVICE``) is the raw
        cdata, NULL included: :attr:`platform` is the object."""
        if not isinstance(prop, ur_device_info_t):
            raise TypeError(f"info takes a ur_device_info_t, not {type(prop).__name__} {prop!r}")
        return query("urDeviceGetInfo", self.handle, prop)

    name = _device_info("UR_DEVICE_INFO_NAME", "The device's name.")
    type = _device_info("UR_DEVICE_INFO_TYPE", "The device's ``ur_device_type_t``.")
    vendor = _device_info("UR_DEVICE_INFO_VENDOR", "The vendor's name.")
    driver_version = _device_info("UR_DEVICE_INFO_DRIVER_VERSION", "The driver's version.")
    global_mem_size = _device_info("UR_DEVICE_INFO_GLOBAL_MEM_SIZE", "Global memory, bytes.")
    local_mem_size = _device_info("UR_DEVICE_INFO_LOCAL_MEM_SIZE", "Local memory, bytes.")
    max_mem_alloc_size = _device_info("UR_DEVICE_INFO_MAX_MEM_ALLOC_SIZE",
                                      "The largest single allocation, bytes.")
    max_compute_units = _device_info("UR_DEVICE_INFO_MAX_COMPUTE_UNITS", "Compute units.")
    max_work_group_size = _device_info("UR_DEVICE_INFO_MAX_WORK_GROUP_SIZE",
                                       "The largest work-group, work-items.")
    max_work_item_sizes = _device_info("UR_DEVICE_INFO_MAX_WORK_ITEM_SIZES",
                                       "The largest work-group in each dimension.")
    sub_group_sizes = _device_info("UR_DEVICE_INFO_SUB_GROUP_SIZES_INTEL",
                                   "The sub-group sizes the device supports.")
    il_version = _device_info("UR_DEVICE_INFO_IL_VERSION", "Supported IL versions, e.g. SPIR-V.")
    usm_host_support = _device_info("UR_DEVICE_INFO_USM_HOST_SUPPORT",
                                    "USM host-allocation capabilities (flags).")
    usm_device_support = _device_info("UR_DEVICE_INFO_USM_DEVICE_SUPPORT",
                                      "USM device-allocation capabilities (flags).")
    usm_shared_support = _device_info("UR_DEVICE_INFO_USM_SINGLE_SHARED_SUPPORT",
                                      "USM shared-allocation capabilities (flags).")

    @property
    def launch_limits(self) -> tuple:
        """``(most work-items in one launch, most work-groups in each dimension, whether a
        launch without a local size may run groups of one)`` (``_compat.launch_limits``)."""
        limits = self._properties.get("launch_limits")
        if limits is None:
            try:
                groups = self.info(ur_device_info_t.UR_DEVICE_INFO_MAX_WORK_GROUPS_3D)
            except URError:  # an adapter that does not say
                groups = None
            limits = self._properties["launch_limits"] = _compat.launch_limits(
                self.backend, self.type == ur_device_type_t.UR_DEVICE_TYPE_CPU, groups)
        return limits

    def check_launch_size(self, name: str, global_sizes: tuple, local_sizes) -> None:
        """Raise ``ValueError`` naming ``name`` for a launch larger than this device runs
        (:attr:`launch_limits`)."""
        items, groups, groups_of_one = self.launch_limits
        total = math.prod(global_sizes)
        if total > items:
            raise ValueError(f"{name} {tuple(global_sizes)}: {total} work-items in one launch; "
                             f"{self.name} runs at most {items}")
        for dim, size in enumerate(global_sizes):
            if local_sizes:
                count = size // local_sizes[dim]
            elif groups_of_one:
                count = size
            else:  # the adapter picks the group size
                continue
            if count > groups[dim]:
                how = f"local_size {tuple(local_sizes)}" if local_sizes else \
                    "no local_size, so possibly groups of one"
                raise ValueError(f"{name} {tuple(global_sizes)}: {count} work-groups in "
                                 f"dimension {dim} ({how}); {self.name} runs at most "
                                 f"{groups[dim]}")

    @property
    def backend(self) -> Backend:
        """The backend (Level Zero, OpenCL, CUDA, HIP, ...) of the device's platform."""
        return self.platform.backend

    @property
    def extensions(self) -> frozenset[str]:
        """The device's extension names."""
        return frozenset(self.info(ur_device_info_t.UR_DEVICE_INFO_EXTENSIONS).split())

    @property
    def has_fp16(self) -> bool:
        """Whether the device computes in half precision."""
        return bool(self.info(ur_device_info_t.UR_DEVICE_INFO_HALF_FP_CONFIG))

    @property
    def has_fp64(self) -> bool:
        """Whether the device computes in double precision."""
        return bool(self.info(ur_device_info_t.UR_DEVICE_INFO_DOUBLE_FP_CONFIG))

    def create_context(self):
        """A new :class:`~ur_cffi.context.Context` for this device alone."""
        from .context import Context

        return Context([self])

    def synchronize(self) -> None:
        """Wait for all work on the device.

        Uses ``urDeviceWaitExp`` where the adapter supports it; otherwise (the OpenCL CPU
        device, for one) finishes every queue ur_cffi created on this device, or on a Device
        made of its partitions, and has not closed.  Work submitted by other libraries'
        queues is only covered in the first case.
        """
        from .queue import finish_barrier, retained

        self.handle  # noqa: B018 - raises ClosedError (closed, or the parent's after a fork)
        if self._device_wait is not False:
            try:
                if self._expected_seconds() < _durations.DIRECT_SECONDS:  # a helper costs more
                    check(lib.urDeviceWaitExp(self.handle), "urDeviceWaitExp")
                else:
                    _waiting.wait(lib.urDeviceWaitExp, "urDeviceWaitExp", self.handle)
                self._device_wait = True
                return
            except URError as error:
                if error.result not in UNSUPPORTED:
                    raise
                self._device_wait = False
        queues, dropped = [], []
        for device in self._with_sub_devices():
            with device.queues_lock:
                queues += device._queues
                dropped += [ref for ref in tuple(device._unfinished) if ref() is None]
        handles = []  # our own references: another thread may close the queues meanwhile
        try:
            # Queues dropped whose releases have yet to finish them: finished here, not waited
            # for (that release may be this thread's, further up: a signal handler's or a
            # finalizer's synchronize() inside it waited for good).
            handles += filter(None, map(retained, dropped))  # (no barrier: none launches there)
            for queue in queues:
                barrier = queue.out_of_order and finish_barrier(queue)  # (see finish_barrier)
                if barrier:
                    with barrier:
                        barrier.wait()
                    continue
                handle = retained(queue)
                if handle is not None:
                    handles.append(handle)
            for handle in handles:
                _waiting.wait(lib.urQueueFinish, "urQueueFinish", handle)
        finally:
            for handle in handles:
                lib.urQueueRelease(handle)

    def _with_sub_devices(self) -> list:
        """This device and the Devices made of its partitions, theirs too."""
        found = [self]
        for device in found:  # (grows as it goes)
            with device.queues_lock:
                sub_devices = list(device._sub_devices)
            found += [sub for sub in sub_devices if sub not in found]
        return found

    def _expected_seconds(self) -> float:
        """How long the work submitted to ur_cffi's open queues on this device since their
        last waits is expected to take (``_durations``; 0 for none, inf where unknown)."""
        with self.queues_lock:
            windows = [queue._window for queue in self._queues]
        return max((_durations.expected_seconds(window) for window in windows if window),
                   default=0.0)

    @property
    def synchronize_uses_device_wait(self) -> bool | None:
        """True if :meth:`synchronize` used ``urDeviceWaitExp``; False if it finishes queues."""
        return self._device_wait

    def __repr__(self) -> str:
        if self.closed:  # released by loader.teardown(): nothing can be asked of it
            return "<Device closed>"
        return f"<Device {self.name!r} {self.type.name} {self.backend.name}>"


_SELECTED_PER_DEVICE = 64
"""Devices a selector may select per root device (its sub-devices and theirs)."""

_devices_by_handle: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
"""The Device of each handle (as an integer)."""

_cache_lock = _interrupts.Lock()  # Ctrl-C cannot leave it held
_cache: dict = {"generation": None, "devices": []}


def _enumerate() -> list[Device]:
    found = []
    adapters = loader.init()
    # With a selector set, urDeviceGetSelected applies all of it (device types, indices,
    # negative terms), as SYCL does; loader.init() applies only its backends and device types.
    # loader.device_selector() refuses a malformed one, which some releases crash on.
    selected = bool(loader.selector_text())
    name = "urDeviceGetSelected" if selected else "urDeviceGet"
    for adapter in adapters:
        for platform in adapter.platforms():
            result, handles = _device_handles(name, platform,
                                              ur_device_type_t.UR_DEVICE_TYPE_ALL)
            if selected and result == ur_result_t.UR_RESULT_ERROR_INVALID_VALUE:
                # A well-formed selector this release's UR does not take (oneAPI 2025.0 and
                # 2025.1 know no native_cpu backend, for one; 2025.0 to 2025.2,
                # '!level_zero:*').
                hint = loader.refused_selector_hint(_selector_name(platform))
                raise loader.DeviceSelectorError(
                    loader.selector_text() or "",
                    f"is refused by UR's {name} ({ur_result_t(result).name})"
                    f"{f' ({hint})' if hint else ''}")
            if result == ur_result_t.UR_RESULT_ERROR_DEVICE_NOT_FOUND:
                continue
            check(result, name)
            found += [_device_of(handle, platform) for handle in handles]
    return found


def _device_of(handle, platform) -> Device:
    """The Device of a handle ``urDeviceGet`` returned: the one made of it by hand already, if
    any (that Device holds its own reference), else a new one."""
    made = _devices_by_handle.get(int(ffi.cast("uintptr_t", handle)))
    if made is not None and not made.closed:
        lib.urDeviceRelease(handle)
        return made
    return Device(handle, platform)


def _device_handles(name: str, platform, device_type) -> tuple[int, list]:
    """``(ur_result_t, device handles)`` of ``name`` (``urDeviceGet`` or
    ``urDeviceGetSelected``) for ``platform`` and ``device_type``.

    Where a term of the selector names the platform's backend or ``*``, the loader's
    ``urDeviceGetSelected`` fetches all the platform's devices with ``urDeviceGet`` and never
    releases those it does not return; UR's leak checker counts them, so they are released
    here.  It fills an array with no count of its own (its count-only call would take a
    reference of every device): ``_SELECTED_PER_DEVICE`` entries for each device
    ``urDeviceGet`` counts, as sub-device terms (``level_zero:0.*``) select more devices than
    the platform's roots, and it copies no more than the array holds."""
    count = ffi.new("uint32_t *")
    selected = name == "urDeviceGetSelected"
    counted = ur_device_type_t.UR_DEVICE_TYPE_ALL if selected else device_type
    result = lib.urDeviceGet(platform.handle, counted, 0, ffi.NULL, count)
    if result or not count[0]:
        return result, []
    entries = count[0] * _SELECTED_PER_DEVICE if selected else count[0]
    handles = ffi.new("ur_device_handle_t[]", entries)  # (NULLs)
    result = getattr(lib, name)(platform.handle, device_type, entries, handles, ffi.NULL)
    if result:  # (a refused selector fails before the loader fetches any device)
        return result, []
    found = [handle for handle in handles if handle != ffi.NULL]
    if selected and len(found) == entries:
        for handle in found:
            lib.urDeviceRelease(handle)
        raise loader.DeviceSelectorError(
            loader.selector_text() or "", f"selects {entries} or more devices of {platform!r} "
            f"({count[0]} root devices): more than ur_cffi reads ({entries})")
    if selected and _loader_fetches_devices_of(platform):
        every = ffi.new("ur_device_handle_t[]", count[0])
        if not lib.urDeviceGet(platform.handle, counted, count[0], every, ffi.NULL):
            returned = {int(ffi.cast("uintptr_t", handle)) for handle in found}
            for handle in every:
                lib.urDeviceRelease(handle)  # (the reference this urDeviceGet took)
                if int(ffi.cast("uintptr_t", handle)) not in returned:
                    lib.urDeviceRelease(handle)  # (the loader's)
    return result, found


def _loader_fetches_devices_of(platform) -> bool:
    """Whether the loader's ``urDeviceGetSelected`` fetches ``platform``'s devices: where a
    term of the selector UR read names its backend or ``*`` (elsewhere it answers no device,
    fetching none)."""
    backend = _selector_name(platform)
    return any(name in ("*", backend)
               for _, name, _ in loader.device_selector(loader.selector_text() or "") or ())


def _selector_name(platform) -> str:
    """``platform``'s backend as a selector names it (``opencl``)."""
    return _compat.backend_name(platform.backend).lower()


def _runtime_defaults(found: list[Device]) -> list[Device]:
    """Those of ``found`` that their platform's runtime prefers (``UR_DEVICE_TYPE_DEFAULT``,
    a type no device reports as its own); a platform's first device where the runtime names
    none (UR of oneAPI 2025.3 answers no device for OpenCL's platforms), as OpenCL's default
    type means."""
    preferred = set()
    name = "urDeviceGetSelected" if loader.selector_text() else "urDeviceGet"
    for platform in {id(d.platform): d.platform for d in found}.values():
        result, handles = _device_handles(name, platform,
                                          ur_device_type_t.UR_DEVICE_TYPE_DEFAULT)
        if result or not handles:
            first = next(d for d in found if d.platform is platform)
            preferred.add(int(ffi.cast("uintptr_t", first.handle)))
            continue
        for handle in handles:
            preferred.add(int(ffi.cast("uintptr_t", handle)))
            lib.urDeviceRelease(handle)  # (a reference of its own, to UR's leak checker)
    return [d for d in found if int(ffi.cast("uintptr_t", d.handle)) in preferred]


def _member(enum, prefix: str, name: str):
    """``enum[prefix + NAME]``; a ``ValueError`` listing the choices for an unknown name."""
    try:
        return enum[prefix + name.upper()]
    except KeyError:
        choices = ", ".join(m.name.removeprefix(prefix).lower() for m in enum
                            if m.name.startswith(prefix) and not m.name.endswith("FORCE_UINT32"))
        raise ValueError(f"unknown {enum.__name__} {name!r}; one of: {choices}") from None


def _choice(enum, prefix: str, what: str, value):
    """``value`` (a member, its name without ``prefix`` in any case, or its number, not a
    member of another enum) as a member of ``enum``."""
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        return _member(enum, prefix, value)
    if not isinstance(value, (bool, _enum.Enum)) and hasattr(type(value), "__index__"):
        try:
            return enum(operator.index(value))
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{what} must be a {enum.__name__} or its name, not "
                    f"{type(value).__name__} {value!r}")


def devices(device_type: ur_device_type_t | str | None = None,
            backend: Backend | str | None = None) -> list[Device]:
    """All root devices of all adapters, optionally only one type (``"gpu"``, ``"cpu"``) or backend.

    With ``ONEAPI_DEVICE_SELECTOR`` set, the devices UR's ``urDeviceGetSelected`` selects, as in
    SYCL (types, indices, sub-devices, ``!`` terms); ``loader.DeviceSelectorError`` (a
    ``ValueError``) if it is malformed.  It is read when the loader initialises.
    """
    with _cache_lock:
        loader.init()
        if _cache["generation"] != loader.generation():
            _cache["devices"] = _enumerate()
            _cache["generation"] = loader.generation()
        found = list(_cache["devices"])
    if device_type is not None:
        device_type = _choice(ur_device_type_t, "UR_DEVICE_TYPE_", "device_type", device_type)
    if backend is not None:
        backend = _choice(Backend, _compat.BACKEND_PREFIX, "backend", backend)
    if device_type == ur_device_type_t.UR_DEVICE_TYPE_DEFAULT:
        found = _runtime_defaults(found)
    elif device_type not in (None, ur_device_type_t.UR_DEVICE_TYPE_ALL):
        found = [d for d in found if d.type == device_type]
    if backend is not None:
        found = [d for d in found if d.backend == backend]
    return found


def default_device() -> Device:
    """The first GPU if there is one, else the first device; raises ``RuntimeError`` if none."""
    found = devices()
    if not found:
        if loader.selector_text():
            hint = loader.selector_hint(frozenset(
                _selector_name(platform) for adapter in loader.init()
                for platform in adapter.platforms()))
            raise RuntimeError(f"no UR device is selected by {loader.SELECTOR_ENV}="
                               f"{loader.selector_text()!r}"
                               f"{f' ({hint})' if hint else ''}; unset it to use every "
                               "device")
        raise RuntimeError("no UR device found; run `python -m ur_cffi` to see why")
    gpus = [d for d in found if d.type == ur_device_type_t.UR_DEVICE_TYPE_GPU]
    return (gpus or found)[0]
