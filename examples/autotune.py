"""``@triton.autotune`` and ``triton.testing.do_bench`` on a UR device, without PyTorch.

The autotuner times each config with ``do_bench``, which ur_cffi.triton runs on UR profiling
events (barriers on the queue, timed by the device); the fastest config is then used.  Prints
each config's time, the chosen one, a do_bench figure, and checks the result against float64
numpy; exits with status 1 if it is wrong.

    python examples/autotune.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton

# Before @triton.autotune runs: the autotuner takes its benchmarker from the active driver.
queue = ur_cffi.triton.activate()

CONFIGS = [triton.Config({"BLOCK_SIZE": 256}, num_warps=2),
           triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
           triton.Config({"BLOCK_SIZE": 4096}, num_warps=8)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def main():
    rng = np.random.default_rng()
    n, a = 1_000_003, 0.5
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x_device, y_device = ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)
    out = ur_cffi.empty(n, np.float32, queue=queue)
    out.fill(np.nan)

    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
    axpy[grid](x_device, y_device, out, a, n)
    for config, (median, _, _) in axpy.configs_timings.items():
        print(f"{config}: {median:.3f} ms")
    print(f"chosen: {axpy.best_config}")
    ms = triton.testing.do_bench(lambda: axpy[grid](x_device, y_device, out, a, n), rep=50)
    print(f"do_bench: {ms:.3f} ms per call")

    result = out.to_numpy()
    expected = (np.float32(a) * x.astype(np.float64) + y).astype(np.float32)
    error = float(np.max(np.abs(result.astype(np.float64) - expected)))
    print(f"max error {error:.3g}")
    ur_cffi.triton.deactivate()
    return 0 if axpy.best_config in CONFIGS and error < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
