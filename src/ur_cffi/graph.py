"""Graphs: kernel launches, USM copies and fills recorded once and replayed with one enqueue.

::

    graph = ur_cffi.Graph(context)                  # of one context and device
    with ur_cffi.triton.using(queue), graph.recording(queue):  # what is submitted to `queue`
        kernel.launch(queue, n, 64, x, y, 2.0, n)   # in the block goes into the graph instead
        y.copy_to(z, blocking=False)
        triton_kernel[grid](z, n, BLOCK=256)        # ur_cffi.triton's launches on it too
    event = graph.replay(queue, wait_for=[...])     # every command, one enqueue

Where the UR release and the device have command buffers (:attr:`Graph.native`), a graph is a
UR command buffer (``urCommandBufferCreateExp``, appends, ``urCommandBufferFinalizeExp``,
``urEnqueueCommandBufferExp``).  Elsewhere it keeps its commands and a replay enqueues them one
by one, in the same order and with the same dependencies, so code written for graphs runs
everywhere; ``Graph(..., native=False)`` or ``UR_CFFI_GRAPH_NATIVE=0`` chooses that, and a graph
left to choose turns to it when the device's command buffers refuse a command as unsupported
(oneAPI 2025.2's CPU runtime takes launches but no USM copies), or at a 2-D copy (rows of a
strided view: UR has no command-buffer append for ``urEnqueueUSMMemcpy2D``).  Which headers'
command-buffer functions ur_cffi drives is settled in ``_compat`` (oneAPI 2025.2 on).

Recording.  In a :meth:`Graph.recording` block every command submitted to its queue, by any
thread, is recorded, not run: ``Kernel.launch``, calls of a ``PreparedLaunch``
(``Kernel.prepare``, ``ur_cffi.triton.prepare``), Triton's ``kernel[grid](...)`` (the block
makes its queue this thread's Triton queue while ``ur_cffi.triton`` is active), USM copies and
fills (``USMArray.copy_from``, ``copy_to``, ``fill``) and ``Queue.barrier``.  Each returns a
:class:`GraphCommand` where it returned an Event (None with ``event=False``).  Arguments are
taken when recorded (values by value, arrays by address); the host memory of a copy is read or
written at every replay.  ``blocking=`` has no effect, as nothing runs; a blocking copy into host
memory raises, its data would exist only after a replay; arrays made in the block
(``asarray``, ``zeros``) get their contents at each replay.  Everything is checked when
recorded, as when enqueued.  :meth:`Graph.launch`, :meth:`Graph.copy`, :meth:`Graph.fill` and
:meth:`Graph.add` record without a block.

Dependencies.  In an in-order graph (the default) every command runs after the one recorded
before it.  In a graph made with ``in_order=False`` a command runs after the ``GraphCommand``
objects in its ``wait_for=`` (``after=``), and after everything a recorded barrier waited for;
nothing else orders it.  Events of the queue cannot be waited for inside a graph: a replay
waits for them (``replay(queue, wait_for=[...])``).

Replays.  :meth:`Graph.replay` finalizes the graph if needed, runs on any queue of its context
and device after ``wait_for`` and after the graph's previous replay, and returns an Event of the
whole replay.  :meth:`GraphCommand.update` changes a recorded launch's arguments and sizes
between replays, where the device's command buffers can (else ``NotImplementedError`` naming
the missing ``UR_DEVICE_COMMAND_BUFFER_UPDATE_CAPABILITY_FLAG_*``; replaying one by one, always).

Lifetime.  A graph keeps what its commands use (kernels, with a UR reference of its own, and so
their programs; arrays; the host memory of copies) until it is closed; closing waits for its
latest replay.  A replay raises ``ClosedError`` if an array it uses was closed since.
"""

from __future__ import annotations

import contextlib
import struct
import sys
from typing import NamedTuple

import numpy as np

from . import _checks, _compat, _durations, _forking, _handle, _waiting
from . import _interrupts
from ._interrupts import hold_back_in, section
from ._compat import LOCAL, MEM_OBJ, POINTER, VALUE, read_argument, write_argument
from ._ur import ffi, lib
from .enums import ur_result_t, ur_structure_type_t
from .errors import UNSUPPORTED, URError, check
from .memory import Buffer, USMArray, memory_of
from .program import Kernel, PreparedLaunch, _sizes, check_integer_addresses, integer_addresses
from .queue import Event, Queue, ReplayEvent, enqueue_lock, recording, wait_list

_NULL = ffi.NULL
_EVENT_OUT = ffi.typeof("ur_event_handle_t *")
_STYPE = ur_structure_type_t

_recording_lock = _forking.lock()  # guards ``queue.recording``

_FLAG = "UR_DEVICE_COMMAND_BUFFER_UPDATE_CAPABILITY_FLAG_"
_CAPABILITIES = _compat.UPDATE_CAPABILITIES
_ARGUMENTS, _LOCAL, _GLOBAL, _OFFSET = _CAPABILITIES.values()


def command_buffer_support(device) -> tuple[bool, int, str]:
    """``(native, update capabilities, why not native)`` of ``device`` for this UR release:
    whether a :class:`Graph` on it is a UR command buffer, and the
    ``UR_DEVICE_INFO_COMMAND_BUFFER_UPDATE_CAPABILITIES_EXP`` bits."""
    if not _compat.HAS_COMMAND_BUFFERS:
        return False, 0, ("the command-buffer functions of the UR header ur_cffi was built from "
                          "are of an older shape than it drives (oneAPI 2025.2 on)")
    support = _compat.enumerator("ur_device_info_t", "UR_DEVICE_INFO_COMMAND_BUFFER_SUPPORT_EXP")
    updates = _compat.enumerator("ur_device_info_t",
                                 "UR_DEVICE_INFO_COMMAND_BUFFER_UPDATE_CAPABILITIES_EXP")
    try:
        if not device.info(support):
            return False, 0, (f"{device.name!r} has no UR command buffers "
                              "(UR_DEVICE_INFO_COMMAND_BUFFER_SUPPORT_EXP is false)")
        return True, int(device.info(updates)), ""
    except URError as error:
        return False, 0, f"{device.name!r} does not say whether it has command buffers ({error})"


