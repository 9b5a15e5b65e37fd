"""Triton kernels on UR devices, without PyTorch.

One call switches Triton onto UR; after it, ``kernel[grid](...)`` compiles for the queue's
device and launches on the queue::

    import ur_cffi.triton
    ur_cffi.triton.activate()            # a profiling queue on ur_cffi.default_device()
    kernel[grid](x, y, 10.0, n, BLOCK_SIZE=1024)
    ur_cffi.triton.current_queue().finish()

    with ur_cffi.triton.using(queue):    # or: launches in this block go to `queue`
        kernel[grid](...)
        event = ur_cffi.triton.last_event()

Devices: Level Zero and OpenCL devices get SPIR-V from Triton's Intel backend, CUDA devices a
cubin from its NVIDIA backend (target from the compute capability); ``backend.py`` decides,
``abi.py`` holds each backend's launch rules per Triton version, ``cuda.py`` the CUDA side.

Arguments: ur_cffi ``USMArray`` and views of them pass as typed pointers to their own first
element (their dtype gives the kernel's pointer type: bfloat16 and float8 arrays from
``ml_dtypes`` too; Triton's alignment specialization sees the view's address), and so do other
objects with ``data_ptr()`` and ``dtype`` (``triton.reinterpret``'s wrappers); integers as
integers (a raw address is an int64 the kernel may cast with ``.to(tl.pointer_type(...))``; an
int where the kernel uses a pointer raises a ``TypeError`` saying so); Python floats as fp32;
constexprs as Triton expects.

Ordering: every launch is enqueued on the current queue, so ``queue.finish()``,
``device.synchronize()`` and the launch's event order it exactly.  The event of the latest
launch (process-wide) is :func:`last_event`: on an in-order queue without profiling a launch
takes no event of its own, and ``last_event()`` enqueues a marker that completes with it (and
with whatever was enqueued on that queue after it); ``using(queue, wait_for=[...])`` makes
every launch in the block wait for those events (on an out-of-order queue, this is how
launches are ordered).

Repeated launches: ``launch = ur_cffi.triton.prepare(kernel, grid, x, y, 10.0, n,
BLOCK_SIZE=1024)`` compiles and checks once and returns a ``ur_cffi.PreparedLaunch``;
``launch(event=False)`` then enqueues without Triton's dispatch, which costs several
microseconds of Python per ``kernel[grid](...)``.

Checks before launch (``launcher.py``): argument count; a USMArray must belong to the queue's
context and hold the element type the kernel was compiled for; host memory (a numpy array, or
any address ``urUSMGetMemAllocInfo`` does not know in a pointer argument) is refused.

Caching (``programs.py``): Triton's own compile cache; one UR program per context and binary;
native binaries in Triton's cache directory, so a second process skips the SPIR-V build.  What
is cached for a context (its programs, Triton's compiled kernels) is dropped once the context
is closed, at the next ``using``/``activate`` (``driver.py``), and all of it at
:func:`deactivate`.  Close contexts you are done with (or use ``with``): cached programs keep
an unclosed context alive.

Activation: :func:`activate` keeps ur_cffi.triton active until :func:`deactivate`; a ``using``
block without it activates for as long as any thread is in such a block (counted, so blocks in
several threads at once are safe).  A failed ``activate`` or ``using`` changes nothing.

``activate`` replaces, at run time, the few places where triton-xpu imports torch
(``_no_torch.py``); :func:`deactivate` restores them and Triton's previous driver.
"""

from __future__ import annotations

import contextlib

from .. import _forking, memory
from .._interrupts import hold_back_in
from .._interrupts import install as install_interrupts
from . import abi
from .abi import TESTED_VERSIONS

__all__ = ["activate", "deactivate", "using", "prepare", "last_event", "current_queue",
           "is_active", "active_driver", "compile", "kernel_options", "TESTED_VERSIONS"]

