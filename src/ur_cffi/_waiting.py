"""Blocking UR waits that Ctrl-C can interrupt.

A C call blocked in ``urQueueFinish`` or ``urEventWait`` holds the main thread until it returns,
so a ``KeyboardInterrupt`` would wait for the device.  In the main thread a wait first polls a
cheap completion probe for a few tens of microseconds (short waits, the common case, stay on
this thread), then hands the blocking call to a helper thread and waits for it interruptibly.
The GIL is released during every call into UR (cffi does so for each call), so other Python
threads run meanwhile either way.
"""

from __future__ import annotations

import threading
import time

from .errors import check

SPIN_SECONDS = 50e-6
"""How long the main thread polls before handing a wait to a helper thread."""


def wait(blocking_call, name: str, *args, is_done=None) -> None:
    """Run ``blocking_call(*args)`` (a UR wait) and check its result; interruptible in main.

    ``is_done()``, if given, reports completion without blocking.  If Ctrl-C interrupts the
    wait, the UR call goes on in its helper thread and the objects stay usable.
    """
    if threading.current_thread() is not threading.main_thread():
        check(blocking_call(*args), name)
        return
    if is_done is not None:
        deadline = time.perf_counter() + SPIN_SECONDS
        while not is_done():
            if time.perf_counter() > deadline:
                break
        else:
            check(blocking_call(*args), name)
            return
    outcome = []
    finished = threading.Event()

    def run():
        outcome.append(blocking_call(*args))
        finished.set()

    threading.Thread(target=run, name=f"ur_cffi {name}", daemon=True).start()
    finished.wait()  # interruptible: a KeyboardInterrupt leaves the helper thread waiting
    check(outcome[0], name)
