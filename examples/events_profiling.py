"""Events: order asynchronous copies on an out-of-order queue, and time them on the device.

Each enqueue returns an Event at once; ``wait_for=`` makes a command start only after others,
which is the only ordering an out-of-order queue has.  A queue made with ``profiling=True``
stamps each command's start and end in nanoseconds.  Exits with status 1 if a result is not
exact or the timestamps contradict the order asked for.

    python examples/events_profiling.py
"""

import numpy as np

import ur_cffi


def main():
    n = 4_000_037
    rng = np.random.default_rng()
    x = rng.standard_normal(n).astype(np.float32)
    result = np.full(n, np.nan, np.float32)
    device = ur_cffi.default_device()
    with device.create_context() as context, \
            ur_cffi.Queue(context, device, out_of_order=True, profiling=True) as queue:
        a = ur_cffi.empty(n, queue=queue)
        b = ur_cffi.empty(n, queue=queue, kind="shared")
        steps = {}
        steps["upload"] = a.copy_from(x, blocking=False)
        steps["poison b"] = b.fill(np.nan, blocking=False)
        steps["a to b"] = b.copy_from(a, blocking=False,
                                      wait_for=[steps["upload"], steps["poison b"]])
        steps["fill head"] = b.fill(0.0, count=1000, blocking=False, wait_for=[steps["a to b"]])
        steps["download"] = b.copy_to(result, blocking=False, wait_for=[steps["fill head"]])
        steps["download"].wait()  # everything it waited for is complete too

        for name, event in steps.items():
            print(f"{name:10} {event.elapsed_ns / 1e6:8.3f} ms   "
                  f"(started {(event.start_ns - steps['upload'].start_ns) / 1e6:7.3f} ms in)")
        ordered = all(steps[before].end_ns <= steps[after].start_ns for before, after in
                      [("upload", "a to b"), ("poison b", "a to b"), ("a to b", "fill head"),
                       ("fill head", "download")])

    expected = x.copy()
    expected[:1000] = 0.0
    exact = np.array_equal(result, expected)
    print(f"result exact: {exact}; each step started after the ones it waited for: {ordered}")
    return 0 if exact and ordered else 1


if __name__ == "__main__":
    raise SystemExit(main())
