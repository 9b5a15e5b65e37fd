"""Helpers for the reliability tests: small Triton kernels compiled without PyTorch, and a way to
run risky code in a child process, so that a crash fails one test instead of killing pytest.

As a script:
  ``python crash_probe.py compile DIR``  writes ``DIR/<kernel>.bin`` (SPIR-V, or a cubin for a
  CUDA device) and ``DIR/kernels.json``;
  ``python crash_probe.py soak KERNELS_DIR USM_CYCLES PROGRAM_CYCLES``  runs allocate/copy/free
  and program/kernel cycles, tears the loader down and prints resident-memory growth and what
  UR's leak checker reported as JSON (see :func:`soak`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import device_under_test

if __name__ == "__main__":
    sys.modules["torch"] = None  # any `import torch` now fails: nothing here may need it

HERE = Path(__file__).resolve().parent

# Work-group size of every kernel here: num_warps * threads_per_warp, fixed at compile time.
NUM_WARPS, THREADS_PER_WARP = 4, 16
LOCAL_SIZE = NUM_WARPS * THREADS_PER_WARP
BLOCK = 256  # elements per program (work-group)

SPIN_LIMIT = 20_000_000 if device_under_test.TYPE == "cpu" else 2_000_000
"""Rounds after which the ``spin`` kernel ends by itself if no flag releases it: 2.5 to 7 s on
the 2-core CI machine, quiet or with its other core busy (3 to 8 million rounds a second); a
GPU reads the flag in host memory across PCIe, about a microsecond a round.  The tests set the
flag within milliseconds; the limit bounds the run of a control that holds the kernel's waiter
on purpose, or of a test that fails (a wait that keeps the GIL, a Ctrl-C that does not
interrupt), to seconds."""

SIGNATURES = {
    # Triton's signature, and ur_cffi's Kernel signature for the same arguments.
    "axpy": ({"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "a": "fp32", "n": "i32"},
             ("ptr", "ptr", "ptr", "float32", "int32")),
    "lcg": ({"x_ptr": "*i32", "y_ptr": "*i32", "n": "i32", "steps": "i32"},
            ("ptr", "ptr", "int32", "int32")),
    "block_sums": ({"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                   ("ptr", "ptr", "int32", "local")),
    "spin": ({"flag_ptr": "*i32", "out_ptr": "*i32", "max_steps": "i32"},
             ("ptr", "ptr", "int32", "local")),  # the atomic's result goes through local memory
}


try:
    import triton
    import triton.language as tl
except ImportError:  # without the "triton" extra, the tests needing kernels skip
    triton = None
else:
    # Compiled by their SIGNATURES name (compile_kernels); lcg_reference checks "lcg".
    from kernels import block_sums, lcg_reference  # noqa: F401
    from kernels import lcg_steps as lcg  # noqa: F401

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, a * x + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    @triton.jit
    def spin(flag_ptr, out_ptr, max_steps, BLOCK: tl.constexpr, VOLATILE: tl.constexpr = False):
        # Runs until the host sets *flag_ptr (or max_steps rounds pass, SPIN_LIMIT say), then
        # stores how many rounds it waited: a kernel exactly as long as a test wants.
        steps = 0
        if VOLATILE:  # CUDA: an atomic on host memory may never see the host's write there
            while (tl.load(flag_ptr, volatile=True) == 0) & (steps < max_steps):
                steps += 1
        else:  # the CPU device: an atomic re-reads
            while (tl.atomic_add(flag_ptr, 0) == 0) & (steps < max_steps):
                steps += 1
        tl.store(out_ptr + tl.program_id(0), steps)


def hidden_args() -> tuple:
    """What launches of this module's kernels pass after the user's arguments on the test
    device: the NVIDIA backend's null scratch pointers (none on the CPU device)."""
    import numpy as np

    from ur_cffi.triton import abi, backend

    if backend.triton_backend(device_under_test.get()) != "nvidia":
        return ()
    return (np.uint64(0),) * abi.current("nvidia").scratch_pointers