class GraphCommand:
    """A command recorded into a :class:`Graph`: what a recorded call returns in place of an
    Event, and what later commands take in ``wait_for=`` (``after=``)."""

    __slots__ = ("graph", "_points", "_command")

    def __init__(self, graph: Graph, points: frozenset, command):
        self.graph, self._points, self._command = graph, points, command

    @property
    def kind(self) -> str:
        """``"launch"``, ``"copy"``, ``"fill"``, or ``"marker"`` (a barrier, an empty copy,
        or a strided copy recorded as one copy per row: no command of its own, a point to
        wait for)."""
        return "marker" if self._command is None else self._command.kind

    @property
    def kernel(self) -> Kernel | None:
        """The kernel of a launch, else None."""
        return self._command.kernel if self.kind == "launch" else None

    def update(self, *args, global_size=None, local_size=None, global_offset=None, grid=None,
               **by_name) -> None:
        """Change this launch for the replays to come (those in flight are waited for first).

        A launch recorded from ``Kernel.launch``, ``Kernel.prepare``, ``Graph.launch`` or
        ``ur_cffi.triton.prepare`` takes the kernel's whole argument list again, checked as
        ``Kernel.launch`` checks it (arrays and views give their addresses), and
        ``global_size``/``local_size``/``global_offset`` (None keeps them).  A Triton
        ``kernel[grid]`` launch takes its parameters by name (``x_ptr=array, n=100``) and
        ``grid=``; Triton compiled it for its specialization: integers recorded divisible by 16
        must stay so, and pointers 16-byte aligned.

        Finalizes the graph first if needed, as a replay does.  Raises ``NotImplementedError``
        naming the capability the device's command buffers lack, ``TypeError``/``ValueError``
        for arguments as a launch would, ``RuntimeError`` inside a recording block."""
        if self.kind != "launch":
            raise TypeError(f"only a recorded kernel launch can be updated, not a {self.kind}")
        self.graph._update(self._command, args, by_name, global_size, local_size,
                           global_offset, grid)

    def wait(self) -> None:
        """Raises: a recorded command runs at each replay; wait for the replay's Event."""
        raise RuntimeError("a GraphCommand is recorded, not run: wait for the Event that "
                           "graph.replay(queue) returns")

    def __repr__(self) -> str:
        what = self.kind if self.kind != "launch" else f"launch of {self.kernel.name!r}"
        return f"<GraphCommand {what} of {self.graph!r}>"


_WAITS = "wait_for (after= of Graph's methods)"
"""What a recorded command's dependencies are given as, named in their errors."""