_lock = _forking.lock(reentrant=True)
# "explicit": activate() was called (and not deactivate() since); "users": using() blocks open
# in any thread.  The driver is installed while either holds.
_state: dict = {"driver": None, "previous": None, "patches": None, "explicit": False,
                "users": 0}


def activate(queue=None):
    """Make Triton compile for and launch on ``queue`` (a ur_cffi Queue); returns the queue.

    ``queue=None`` gives an in-order queue with profiling (so ``do_bench`` times on the
    device) on ``ur_cffi.default_device()``: the one an earlier ``activate()`` made, while it
    lives (arrays made on it keep it alive, also after :func:`deactivate`), else a new one in a
    new context.  Calling it with another queue changes the queue.  Call it before
    ``@triton.autotune`` decorates a kernel: the autotuner takes its benchmarker from the
    active driver at decoration time.

    Raises ``TypeError`` if ``queue`` is not a ur_cffi Queue, ``ClosedError`` if it is closed,
    ``NotImplementedError`` if the installed Triton's launch ABI is unknown (see
    ``ur_cffi.triton.abi``); then nothing has changed.
    """
    with _lock:
        installed = _state["driver"] is None
        if installed:
            _install()
        try:
            queue = _state["driver"].set_default_queue(queue)
        except BaseException:
            if installed:  # Triton's driver and state as they were
                _uninstall()
            raise
        _state["explicit"] = True
        return queue


def _install() -> None:
    from . import _no_torch, backend, launcher
    from .driver import URDriver

    abi.check_installed()  # refuse an unknown Triton before changing anything
    patches = _no_torch.Patches()
    try:
        _no_torch.install(patches)
        _no_torch.prime_specializer()
        launcher.install_argument_check(patches)
        backend.install_option_check(patches)
        driver = URDriver()
    except BaseException:
        patches.restore()
        raise
    _state.update(driver=driver, patches=patches,
                  previous=_no_torch.set_active_driver(driver))
    memory.current_queue = driver.current_queue  # clone, copy_, zero_ run there


def deactivate() -> None:
    """Give Triton back its previous driver and undo the run-time replacements.

    Closes no queue: the one ``activate()`` made lives on while arrays made on it do.  While
    ``using`` blocks are open (in any thread), they keep ur_cffi.triton active, without a queue
    outside them, until the last one ends.
    """
    with _lock:
        if _state["driver"] is None:
            return
        _state["explicit"] = False
        if _state["users"]:
            _state["driver"].clear_default_queue()
            return
        _uninstall()


def _uninstall() -> None:
    from . import _no_torch

    with _lock:
        driver = _state["driver"]
        memory.current_queue = None
        _no_torch.restore_active_driver(_state["previous"])
        _state["patches"].restore()
        _state.update(driver=None, previous=None, patches=None)
        driver.close()
        from . import programs

        programs.clear()


@contextlib.contextmanager
@hold_back_in  # Ctrl-C while the block is entered or left: once it is (not in the block)
def using(queue, wait_for=()):
    """Launches in this block (in this thread or asyncio task) go to ``queue`` and wait for
    ``wait_for``; so does the rest of the block's work on ``queue`` (a barrier enqueued there
    first, except while it records into a Graph).

    ``queue=None`` keeps the current queue (to add ``wait_for`` only).  Without
    :func:`activate`, ur_cffi.triton is active while any thread is in a ``using`` block (an
    asyncio task made inside one keeps its queue after it only while ur_cffi.triton is
    active).  The block holds its own references to the ``wait_for`` events, so closing one
    inside it is safe.  Raises ``TypeError`` for a ``queue`` that is not a ur_cffi Queue,
    ``ClosedError`` for a closed queue or event.
    """
    from ..queue import recording
    from .driver import Scope

    install_interrupts()  # (hold_back_in needs the handler)
    with _lock:
        if _state["driver"] is None:
            _install()  # no default queue: launches outside using blocks have none
        driver = _state["driver"]
        _state["users"] += 1
    try:
        scope = Scope(driver.scope().queue if queue is None else queue, wait_for)
        if scope.wait_count and scope.queue not in recording:
            # All the block's work on the queue comes after wait_for (CUDA's wait_event), not
            # only its launches: an autotuner's clone() for restore_value read stale values.
            scope.queue.barrier(scope.wait_for)
        driver.push(scope)
        try:
            yield scope.queue
        finally:
            driver.pop(scope)
            scope.close()
    finally:
        with _lock:
            _state["users"] -= 1
            if not _state["users"] and not _state["explicit"]:
                _uninstall()


