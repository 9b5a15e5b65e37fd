"""Ctrl-C at every line: a SIGINT delivered at each line that ur_cffi executes in the enqueue,
event, copy, allocation, close and Triton paths, one sweep per scenario.

A trace function (``sys.settrace``) counts the line events in ur_cffi's own frames while a
scenario runs and, at the N-th, sends the process a real SIGINT: Python then raises
``KeyboardInterrupt`` wherever it handles signals next, as with Ctrl-C at that moment (a
``raise`` from the trace function instead would strike where no signal is ever handled, inside
a ``with`` statement's own exit).  The sweep runs the scenario for N = 1, 2, ... until a run
ends without reaching N.  After every interrupted run the process
must be sound: the enqueue lock free, the queue working (a fresh copy round trip exact), and
arrays written by completed work exact.  The whole sweep runs in a child process
(``python test_interrupt_sweep.py KERNELS``), so a crash (a double release, memory freed under a
running copy) fails the test; it ends with the loader torn down under UR's leak checker.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

triton = pytest.importorskip("triton", reason="the sweep's scenarios launch a Triton kernel")
tl = pytest.importorskip("triton.language")

import crash_probe  # noqa: E402
import device_under_test  # noqa: E402

BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE


@triton.jit
def scale(x_ptr, y_ptr, a, count, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < count
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)


def _signal_point() -> None:
    """A call: Python handles pending signals around calls."""


def sweep(scenario, check, package: str) -> tuple[int, int]:
    """Run ``scenario()`` once per line event of ``package``'s code it executes, interrupted at
    that line; ``check()`` after each.  Returns ``(runs, interrupted runs)``."""
    runs = interrupted = 0
    target = 1
    while True:
        seen, where = [0], [None]

        def local(frame, event, arg):
            if event == "line":
                seen[0] += 1
                if seen[0] == target:
                    where[0] = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                    os.kill(os.getpid(), signal.SIGINT)
            return local

        def tracer(frame, event, arg):
            if frame.f_code.co_filename.startswith(package):
                return local
            return None

        sys.settrace(tracer)
        try:
            try:
                scenario()
            finally:
                sys.settrace(None)
            _signal_point()  # a SIGINT sent at the scenario's last line is handled here
            if where[0] is not None:  # one ur_cffi sent again from a callback comes in ms
                time.sleep(0.1)
        except KeyboardInterrupt:
            interrupted += 1
        runs += 1
        try:
            check()
        except Exception as error:  # noqa: BLE001 - named with where the interrupt came
            raise AssertionError(f"{scenario.__name__}, interrupted at {where[0]}: "
                                 f"{type(error).__name__}: {error}") from None
        if seen[0] < target:  # the whole scenario ran before the N-th line: swept
            return runs, interrupted
        target += 1


SCENARIOS = ["copy_in_without_waiting", "read_back", "allocate_and_close", "launch_and_wait",
             "triton_launch", "create_objects", "list_devices", "record_and_replay",
             "triton_on_another_queue"]


def run(kernels: Path, names: list[str]) -> dict:
    import ur_cffi
    import ur_cffi.triton
    from ur_cffi.queue import enqueue_lock, recording

    package = str(Path(ur_cffi.__file__).parent)
    rng = np.random.default_rng()
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    program, axpy = crash_probe.load(context, kernels, "axpy")
    n = 3 * BLOCK
    x_host = rng.standard_normal(n).astype(np.float32)
    x = ur_cffi.asarray(x_host, queue=queue)
    y = ur_cffi.asarray(rng.standard_normal(n).astype(np.float32), queue=queue)
    out = ur_cffi.empty(n, queue=queue)
    prepared = axpy.prepare(queue, n // BLOCK * LOCAL, LOCAL, x, y, out, 2.0, n)
    kept = []  # objects a scenario made, dropped by the check

    def check():
        assert enqueue_lock.acquire(blocking=False), "the enqueue lock is still held"
        enqueue_lock.release()
        assert not recording, f"left recording into a graph: {recording}"
        assert ur_cffi.triton.current_queue() is queue, "Triton launches go to another queue"
        kept.clear()
        gc.collect()
        queue.finish()
        probe = rng.standard_normal(64).astype(np.float32)
        assert np.array_equal(ur_cffi.asarray(probe, queue=queue).to_numpy(), probe)
        assert np.array_equal(x.to_numpy(), x_host), "completed work was lost"

    def copy_in_without_waiting():
        big = ur_cffi.empty(1 << 16, queue=queue)
        kept.append(big)
        big.copy_from(rng.standard_normal(1 << 16).astype(np.float32), blocking=False)

    def read_back():
        kept.append(x.to_numpy())
        target = np.empty(n, np.float32)
        x.copy_to(target, blocking=False).wait()

    def allocate_and_close():
        array = ur_cffi.asarray(x_host, queue=queue, kind="shared")
        array.fill(1.0, offset=3, count=5)
        array.close()

    def launch_and_wait():
        axpy.launch(queue, n // BLOCK * LOCAL, LOCAL, x, y, out, 2.0, n).wait()
        axpy.launch(queue, n // BLOCK * LOCAL, LOCAL, x, y, out, 2.0, n, event=False)
        prepared(wait_for=[queue.barrier()])

    ur_cffi.triton.activate(queue)
    scale[(3,)](x, out, 2.0, n, BLOCK=BLOCK)  # compiled before the sweep

    def triton_launch():
        scale[(3,)](x, out, 2.0, n, BLOCK=BLOCK)
        event = ur_cffi.triton.last_event()
        kept.append(event)
        event.wait()

    def create_objects():  # a Ctrl-C between a create and its owner used to leak the handle
        with device.create_context() as other, ur_cffi.Queue(other, device) as made:
            kept.append(made)
        kept.append(crash_probe.kernel(program, kernels, "axpy"))
        kept.append(ur_cffi.Buffer(context, 64))

    def record_and_replay():  # a graph: recorded commands, a replay, its release
        graph = ur_cffi.Graph(context)
        kept.append(graph)
        with graph.recording(queue):
            axpy.launch(queue, n // BLOCK * LOCAL, LOCAL, x, y, out, 2.0, n, event=False)
            out.copy_to(np.empty(n, np.float32), blocking=False)
            out.fill(0.0, blocking=False)
        graph.replay(queue).wait()
        graph.close()

    def triton_on_another_queue():  # ur_cffi.triton.using, entered and left
        with ur_cffi.Queue(context, device) as other, ur_cffi.triton.using(other):
            scale[(3,)](x, out, 2.0, n, BLOCK=BLOCK)

    def list_devices():  # the device list's lock and the loader's, taken on every call
        assert device in ur_cffi.devices()
        kept.append(ur_cffi.default_device())

    scenarios = {f.__name__: f for f in (copy_in_without_waiting, read_back, allocate_and_close,
                                         launch_and_wait, triton_launch, create_objects,
                                         list_devices, record_and_replay,
                                         triton_on_another_queue)}
    results = {name: sweep(scenarios[name], check, package) for name in names}
    out.fill(np.nan)  # after the sweep, a launch of each kind still computes exactly
    scale[(3,)](x, out, 2.0, n, BLOCK=BLOCK)
    assert np.array_equal(out.to_numpy(), 2.0 * x_host)
    out.fill(np.nan)
    axpy.launch(queue, n // BLOCK * LOCAL, LOCAL, x, y, out, 2.0, n).wait()
    assert np.allclose(out.to_numpy(), 2.0 * x_host.astype(np.float64) + y.to_numpy(),
                       rtol=1e-6)
    ur_cffi.triton.deactivate()
    return results


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_an_interrupt_at_any_line_leaves_the_process_sound(kernels, tmp_path, scenario):
    done = crash_probe.run_child([kernels, scenario], script=Path(__file__), check=False,
                                 timeout=300,
                                 cwd=tmp_path, env=crash_probe.child_env(UR_CFFI_VALIDATION=1))
    assert done.returncode == 0, (f"exited with {done.returncode} (negative: a signal)\n"
                                  f"{done.stdout[-2000:]}\n{done.stderr[-6000:]}")
    results = json.loads(done.stdout.strip().splitlines()[-1])
    print(results)
    for name, (runs, interrupted) in results.items():
        assert interrupted >= 20, (name, runs, interrupted)  # every line was swept


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), sys.argv[2:] or SCENARIOS)))
