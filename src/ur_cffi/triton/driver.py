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
- the driver keeps the latest launch's event (:meth:`URDriver.last_event`), released when
  the next launch replaces it; a launch on an in-order queue without profiling takes none, and
  ``last_event()`` enqueues a marker in its place when asked;
- a scope holds its own references to its ``wait_for`` events (``urEventRetain``), so an Event
  closed inside a ``using`` block still orders the block's launches;
- what is cached per context (UR programs, Triton's compiled kernels, device properties) is
  dropped once the context is closed (:meth:`URDriver.forget_closed_contexts`, at the next
  ``using`` or ``activate``), so a context's programs go with it.
"""

from __future__ import annotations

import contextvars
import sys
import weakref

from triton.backends.driver import DriverBase
from triton.runtime.jit import JITFunction

from .. import _compat, _forking
from .._handle import Resource
from .._interrupts import section
from .._ur import ffi, lib
from ..device import Device, default_device, devices
from ..errors import URError, check
from ..graph import GraphCommand
from ..info import query
from ..program import Kernel
from ..queue import (Event, Queue, adopt, enqueue_lock, raw_barrier, raw_enqueue_lock,
                     wait_list)
from . import abi, backend, bench
from .launcher import Launcher


class Scope:
    """Where launches go: a queue, and the events every launch in the scope waits for.

    The scope holds a reference of its own to each event's UR handle until :meth:`close`, so
    closing an Event while the scope is in use never hands UR a released handle."""

    __slots__ = ("queue", "device_key", "wait_for", "wait_count", "wait_events", "_held")

    def __init__(self, queue: Queue, wait_for=()):
        if not isinstance(queue, Queue):
            raise TypeError(f"queue must be a ur_cffi Queue (where Triton launches go), not "
                            f"{type(queue).__name__} {queue!r:.60}")
        queue.handle  # noqa: B018 - raises ClosedError for a closed queue
        self.queue = queue
        self.device_key = (queue.context, queue.device)
        if isinstance(wait_for, (list, tuple)) and any(isinstance(item, GraphCommand)
                                                       for item in wait_for):
            raise TypeError("wait_for takes Event objects, not GraphCommand: a Triton launch "
                            "in an out-of-order Graph recording runs after recorded commands "
                            "only through a recorded barrier (queue.barrier(wait_for=[...]) "
                            "before the launch)")
        self.wait_count, self.wait_events = wait_list(wait_for, queue.context)
        self.wait_for = (wait_for,) if isinstance(wait_for, Event) else \
            () if wait_for is None else tuple(wait_for)
        self._held = _HeldEvents(self.wait_events, self.wait_count) if self.wait_count else None

    def close(self) -> None:
        """Release the scope's references to its wait events; launches still in the scope (an
        asyncio task made inside its block keeps it) wait for nothing more."""
        with enqueue_lock:  # a launch in the scope (another thread's) reads them under it
            self.wait_count, self.wait_events, self.wait_for = 0, ffi.NULL, ()
        if self._held is not None:
            self._held.close()


class _HeldEvents(Resource):
    """References of a :class:`Scope`'s own to its wait events' handles (``urEventRetain``),
    released once, at :meth:`Scope.close`, collection or loader teardown."""

    __slots__ = ()
    _release_function = "urEventRelease"

    def __init__(self, handles, count: int):
        held = []
        try:
            for index in range(count):
                check(lib.urEventRetain(handles[index]), "urEventRetain")
                held.append(handles[index])
        except BaseException:
            _release_events(held)
            raise
        self._own(held, release_args=(held,), release=_release_events)

    def __repr__(self) -> str:
        return f"<{len(self._handle or ())} wait event(s) held by a Triton scope>"


def _release_events(handles: list) -> int:
    result = 0
    while handles:
        result = lib.urEventRelease(handles.pop()) or result
    return result


class Utils:
    """``driver.utils``: device properties, binary loading, waiting."""

    def __init__(self, driver: URDriver):
        self._driver = driver
        self._properties: dict = {}

    def get_device_properties(self, device_key) -> dict:
        """What Triton reads of the device (``max_shared_mem`` before loading a kernel).
        ``device_key``: ``driver.active.get_current_device()``, a ur_cffi Device, or an index
        into ``ur_cffi.devices()`` (what Triton's own drivers and tutorials pass)."""
        props = self._properties.get(device_key) if type(device_key) is tuple else None
        if props is None:
            device = _device_of(device_key)
            key = device_key if type(device_key) is tuple else (None, device)  # see _forget
            props = self._properties.get(key)
            if props is None:
                props = self._properties[key] = _device_properties(device)
        return props

    def load_binary(self, name: str, binary: bytes, shared: int, *rest):
        """``(program, kernel, n_regs, n_spills)`` for a compiled kernel (SPIR-V or cubin) in
        the key's context; Triton 3.6's NVIDIA backend also takes the most threads per block.
        ``rest`` is ``(build_flags, device_key)`` from Intel's Triton, ``(device_key,)`` from
        NVIDIA's."""
        *flags, device_key = rest
        program, kernel = backend.load(name, binary, flags[0] if flags else "", device_key)
        values = (program, kernel, _kernel_info(kernel, "UR_KERNEL_INFO_NUM_REGS"),
                  _kernel_info(kernel, "UR_KERNEL_INFO_SPILL_MEM_SIZE"))
        if backend.triton_backend(device_key[1]) == "nvidia" and \
                abi.current("nvidia").load_binary_values == 5:
            from . import cuda

            values += (cuda.max_threads(kernel, device_key[1]),)
        return values

    def wait(self) -> None:
        """Finish the current queue."""
        self._driver.scope().queue.finish()


def _device_properties(device: Device) -> dict:
    """The properties Triton's drivers report, as far as UR says them: the clock rates in kHz
    and the bus width in bits (``triton.testing.get_dram_gbps``) only where the adapter
    reports them (CUDA's does, the OpenCL CPU one does not)."""
    props = {
        "max_shared_mem": int(device.local_mem_size),
        "multiprocessor_count": int(device.max_compute_units),
        "max_work_group_size": int(device.max_work_group_size),
        "sub_group_sizes": sorted(device.sub_group_sizes),
        "warpSize": backend.gpu_target(device).warp_size,
        "name": device.name,
    }
    for key, name, scale in (("sm_clock_rate", "UR_DEVICE_INFO_MAX_CLOCK_FREQUENCY", 1000),
                             ("mem_clock_rate", "UR_DEVICE_INFO_MEMORY_CLOCK_RATE", 1000),
                             ("mem_bus_width", "UR_DEVICE_INFO_MEMORY_BUS_WIDTH", 1)):
        prop = _compat.enumerator("ur_device_info_t", name)
        try:
            value = int(device.info(prop)) * scale if prop is not None else 0
        except URError:
            value = 0
        if value:
            props[key] = value
    return props


def _device_of(device_key) -> Device:
    """The Device a ``get_device_properties`` argument names."""
    if isinstance(device_key, Device):
        return device_key
    if isinstance(device_key, tuple) and len(device_key) == 2 and \
            isinstance(device_key[1], Device):
        return device_key[1]
    if isinstance(device_key, int) and not isinstance(device_key, bool):
        found = devices()
        if not 0 <= device_key < len(found):
            raise ValueError(f"get_device_properties: device index {device_key} is not one of "
                             f"the {len(found)} of ur_cffi.devices()")
        return found[device_key]
    raise TypeError(f"get_device_properties takes driver.active.get_current_device(), a "
                    f"ur_cffi Device or an index into ur_cffi.devices(), not "
                    f"{type(device_key).__name__} {device_key!r}")


def _kernel_info(kernel: Kernel, name: str) -> int:
    """A register or spill count for Triton's metadata; 0 where the adapter has none (the
    OpenCL CPU adapter answers UNSUPPORTED_ENUMERATION or INVALID_SIZE) or the UR release has
    no such query (``UR_KERNEL_INFO_SPILL_MEM_SIZE`` is new in UR 0.12)."""
    prop = _compat.enumerator("ur_kernel_info_t", name)
    if prop is None:
        return 0
    try:
        return _largest(query("urKernelGetInfo", kernel.handle, prop))
    except URError:
        return 0


def _largest(value) -> int:
    """A count as UR gives it: one number, or one for each of the program's devices (the
    header's ``uint32_t[]`` of ``UR_KERNEL_INFO_SPILL_MEM_SIZE``: the Level Zero adapter
    answers a list); the largest, 0 for none."""
    return max(value, default=0) if isinstance(value, list) else int(value)


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


_made_queue: weakref.ref | None = None
"""The queue ``activate()`` made without one given: the next such call gives it again while it
lives.  Never closed by ur_cffi.triton: arrays made on it keep it (and its context) alive after
``deactivate()``, and it is released when the last of them goes."""

# The ``using`` scopes of each thread and asyncio task (a new thread starts with none; a task,
# with those of the code that made it), innermost last, as (driver, scope) pairs: one variable
# for all drivers, as a context keeps every variable once set in it (one per driver grew
# without end, each ``using()`` block without ``activate()`` making a driver).
_USING_SCOPES = contextvars.ContextVar("ur_cffi.triton using scopes", default=())


class URDriver(DriverBase):
    """Triton's active driver while ur_cffi.triton is active (``ur_cffi.triton.activate``)."""

    def __init__(self):
        super().__init__()
        self.utils = Utils(self)
        self.launcher_cls = self._new_launcher
        self.launch_lock = enqueue_lock  # also guards the launchers' argument blocks
        self.raw_launch_lock = raw_enqueue_lock  # the same, inside an _interrupts.section
        self._default: Scope | None = None
        self._scopes = _USING_SCOPES
        self._last_event: Event | None = None
        self._latest = _LatestEvent()
        self._latest_queue: Queue | None = None
        # Threads in ur_cffi.triton.prepare -> None, until a launcher, instead of launching,
        # puts the PreparedLaunch of the launch there.
        self.preparing: dict = {}
        self._targets: dict = {}
        self._work_groups: dict = {}
        # What keeps per-context caches findable: the contexts of every scope so far, and the
        # JITFunctions used (their device_caches are keyed by (context, device)).  Weak:
        # a context nothing cached holds is not kept alive by being listed.
        self._contexts = weakref.WeakSet()
        self._functions = weakref.WeakSet()
        self._forget_lock = _forking.lock()
        self._closed = False

    # --- where launches go -------------------------------------------------------------

    def set_default_queue(self, queue: Queue | None) -> Queue:
        """Launch on ``queue`` outside ``using`` blocks; None: the in-order profiling queue on
        ``ur_cffi.default_device()`` that an earlier None made, while it lives, else a new one
        (see :data:`_made_queue`)."""
        global _made_queue
        if queue is None:
            queue = _made_queue() if _made_queue is not None else None
            if queue is None or queue.closed or queue.context.closed:
                device = default_device()
                queue = Queue(device.create_context(), device, profiling=True)
                _made_queue = weakref.ref(queue)
        self._default = self._note_context(Scope(queue))
        return queue

    def clear_default_queue(self) -> None:
        """No queue outside ``using`` blocks any more (the driver's reference to it goes)."""
        self._default = None

    def scope(self) -> Scope:
        """The innermost ``using`` scope of this thread or task, else the default one."""
        for driver, scope in reversed(self._scopes.get()):
            if driver is self:
                return scope
        if self._default is None:
            if self._closed:  # a CompiledKernel kept from then, launched by hand
                raise RuntimeError(
                    "this compiled kernel was loaded while an earlier ur_cffi.triton session "
                    "was active (ended by deactivate() or its last using() block): launch it "
                    "through kernel[grid], which loads it for the current one")
            raise RuntimeError("ur_cffi.triton has no queue: call ur_cffi.triton.activate()")
        return self._default

    def current_queue(self) -> Queue | None:
        """The queue of :meth:`scope`, or None where there is none."""
        scope = next((scope for driver, scope in reversed(self._scopes.get())
                      if driver is self), self._default)
        return None if scope is None else scope.queue

    def push(self, scope: Scope) -> None:
        """Enter a ``using`` block in this thread or task."""
        self._scopes.set((*self._scopes.get(), (self, self._note_context(scope))))

    def pop(self, scope: Scope) -> None:
        """Leave the ``using`` block entered with ``scope``, wherever it is in this thread's or
        task's stack (a generator's block may end after those entered inside it)."""
        stack = self._scopes.get()
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][1] is scope:
                self._scopes.set(stack[:index] + stack[index + 1:])
                return

    # --- per-context caches -------------------------------------------------------------

    def _note_context(self, scope: Scope) -> Scope:
        """Note ``scope``'s context, first forgetting contexts closed since; returns it."""
        self.forget_closed_contexts()
        with self._forget_lock:
            self._contexts.add(scope.device_key[0])
        return scope

    def forget_closed_contexts(self) -> None:
        """Drop what is cached for contexts closed since: their UR programs (``programs.py``),
        Triton's compiled kernels for them (each JITFunction's ``device_caches`` entry, with
        its UR kernels) and their device properties.  The UR objects are released once
        nothing else holds them (a ``prepare``'d launch holds its kernel)."""
        with self._forget_lock:
            closed = {context for context in self._contexts if context.closed}
            if closed:
                self._forget(closed)

    def _forget(self, contexts: set) -> None:
        """What :meth:`forget_closed_contexts` does, for ``contexts``; ``_forget_lock`` held."""
        from . import programs

        for context in contexts:
            self._contexts.discard(context)
        programs.forget(contexts)
        for function in list(self._functions):
            caches = getattr(function, "device_caches", {})
            for key in list(caches):
                if isinstance(key, tuple) and key and key[0] in contexts:
                    caches.pop(key, None)
        properties = self.utils._properties
        for key in list(properties):
            if key[0] in contexts:
                properties.pop(key, None)

    def _new_launcher(self, src, metadata) -> Launcher:
        """``launcher_cls``: a :class:`Launcher`; notes the JITFunction whose kernel it is."""
        function = getattr(src, "fn", None)
        if function is not None:
            self._functions.add(function)
        return Launcher(src, metadata, self)

    # --- launch events -----------------------------------------------------------------

    def record(self, handle, queue: Queue) -> None:
        """Keep ``handle`` (a launch's new event, or None: see :meth:`last_event`) as the
        latest launch's; the previous one is released unless :meth:`last_event` handed it
        out.  Called by launchers with ``launch_lock`` held.  The Event object is made only
        when asked for."""
        latest = self._latest
        previous = latest.handle_slot[0]
        latest.handle_slot[0], self._latest_queue, self._last_event = handle, queue, None
        queue._last_event = None  # Queue.finish probes with a barrier instead
        if previous is not None:
            lib.urEventRelease(previous)

    def last_event(self) -> Event | None:
        """The :class:`~ur_cffi.Event` of the latest launch (any thread), None before one.

        A launch on an in-order queue without profiling takes no event of its own (each
        costs the runtime's event, microseconds on CUDA): the first call after it enqueues a
        marker on that queue (a barrier waiting for nothing else), which completes when the
        launch has.  Had other commands been
        enqueued there after the launch, the marker completes with them too; had the queue
        been closed (so finished), there is no event: None.  Callers share the Event; once a
        caller closed it, the next call makes a marker in its place, as above."""
        with self.launch_lock:
            queue = self._latest_queue
            if self._last_event is not None and self._last_event.closed:
                self._last_event = None  # its handle went with it: the slot is empty
            if self._last_event is None and queue is not None:
                slot = self._latest.handle_slot
                with section:  # one owner at a time, even if interrupted
                    handle = slot[0]
                    if handle is None:  # launch_lock is the enqueue lock
                        handle = raw_barrier(queue, keep_event=True, locked=True)
                        if handle is None:  # another thread closed the queue
                            return None
                    slot[0] = None
                    try:
                        self._last_event = Event._of(handle, queue)
                    except BaseException:
                        adopt(handle)
                        raise
            return self._last_event

    def mark_empty_launch(self, queue: Queue, scope: Scope) -> None:
        """A launch over an empty grid runs nothing; its event is a marker in its place."""
        out = ffi.new("ur_event_handle_t *")
        with self.launch_lock:
            check(lib.urEnqueueEventsWait(queue.handle, scope.wait_count, scope.wait_events,
                                          out), "urEnqueueEventsWait")
            if scope.wait_count:
                queue._note_work(None, 1)  # it waits for other work (_durations)
            self.record(out[0], queue)

    def check_work_group(self, num_warps: int, threads_per_warp: int) -> None:
        """Raise ``backend.UnlaunchableConfig`` (a ``ValueError``) unless the current device
        runs ``threads_per_warp``-wide sub-groups and work-groups of
        ``num_warps * threads_per_warp``."""
        device = self.scope().queue.device
        limits = self._work_groups.get(device)
        if limits is None:
            limits = self._work_groups[device] = (sorted(device.sub_group_sizes),
                                                  int(device.max_work_group_size))
        backend.check_work_group(device.name, *limits, num_warps, threads_per_warp)

    # --- DriverBase --------------------------------------------------------------------

    @classmethod
    def is_active(cls) -> bool:
        """Installed with ``set_active``, never picked by Triton's own discovery."""
        return True

    def get_current_device(self):
        """``(context, device)`` of the current queue (Triton's per-device cache key)."""
        stack = self._scopes.get()  # scope(), inlined: Triton asks on every launch
        if stack and stack[-1][0] is self:
            return stack[-1][1].device_key
        return (not stack and self._default or self.scope()).device_key

    def set_current_device(self, device_key) -> None:
        """Not supported: choose the device by choosing the queue (``using``)."""
        raise NotImplementedError("choose the device with ur_cffi.triton.using(queue)")

    def get_current_stream(self, device=None) -> Queue:
        """The ur_cffi Queue launches go to."""
        stack = self._scopes.get()  # scope(), inlined: Triton asks on every launch
        if stack and stack[-1][0] is self:
            return stack[-1][1].queue
        return (not stack and self._default or self.scope()).queue

    def get_current_target(self):
        """The ``GPUTarget`` of the current queue's device (``target.py``).

        A JITFunction asks as it makes its cache for the current (context, device)
        (``create_binder``): it is noted then, so that the cache goes with the context even
        where no launch loads a kernel (``warmup()``, a launch refused as it binds)."""
        caller = sys._getframe(1).f_locals.get("self")
        if isinstance(caller, JITFunction):
            self._functions.add(caller)
        device = self.scope().queue.device
        found = self._targets.get(device)
        if found is None:
            found = self._targets[device] = backend.gpu_target(device)
        return found

    def map_python_to_cpp_type(self, ty: str) -> str:
        """The C type of a Triton scalar type as launches pass it (Triton 3.6's abstract
        ``DriverBase`` method)."""
        if ty.startswith("*"):
            return "void*"
        return {"b": "int8_t", "h": "int16_t", "i": "int32_t", "q": "int64_t", "B": "uint8_t",
                "H": "uint16_t", "I": "uint32_t", "Q": "uint64_t", "e": "uint16_t",
                "f": "float", "d": "double"}[self._rules().scalar_format(ty)]

    def _rules(self):
        """The launch rules of the installed Triton for the current queue's device."""
        return abi.current(backend.triton_backend(self.scope().queue.device))

    def get_active_torch_device(self):
        """There is no torch device: ur_cffi.triton runs without PyTorch."""
        raise RuntimeError(
            "ur_cffi.triton runs without PyTorch: there is no torch device. The queue Triton "
            "launches on is driver.active.get_current_stream() (its device: .device); make "
            "arrays with ur_cffi.empty(..., queue=queue) or ur_cffi.asarray(numpy_array, "
            "queue=queue)")

    def get_benchmarker(self):
        """``do_bench`` on UR profiling events (``bench.py``)."""
        return bench.benchmark

    def get_device_interface(self):
        """What ``do_bench`` uses for ``synchronize()``; asked before its first call of the
        function it times, so refused in a Graph recording there (``bench.not_recording``)."""
        bench.not_recording("triton.testing.do_bench")
        return bench.DeviceInterface()

    def get_empty_cache_for_benchmark(self):
        """A device buffer ``do_bench`` overwrites between runs."""
        return bench.empty_cache(self.scope().queue)

    def clear_cache(self, cache) -> None:
        """Overwrite ``cache`` on the current queue."""
        bench.clear_cache(cache)

    def close(self) -> None:
        """Drop the latest launch's Event and the default queue, and drop what is cached per
        context: Triton's compiled kernels launch through the driver that
        loaded them, so a later driver compiles (from Triton's cache) and loads them again."""
        with self.launch_lock:
            self._last_event = self._latest_queue = None
            self._latest.close()
            self._closed = True
        self.clear_default_queue()
        with self._forget_lock:
            self._forget(set(self._contexts))

    def __repr__(self) -> str:
        queue = self._default.queue if self._default else None
        return f"<ur_cffi.triton.URDriver default queue {queue!r}>"