class Graph(_handle.Resource):
    """Kernel launches, USM copies and fills of one context and device, recorded once
    (:meth:`recording`) and replayed with one enqueue each time (:meth:`replay`).

    ``in_order`` (default): every command after the one recorded before it; else each after
    the commands it waits for.  ``native``: None uses a UR command buffer where the release and
    the device have them (``UR_CFFI_GRAPH_NATIVE=0`` says no) and replays command by command
    from the first command they refuse as unsupported; False replays command by command; True
    raises ``NotImplementedError`` (saying why) where there is no command buffer, and the
    device's error for a command it refuses.  :attr:`native` says which the graph is.
    """

    __slots__ = ("context", "device", "in_order", "native", "_auto", "_capabilities", "_why",
                 "_state", "_commands", "_lock", "_recorders", "_blocks", "_finalized",
                 "_broken_by", "_floor", "_memory", "_checked", "_latest_queue", "_replay_queue",
                 "_timing")
    _release_function = "urCommandBufferReleaseExp"

    def __init__(self, context, device=None, *, in_order: bool = True, native: bool | None = None):
        from .context import Context

        if not isinstance(context, Context):
            raise TypeError(f"context must be a ur_cffi Context, not {type(context).__name__}")
        in_order = _checks.flag("Graph: in_order", in_order)
        native = _checks.optional_flag("Graph: native", native)
        context.handle  # noqa: B018 - raises ClosedError
        device = context.devices[0] if device is None else device
        if device not in context.devices:
            raise ValueError(f"{device!r} is not a device of {context!r}")
        supported, capabilities, why = command_buffer_support(device)
        self._auto = native is None
        if native is None:
            native = _checks.env_flag("UR_CFFI_GRAPH_NATIVE", True) and supported
            why = why or "UR_CFFI_GRAPH_NATIVE=0"
        elif native and not supported:
            raise NotImplementedError(f"no native graph: {why}")
        else:
            why = why or "native=False"
        self.context, self.device, self.in_order, self.native = context, device, in_order, native
        self._capabilities = capabilities
        self._why = "" if native else why
        self._state = state = _State()
        self._timing = _durations.Timing()  # how long a replay takes, once a wait measured it
        self._commands: list = state.commands
        self._lock = _forking.lock(reentrant=True)
        self._recorders: dict = {}  # queue -> how many uses record it into this graph now
        self._blocks = 0  # recording blocks open
        self._finalized = False
        self._broken_by = None  # what a recording block ended with: the graph lacks the rest
        self._floor: frozenset = frozenset()  # what a recorded barrier ordered later commands after
        self._memory: list = []  # arrays and buffers the commands use
        self._checked = _handle.release_count
        self._latest_queue = self._replay_queue = None
        handle = state
        if native:
            desc = ffi.new("ur_exp_command_buffer_desc_t *", {
                "stype": _STYPE.UR_STRUCTURE_TYPE_EXP_COMMAND_BUFFER_DESC,
                "isUpdatable": capabilities != 0, "isInOrder": in_order})
            out = ffi.new("ur_exp_command_buffer_handle_t *")
        with section:
            if native:
                check(lib.urCommandBufferCreateExp(context.handle, device.handle, desc, out),
                      "urCommandBufferCreateExp")
                handle = state.buffer = out[0]
            self._own(handle, parents=(context, device), release_args=(state,),
                      release=_release_graph)

    @property
    def update_capabilities(self) -> int:
        """The ``UR_DEVICE_COMMAND_BUFFER_UPDATE_CAPABILITY_FLAG_*`` bits updates may use: the
        device's for a native graph; every one when replaying command by command."""
        return self._capabilities if self.native else sum(_CAPABILITIES.values())

    @property
    def finalized(self) -> bool:
        """Whether recording is over (:meth:`finalize`, or the first replay)."""
        return self._finalized

    @property
    def commands(self) -> tuple[GraphCommand, ...]:
        """The recorded commands, in recording order (markers left out)."""
        return tuple(GraphCommand(self, frozenset((index,)), command)
                     for index, command in enumerate(self._commands))

    # --- recording ------------------------------------------------------------------------

    @contextlib.contextmanager
    @hold_back_in  # Ctrl-C while the block is entered or left: once it is (not in the block)
    def recording(self, queue: Queue | None = None):
        """A block in which what is submitted to ``queue`` (any queue of the graph's context
        and device; None: one the graph makes) is recorded into the graph instead of run;
        yields the queue.  Raises ``RuntimeError`` once the graph is finalized or while
        ``queue`` records into another graph.  An exception that ends the block leaves the
        graph unusable (it would lack what the block did not record): its replay, update or
        finalize raises ``RuntimeError`` naming it."""
        queue = self._own_queue() if queue is None else self._check_queue(queue, "recording")
        with self._registered(queue, block=True), _triton_scope(queue):
            try:
                yield queue
            except BaseException as error:
                self._broken_by = self._broken_by or f"{type(error).__name__}: {error}"
                raise

    def launch(self, kernel: Kernel, global_size, local_size, *args, after=(),
               global_offset=None) -> GraphCommand:
        """Record ``kernel.launch(queue, global_size, local_size, *args)`` after the commands
        ``after``; checked as the launch would be."""
        if not isinstance(kernel, Kernel):
            raise TypeError(f"launch takes a ur_cffi Kernel, not {type(kernel).__name__} "
                            f"{kernel!r}")
        with self._explicit() as queue:
            return kernel.launch(queue, global_size, local_size, *args, wait_for=after,
                                 global_offset=global_offset)

    def copy(self, destination, source, *, after=()) -> GraphCommand:
        """Record a copy between a USMArray and a USMArray or numpy array (whose memory is
        read or written at each replay), after the commands ``after``."""
        with self._explicit() as queue:
            if isinstance(destination, USMArray):
                return destination.copy_from(source, queue=queue, blocking=False,
                                             wait_for=after)
            if isinstance(source, USMArray):
                return source.copy_to(destination, queue=queue, blocking=False, wait_for=after)
        raise TypeError(f"copy needs a USMArray on one side, not {type(destination).__name__} "
                        f"and {type(source).__name__}")

    def fill(self, array: USMArray, value, *, offset: int = 0, count: int | None = None,
             after=()) -> GraphCommand:
        """Record ``array.fill(value, offset=offset, count=count)`` after the commands
        ``after``."""
        if not isinstance(array, USMArray):
            raise TypeError(f"fill takes a USMArray, not {type(array).__name__} {array!r}")
        with self._explicit() as queue:
            return array.fill(value, offset=offset, count=count, queue=queue, blocking=False,
                              wait_for=after)

    def add(self, launch: PreparedLaunch, *, after=()) -> GraphCommand:
        """Record a prepared launch (``Kernel.prepare``, ``ur_cffi.triton.prepare``) after the
        commands ``after``."""
        if not isinstance(launch, PreparedLaunch):
            raise TypeError(f"add takes a PreparedLaunch, not {type(launch).__name__}")
        if launch.queue.context is not self.context or launch.queue.device is not self.device:
            raise ValueError(f"add: {launch!r} is not of the graph's context and device")
        # (Its queue, closed or not, only said where it was checked: nothing runs there.)
        for memory in launch._memories:
            if memory is not None:
                memory.handle  # noqa: B018 - raises ClosedError
        if launch._released != _handle.release_count:  # (the graph's replays check from now on)
            check_integer_addresses(launch.kernel, self.context, launch._addresses)
        return self._record(_Launch(launch.kernel, launch._call_args[0], launch.args,
                                    launcher=launch.launcher, keep=launch._buffers,
                                    memories=launch._memories), after, True)

    def finalize(self) -> None:
        """End recording (``urCommandBufferFinalizeExp``); the first replay does it if needed.
        Raises ``RuntimeError`` inside a :meth:`recording` block."""
        with self._lock:
            self.handle  # noqa: B018 - raises ClosedError
            if self._finalized:
                return
            if self._blocks:
                raise RuntimeError("finalize the graph after its recording blocks")
            self._check_unbroken()
            if self.native:
                check(lib.urCommandBufferFinalizeExp(self._state.buffer),
                      "urCommandBufferFinalizeExp")
            self._finalized = True

    # Called by the hooks in program._launch, queue.enqueue_command and the Triton launcher
    # while a queue records into this graph.

    def record_launch(self, kernel, queue, call_args, args, wait_for, event, launcher=None,
                      keep=None):
        """Record a checked launch of ``kernel`` (``call_args`` as ``program._launch`` takes
        them, packed from ``args``; by a ``ur_cffi.triton`` ``launcher``'s rules, if given;
        ``keep``: a prepared launch's memory its arguments point into, NVIDIA scratch too)."""
        return self._record(_Launch(kernel, call_args, args, launcher=launcher, keep=keep),
                            wait_for, event)

    def record_triton(self, launcher, grid, queue, function, addresses, values, args, owners,
                      wait_for):
        """Record a Triton ``kernel[grid]`` launch (``ur_cffi.triton.launcher``)."""
        queue.handle  # noqa: B018 - raises ClosedError, as the launch would
        if not all(grid):
            return None  # an empty grid runs nothing
        prepared = launcher._prepare(grid, queue, function, addresses, values, args, owners)
        command = _Launch(function, prepared._call_args[0], tuple(args), launcher=launcher,
                          keep=prepared._buffers)
        return self._record(command, wait_for, False)

    def record_operation(self, queue, function, args, wait_for, keep_alive, blocking,
                         before=()):
        """Record ``queue.enqueue_command``'s operation whole, under the graph's lock (a
        finalize in another thread comes before or after all of it): ``before``'s commands,
        each after ``wait_for``, then a marker after them all; or ``function`` alone."""
        with self._lock:
            if before:
                wait_for = [self.record_command(queue, first, first_args, wait_for, keep_alive,
                                                blocking) for first, first_args in before]
                function, args = lib.urEnqueueEventsWait, ()
            return self.record_command(queue, function, args, wait_for, keep_alive, blocking)

    def record_command(self, queue, function, args, wait_for, keep_alive, blocking):
        """Record ``function(queue, *args, wait list, event)`` (``queue.enqueue_command``)."""
        queue.handle  # noqa: B018 - raises ClosedError, as the enqueue would
        name = function.__name__
        if name in ("urEnqueueEventsWait", "urEnqueueEventsWaitWithBarrier"):
            return self._record_marker(wait_for, barrier=name.endswith("Barrier"))
        if name in ("urEnqueueUSMMemcpy", "urEnqueueUSMMemcpy2D"):
            destination = int(ffi.cast("uintptr_t", args[1]))
            if blocking and any(isinstance(held, np.ndarray) and held.ctypes.data <= destination
                                < held.ctypes.data + held.nbytes for held in keep_alive):
                raise RuntimeError("a blocking copy into host memory while recording: its data "
                                   "would exist only after a replay. Record it with "
                                   "blocking=False and read the array after the replay")
            command = _Copy("copy", function, args, keep_alive)
        elif name == "urEnqueueUSMFill":
            command = _Copy("fill", function, args, keep_alive)
        else:
            raise NotImplementedError(f"{name} cannot be recorded into a graph: kernel "
                                      "launches, USM copies and fills and barriers can")
        return self._record(command, wait_for, True)

    # --- replays ---------------------------------------------------------------------------

    def replay(self, queue: Queue, *, wait_for=(), event: bool = True) -> Event | None:
        """Enqueue every recorded command on ``queue`` (of the graph's context and device),
        after ``wait_for`` and the graph's previous replay; returns the replay's Event, or
        None with ``event=False``.  Finalizes the graph first if needed.

        Raises ``ClosedError`` if the graph, the queue or an array a command uses is closed."""
        if event is not True and event is not False:
            event = _checks.flag("replay: event", event)
        if not isinstance(queue, Queue):
            self._check_queue(queue, "replay")  # raises
        if recording and queue in recording:
            which = "this graph" if recording[queue] is self else "another graph"
            raise RuntimeError(f"replay on {queue!r}, which is recording into {which}: "
                               "a replay cannot be recorded (UR command buffers do not nest); "
                               "replay it before or after the recording block")
        if queue is not self._replay_queue or queue is None:
            self._check_queue(queue, "replay")  # (a refused replay leaves the graph open)
        count, events = wait_list(wait_for, self.context)
        if not self._finalized:
            self.finalize()
        if queue is not self._replay_queue:
            self._replay_queue = queue
            for resource in self._memory:  # reuse of their memory waits for this queue too
                if type(resource) is USMArray:
                    resource._used_on(queue)
        if self._checked != _handle.release_count:
            self._check_memory()
        state = self._state
        with self._lock, section:  # Ctrl-C after the enqueue waits until the Event owns it
            self.handle  # noqa: B018 - raises ClosedError
            latest = state.latest
            if latest is not None and (queue is not self._latest_queue or queue.out_of_order):
                events = ffi.new("ur_event_handle_t[]", [events[i] for i in range(count)]
                                 + [latest])
                count += 1
            out = ffi.new(_EVENT_OUT)
            try:
                if self.native and self._commands:  # (an empty command buffer's replay on an
                    with enqueue_lock:               # out-of-order CPU queue ended at once,
                        result = lib.urEnqueueCommandBufferExp(queue._handle, state.buffer,
                                                               count, events, out)
                    function, detail = "urEnqueueCommandBufferExp", "replaying a graph"
                else:  # before its wait list: enqueued one by one, it waits for it)
                    result, function, detail = self._enqueue_each(
                        queue, queue.out_of_order, count, events, out)
            except TypeError:  # no handle: the queue is closed
                queue.handle  # noqa: B018 - raises ClosedError
                raise
            if result:
                check(result, function, detail)
            # Measured like a kernel (_durations), unless it waits on other work.
            queue._note_work(self._timing if not count else None, 1)
            state.latest, self._latest_queue = out[0], queue
            if latest is not None:
                lib.urEventRelease(latest)
            if not event:
                queue._last_event = None  # Queue.finish has no event of the latest command
                return None
            lib.urEventRetain(out[0])
            return ReplayEvent._of(out[0], queue)

    def _enqueue_each(self, queue: Queue, out_of_order: bool, count, events, out) -> tuple:
        """Enqueue the commands one by one (a graph that is no command buffer) on ``queue``;
        ``(ur_result_t, function, what failed)``."""
        commands = self._commands
        last = len(commands) - 1
        replaying = "replaying a graph"
        with enqueue_lock:
            queue = queue._handle  # under the lock, as Queue.close sets it None (TypeError)
            if last < 0:
                return (lib.urEnqueueEventsWait(queue, count, events, out),
                        "urEnqueueEventsWait", replaying)
            if not out_of_order:
                # In order: recording order respects every dependency; only the first command
                # waits, only the last one signals.
                for index, command in enumerate(commands):
                    first = index == 0
                    result = command.enqueue(queue, count if first else 0,
                                             events if first else _NULL,
                                             out if index == last else _NULL)
                    if result:
                        lib.urQueueFinish(queue)  # what was enqueued uses what the graph holds
                        return result, command.function_name, _failed(replaying, index, command)
                return 0, "", ""
            signals = ffi.new("ur_event_handle_t[]", last + 1)
            try:
                for index, command in enumerate(commands):
                    deps = (index - 1,) if self.in_order and index else command.deps
                    if deps:
                        waits = ffi.new("ur_event_handle_t[]", [signals[d] for d in deps])
                        result = command.enqueue(queue, len(deps), waits, signals + index)
                    else:
                        result = command.enqueue(queue, count, events, signals + index)
                    if result:
                        lib.urQueueFinish(queue)
                        return result, command.function_name, _failed(replaying, index, command)
                if self.in_order:
                    out[0], signals[last] = signals[last], _NULL
                    return 0, "", ""
                return (lib.urEnqueueEventsWait(queue, last + 1, signals, out),
                        "urEnqueueEventsWait", replaying)
            finally:
                for index in range(last + 1):
                    if signals[index] != _NULL:
                        lib.urEventRelease(signals[index])

    # --- internals -------------------------------------------------------------------------

    def _own_queue(self) -> Queue:
        """The graph's own queue, made when first needed (again where the user closed the one
        ``recording()`` gave): what records without a queue of the user's, and checks
        updates.  Nothing runs on it."""
        with self._lock:
            self.handle  # noqa: B018 - raises ClosedError
            if self._state.queue is None or self._state.queue.closed:
                self._state.queue = Queue(self.context, self.device)
            return self._state.queue

    def _explicit(self):
        """Records what is submitted to the graph's own queue while it lasts."""
        return self._registered(self._own_queue(), block=False)

    @contextlib.contextmanager
    @hold_back_in  # Ctrl-C between the registration and the try would leave it recording
    def _registered(self, queue: Queue, block: bool):
        """``queue`` records into this graph while the context lasts (nested and concurrent
        uses counted); ``block``: a :meth:`recording` block, which :meth:`finalize` waits
        out."""
        _interrupts.install()  # (hold_back_in needs the handler)
        with _recording_lock:
            self._recordable()
            if recording.get(queue, self) is not self:
                raise RuntimeError(f"{queue!r} is recording into another graph already")
            recording[queue] = self
            self._recorders[queue] = self._recorders.get(queue, 0) + 1
            self._blocks += block
        try:
            yield queue
        finally:
            with _recording_lock:
                self._blocks -= block
                users = self._recorders.pop(queue) - 1
                if users:
                    self._recorders[queue] = users
                elif recording.get(queue) is self:
                    del recording[queue]

    def _check_queue(self, queue, what: str) -> Queue:
        if not isinstance(queue, Queue):
            raise TypeError(f"{what} needs a ur_cffi Queue, not {type(queue).__name__}")
        queue.handle  # noqa: B018 - raises ClosedError
        if queue.context is not self.context or queue.device is not self.device:
            raise ValueError(f"{what}: {queue!r} is not of the graph's context and device")
        return queue

    def _check_unbroken(self) -> None:
        if self._broken_by is not None:
            raise RuntimeError(f"the graph's recording block ended with {self._broken_by}: "
                               "it lacks what the block did not record; record a new graph")

    def _recordable(self) -> None:
        self.handle  # noqa: B018 - raises ClosedError
        self._check_unbroken()
        if self._finalized:
            raise RuntimeError("the graph is finalized: nothing more can be recorded into it")

    def _dependencies(self, wait_for) -> frozenset:
        """The recorded commands (indices) that ``wait_for`` names, with the barrier floor."""
        if isinstance(wait_for, (GraphCommand, Event)):
            wait_for = (wait_for,)
        elif wait_for is None:
            wait_for = ()
        elif not isinstance(wait_for, (list, tuple)):
            raise TypeError(f"{_WAITS} takes GraphCommands while recording, not "
                            f"{type(wait_for).__name__}")
        points = set(self._floor)
        for item in wait_for:
            if isinstance(item, GraphCommand):
                if item.graph is not self:
                    raise ValueError(f"{_WAITS}: a command of another graph")
                points |= item._points
            elif isinstance(item, Event):
                raise TypeError(f"{_WAITS}: an Event cannot be waited for inside a graph (a "
                                "graph runs at every replay, an Event once): pass it to "
                                "graph.replay(queue, wait_for=[...])")
            else:
                raise TypeError(f"{_WAITS} takes GraphCommands while recording, not "
                                f"{type(item).__name__}")
        return frozenset(points)

    def _record(self, command, wait_for, event: bool):
        with self._lock, section:  # Ctrl-C: no command in the buffer that the graph lacks
            self._recordable()
            given = self._dependencies(wait_for)
            deps = () if self.in_order else tuple(sorted(given))
            if self.native:
                self._append(command, deps)
            command.deps = deps
            index = len(self._commands)
            self._commands.append(command)
            if command.kind == "launch":
                check(lib.urKernelRetain(command.handle), "urKernelRetain")
                self._state.kernels.append(command.handle)
            self._memory.extend(command.memory())
        return GraphCommand(self, frozenset((index,)), command) if event else None

    def _record_marker(self, wait_for, barrier: bool) -> GraphCommand:
        with self._lock:
            self._recordable()
            given = self._dependencies(wait_for)
            if self.in_order:
                points = frozenset((len(self._commands) - 1,)) if self._commands else frozenset()
            elif barrier and not wait_for:  # after everything so far: what nothing waits for
                waited = set().union(*(command.deps for command in self._commands))
                points = frozenset(range(len(self._commands))) - waited
            else:
                points = given
            if barrier and not self.in_order:
                self._floor = points
        return GraphCommand(self, points, None)

    def _append(self, command, deps: tuple) -> None:
        """Append ``command`` to the command buffer after the sync points of ``deps``."""
        points = (ffi.new("uint32_t[]", [self._commands[d].point for d in deps]) if deps
                  else _NULL)
        point = ffi.new("uint32_t *")
        handle = _NULL
        if command.kind == "launch":
            if command.properties != _NULL:
                why = (f"a launch of {command.kernel.name!r} takes launch properties "
                       "(work-group memory or launch flags), which UR command buffers cannot")
                if self._auto:
                    self._replay_one_by_one(why)
                    return
                raise NotImplementedError(f"{why}; use Graph(native=False)")
            if self._capabilities:
                handle = ffi.new("ur_exp_command_buffer_command_handle_t *")
        with enqueue_lock:
            result = command.append(self._state.buffer, len(deps), points, point, handle)
        if result in UNSUPPORTED and self._auto:
            self._replay_one_by_one(f"{command.append_name} returned "
                                    f"{ur_result_t(result).name}")
            return
        if result:
            check(result, command.append_name, "recording into a graph")
        command.point = point[0]
        if handle != _NULL:
            command.command = handle[0]

    def _replay_one_by_one(self, why: str) -> None:
        """Give up the command buffer, whose device cannot take a command recorded now: the
        graph keeps every command and replays them one by one."""
        buffer, self._state.buffer = self._state.buffer, None
        self._handle = self._state
        self.native, self._why = False, why
        check(lib.urCommandBufferReleaseExp(buffer), "urCommandBufferReleaseExp")

    def _check_memory(self) -> None:
        """Raise ``ClosedError`` if memory a command uses was released, ``ValueError`` if an
        address a launch was given as an integer is no longer USM memory (checked when
        anything was released since the last check)."""
        released = _handle.release_count
        for resource in self._memory:
            if resource.closed:
                self._name_closed(resource)
        for index, command in enumerate(self._commands):
            if command.kind == "launch" and command.addresses:
                try:
                    check_integer_addresses(command.kernel, self.context, command.addresses)
                except ValueError as error:
                    raise ValueError(f"replay: command {index} (launch of kernel "
                                     f"{command.kernel.name!r}): {error}") from None
        self._checked = released

    def _name_closed(self, resource) -> None:
        """Raise ``ClosedError`` naming the command (and argument) that uses ``resource``."""
        for index, command in enumerate(self._commands):
            if resource in command.memory():
                what = f"command {index} ({command.kind}"
                if command.kind == "launch":
                    what += f" of kernel {command.kernel.name!r}"
                    position = next((i for i, memory in enumerate(command.memories)
                                     if memory is resource), None)
                    if position is not None:
                        what += f", argument {position}"
                raise _handle.ClosedError(f"replay: {what}) uses a {type(resource).__name__} "
                                          "that is closed")
        resource.handle  # noqa: B018 - raises ClosedError

    def close(self) -> None:
        """Wait for the latest replay (Ctrl-C interrupts that wait), then release the graph
        and what it holds; closing twice is harmless."""
        if self._handle is None:
            return
        with self._lock:  # a replay waiting for it finds the graph closed
            try:
                self._wait_for_latest()
            except URError:  # a failed replay: the release goes on, as it did before
                pass
            super().close()
            self._memory = []
            self._latest_queue = self._replay_queue = None
            self._timing = _durations.Timing()

    def _wait_for_latest(self) -> None:
        """Wait for the latest replay, interruptibly (the wait keeps its own reference)."""
        latest = self._state.latest
        if latest is not None:
            _waiting.wait(lib.urEventWait, "urEventWait", 1,
                          ffi.new("ur_event_handle_t[1]", [latest]))

    def _update(self, launch, args, by_name, global_size, local_size, global_offset,
                grid) -> None:
        self.handle  # noqa: B018 - raises ClosedError
        if self._blocks:
            raise RuntimeError("update the graph's launches after its recording blocks")
        # The new state is made from the launch's current one: under the lock, so that two
        # updates in two threads apply both (the second one read before the first landed).
        with self._lock:
            if launch.launcher is not None:
                if args or global_size is not None or local_size is not None \
                        or global_offset is not None:
                    raise TypeError(f"a Triton launch of {launch.kernel.name!r} is updated by "
                                    "parameter name (update(x_ptr=array, n=100)) and grid=")
                new = launch.triton_update(self._own_queue(), by_name, grid)
            else:
                if by_name or grid is not None:
                    raise TypeError(f"a launch of {launch.kernel.name!r} takes its whole "
                                    "argument list again (update(x, y, 2.0, n)) and "
                                    "global_size/local_size")
                new = launch.kernel_update(self._own_queue(), args, global_size,
                                           local_size, global_offset)
            if not self._finalized:  # once the arguments are checked: a refused update leaves
                self.finalize()      # the graph open (a command buffer's launches update once
                                     # final)
            self.handle  # noqa: B018
            changed, sizes = launch.changes(new)  # against what the command buffer holds
            if self.native and (changed or sizes):
                needed = (_ARGUMENTS if changed else 0) | (
                    (_GLOBAL | _LOCAL) if "global" in sizes else 0) | (
                    _LOCAL if "local" in sizes else 0) | (_OFFSET if "offset" in sizes else 0)
                missing = needed & ~self._capabilities
                if missing:
                    names = [_FLAG + name for name, bit in _CAPABILITIES.items() if bit & missing]
                    raise NotImplementedError(
                        f"the command buffers of {self.device.name!r} cannot update a recorded "
                        f"launch this way: they lack {', '.join(names)} "
                        f"(UR_DEVICE_INFO_COMMAND_BUFFER_UPDATE_CAPABILITIES_EXP is "
                        f"{self._capabilities}); record another graph, or use "
                        "Graph(native=False)")
            self._wait_for_latest()  # replays in flight use what the update replaces
            with section:  # Ctrl-C after the update waits until the graph holds its memory
                if self.native and (changed or sizes):
                    applied = []
                    for part, part_sizes in self._update_calls(new, changed, sizes):
                        result = self._update_call(launch, new, part, part_sizes)
                        if result:
                            for done in applied:  # the launch as it was: all or nothing
                                self._update_call(launch, launch, *done)
                            check(result, "urCommandBufferUpdateKernelLaunchExp",
                                  f"kernel {launch.kernel.name!r}")
                        applied.append((part, part_sizes))
                launch.adopt(new)
                self._timing = _durations.Timing()  # other work now: measured again
                self._memory = [resource for command in self._commands
                                for resource in command.memory()]
                self._checked = -1
                self._replay_queue = None  # the next replay notes its queue for new memory

    def _update_call(self, launch, state, changed: list, sizes: set) -> int:
        """One ``urCommandBufferUpdateKernelLaunchExp`` giving ``launch`` the arguments
        ``changed`` and the ``sizes`` of ``state`` (a snapshot, or the launch itself)."""
        # ``_pointed_into`` holds what ``desc`` points into until the call returns.
        desc, _pointed_into = _update_descriptor(launch, state, changed, sizes)
        with enqueue_lock:
            return lib.urCommandBufferUpdateKernelLaunchExp(self._state.buffer, 1, desc)

    def _update_calls(self, new, changed: list, sizes: set) -> list:
        """``[(arguments, sizes)]`` of each update call: one, or where the adapter takes one
        memory-object argument per call (``_compat``), one more for each beyond the first."""
        memory = [index for index in changed if read_argument(new.words, index)[0] == MEM_OBJ]
        if len(memory) < 2 or not _compat.updates_one_memory_argument_per_call(
                self.device.platform.backend):
            return [(changed, sizes)]
        first = [index for index in changed if index not in memory[1:]]
        return [(first, sizes)] + [([index], set()) for index in memory[1:]]

    def __repr__(self) -> str:
        if self.closed:
            return "<Graph closed>"
        how = "a UR command buffer" if self.native else f"replayed one by one ({self._why})"
        order = "in-order" if self.in_order else "out-of-order"
        return f"<Graph {order}, {len(self._commands)} commands, {how}>"


