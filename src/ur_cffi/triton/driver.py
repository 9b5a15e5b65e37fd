"""The Triton driver for UR: what ``triton.runtime.driver.set_active`` installs.

Triton's JIT asks its active driver for the device (a cache key), the stream (passed back to
the launcher), the compile target, a launcher class, and ``utils.load_binary`` /
``utils.get_device_properties`` / ``utils.wait``; ``do_bench`` and ``@triton.autotune`` ask for
a device interface, a cache to clear and a benchmarker.  :class:`URDriver` answers all of it
from ur_cffi objects:

- the stream is the ur_cffi :class:`~ur_cffi.Queue` of the current :class:`Scope` (the
  innermost ``using(queue)`` block of this thread, else the queue given to ``activate``);
- the device is ``(context, device)`` of that queue: Triton keeps compiled kernels per device,
  and a loaded UR kernel belongs to one context;
- every launch makes an :class:`~ur_cffi.Event`; the driver keeps the latest one
  (:meth:`URDriver.last_event`), so it is released when the next launch replaces it.
"""

from __future__ import annotations

import threading

from triton.backends.driver import DriverBase

from .. import _release
from .._handle import Resource
from .._ur import ffi, lib
from ..device import default_device
from ..errors import URError, check
from ..info import query
from ..program import Kernel
from ..queue import Event, Queue, enqueue_lock, wait_list
from . import bench, programs, target
from .launcher import Launcher


class Scope:
    """Where launches go: a queue, and the events every launch in the scope waits for."""

    __slots__ = ("queue", "device_key", "wait_for", "wait_count", "wait_events")

    def __init__(self, queue: Queue, wait_for=()):
        if not isinstance(queue, Queue):
            raise TypeError(f"Triton launches need a ur_cffi Queue, not {type(queue).__name__}")
        queue.handle  # noqa: B018 - raises ClosedError for a closed queue
        self.queue = queue
        self.device_key = (queue.context, queue.device)
        self.wait_for = (wait_for,) if isinstance(wait_for, Event) else tuple(wait_for)
        self.wait_count, self.wait_events = wait_list(self.wait_for)


class _Scopes(threading.local):
    """Each thread's stack of ``using`` scopes (a ``threading.local`` subclass, so the stack
    exists in every thread without a failing attribute lookup on the launch path)."""

    def __init__(self):
        self.stack: list[Scope] = []


class Utils:
    """``driver.utils``: device properties, binary loading, waiting."""

    def __init__(self, driver: URDriver):
        self._driver = driver
        self._properties: dict = {}

    def get_device_properties(self, device_key) -> dict:
        """What Triton reads of the device (``max_shared_mem`` before loading a kernel)."""
        props = self._properties.get(device_key)
        if props is None:
            device = device_key[1]
            props = self._properties[device_key] = {
                "max_shared_mem": int(device.local_mem_size),
                "multiprocessor_count": int(device.max_compute_units),
                "max_work_group_size": int(device.max_work_group_size),
                "sub_group_sizes": sorted(device.sub_group_sizes),
                "name": device.name,
            }
        return props

    def load_binary(self, name: str, il: bytes, shared: int, build_flags: str, device_key):
        """``(program, kernel, n_regs, n_spills)`` for SPIR-V ``il`` in the key's context."""
        context, device = device_key
        program = programs.load(context, device, il, build_flags)
        kernel = Kernel(program, name)
        return program, kernel, _kernel_info(kernel, "UR_KERNEL_INFO_NUM_REGS"), \
            _kernel_info(kernel, "UR_KERNEL_INFO_SPILL_MEM_SIZE")

    def wait(self) -> None:
        """Finish the current queue."""
        self._driver.scope().queue.finish()


def _kernel_info(kernel: Kernel, name: str) -> int:
    """A register or spill count for Triton's metadata; 0 where the adapter has none (the
    OpenCL CPU adapter answers UNSUPPORTED_ENUMERATION or INVALID_SIZE) or the UR release has
    no such query (``UR_KERNEL_INFO_SPILL_MEM_SIZE`` is new in UR 0.12)."""
    prop = _release.enumerator("ur_kernel_info_t", name)
    if prop is None:
        return 0
    try:
        return int(query("urKernelGetInfo", kernel.handle, prop))
    except URError:
        return 0


class _LatestEvent(Resource):
    """The latest launch's event handle until :meth:`URDriver.last_event` wraps it: raw, as a
    launch makes no Python object for it, but owned here so teardown releases it."""

    __slots__ = ("handle_slot",)

    def __init__(self):
        self.handle_slot = [None]
        self._own(self.handle_slot, release_args=(self.handle_slot,), release=_release_slot)

    def __repr__(self) -> str:
        return f"<latest Triton launch event {'held' if self.handle_slot[0] else 'none'}>"


def _release_slot(slot: list) -> int:
    handle, slot[0] = slot[0], None
    return 0 if handle is None else lib.urEventRelease(handle)