def compile(fn, signature: dict, constants: dict | None = None, *, device=None, **options):
    """Compile a ``@triton.jit`` function ahead of time for a UR ``device``, without torch.

    ``signature`` and ``constants`` are ``triton.compiler.ASTSource``'s (``{"x": "*fp32",
    "BLOCK": "constexpr"}``, ``{"BLOCK": 128}``); ``options`` are Triton's (``num_warps``...).
    Returns Triton's ``CompiledKernel``: SPIR-V in ``.asm["spv"]`` (a cubin in
    ``.asm["cubin"]`` for a CUDA device), ``.metadata.name`` and ``.metadata.shared``.  Load
    it with ``programs.load`` or, adapted for the device, ``Program.from_il``
    (``Program.from_binary`` for a cubin).
    """
    import triton

    from . import _no_torch, backend
    from ..device import Device, default_device
    from .source import checked_source

    device = default_device() if device is None else device
    if not isinstance(device, Device):
        raise TypeError(f"device must be a ur_cffi Device, not {type(device).__name__} "
                        f"{device!r}")
    patches = _no_torch.Patches()
    with _lock:
        if _state["driver"] is None:  # otherwise the replacements are in place already
            _no_torch.install(patches)
            # num_ctas and the work-group checked as kernel[grid]'s compiles are (a kernel
            # of num_ctas=2 launched by hand left half its output unwritten)
            backend.install_option_check(patches)
        try:
            target = backend.gpu_target(device)
            backend.check_options(target, options)
            return triton.compile(checked_source(fn, signature, constants), target=target,
                                  options=options)
        finally:
            patches.restore()


def kernel_options(compiled) -> dict:
    """What ``program.kernel(name, **kernel_options(compiled))`` needs to launch ``compiled``
    (a :func:`compile` result) by hand with the user's arguments only: ``hidden_args``, the
    values its backend's ABI passes after them (null scratch pointers on NVIDIA; a
    :class:`~ur_cffi.Local` of ``metadata.shared`` bytes on Intel, whose kernels take shared
    memory as an argument), ``work_group_memory``, the shared memory a NVIDIA kernel takes
    as a launch property, and ``required_local_size``, the work-group size it computes right
    in (``num_warps`` times its threads per warp; launches take it by default).

    Raises ``NotImplementedError`` for a kernel that needs scratch memory: launch it with
    ``kernel[grid]`` or :func:`prepare`, which allocate it.
    """
    import numpy as np

    from ..program import Local

    from .cuda import scratch_layout

    metadata = getattr(compiled, "metadata", None)
    if metadata is None or not hasattr(metadata, "target"):
        raise TypeError(f"kernel_options takes what ur_cffi.triton.compile returned, not "
                        f"{type(compiled).__name__} {compiled!r:.80}")
    rules = abi.current(abi.TARGET_BACKENDS.get(metadata.target.backend,
                                                metadata.target.backend))
    for index, size, _ in scratch_layout(rules, metadata):
        prefix = rules.scratch_metadata[index]
        raise NotImplementedError(
            f"kernel {metadata.name!r} needs {prefix.replace('_', ' ')} memory ({size} bytes "
            "per program): launch it with kernel[grid] or ur_cffi.triton.prepare, which "
            "allocate it")
    hidden = (np.uint64(0),) * rules.scratch_pointers
    shared = int(metadata.shared)
    if shared and rules.shared_memory_argument:
        hidden, shared = (*hidden, Local(shared)), 0
    return {"hidden_args": hidden, "work_group_memory": shared,
            "required_local_size": (metadata.num_warps * rules.threads_per_warp(metadata),)}