def _failed(doing: str, index: int, command) -> str:
    what = f"kernel {command.kernel.name!r}" if command.kind == "launch" else command.kind
    return f"{doing}: command {index} ({what})"


class _State:
    """What releasing a graph needs, apart from the graph object (a finalizer must not hold
    it): the command buffer, the latest replay's event, the kernel references, the commands
    (and so what they keep alive) and the graph's queues."""

    __slots__ = ("buffer", "latest", "kernels", "commands", "queue")

    def __init__(self):
        self.buffer = self.latest = self.queue = None
        self.kernels, self.commands = [], []


def _release_graph(state: _State) -> int:
    results = []
    latest, state.latest = state.latest, None
    if latest is not None:  # a replay may be in flight: it uses what the graph holds
        lib.urEventWait(1, ffi.new("ur_event_handle_t[1]", [latest]))
        results.append(lib.urEventRelease(latest))
    if state.buffer is not None:
        results.append(lib.urCommandBufferReleaseExp(state.buffer))
        state.buffer = None
    for kernel in state.kernels:
        results.append(lib.urKernelRelease(kernel))
    state.kernels.clear()
    state.commands.clear()
    # The graph's own queue, on which nothing runs: dropped, its collection releases it.  Not
    # Queue.close, which takes the enqueue lock: a collection in a launch runs this holding it.
    state.queue = None
    return next((result for result in results if result), 0)