class URDriver(DriverBase):
    """Triton's active driver while ur_cffi.triton is active (``ur_cffi.triton.activate``)."""

    def __init__(self):
        super().__init__()
        self.utils = Utils(self)
        self.launcher_cls = lambda src, metadata: Launcher(src, metadata, self)
        self.launch_lock = enqueue_lock  # also guards the launchers' argument blocks
        self._default: Scope | None = None
        self._owned_queue: Queue | None = None
        self._scopes = _Scopes()
        self._last_event: Event | None = None
        self._latest = _LatestEvent()
        self._latest_queue: Queue | None = None
        # Threads in ur_cffi.triton.prepare -> None, until a launcher, instead of launching,
        # puts the PreparedLaunch of the launch there.
        self.preparing: dict = {}
        self._targets: dict = {}
        self._work_groups: dict = {}

    # --- where launches go -------------------------------------------------------------

    def set_default_queue(self, queue: Queue | None) -> Queue:
        """Launch on ``queue`` outside ``using`` blocks; None makes (and owns) an in-order
        profiling queue on ``ur_cffi.default_device()``."""
        owned = None
        if queue is None:
            device = default_device()
            owned = queue = Queue(device.create_context(), device, profiling=True)
        self._default = Scope(queue)
        previous, self._owned_queue = self._owned_queue, owned
        if previous is not None and previous is not queue:
            previous.close()
        return queue

    def scope(self) -> Scope:
        """The innermost ``using`` scope of this thread, else the default one."""
        stack = self._scopes.stack
        if stack:
            return stack[-1]
        if self._default is None:
            raise RuntimeError("ur_cffi.triton has no queue: call ur_cffi.triton.activate()")
        return self._default

    def push(self, scope: Scope) -> None:
        """Enter a ``using`` block on this thread."""
        self._scopes.stack.append(scope)

    def pop(self, scope: Scope) -> None:
        """Leave the ``using`` block entered with ``scope``."""
        stack = self._scopes.stack
        if not stack or stack[-1] is not scope:
            raise RuntimeError("ur_cffi.triton.using blocks must be left in reverse order")
        stack.pop()

    # --- launch events -----------------------------------------------------------------

    def record(self, handle, queue: Queue) -> None:
        """Keep ``handle`` (a launch's new event) as the latest launch's; the previous one is
        released unless :meth:`last_event` handed it out.  Called by launchers with
        ``launch_lock`` held.  The Event object is made only when asked for."""
        latest = self._latest
        previous = latest.handle_slot[0]
        latest.handle_slot[0], self._latest_queue, self._last_event = handle, queue, None
        queue._last_event = None  # Queue.finish probes with a barrier instead
        if previous is not None:
            lib.urEventRelease(previous)

    def last_event(self) -> Event | None:
        """The :class:`~ur_cffi.Event` of the latest launch (any thread), None before one."""
        with self.launch_lock:
            slot = self._latest.handle_slot
            if self._last_event is None and slot[0] is not None:
                self._last_event = Event(slot[0], self._latest_queue)
                slot[0] = None
            return self._last_event

    def mark_empty_launch(self, queue: Queue, scope: Scope) -> None:
        """A launch over an empty grid runs nothing; its event is a marker in its place."""
        out = ffi.new("ur_event_handle_t *")
        with self.launch_lock:
            check(lib.urEnqueueEventsWait(queue.handle, scope.wait_count, scope.wait_events,
                                          out), "urEnqueueEventsWait")
            self.record(out[0], queue)

    def check_work_group(self, num_warps: int, threads_per_warp: int) -> None:
        """Raise ``ValueError`` unless the current device runs ``threads_per_warp``-wide
        sub-groups and work-groups of ``num_warps * threads_per_warp``."""
        device = self.scope().queue.device
        limits = self._work_groups.get(device)
        if limits is None:
            limits = self._work_groups[device] = (sorted(device.sub_group_sizes),
                                                  int(device.max_work_group_size))
        sizes, largest = limits
        if threads_per_warp not in sizes:
            raise ValueError(f"threads_per_warp={threads_per_warp} is not a sub-group size of "
                             f"{device.name!r} (it has {sizes})")
        if num_warps * threads_per_warp > largest:
            raise ValueError(f"num_warps={num_warps} x threads_per_warp={threads_per_warp} "
                             f"exceeds the largest work-group of {device.name!r} ({largest})")

    # --- DriverBase --------------------------------------------------------------------

    @classmethod
    def is_active(cls) -> bool:
        """Installed with ``set_active``, never picked by Triton's own discovery."""
        return True

    def get_current_device(self):
        """``(context, device)`` of the current queue (Triton's per-device cache key)."""
        return self.scope().device_key

    def set_current_device(self, device_key) -> None:
        """Not supported: choose the device by choosing the queue (``using``)."""
        raise NotImplementedError("choose the device with ur_cffi.triton.using(queue)")

    def get_current_stream(self, device=None) -> Queue:
        """The ur_cffi Queue launches go to."""
        return self.scope().queue

    def get_current_target(self):
        """The ``GPUTarget`` of the current queue's device (``target.py``)."""
        device = self.scope().queue.device
        found = self._targets.get(device)
        if found is None:
            found = self._targets[device] = target.gpu_target(device)
        return found

    def get_active_torch_device(self):
        """There is no torch device: ur_cffi.triton runs without PyTorch."""
        raise RuntimeError("ur_cffi.triton runs without PyTorch: there is no torch device")

    def get_benchmarker(self):
        """``do_bench`` on UR profiling events (``bench.py``)."""
        return bench.benchmark

    def get_device_interface(self):
        """What ``do_bench`` uses for ``synchronize()``."""
        return bench.DeviceInterface()

    def get_empty_cache_for_benchmark(self):
        """A device buffer ``do_bench`` overwrites between runs."""
        return bench.empty_cache(self.scope().queue)

    def clear_cache(self, cache) -> None:
        """Overwrite ``cache`` on the current queue."""
        bench.clear_cache(cache)

    def close(self) -> None:
        """Drop the latest launch's Event and close the queue this driver made, if any."""
        with self.launch_lock:
            self._last_event = self._latest_queue = None
            self._latest.close()
        self._default = None
        if self._owned_queue is not None:
            self._owned_queue.close()
            self._owned_queue = None

    def __repr__(self) -> str:
        queue = self._default.queue if self._default else None
        return f"<ur_cffi.triton.URDriver default queue {queue!r}>"