def prepare(fn, grid, *args, **kwargs):
    """``fn[grid](*args, **kwargs)`` compiled, checked and packed once, not launched: returns a
    :class:`~ur_cffi.PreparedLaunch` on the current queue that enqueues it on each call
    (``launch(event=False)``, ``launch(wait_for=[...])``), without Triton's dispatch.

    It holds its arguments; their values, pointer arguments' addresses and the grid are
    fixed now.  Its launches do not run Triton's launch hooks and are not
    :func:`last_event`.  An autotuned kernel is tuned here as at its first ``kernel[grid]``;
    one whose chosen config has a ``pre_hook`` (run before each of Triton's launches, e.g.
    to zero an accumulator) raises ``ValueError``.
    """
    from threading import get_ident

    from .bench import launches_run

    driver = _state["driver"]
    if driver is None:
        raise RuntimeError("ur_cffi.triton is not active: call ur_cffi.triton.activate()")
    tuners = _autotuners(fn)
    for tuner in tuners:
        tuner.do_bench = launches_run(tuner.do_bench)
    thread = get_ident()
    driver.preparing[thread] = None
    try:
        fn[grid](*args, **kwargs)
    finally:
        prepared = driver.preparing.pop(thread, None)
    if prepared is None:
        raise RuntimeError(f"Triton did not reach ur_cffi's launcher for {fn!r}")
    for tuner in tuners:
        if tuner.best_config.pre_hook is not None:
            raise ValueError(f"prepare: the config autotuning chose for {tuner.base_fn.__name__!r} "
                             f"({tuner.best_config}) has a pre_hook, which Triton runs before "
                             "each launch and a prepared launch would not: use kernel[grid], "
                             "or record kernel[grid] into a ur_cffi.Graph (which records the "
                             "hook's commands too)")
    return prepared


def _autotuners(fn) -> list:
    """The ``@triton.autotune`` objects among ``fn`` and the kernels it wraps."""
    from triton.runtime import KernelInterface
    from triton.runtime.autotuner import Autotuner

    found = []
    while isinstance(fn, KernelInterface):
        if isinstance(fn, Autotuner):
            found.append(fn)
        fn = getattr(fn, "fn", None)
    return found


def last_event():
    """The :class:`~ur_cffi.Event` of the latest launch through ur_cffi.triton, or None.

    Process-wide: with launches from several threads, the latest of them.  On an in-order
    queue without profiling, a marker enqueued at the first call after the launch stands in
    for the launch's own event (``URDriver.last_event``).  Raises ``RuntimeError`` while
    this thread's queue records into a :class:`~ur_cffi.Graph`: its launches run at replays.
    """
    from ..queue import recording

    driver = _state["driver"]
    if driver is None:
        return None
    if recording and driver.scope().queue in recording:
        raise RuntimeError("kernel[grid] launches are recorded into a graph here, not run: "
                           "wait for the Event that graph.replay(queue) returns")
    return driver.last_event()


def current_queue():
    """The queue launches from this thread go to; ``RuntimeError`` if not active."""
    driver = _state["driver"]
    if driver is None:
        raise RuntimeError("ur_cffi.triton is not active: call ur_cffi.triton.activate()")
    return driver.scope().queue


def is_active() -> bool:
    """Whether ur_cffi.triton is Triton's driver now."""
    return _state["driver"] is not None


def active_driver():
    """The active :class:`~ur_cffi.triton.driver.URDriver`, or None."""
    return _state["driver"]