def _triton_scope(queue: Queue):
    """``ur_cffi.triton.using(queue)`` where ur_cffi.triton is active (``activate()``, or a
    ``using()`` block around the recording), so that Triton launches in a recording block go
    to its queue.  (Not whenever it is imported: making its driver for each block cost 9 ms.)"""
    triton = sys.modules.get("ur_cffi.triton")
    if triton is not None and triton.is_active():
        return triton.using(queue)
    return contextlib.nullcontext()


# --------------------------------------------------------------------------------------------
# Recorded commands


class _Copy:
    """A USM copy or fill: the UR enqueue function and its arguments after the queue."""

    __slots__ = ("kind", "function", "function_name", "args", "keep_alive", "deps", "point")

    def __init__(self, kind: str, function, args: tuple, keep_alive: tuple):
        self.kind, self.function, self.args, self.keep_alive = kind, function, args, keep_alive
        self.function_name = function.__name__

    @property
    def append_name(self) -> str:
        if self.function_name == "urEnqueueUSMMemcpy2D":
            return "a 2-D USM copy (UR has no command-buffer append for urEnqueueUSMMemcpy2D)"
        return "urCommandBufferAppendUSMMemcpyExp" if self.kind == "copy" else \
            "urCommandBufferAppendUSMFillExp"

    def memory(self) -> list:
        return [held for held in self.keep_alive if isinstance(held, (USMArray, Buffer))]

    def enqueue(self, queue, count, events, out) -> int:
        if out == _NULL or self.function_name != "urEnqueueUSMMemcpy2D":
            return self.function(queue, *self.args, count, events, out)
        # A marker's event, as USMArray._strided_copy's: oneAPI 2026.2's leak checker does not
        # register the events of urEnqueueUSMMemcpy2D and reports every later use of them.
        return self.function(queue, *self.args, count, events, _NULL) or \
            lib.urEnqueueEventsWait(queue, 0, _NULL, out)

    def append(self, buffer, count, points, point, _command) -> int:
        # urEnqueueUSMMemcpy(queue, blocking, dst, src, size, ...) and
        # urEnqueueUSMFill(queue, ptr, patternSize, pPattern, size, ...) after the queue
        if self.function_name == "urEnqueueUSMMemcpy2D":
            return _UNSUPPORTED  # the graph replays one by one from here (Graph._append)
        if self.kind == "copy":
            _, destination, source, nbytes = self.args
            return lib.urCommandBufferAppendUSMMemcpyExp(buffer, destination, source, nbytes,
                                                         count, points, 0, _NULL, point, _NULL,
                                                         _NULL)
        memory, pattern_size, pattern, nbytes = self.args
        return lib.urCommandBufferAppendUSMFillExp(buffer, memory, pattern, pattern_size, nbytes,
                                                   count, points, 0, _NULL, point, _NULL, _NULL)


