"""The caching allocator's rows: ``ur_cffi.empty`` + ``close`` of 4 KiB against C's
``urUSMDeviceAlloc`` + ``urUSMFree``, and a loop of "allocate a temporary, launch on it, drop
it" against the C loop without a caching allocator, which must finish the queue before each
free.  Interleaved rounds as in ``harness``; the loop's queue finishes are counted (one, at
the end, for ur_cffi; checked on the device by ``tests/test_allocator.py``)."""

from __future__ import annotations

import statistics
import time

import numpy as np

import ur_cffi

from . import kernel
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

    rows = []
    for name, c_run, run, n, note in (
            ("USM alloc+free 4 KiB", c_alloc_free, alloc_free, count, ""),
            (f"temporary + launch + drop, {LOOP} per finish", c_loop, loop, LOOP,
             "C finishes the queue before each urUSMFree")):
        c_times, times = [], []
        for round_index in range(-1, rounds):
            pair = [(c_times, c_run), (times, run)]
            for target, runner in (pair if round_index % 2 else pair[::-1]):
                began = time.perf_counter_ns()
                runner(n)
                if round_index >= 0:
                    target.append((time.perf_counter_ns() - began) * 1e-3 / n)
        ratios = [t / c for t, c in zip(times, c_times)]
        half = len(ratios) // 2 or 1
        rows.append({"row": name, "c_us": statistics.median(c_times),
                     "ur_cffi_us": statistics.median(times), "ratio": statistics.median(ratios),
                     "ratio_a": statistics.median(ratios[:half]),
                     "ratio_b": statistics.median(ratios[half:] or ratios), "note": note})
    stats = ur_cffi.memory_stats(context)
    rows.append({"row": "allocator after the runs", "note": (
        f"{stats['cache_hits']} of {stats['allocations']} allocations from the cache, "
        f"{stats['ur_allocations']} urUSMDeviceAlloc")})
    return rows


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
