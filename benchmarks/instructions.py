"""``python -m benchmarks.instructions``: instructions per call of ur_cffi's hot paths, counted
by callgrind in the calling thread, which do not drift with the machine's speed as times do.

Each operation runs in a child process under ``valgrind --tool=callgrind --separate-threads=yes``
twice, ``FEW`` and ``MANY`` times after a warm-up, counted only from the first call to the
finish after the last (``--collect-atstart=no``, then ``CALLGRIND_TOGGLE_COLLECT``); the
difference of the two counts of the main thread, divided by the difference of the call
counts, is what one call costs (the runtime's worker threads, which run the kernels, drop
out; the finish too with ``--stub-ur``, while with real UR its spin-wait grows with the
backlog of work and the machine's load).  Slow: about a minute per run.

Operations (the kernel and arguments of ``make bench``):

- ``launch``: ``Kernel.launch(queue, 32, 32, x, n, event=False)``
- ``prepared``: a ``Kernel.prepare(...)`` launch, ``event=False``
- ``triton_launcher``: ur_cffi.triton's launcher called with the arguments Triton passes it
- ``triton_prepared``: ``ur_cffi.triton.prepare(...)(event=False)``
- ``kernel_grid``: Triton's ``kernel[grid](...)``, dispatch and launcher
- ``empty_close``: ``ur_cffi.empty(4096, np.uint8, queue=queue).close()``

With ``--stub-ur`` the counts are ur_cffi's own Python alone: after one real call, the UR
calls of the launch and wait paths (``urEnqueueKernelLaunchWithArgsExp``, ``urQueueFinish``,
``urEventRelease``) are replaced by a Python function that returns 0 (before the warm-up, so
that the specializing interpreter settles on it), the garbage collector is off and string
hashes are fixed (``PYTHONHASHSEED=0``).  That takes the runtime's spin-waits out of the
counts, but they still move by up to about 0.5k between runs of the same code (a prepared
launch: 9,091 to 9,604 in four runs); without it they move by 0.5k to 1k.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FEW, MANY, WARM_UP = 200, 1200, 50
OPERATIONS = ("launch", "prepared", "triton_launcher", "triton_prepared", "kernel_grid",
              "empty_close")


def _operation(name: str):
    """``(call, finish, setup)`` for operation ``name``, set up on the default device."""
    import numpy as np

    import ur_cffi
    import ur_cffi.triton as ur_triton
    from ur_cffi.triton.launcher import Launcher

    from . import kernel
    from .methods import Setup

    setup = Setup(1 << 12, 1 << 12)
    queue, x, args = setup.queue, setup.x, setup.kernel_args()
    ur_triton.activate(queue)
    tiny = kernel.tiny
    options = {"BLOCK": kernel.BLOCK, "num_warps": kernel.NUM_WARPS}
    if name == "launch":
        launch = setup.kernel.launch
        return (lambda: launch(queue, kernel.BLOCK, kernel.BLOCK, *args, event=False)), \
            queue.finish, setup
    if name == "prepared":
        prepared = setup.kernel.prepare(queue, kernel.BLOCK, kernel.BLOCK, *args)
        return (lambda: prepared(event=False)), queue.finish, setup
    if name == "triton_launcher":
        calls = []
        original = Launcher.__call__

        def capture(launcher, *launch_args):
            calls.append((launcher, launch_args))
            return original(launcher, *launch_args)

        Launcher.__call__ = capture
        try:
            tiny[(1,)](x, kernel.N, **options)
        finally:
            Launcher.__call__ = original
        launcher, launch_args = calls[0]
        return (lambda: launcher(*launch_args)), queue.finish, setup
    if name == "triton_prepared":
        prepared = ur_triton.prepare(kernel.tiny, (1,), x, kernel.N, **options)
        return (lambda: prepared(event=False)), queue.finish, setup
    if name == "kernel_grid":
        return (lambda: tiny[(1,)](x, kernel.N, **options)), queue.finish, setup
    if name == "empty_close":
        return (lambda: ur_cffi.empty(4096, np.uint8, queue=queue).close()), queue.finish, setup
    raise ValueError(f"operation must be one of {OPERATIONS}, not {name!r}")


_stubbed_launches = [0]


def _no_ur_call(*args) -> int:
    return 0


def _no_ur_launch(*args) -> int:
    _stubbed_launches[0] += 1
    return 0


def _stub_ur() -> None:
    """Replace the UR calls of the launch and wait paths, where ur_cffi looks them up."""
    import ur_cffi._compat
    import ur_cffi.queue
    import ur_cffi.triton.launcher

    ur_cffi._compat.enqueue_launch = _no_ur_launch
    ur_cffi.triton.launcher._enqueue = _no_ur_launch
    ur_cffi.queue._finish = _no_ur_call
    ur_cffi.queue._event_release = _no_ur_call


def _child(name: str, count: int, stub_ur: bool = False) -> None:
    """Run operation ``name`` ``count`` times after the warm-up; raise if it did not do its
    work (the kernel's output, or every allocation served from the cache).  ``stub_ur``: the
    counted calls reach no UR launch or wait (see the module's docstring)."""
    import gc

    import ur_cffi

    from . import kernel

    call, finish, setup = _operation(name)
    setup.poison()
    if stub_ur:  # one real call, whose work is checked below; the warm-up then runs stubbed
        call()   # so that Python's specializing interpreter has settled on the stubs
        finish()
        _stub_ur()
        gc.disable()
    for _ in range(WARM_UP):
        call()
    finish()
    hits = ur_cffi.memory_stats(setup.context)["cache_hits"]
    toggle_collect = _collection_switch()
    toggle_collect()  # on: only the counted calls and their finish are counted
    for _ in range(count):
        call()
    finish()
    toggle_collect()
    if name == "empty_close":
        served = ur_cffi.memory_stats(setup.context)["cache_hits"] - hits
        if served != count:
            raise RuntimeError(f"{served} of {count} allocations came from the cache")
    elif stub_ur and _stubbed_launches[0] != WARM_UP + count:
        raise RuntimeError(f"{_stubbed_launches[0]} of {WARM_UP + count} launches reached "
                           "the stub: ur_cffi calls UR's launch from elsewhere now (_stub_ur)")
    elif setup.x.to_numpy().tolist()[:kernel.N] != kernel.expected():
        raise RuntimeError(f"{name}: the kernel's output is wrong")


def _collection_switch():
    """A function that turns callgrind's counting on and off (``CALLGRIND_TOGGLE_COLLECT``,
    from valgrind's ``callgrind.h``, compiled here): the child runs with counting off, so
    that its start-up, which varies by far more than the calls cost (the runtime's
    spin-waits while it builds the program grow with the machine's load: 0.7 G instructions
    between two runs), is left out."""
    import cffi

    builder = cffi.FFI()
    builder.cdef("void toggle_collect(void);")
    builder.set_source("_ur_bench_callgrind", "#include <valgrind/callgrind.h>\n"
                       "void toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }")
    module = _compiled(builder, "_ur_bench_callgrind")
    return module.lib.toggle_collect


def _compiled(builder, name: str):
    """The module ``builder`` compiles, loaded (its folder removed: the file stays mapped)."""
    import importlib.util

    with tempfile.TemporaryDirectory(prefix="ur_bench_callgrind_") as directory:
        path = builder.compile(tmpdir=directory, verbose=False)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def _main_thread_instructions(name: str, count: int, directory: Path, stub_ur: bool) -> int:
    out = directory / f"{name}-{count}"
    command = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
               "--collect-atstart=no", f"--callgrind-out-file={out}", sys.executable, "-m", "benchmarks.instructions",
               "--child", name, str(count)] + (["--stub-ur"] if stub_ur else [])
    # Fixed string hashes: each seed lays out the interpreter's dicts differently.
    env = {**os.environ, "PYTHONHASHSEED": "0"} if stub_ur else None
    run = subprocess.run(command, capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parent.parent)
    if run.returncode:
        raise RuntimeError(f"{name} x{count} failed under callgrind:\n{run.stderr[-2000:]}")
    main_thread = out.with_name(out.name + "-01")  # callgrind numbers threads from 1
    for line in main_thread.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {main_thread}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("operations", nargs="*", default=list(OPERATIONS),
                        help=f"any of {', '.join(OPERATIONS)} (default: all)")
    parser.add_argument("--stub-ur", action="store_true",
                        help="count ur_cffi's Python alone: UR's launch and wait calls "
                             "replaced after the warm-up, the garbage collector off")
    parser.add_argument("--child", nargs=2, metavar=("OPERATION", "COUNT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.stub_ur)
        return 0
    unknown = [name for name in args.operations if name not in OPERATIONS]
    if unknown:
        parser.error(f"unknown operations {unknown}; choose from {OPERATIONS}")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: callgrind counts the instructions", file=sys.stderr)
        return 2
    print("| operation | instructions per call, main thread |\n| --- | --- |")
    with tempfile.TemporaryDirectory() as directory:
        for name in args.operations:
            few, many = (_main_thread_instructions(name, count, Path(directory), args.stub_ur)
                         for count in (FEW, MANY))
            if many <= few:
                raise RuntimeError(f"{name}: {MANY} calls counted {many:,} instructions, {FEW} "
                                   f"calls {few:,}: the runs differ by more than the calls")
            print(f"| {name} | {(many - few) / (MANY - FEW):,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
