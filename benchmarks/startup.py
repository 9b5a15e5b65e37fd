"""Start-up costs, each in fresh subprocesses: ``import ur_cffi``, and process start to the
first result of ``examples/demo.py`` with an empty Triton cache (cold) and a filled one (warm).

If ``examples/demo.py`` does not exist, a small script doing the same (compile a Triton kernel,
build it on the device, launch it, print a value) stands in, and the report says so.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "demo.py"

IMPORT_PROBE = ("import time; began = time.perf_counter(); import ur_cffi; "
                "print(time.perf_counter() - began)")

# Stand-in for examples/demo.py with the Triton driver: a vector add through kernel[grid].
INLINE_TRITON = textwrap.dedent('''
    import numpy as np
    import triton
    import triton.language as tl

    import ur_cffi
    import ur_cffi.triton


    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
                 + tl.load(y_ptr + offsets, mask=mask), mask=mask)


    n = 1000
    x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    device = ur_cffi.default_device()
    with ur_cffi.Queue(device.create_context(), device) as queue, ur_cffi.triton.using(queue):
        dx, dy = ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)
        out = ur_cffi.empty(n, np.float32, queue=queue)
        add[(triton.cdiv(n, 256),)](dx, dy, out, n, BLOCK=256)
        print("max error", float(np.abs(out.to_numpy() - (x + y)).max()))
''')

# Stand-in when ur_cffi.triton is missing too: the benchmark kernel through triton.compile.
INLINE_COMPILE = textwrap.dedent('''
    import numpy as np

    import ur_cffi
    from benchmarks import kernel

    device = ur_cffi.default_device()
    context = device.create_context()
    with ur_cffi.Queue(context, device) as queue:
        il, shared = kernel.compile_spirv(device)
        program = ur_cffi.Program.from_il(context, ur_cffi.spirv.drop_capabilities(il))
        tiny = program.kernel(kernel.NAME, signature=("ptr", "int32"))
        x = ur_cffi.zeros(kernel.BLOCK, np.int32, queue=queue)
        tiny.launch(queue, kernel.BLOCK, kernel.BLOCK, x, kernel.N)
        queue.finish()
        print("x[:4] =", x.to_numpy()[:4].tolist())
''')


def _has_triton_driver() -> bool:
    try:
        import ur_cffi.triton as driver
    except ImportError:
        return False
    return hasattr(driver, "using")


def demo_command(workdir: Path) -> tuple[list[str], str]:
    """The command timed as "the demo" and a description of it."""
    if DEMO.exists():
        return [sys.executable, str(DEMO)], "examples/demo.py"
    if _has_triton_driver():
        script, what = INLINE_TRITON, "inline stand-in (examples/demo.py absent): vector add " \
                                      "through ur_cffi.triton"
    else:
        script, what = INLINE_COMPILE, "inline stand-in (examples/demo.py and ur_cffi.triton " \
                                       "absent): triton.compile + Program.from_il + launch"
    path = workdir / "demo_standin.py"
    path.write_text(script)
    return [sys.executable, str(path)], what


# A line holding one of these is the demo's result (examples/demo.py prints "device: ..."
# first and "MSE: ..." once the kernel ran and the result is back on the host).
RESULT_MARKERS = ("MSE", "max error", "x[:4]")


def time_first_result(command: list[str], env: dict) -> dict:
    """Seconds from spawning ``command`` to the first stdout line with a result, and to exit."""
    with tempfile.TemporaryFile("w+") as stderr:  # a file: a full stderr pipe would block it
        began = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1"},
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
        result_at, result_line = None, None
        for line in process.stdout:
            if result_at is None and any(marker in line for marker in RESULT_MARKERS):
                result_at, result_line = time.perf_counter() - began, line.strip()
        process.wait()
        exit_at = time.perf_counter() - began
        stderr.seek(0)
        errors = stderr.read()
    if process.returncode != 0:
        return {"first_result_s": None, "exit_s": None,
                "error": f"exit {process.returncode}: {errors.strip()[-600:]}"}
    return {"first_result_s": result_at, "exit_s": exit_at, "result_line": result_line}


def measure(import_runs: int, cold_runs: int, warm_runs: int, log=print) -> dict:
    """The start-up figures (medians over runs) as a JSON-ready dict."""
    env = dict(os.environ)
    env.pop("TRITON_CACHE_DIR", None)
    # The stand-in scripts live in a temporary directory but import ``benchmarks``.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    results: dict = {}

    imports, walls = [], []
    for _ in range(import_runs):
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=REPO, env=env,
                              capture_output=True, text=True)
        walls.append(time.perf_counter() - began)
        if done.returncode != 0:
            results["import_error"] = done.stderr.strip()[-600:]
            break
        imports.append(float(done.stdout.strip().splitlines()[-1]))
    results["import_s"] = statistics.median(imports) if imports else None
    results["import_process_s"] = statistics.median(walls) if imports else None
    log(f"  import ur_cffi: {len(imports)} runs")

    workdir = Path(tempfile.mkdtemp(prefix="ur_bench_startup_"))
    try:
        command, results["demo"] = demo_command(workdir)
        for label, runs in (("cold", cold_runs), ("warm", warm_runs)):
            outcomes = []
            for run in range(runs):
                cache = workdir / (f"cache-cold-{run}" if label == "cold" else "cache-warm")
                if label == "warm" and not cache.exists():
                    time_first_result(command, {**env, "TRITON_CACHE_DIR": str(cache)})  # fill
                outcomes.append(time_first_result(command, {**env, "TRITON_CACHE_DIR": str(cache)}))
            firsts = [o["first_result_s"] for o in outcomes if o.get("first_result_s") is not None]
            exits = [o["exit_s"] for o in outcomes if o.get("exit_s") is not None]
            results[f"demo_{label}_s"] = statistics.median(firsts) if firsts else None
            results[f"demo_{label}_exit_s"] = statistics.median(exits) if exits else None
            errors = [o["error"] for o in outcomes if "error" in o]
            if errors:
                results[f"demo_{label}_error"] = errors[0]
            if outcomes and outcomes[0].get("result_line"):
                results["demo_result_line"] = outcomes[0]["result_line"]
            log(f"  demo {label}: {runs} runs")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results