_UNSUPPORTED = int(ur_result_t.UR_RESULT_ERROR_UNSUPPORTED_FEATURE)
_INTEGERS = frozenset(("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"))
_KIND_NAMES = {POINTER: "pointer", VALUE: "value", MEM_OBJ: "memory object",
               LOCAL: "local memory size"}


class _Snapshot:
    """One state of a launch: its sizes (``size_t[3]`` each; offsets always given) and an
    argument block of its own, with the objects its arguments came from."""

    __slots__ = ("dims", "offsets", "global_sizes", "local_sizes", "sizes", "block",
                 "arguments", "words", "args", "keep")

    def __init__(self, sizes: tuple, block, arguments, words, args: tuple, keep):
        dims, offsets, global_values, local_values = self.sizes = sizes
        self.dims = dims
        self.offsets = _compat.launch_sizes(offsets, 0)
        self.global_sizes = _compat.launch_sizes(global_values, 1)
        self.local_sizes = _NULL if local_values is None else \
            _compat.launch_sizes(local_values, 1)
        self.block, self.arguments, self.words = block, arguments, words
        self.args, self.keep = args, keep


def _launch_sizes(call_args: tuple) -> tuple:
    """``(dims, offsets, global sizes, local sizes or None)`` of a launch's arguments."""
    dims, offsets, global_sizes, local_sizes = call_args[:4]
    return (dims, (0,) * dims if offsets == _NULL else tuple(offsets[i] for i in range(dims)),
            tuple(global_sizes[i] for i in range(dims)),
            None if local_sizes == _NULL else tuple(local_sizes[i] for i in range(dims)))


