"""Launch one small Triton kernel many times, three ways, and see what each costs per launch.

``kernel[grid](...)`` runs Triton's dispatch (argument binding, specialization, cache lookup)
on every call.  ``ur_cffi.triton.prepare(kernel, grid, ...)`` does that once and returns a
``PreparedLaunch`` that only enqueues; ``event=False`` skips making an Event per launch, and
``ur_cffi.set_interruptible_waits(False)`` makes ``queue.finish()`` the plain blocking UR call
(Ctrl-C then waits for the device; the default waits already block directly on short work).
Each way runs the same launches on the same arrays; the result must be exact every time.
Prints microseconds per launch (timings on a busy machine vary); exits with status 1 if a
result is wrong.

    python examples/repeated_launches.py
"""

import sys
import time

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def axpy(x_ptr, y_ptr, a, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.load(y_ptr + offsets, mask=mask) + a * x, mask=mask)


def main():
    queue = ur_cffi.triton.activate()
    n, a, launches = 1000, 2.0, 2000
    rng = np.random.default_rng()
    x = rng.integers(-100, 100, n).astype(np.float32)  # integers: every sum below is exact
    x_device = ur_cffi.asarray(x, queue=queue)
    y_device = ur_cffi.empty(n, np.float32, queue=queue)
    grid = (triton.cdiv(n, 1024),)
    expected = launches * a * x.astype(np.float64)

    def run(label, launch_once):
        launch_once()  # the first kernel[grid] call compiles: not timed
        y_device.fill(0.0)
        queue.finish()
        start = time.perf_counter()
        for _ in range(launches):
            launch_once()
        queue.finish()
        per_launch = (time.perf_counter() - start) / launches * 1e6
        exact = np.array_equal(y_device.to_numpy().astype(np.float64), expected)
        print(f"{label:45} {per_launch:7.2f} us per launch, exact: {exact}")
        return exact

    results = [run("kernel[grid](...)",
                   lambda: axpy[grid](x_device, y_device, a, n, BLOCK_SIZE=1024))]
    prepared = ur_cffi.triton.prepare(axpy, grid, x_device, y_device, a, n, BLOCK_SIZE=1024)
    results.append(run("ur_cffi.triton.prepare(...)()", prepared))
    results.append(run("ur_cffi.triton.prepare(...)(event=False)",
                       lambda: prepared(event=False)))

    def launch_and_finish():
        prepared(event=False)
        queue.finish()

    results.append(run("the same, finishing each launch", launch_and_finish))
    previous = ur_cffi.set_interruptible_waits(False)
    results.append(run("the same, finishing with blocking waits", launch_and_finish))
    ur_cffi.set_interruptible_waits(previous)

    ur_cffi.triton.deactivate()
    print(f"all exact: {all(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
