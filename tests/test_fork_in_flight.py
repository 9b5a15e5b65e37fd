"""fork() while work is in flight (a long kernel queued, another thread in ``finish()``): the
child ends promptly with the status it chose, although Intel's CPU runtime would wait at exit
for worker threads the child does not have; its uses of UR raise ``ClosedError``; the parent's
kernel completes exactly.  Each case runs in a child process of pytest, bounded in time."""

from __future__ import annotations

import json
import textwrap

import pytest

import crash_probe

FORK_IN_FLIGHT = textwrap.dedent("""
    import atexit, json, os, sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test
    from kernels import lcg_reference

    how, waiter, forker = sys.argv[2], sys.argv[3], sys.argv[4]
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    _, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    n, steps = 8 * crash_probe.BLOCK, 2_000_000
    x = np.random.default_rng().integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    source = ur_cffi.asarray(x, queue=queue)
    out = ur_cffi.empty(n, np.int32, queue=queue)
    lcg.launch(queue, n // crash_probe.BLOCK * crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE,
               source, out, n, steps)
    if waiter == "thread":
        finishing = threading.Thread(target=queue.finish)
        finishing.start()

    def fork_and_wait():
        pid = os.fork()
        if pid == 0:
            try:
                queue.finish()
                print("child: finish did not raise", file=sys.stderr)
            except ur_cffi.ClosedError:
                pass
            if how == "exit":
                sys.exit(7)
            if how == "raise":
                raise RuntimeError("the child's uncaught error")
            sys.stdout.write("child ran to its end\\n")  # then: status 0
            return
        started = time.monotonic()
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() - started > 30:
                break
            time.sleep(0.05)
        if not done:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        queue.finish()
        print(json.dumps({"exited": bool(done), "status": os.waitstatus_to_exitcode(status)
                          if done else None,
                          "exact": bool(np.array_equal(out.to_numpy(), lcg_reference(x, steps)))}))

    if forker == "main":
        fork_and_wait()
    elif forker == "exit function":  # registered after ur_cffi's import: runs before its exit
        atexit.register(fork_and_wait)
    else:  # the child's only thread is this one: it ends without Python's exit steps
        forking = threading.Thread(target=fork_and_wait)
        forking.start()
        forking.join()
""")


@pytest.mark.parametrize("waiter", ["none", "thread"])
@pytest.mark.parametrize("how, status", [("exit", 7), ("raise", 1), ("end", 0)])
def test_a_child_forked_with_work_in_flight_exits_with_its_status(kernels, how, status, waiter):
    done = crash_probe.run_child([kernels, how, waiter, "main"], code=FORK_IN_FLIGHT,
                                 timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"exited": True, "status": status, "exact": True}, done.stderr[-2000:]
    assert "finish did not raise" not in done.stderr
    if how == "raise":
        assert "the child's uncaught error" in done.stderr


def test_a_child_forked_inside_an_exit_function_exits(kernels):
    """Python runs no exit function its exit functions register: a child forked inside one
    must not leave its escape from the runtime's exit handlers to one."""
    done = crash_probe.run_child([kernels, "end", "none", "exit function"], code=FORK_IN_FLIGHT,
                                 timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"exited": True, "status": 0, "exact": True}, done.stderr[-2000:]
    assert "finish did not raise" not in done.stderr


@pytest.mark.parametrize("how", ["exit", "raise", "end"])
def test_a_child_forked_from_another_thread_exits(kernels, how):
    """A child forked from a thread other than the main one ends when that thread ends, with
    status 0 as Python gives it there (``sys.exit`` and exceptions end only the thread), and
    without Python's exit steps: it used to hang in the runtime's exit handler."""
    done = crash_probe.run_child([kernels, how, "none", "thread"], code=FORK_IN_FLIGHT,
                                 timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"exited": True, "status": 0, "exact": True}, done.stderr[-2000:]
    assert "finish did not raise" not in done.stderr