class _GridScratch(NamedTuple):
    """What a Triton launch whose grid an update changed keeps: what it kept when recorded,
    and the NVIDIA scratch memory of its current grid."""

    recorded: object
    scratch: list


class _Launch:
    """A recorded kernel launch: the kernel (and a UR reference to it, the graph's), its sizes
    and its own copy of the argument block."""

    __slots__ = ("kind", "kernel", "handle", "launcher", "properties", "count", "dims",
                 "offsets", "global_sizes", "local_sizes", "sizes", "block", "arguments",
                 "words", "args", "memories", "addresses", "keep", "deps", "point",
                 "command")
    function_name = _compat.LAUNCH
    append_name = ("urCommandBufferAppendKernelLaunchWithArgsExp"
                   if _compat.HAS_APPEND_WITH_ARGS else "urCommandBufferAppendKernelLaunchExp")

    def __init__(self, kernel: Kernel, call_args: tuple, args: tuple, launcher=None,
                 keep=None, memories: tuple = ()):
        """``memories``: what each of ``args`` passes, found already (a prepared launch's)."""
        self.kind, self.kernel, self.handle = "launch", kernel, kernel.handle
        self.launcher, self.command = launcher, None
        self.count, self.properties = call_args[4], call_args[6]
        self.args, self.memories = (args, memories) if memories else ((), ())
        self.adopt(_Snapshot(_launch_sizes(call_args),
                             *_compat.copy_arguments(call_args[5], self.count), args, keep))

    def adopt(self, new: _Snapshot) -> None:
        """Make ``new`` the launch's state."""
        self.dims, self.offsets, self.sizes = new.dims, new.offsets, new.sizes
        self.global_sizes, self.local_sizes = new.global_sizes, new.local_sizes
        self.block, self.arguments, self.words = new.block, new.arguments, new.words
        # The memory each argument passes, found once (a wrapper's array is found by its
        # data_ptr(), which raises once that array is closed): the same as before for the
        # arguments an update keeps.
        known = {id(arg): memory for arg, memory in zip(self.args, self.memories)}
        self.memories = tuple(known[id(arg)] if id(arg) in known else memory_of(arg)
                              for arg in new.args)
        self.args, self.keep = new.args, new.keep
        self.addresses = integer_addresses(self.kernel, new.args, self.launcher)

    def memory(self) -> list:
        return [memory for memory in self.memories if memory is not None]

    def enqueue(self, queue, count, events, out) -> int:
        return _compat.enqueue_launch(queue, self.handle, self.dims, self.offsets,
                                      self.global_sizes, self.local_sizes, self.count,
                                      self.arguments, self.properties, count, events, out)

    def append(self, buffer, count, points, point, command) -> int:
        return _compat.append_launch(buffer, self.handle, self.dims, self.offsets,
                                     self.global_sizes, self.local_sizes, self.count,
                                     self.arguments, count, points, point, command)

    def kernel_update(self, queue: Queue, args: tuple, global_size, local_size,
                      global_offset) -> _Snapshot:
        """The launch with the kernel's arguments ``args`` (none: the same ones), checked as
        ``Kernel.launch`` checks them, and new sizes (None: the same)."""
        dims, offsets, global_sizes, local_sizes = self.sizes
        global_size = global_sizes if global_size is None else global_size
        local_size = local_sizes if local_size is None else local_size
        global_offset = offsets if global_offset is None else global_offset
        if not args:
            global_sizes, local_sizes, offsets = self.kernel._checked_sizes(
                queue.device, global_size, local_size, global_offset, dims)
            sizes = (dims, offsets, global_sizes, local_sizes)
            return _Snapshot(sizes, self.block, self.arguments, self.words, self.args, self.keep)
        kernel = self.kernel
        if kernel._handle is None:
            raise _handle.ClosedError(
                f"update of the launch of {kernel.name!r}: its Kernel was closed (the graph "
                "replays it still, with its own reference, but new arguments are checked "
                "against the Kernel): update before closing it")
        (call_args, _), _ = kernel._check_and_pack(queue, global_size, local_size, args,
                                                   global_offset)
        sizes = _launch_sizes(call_args)
        if sizes[0] != dims:
            raise ValueError(f"global_size {sizes[2]}: the launch was recorded in {dims} "
                             "dimension(s)")
        new = _Snapshot(sizes, *_compat.copy_arguments(call_args[5], self.count), args, None)
        for index in range(self.count):
            old_kind, old_size, _ = read_argument(self.words, index)
            kind, size, _ = read_argument(new.words, index)
            if (kind, size) != (old_kind, old_size):
                raise TypeError(f"argument {index} of {kernel.name!r}: the update passes a "
                                f"{_KIND_NAMES[kind]} of {size} bytes where the launch was "
                                f"recorded with a {_KIND_NAMES[old_kind]} of {old_size} bytes")
        return new

    def triton_update(self, queue: Queue, by_name: dict, grid) -> _Snapshot:
        """The Triton launch with the parameters ``by_name`` and the ``grid`` changed."""
        launcher = self.launcher
        block, arguments, words = _compat.copy_arguments(self.arguments, self.count)
        args = list(self.args)
        entries = {name: (index, kind, position, ty)
                   for index, (kind, position, name, ty) in enumerate(launcher.entries)
                   if kind in ("pointer", "value")}
        for name, value in by_name.items():
            if name not in entries and any(item.startswith(f"{name}[") for item in entries):
                raise TypeError(f"argument {name!r} of kernel {launcher.name!r} is a tuple: "
                                f"update its items by their names, e.g. "
                                f"update(**{{'{name}[0]': ...}})")
            if name not in entries:
                raise TypeError(f"kernel {launcher.name!r} has no argument {name!r} to update "
                                "(constexprs, and integers Triton specialized as 1, are "
                                "compiled in)")
            index, kind, position, ty = entries[name]
            _, size, word = read_argument(words, index)
            if kind == "pointer":
                address = launcher._address(value, name, launcher.rules.pointer_element(ty),
                                            queue)
                if not address:  # (None reads as a null pointer where Triton compiled one in)
                    raise TypeError(f"argument {name!r} of kernel {launcher.name!r}: {value!r} "
                                    "is no memory; the launch was recorded with an array")
                if address % 16 and _specialized(launcher, name, word):
                    raise ValueError(f"argument {name!r} of kernel {launcher.name!r}: address "
                                     f"0x{address:x} is not 16-byte aligned, which Triton "
                                     "compiled the kernel for")
                write_argument(words, index, POINTER, size, address)
            else:
                _write_scalar(launcher, name, ty, ffi.cast("char *", word), size, value)
            args[position] = value
        sizes, keep = self.sizes, self.keep
        if grid is not None:
            cells = _sizes("grid", grid) + (1, 1)
            launcher._check_grid(cells[:3], queue.device)
            local = launcher.local_size
            sizes = (3, (0, 0, 0), (cells[0] * local, cells[1], cells[2]), (local, 1, 1))
            if launcher._scratch:  # NVIDIA scratch memory, sized by the grid: new for this one
                scratch = []
                owners = launcher._scratch_memory(scratch, queue,
                                                  cells[0] * cells[1] * cells[2], True)
                for word, address in scratch:  # (the launcher's block begins with the list)
                    words[word] = address
                # The scratch of an earlier grid is no longer used (replays in flight were
                # waited for): only the recording's own keep and this grid's stay.
                keep = _GridScratch(keep.recorded if type(keep) is _GridScratch else keep, owners)
        return _Snapshot(sizes, block, arguments, words, tuple(args), keep)

    def changes(self, new: _Snapshot) -> tuple[list, set]:
        """``(indices of the arguments that differ, names of the sizes that differ)`` in
        ``new``."""
        changed = []
        for index in range(self.count):
            kind, size, word = read_argument(self.words, index)
            _, new_size, new_word = read_argument(new.words, index)
            if kind == VALUE:
                differs = ffi.buffer(ffi.cast("char *", word), size)[:] != \
                    ffi.buffer(ffi.cast("char *", new_word), new_size)[:]
            else:
                differs = word != new_word
            if differs:
                changed.append(index)
        old, now = self.sizes, new.sizes
        sizes = {name for name, position in (("offset", 1), ("global", 2), ("local", 3))
                 if old[position] != now[position]}
        return changed, sizes


