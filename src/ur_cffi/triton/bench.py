"""Benchmarking without torch: ``triton.testing.do_bench`` and ``@triton.autotune`` on UR events.

``do_bench`` times with ``triton.testing.Event(enable_timing=True)``: ``record()`` then
``start.elapsed_time(end)`` in ms.  While ur_cffi.triton is active that name makes a
:class:`ProfilingEvent`: ``record()`` enqueues a barrier on the current queue, and the elapsed
time is the difference of the two barriers' ``UR_PROFILING_INFO_COMMAND_END`` (when everything
before each had finished on the device).  This needs a queue created with ``profiling=True``
(``activate()`` makes its default queue so); on a queue without profiling ``do_bench`` gets
Triton's ``WallEvent`` and synchronizes around each call instead, as it does on devices whose
events cannot time.

The rest of what ``do_bench`` asks of the driver is here too: :class:`DeviceInterface`
(``synchronize``), the buffer it clears between runs to flush the device's cache, and the
benchmarker ``@triton.autotune`` takes from ``driver.get_benchmarker()`` at decoration time.
"""

from __future__ import annotations

import time

import numpy as np

MIN_CACHE_BYTES = 1 << 20


def _current_queue():
    from . import current_queue

    return current_queue()


def not_recording(what: str) -> None:
    """Raise where the current queue records into a Graph: nothing runs there, so there is
    nothing to time, and what the timing enqueued would go into the graph."""
    from ..queue import recording

    if recording:
        queue = _current_queue()
        if queue in recording:
            raise RuntimeError(
                f"{what} inside a Graph recording of {queue!r}: nothing runs while recording, "
                "so there is nothing to time. Launch the kernel once before the recording "
                "block (an autotuned kernel then records the config it chose)")


def supports_elapsed_time() -> bool:
    """Whether launches go to a profiling queue (``triton.testing._support_elapsed_time``)."""
    from . import is_active

    return is_active() and _current_queue().profiling


class ProfilingEvent:
    """A point in the current queue, timed by UR's profiling counters."""

    __slots__ = ("_barrier",)

    def __init__(self, enable_timing: bool = True, **kwargs):
        self._barrier = None

    def record(self) -> None:
        """Mark the current end of the queue (a barrier: nothing later starts before it)."""
        self._barrier = _current_queue().barrier()

    def elapsed_time(self, end: ProfilingEvent) -> float:
        """Milliseconds from this event to ``end``, waiting for ``end`` to complete."""
        if self._barrier is None or end._barrier is None:
            raise RuntimeError("elapsed_time needs both events recorded")
        end._barrier.wait()
        return (end._barrier.end_ns - self._barrier.end_ns) / 1e6


class WallEvent:
    """A host timestamp taken after finishing the current queue (for queues without profiling,
    where the installed Triton has no ``WallEvent`` of its own)."""

    __slots__ = ("timestamp",)

    def __init__(self, **kwargs):
        self.timestamp = 0.0

    def record(self) -> None:
        """Finish the current queue, then read the clock."""
        _current_queue().finish()
        self.timestamp = time.perf_counter_ns() / 1e6

    def elapsed_time(self, end: WallEvent) -> float:
        """Milliseconds from this event to ``end``."""
        return end.timestamp - self.timestamp


def make_event(**kwargs):
    """``triton.testing.Event`` (and the device interface's ``Event``, which Triton 3.6's
    ``do_bench`` uses): a :class:`ProfilingEvent`, or a wall-clock event without profiling."""
    if supports_elapsed_time():
        return ProfilingEvent(**kwargs)
    import triton.testing

    return getattr(triton.testing, "WallEvent", WallEvent)(**kwargs)


def benchmark(kernel_call, quantiles=None, **kwargs):
    """The autotuner's benchmarker: ``triton.testing.do_bench`` (on UR events when active).
    Its launches run even inside ``ur_cffi.triton.prepare``, which launches nothing: an
    autotuner tuning there times the real kernels, as at a first ``kernel[grid]``."""
    import triton.testing

    not_recording("@triton.autotune's benchmark")
    return _launching(triton.testing.do_bench, kernel_call, quantiles=quantiles, **kwargs)


def launches_run(do_bench):
    """An autotuner's own ``do_bench`` (its ``do_bench=``, or ``warmup=``/``rep=``), made to
    run its launches inside ``ur_cffi.triton.prepare`` as :func:`benchmark` does (it timed
    launches that never ran, and picked a config by noise)."""
    if getattr(do_bench, "launches_run", False):
        return do_bench

    def timed(*args, **kwargs):
        return _launching(do_bench, *args, **kwargs)

    timed.launches_run = True
    return timed


def _launching(call, *args, **kwargs):
    """``call(*args, **kwargs)``, its launches run even where this thread prepares one."""
    from threading import get_ident

    from . import _state

    driver, thread = _state["driver"], get_ident()
    preparing = driver is not None and thread in driver.preparing
    if preparing:
        held = driver.preparing.pop(thread)
    try:
        return call(*args, **kwargs)
    finally:
        if preparing:
            driver.preparing[thread] = held


class DeviceInterface:
    """What ``do_bench`` uses of ``driver.get_device_interface()``: ``synchronize`` and, from
    Triton 3.4 on, ``Event``."""

    Event = staticmethod(make_event)

    @staticmethod
    def synchronize(device=None) -> None:
        """Finish the current queue."""
        _current_queue().finish()

    @staticmethod
    def current_device():
        """The current ``(context, device)``, as ``driver.active.get_current_device()``
        (Triton 3.6's ``get_dram_gbps`` asks)."""
        from . import _state

        return _state["driver"].get_current_device()


def empty_cache(queue):
    """A device buffer twice the device's global-memory cache (``do_bench`` clears it)."""
    from ..enums import ur_device_info_t
    from ..memory import USMArray

    cache_bytes = queue.device.info(ur_device_info_t.UR_DEVICE_INFO_GLOBAL_MEM_CACHE_SIZE)
    nbytes = max(2 * int(cache_bytes), MIN_CACHE_BYTES)
    return USMArray(queue, nbytes // 4, np.int32)


def clear_cache(cache) -> None:
    """Overwrite ``cache`` on the current queue, without waiting."""
    cache.fill(0, queue=_current_queue(), blocking=False)