def spin_local() -> tuple:
    """The spin kernel's arguments after its own: its 4 bytes of local memory where the test
    device takes them as an argument (Triton's Intel backend; on NVIDIA :func:`load` gives them
    as the kernel's work-group memory)."""
    import ur_cffi
    from ur_cffi.triton import backend

    if backend.triton_backend(device_under_test.get()) == "nvidia":
        return ()
    return (ur_cffi.Local(4),)


def compile_kernels(out_dir: Path) -> dict:
    """Compile every kernel for the test device (SPIR-V the CPU runtime accepts, or a cubin);
    returns and writes the index."""
    os.environ.setdefault("TRITON_CACHE_DIR", str(out_dir / "triton-cache"))
    import ur_cffi.triton
    from ur_cffi import spirv
    from ur_cffi.triton import abi, backend

    device = device_under_test.get()
    nvidia = backend.triton_backend(device) == "nvidia"
    index = {}
    for name in SIGNATURES:
        function = globals()[name]
        constants = {"BLOCK": BLOCK, **({"VOLATILE": nvidia} if name == "spin" else {})}
        signature = dict(SIGNATURES[name][0], **dict.fromkeys(constants, "constexpr"))
        if nvidia:  # a warp is 32 threads there: as many threads per work-group as elsewhere
            compiled = ur_cffi.triton.compile(function, signature, constants, device=device,
                                              num_warps=LOCAL_SIZE // 32)
            binary = compiled.asm["cubin"]
        else:
            compiled = ur_cffi.triton.compile(function, signature, constants,
                                              device=device, num_warps=NUM_WARPS,
                                              threads_per_warp=THREADS_PER_WARP)
            binary = spirv.drop_capabilities(compiled.asm["spv"])
        (out_dir / f"{name}.bin").write_bytes(binary)
        rules = abi.current(backend.triton_backend(device))
        index[name] = {"entry": compiled.metadata.name, "shared": compiled.metadata.shared,
                       "local_size": compiled.metadata.num_warps
                       * rules.threads_per_warp(compiled.metadata),
                       "il": not nvidia}
    (out_dir / "kernels.json").write_text(json.dumps(index))
    return index


def kernel_dir(base: Path) -> Path:
    """``base/kernels`` with every kernel compiled (in a child process, once)."""
    out = Path(base) / "kernels"
    if not (out / "kernels.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        run_child(["compile", str(out)], timeout=600)
    return out


def load(context, directory: Path, name: str):
    """``(Program, Kernel)`` for kernel ``name`` compiled into ``directory``, with its
    ur_cffi signature."""
    import ur_cffi

    index = json.loads((Path(directory) / "kernels.json").read_text())[name]
    assert index["local_size"] == LOCAL_SIZE
    binary = (Path(directory) / f"{name}.bin").read_bytes()
    if index["il"]:
        program = ur_cffi.Program.from_il(context, binary)
    else:
        program = ur_cffi.Program.from_binary(context, binary)
    return program, kernel(program, directory, name)


def kernel(program, directory: Path, name: str):
    """A new Kernel for ``name`` in ``program`` (built from ``directory``'s binary), with what
    the test device's launches need: on NVIDIA the scratch pointers as hidden arguments, and
    shared memory as work-group memory instead of the "local" argument the CPU device takes."""
    index = json.loads((Path(directory) / "kernels.json").read_text())[name]
    if index["il"]:
        return program.kernel(index["entry"], signature=SIGNATURES[name][1])
    signature = tuple(entry for entry in SIGNATURES[name][1] if entry != "local")
    return program.kernel(index["entry"], signature=signature, hidden_args=hidden_args(),
                          work_group_memory=index["shared"])


def spirv(directory: Path, name: str) -> bytes | None:
    """Kernel ``name``'s SPIR-V, or None where the test device took another binary."""
    index = json.loads((Path(directory) / "kernels.json").read_text())[name]
    return (Path(directory) / f"{name}.bin").read_bytes() if index["il"] else None


def child_env(**extra) -> dict:
    """The environment for a child process: this one's, with ``tests/`` importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_child(args=(), *, code: str | None = None, script: Path | None = None,
              timeout: float = 300, check: bool = True, env: dict | None = None,
              cwd: Path = HERE) -> subprocess.CompletedProcess:
    """Run ``python -c code args``, ``python script args`` or this file with ``args`` in a
    child process whose ``sys.path`` has ``tests/``.

    With ``check``, a non-zero exit (a crash shows as a negative signal number) raises
    ``AssertionError`` carrying the child's output.
    """
    if code is not None:
        command = [sys.executable, "-c", code]
    elif script is not None:
        command = [sys.executable, str(script)]
    else:
        command = [sys.executable, str(Path(__file__))]
    done = subprocess.run([*command, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or child_env(), cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"child exited with {done.returncode}\n--- stdout\n"
                             f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-8000:]}")
    return done


class Watchdog:
    """Calls ``function`` from a SIGALRM handler every ``seconds``, as a watchdog waiting for
    the device would, inside whatever the main thread runs then, until :meth:`stop`;
    ``calls`` counts the calls."""

    def __init__(self, function, seconds: float = 0.002):
        self.function, self.seconds, self.calls = function, seconds, 0
        signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _on_alarm(self, signum, frame):
        self.function()
        self.calls += 1
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)


def rounds(seconds: float = 15.0, at_least: int = 3):
    """Round numbers for reproducing a race: at least ``at_least`` rounds, then more until
    ``seconds`` have passed (on a loaded machine a race shows less often per round)."""
    deadline = time.monotonic() + seconds
    count = 0
    while count < at_least or time.monotonic() < deadline:
        yield count
        count += 1


def rss_bytes() -> int:
    """This process's resident set size, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(kernels: Path, usm_cycles: int, program_cycles: int) -> dict:
    """Allocate/copy/free ``usm_cycles`` times and create/release a program and kernel
    ``program_cycles`` times; resident memory is sampled after a warm-up of each."""
    import numpy as np

    import ur_cffi

    rng = np.random.default_rng()
    device = device_under_test.get()
    figures = {"usm_cycles": 0, "program_cycles": 0, "errors": 0}
    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        kinds = ("device", "host", "shared")
        host = rng.standard_normal(64).astype(np.float32)
        back = np.empty_like(host)

        def usm_cycle(i):
            kind = kinds[i % 3]
            with ur_cffi.asarray(host, queue=queue, kind=kind) as a, \
                    ur_cffi.empty(host.shape, np.float32, queue=queue, kind=kinds[(i + 1) % 3]) \
                    as b:
                b.copy_from(a)
                back.fill(np.nan)
                b.copy_to(back)
            if not np.array_equal(back, host):
                figures["errors"] += 1

        def program_cycle(i):
            with ur_cffi.Program.from_binary(context, binary) as program, \
                    kernel(program, kernels, "axpy") as built:
                if built.num_args != arguments:
                    figures["errors"] += 1

        program, axpy = load(context, kernels, "axpy")
        with program, axpy:
            binary = program.binaries[0]  # rebuilding from the binary keeps each cycle fast
            arguments = axpy.num_args
        for cycle, count, key in ((usm_cycle, usm_cycles, "usm"),
                                  (program_cycle, program_cycles, "program")):
            warm = max(count // 10, 1)
            for i in range(warm):
                cycle(i)
            before = rss_bytes()
            for i in range(warm, count):
                cycle(i)
            figures[f"{key}_cycles"] = count
            figures[f"{key}_rss_growth"] = rss_bytes() - before
        figures["live_objects"] = len(ur_cffi._handle._live) + len(ur_cffi._handle._events)
        figures["adapters"] = len(ur_cffi.loader.adapters())
    return figures


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        print(json.dumps(compile_kernels(Path(sys.argv[2]))))
    elif sys.argv[1] == "soak":
        import ur_cffi

        figures = soak(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        figures["validation"] = ur_cffi.loader.validation_enabled()
        try:  # in validation mode UR's leak checker reports here
            ur_cffi.loader.teardown()
            figures["validation_problems"] = []
        except ur_cffi.loader.ValidationError as error:
            figures["validation_problems"] = error.problems[:10]
        print(json.dumps(figures))
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")