def _specialized(launcher, name: str, current: int) -> bool:
    """Whether Triton compiled the launch's kernel for ``name`` divisible by 16 (aligned):
    its attributes say, else (a kernel compiled elsewhere) whether the current value is."""
    divisible = launcher.divisible
    return current % 16 == 0 if divisible is None else name in divisible


def _write_scalar(launcher, name: str, ty: str, target, size: int, value) -> None:
    """Write ``value`` as Triton passes a ``ty`` scalar to ``target``, keeping the kernel's
    specialization: an integer recorded divisible by 16 must stay so."""
    fmt = "<" + launcher.rules.scalar_format(ty)
    try:
        from .triton import abi

        if ty in abi.CONVERSIONS:
            value = abi.CONVERSIONS[ty](value)
        data = struct.pack(fmt, value)
    except (struct.error, OverflowError, TypeError):
        raise TypeError(f"argument {name!r} of kernel {launcher.name!r} is {ty}: "
                        f"{type(value).__name__} {value!r} cannot be passed as {ty}") from None
    if ty in _INTEGERS and value % 16:
        (old,) = struct.unpack(fmt, ffi.buffer(target, size))
        if _specialized(launcher, name, old):
            raise ValueError(f"argument {name!r} of kernel {launcher.name!r}: {value!r} is not "
                             "divisible by 16, which Triton compiled the kernel for")
    ffi.memmove(target, data, size)


def _update_descriptor(launch: _Launch, new: _Snapshot, changed: list, sizes: set) -> tuple:
    """``(ur_exp_command_buffer_update_kernel_launch_desc_t *, what it points into)``."""
    kinds = {POINTER: [], VALUE: [], MEM_OBJ: []}
    for index in changed:
        kind, _, _ = read_argument(new.words, index)
        if kind == LOCAL:
            raise ValueError(f"argument {index} of {launch.kernel.name!r}: a local memory size "
                             "cannot be updated")
        kinds[kind].append(index)
    pointers = ffi.new("ur_exp_command_buffer_update_pointer_arg_desc_t[]", len(kinds[POINTER]))
    addresses = ffi.new("void *[]", len(kinds[POINTER]))
    for slot, index in enumerate(kinds[POINTER]):
        addresses[slot] = ffi.cast("void *", read_argument(new.words, index)[2])
        pointers[slot].stype = _STYPE.UR_STRUCTURE_TYPE_EXP_COMMAND_BUFFER_UPDATE_POINTER_ARG_DESC
        pointers[slot].argIndex = index
        pointers[slot].pNewPointerArg = addresses + slot  # where the new pointer is
    values = ffi.new("ur_exp_command_buffer_update_value_arg_desc_t[]", len(kinds[VALUE]))
    for slot, index in enumerate(kinds[VALUE]):
        _, size, word = read_argument(new.words, index)
        values[slot].stype = _STYPE.UR_STRUCTURE_TYPE_EXP_COMMAND_BUFFER_UPDATE_VALUE_ARG_DESC
        values[slot].argIndex, values[slot].argSize = index, size
        values[slot].pNewValueArg = ffi.cast("void *", word)
    memories = ffi.new("ur_exp_command_buffer_update_memobj_arg_desc_t[]", len(kinds[MEM_OBJ]))
    for slot, index in enumerate(kinds[MEM_OBJ]):
        memories[slot].stype = _STYPE.UR_STRUCTURE_TYPE_EXP_COMMAND_BUFFER_UPDATE_MEMOBJ_ARG_DESC
        memories[slot].argIndex = index
        memories[slot].hNewMemObjArg = ffi.cast("ur_mem_handle_t", read_argument(new.words,
                                                                                 index)[2])
    desc = ffi.new("ur_exp_command_buffer_update_kernel_launch_desc_t *")
    desc.stype = _STYPE.UR_STRUCTURE_TYPE_EXP_COMMAND_BUFFER_UPDATE_KERNEL_LAUNCH_DESC
    desc.hCommand = launch.command
    desc.newWorkDim = new.dims
    desc.numNewPointerArgs, desc.pNewPointerArgList = len(kinds[POINTER]), pointers
    desc.numNewValueArgs, desc.pNewValueArgList = len(kinds[VALUE]), values
    desc.numNewMemObjArgs, desc.pNewMemObjArgList = len(kinds[MEM_OBJ]), memories
    if "global" in sizes or "local" in sizes:
        desc.pNewGlobalWorkSize = new.global_sizes
        desc.pNewLocalWorkSize = new.local_sizes
    if "offset" in sizes:
        desc.pNewGlobalWorkOffset = new.offsets
    return desc, (pointers, addresses, values, memories, new)
