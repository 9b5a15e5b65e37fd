"""Ctrl-C during a long wait raises KeyboardInterrupt promptly, and the objects stay usable (or
close cleanly).  Each case runs in a child process that sends itself SIGINT from a timer while
its main thread waits for a kernel that spins until the process sets a flag in host memory."""

from __future__ import annotations

import json
import textwrap

import pytest

import crash_probe

SCRIPT = textwrap.dedent("""
    import ctypes, gc, json, os, signal, sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe
    from ur_cffi import _waiting

    wait, after = sys.argv[2], sys.argv[3]
    kernels = crash_probe.Path(sys.argv[1])
    BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE
    device = ur_cffi.devices("cpu")[0]
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    _, spin = crash_probe.load(context, kernels, "spin")
    _, lcg = crash_probe.load(context, kernels, "lcg")
    seed = np.random.default_rng().integers(-2**31, 2**31, BLOCK, dtype=np.int32)
    source = ur_cffi.asarray(seed, queue=queue)
    target = ur_cffi.zeros(BLOCK, np.int32, queue=queue)
    flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
    spun = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")  # read without the queue

    def release_the_kernel():
        ctypes.c_int32.from_address(flag.data_ptr()).value = 1

    def rounds_spun():
        return ctypes.c_int32.from_address(spun.data_ptr()).value

    host = np.zeros(BLOCK, np.int32)
    sent = {}

    def interrupt():
        sent["at"] = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)

    # The spin kernel runs until the flag is set (it stores how long it spun only then), so it
    # is surely running when SIGINT comes; the lcg kernel behind it gives a result to check.
    # Should the wait hang, the kernel ends by itself after MAX_STEPS rounds (~15 s here).
    MAX_STEPS = 200_000_000
    caught = None
    try:
        if wait == "finish after dropped launches":  # the usual `launch(...); finish()`
            threading.Timer(0.3, interrupt).start()
            spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS, ur_cffi.Local(4))
            lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            queue.finish()
        else:
            event = spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS, ur_cffi.Local(4))
            tail = lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            threading.Timer(0.3, interrupt).start()
            if wait == "finish":
                queue.finish()
            elif wait == "event.wait":
                event.wait()
            elif wait == "blocking copy":  # behind the kernels on the in-order queue
                target.copy_to(host)
            elif wait == "synchronize":
                device.synchronize()
            elif wait == "with block":
                with ur_cffi.Queue(context, device) as inner:
                    inner_target = ur_cffi.zeros(BLOCK, np.int32, queue=inner)
                    inner_event = lcg.launch(inner, LOCAL, LOCAL, source, inner_target,
                                             BLOCK, 1)
                    queue.finish()
    except KeyboardInterrupt:
        caught = time.perf_counter()
    gc.collect()  # what the interrupted frames held goes now, as it may at any time
    report = {
        "interrupted": caught is not None,
        "latency": caught - sent["at"] if caught else None,
        "kernel_still_running": rounds_spun() == 0,
        "helpers_waiting": _waiting.pending(),
    }
    if wait == "finish after dropped launches":
        event = queue.barrier()  # what follows waits for the dropped launches through this
    expected = crash_probe.lcg_reference(seed, 1000)
    if after == "use":  # the same objects, used again
        release_the_kernel()
        queue.finish()
        event.wait()
        report["spun"] = rounds_spun()
        report["released_by_the_flag"] = 0 < rounds_spun() < MAX_STEPS
        report["result_exact"] = bool(np.array_equal(target.to_numpy(), expected))
        lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 3)
        report["again_exact"] = bool(np.array_equal(target.to_numpy(),
                                                    crash_probe.lcg_reference(seed, 3)))
    else:  # closed at once, the kernel still running: close() waits for the device
        threading.Timer(0.2, release_the_kernel).start()
        event.close()
        queue.close()
        report["closed"] = event.closed and queue.closed
        with ur_cffi.Queue(context, device) as fresh:
            out = np.zeros(BLOCK, np.int32)
            target.copy_to(out, queue=fresh)
            report["result_exact"] = bool(np.array_equal(out, expected))
    ur_cffi.loader.teardown()  # in validation mode: raises if anything leaked
    report["helpers_left"] = _waiting.pending()
    print(json.dumps(report))
""")


def interrupt(tmp_path, kernels, wait, after, validation="0") -> dict:
    script = tmp_path / "interrupt.py"
    script.write_text(SCRIPT)
    done = crash_probe.run_child([kernels, wait, after], script=script,
                                 env=crash_probe.child_env(UR_CFFI_VALIDATION=validation),
                                 timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(report)
    return report


@pytest.mark.parametrize("wait", [
    "finish", "event.wait", "synchronize", "with block", "blocking copy",
    "finish after dropped launches"])
def test_ctrl_c_interrupts_a_wait_promptly_and_the_queue_still_works(tmp_path, kernels, wait):
    report = interrupt(tmp_path, kernels, wait, "use")
    assert report["interrupted"]
    assert report["kernel_still_running"]  # it came before the kernel ended, not after
    assert report["latency"] < 1.0  # generous: the signal handler runs within milliseconds
    assert report["helpers_waiting"] == 1  # the wait goes on in its helper thread
    assert report["released_by_the_flag"]  # not ended by itself after MAX_STEPS rounds
    assert report["result_exact"] and report["again_exact"]
    assert report["helpers_left"] == 0  # it ended with the kernel (teardown drains helpers)


def test_objects_close_cleanly_right_after_an_interrupt_and_leak_nothing(tmp_path, kernels):
    # Under UR's leak checker: the helper's own references are given back too.
    report = interrupt(tmp_path, kernels, "event.wait", "close", validation="1")
    assert report["interrupted"] and report["kernel_still_running"]
    assert report["closed"] and report["result_exact"]
    assert report["helpers_left"] == 0
