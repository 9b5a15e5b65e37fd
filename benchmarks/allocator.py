"""The caching allocator's rows: ``ur_cffi.empty`` + ``close`` of 4 KiB against C's
``urUSMDeviceAlloc`` + ``urUSMFree``, and a loop of "allocate a temporary, launch on it, drop
it" against the C loop without a caching allocator, which must finish the queue before each
free.  Measured by ``harness.measure`` as the main table is (interleaved rounds, medians of
round medians, ratios within rounds).  After the rounds, one more ur_cffi loop counts the UR
waits it makes (``urQueueFinish``, ``urEventWait``) with ur_cffi's modules' bindings wrapped:
one finish, at the loop's end, and no event wait (that no free waits for the queue is also
checked on the device, behind a running kernel, by ``tests/test_allocator.py``)."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import numpy as np

import ur_cffi

from . import harness, kernel
from .methods import RawLaunch, address

LOOP = 100  # temporaries per timed run; the ur_cffi loop finishes once at its end


def measure(setup, floor_lib, rounds: int, count: int) -> list[dict]:
    """Rows ``{"row", "c_us", "ur_cffi_us", "ratio", "ratio_a", "ratio_b", "note"}``."""
    raw = RawLaunch(setup)
    queue, context, device = setup.queue, setup.context, setup.device
    handles = (address(context.handle), address(device.handle), address(queue.handle),
               address(setup.kernel.handle), address(raw.global_size), address(raw.local_size),
               raw.num_args, address(raw.args))
    nbytes = kernel.BLOCK * 4
    rest = setup.kernel_args()[1:]

    def c_alloc_free(n):
        ur_cffi.check(floor_lib.floor_usm_alloc_free(handles[0], handles[1], setup.small_bytes,
                                                     n), "C floor")

    def alloc_free(n):
        for _ in range(n):
            ur_cffi.empty(setup.small_bytes, np.uint8, queue=queue).close()

    def c_loop(n):
        ur_cffi.check(floor_lib.floor_temporary_launch(*handles, nbytes, n), "C floor")

    def loop(n):
        launch, block = setup.kernel.launch, kernel.BLOCK
        for _ in range(n):
            temporary = ur_cffi.empty(kernel.BLOCK, np.int32, queue=queue)
            launch(queue, block, block, temporary, *rest, event=False)
            del temporary  # back to the pool while the launch may still run: no finish
        queue.finish()

    workloads = [harness.Workload("alloc_free", "USM alloc+free 4 KiB (measured apart from the "
                                  "table above)", "us", count, 5),
                 harness.Workload("loop", f"temporary + launch + drop, {LOOP} per finish", "us",
                                  LOOP, 5)]
    notes = {"alloc_free": "", "loop": "C finishes the queue before each urUSMFree"}
    times = harness.measure(
        [SimpleNamespace(name="c", ops={"alloc_free": c_alloc_free, "loop": c_loop}),
         SimpleNamespace(name="ur_cffi", ops={"alloc_free": alloc_free, "loop": loop})],
        workloads, rounds, log=lambda _line: None)
    waits = waits_of(lambda: loop(LOOP))
    notes["loop"] += (f"; ur_cffi's loop made {waits['urQueueFinish']} urQueueFinish and "
                      f"{waits['urEventWait']} urEventWait in {LOOP} iterations (counted)")
    rows = []
    for workload in workloads:
        ratios = harness.ratios(times[workload.name], "ur_cffi", "c")
        _, first, second = harness.halves(ratios)
        rows.append({"row": workload.title,
                     "c_us": workload.figure(statistics.median(times[workload.name]["c"])),
                     "ur_cffi_us": workload.figure(
                         statistics.median(times[workload.name]["ur_cffi"])),
                     "ratio": statistics.median(ratios), "ratio_a": statistics.median(first),
                     "ratio_b": statistics.median(second), "note": notes[workload.name]})
    stats = ur_cffi.memory_stats(context)
    rows.append({"row": "allocator after the runs", "note": (
        f"{stats['cache_hits']} of {stats['allocations']} allocations from the cache, "
        f"{stats['ur_allocations']} urUSMDeviceAlloc")})
    return rows


WAITS = ("urQueueFinish", "urEventWait")


class _CountingLib:
    """UR's ``lib``, counting the calls of :data:`WAITS` (each still reaches UR)."""

    def __init__(self, lib, counts: dict):
        self._lib, self._counts = lib, counts

    def __getattr__(self, name):
        function = getattr(self._lib, name)
        if name not in WAITS:
            return function
        counts = self._counts

        def counted(*args):
            counts[name] += 1
            return function(*args)

        return counted


def waits_of(run) -> dict:
    """``{UR function: calls}`` of the :data:`WAITS` that ``run()`` makes through ur_cffi."""
    from ur_cffi import _waiting, allocator, memory, program, queue

    counts = dict.fromkeys(WAITS, 0)
    modules, finish = (queue, allocator, memory, _waiting, program), queue._finish
    for module in modules:
        module.lib = _CountingLib(module.lib, counts)
    queue._finish = queue.lib.urQueueFinish
    try:
        run()
    finally:
        for module in modules:
            module.lib = module.lib._lib
        queue._finish = finish
    return counts


def table(rows: list[dict]) -> str:
    lines = ["| caching allocator | C, us | ur_cffi, us | ratio (A / B) | |",
             "| --- | --- | --- | --- | --- |"]
    for row in rows:
        if "ratio" not in row:
            lines.append(f"| {row['row']} | | | | {row['note']} |")
            continue
        lines.append(f"| {row['row']} | {row['c_us']:.2f} | {row['ur_cffi_us']:.2f} | "
                     f"{row['ratio']:.2f}x ({row['ratio_a']:.2f} / {row['ratio_b']:.2f}) | "
                     f"{row['note']} |")
    return "\n".join(lines)
