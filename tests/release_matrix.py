"""ur_cffi against every oneAPI runtime release PyPI carries, each in its own environment.

For each release: a virtual environment under ``.venv-releases/`` that gets that release's
runtime wheels first (as an environment with PyTorch XPU has them), then ur_cffi exactly as the
README says for that case (``pip install --no-build-isolation``, which must leave the runtime at
its version); then ``python -m ur_cffi`` must list the CPU device, ``examples/demo.py`` must
print ``MSE: 0.0``, and the core slice of the tests must pass.  The result table (also
``.venv-releases/matrix.md`` and ``matrix.json``) is what the README's support table shows.

    python tests/release_matrix.py [--keep] [RELEASE ...]     # default: every release below

Each environment takes about 2 GB, so it is removed once its release is checked (its log stays);
``--keep`` keeps them. Set ``PIP_FIND_LINKS`` to a folder of downloaded wheels to spare the
downloads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ["2025.0.4", "2025.1.0", "2025.2.0", "2025.3.1", "2026.0.0", "2026.1.0"]
"""The releases checked here; the newest (2026.2.0) runs the whole suite in ``make test``."""
INSTALL_BESIDE_EXISTING_RUNTIME = (
    'V=$(python -m pip show intel-cmplr-lib-ur | sed -n "s/^Version: //p") && '
    'python -m pip install "setuptools>=77" "cffi>=1.17" "pycparser>=3" "intel-sycl-rt==$V" "intel-opencl-rt==$V" && '
    'python -m pip install --no-build-isolation ".[triton]"')
"""The README's command for an environment that has a UR runtime already (PyTorch XPU brings
intel-cmplr-lib-ur): the header and CPU runtime of that very release, then ur_cffi built
against them, without build isolation."""
CORE_SLICE = ["tests/test_generator.py", "tests/test_bindings.py", "tests/test_raw_flow.py",
              "tests/test_device.py", "tests/test_device_selector.py",
              "tests/test_memory.py", "tests/test_program_kernel.py",
              "tests/test_launch_reuse.py", "tests/test_hostile_inputs.py", "tests/test_graph.py",
              "tests/test_triton.py", "tests/test_validation_mode.py"]
"""Bindings, devices (selectors too), memory, programs and kernels (hostile arguments too),
graphs, Triton, and validation mode (whose layers differ by release)."""
NUMPY_1 = {"2025.0.4": "numpy==1.26.4"}
"""Releases whose environment has numpy 1.x before ur_cffi comes (as environments of their
time may; ur_cffi asks for numpy>=1.26), installed with the README's ``"numpy<2"`` added to
keep it, and so also running :data:`NUMPY_SLICE`."""
KEEP_NUMPY_1 = ' "numpy<2"'
"""What the README adds to the install command where numpy 1.x must stay (pip would otherwise
take the newest ml_dtypes, which needs numpy 2, and upgrade numpy)."""
NUMPY_SLICE = ["tests/test_views.py", "tests/test_interop.py", "tests/test_dtypes.py"]
"""Arrays, their dtypes and interchange: where numpy's behaviour changed in 2.x."""
VENVS = ROOT / ".venv-releases"
DISK_NEEDED = 3 << 30
"""Free bytes one release's environment needs (about 2 GB installed, plus pip's unpacking)."""


def run(command: list[str], log, **kwargs) -> subprocess.CompletedProcess:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, **kwargs)
    log.write(done.stdout + done.stderr)
    log.flush()
    return done


def check_release(release: str) -> dict:
    """Install, build and test against ``release``; a dict of what happened."""
    venv = VENVS / release
    python = str(venv / "bin" / "python")
    # pip's cache would keep every release's wheels (about 400 MB each) on the disk as well.
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_CACHE_DIR=os.environ.get("PIP_NO_CACHE_DIR", "1"))
    row = {"release": release, "api": None, "build": "not reached", "device": "not reached",
           "demo": "not reached", "tests": "not reached", "runtime_kept": None}
    started = time.monotonic()
    free = shutil.disk_usage(VENVS).free
    if free < DISK_NEEDED and not venv.exists():
        row["build"] = f"not tried: {free / 2**30:.1f} GiB free on disk, {DISK_NEEDED >> 30} needed"
        (VENVS / f"{release}.log").write_text(row["build"] + "\n")
        return row
    with open(VENVS / f"{release}.log", "w") as log:
        if not (venv / "bin" / "python").exists():
            run([sys.executable, "-m", "venv", str(venv)], log, check=True)
        pip = [python, "-m", "pip", "install", "-q"]
        # The runtime first, as the user's environment has it; then ur_cffi as the README says.
        done = run(pip + [f"intel-cmplr-lib-ur=={release}", *NUMPY_1.get(release, "").split()],
                   log, env=env)
        if done.returncode:
            row["build"] = "runtime install failed"
            return row
        path = f"{venv / 'bin'}:{env['PATH']}"
        install = INSTALL_BESIDE_EXISTING_RUNTIME + (KEEP_NUMPY_1 if release in NUMPY_1 else "")
        done = run(["bash", "-c", install], log,
                   env=dict(env, PATH=path, VIRTUAL_ENV=str(venv)))
        row["build"] = "ok" if done.returncode == 0 else "failed"
        kept = run([python, "-m", "pip", "show", "intel-cmplr-lib-ur", "numpy"], log,
                   env=env).stdout
        row["runtime_kept"] = f"Version: {release}" in kept
        numpy_shown = re.search(r"^Name: numpy\s*\nVersion: (\S+)", kept, re.MULTILINE)
        row["numpy"] = numpy_shown.group(1) if numpy_shown else None
        if done.returncode or run(pip + ["pytest>=8", "hypothesis>=6"], log, env=env).returncode:
            return row
        described = run([python, "build_ffi.py", "--describe"], log)
        row["regen"] = described.stdout.strip()
        version = re.search(r"UR API version: (\S+)", described.stdout)
        row["api"] = version.group(1) if version else None

        listed = run([python, "-m", "ur_cffi"], log, timeout=120)
        row["device"] = "CPU" if "UR_DEVICE_TYPE_CPU" in listed.stdout else "no CPU device"
        demo = run([python, "examples/demo.py"], log, timeout=300)
        row["demo"] = "MSE 0" if demo.returncode == 0 and "MSE: 0.0" in demo.stdout \
            else "failed"
        slice_ = CORE_SLICE + (NUMPY_SLICE if release in NUMPY_1 else [])
        tests = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *slice_], log,
                    timeout=1800)
        summary = [line for line in tests.stdout.splitlines() if re.search(r"\d+ (passed|failed)",
                                                                            line)]
        row["tests"] = summary[-1].strip("= ") if summary else f"exit {tests.returncode}"
        row["tests_ok"] = tests.returncode == 0
    row["seconds"] = round(time.monotonic() - started)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| oneAPI | UR API | numpy | build | runtime kept | `python -m ur_cffi` | demo | "
             "core tests | time |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        kept = {True: "yes", False: "**replaced**", None: "-"}[row["runtime_kept"]]
        tests = f"{row['tests']} (with arrays and interchange)" \
            if row["release"] in NUMPY_1 else row["tests"]
        lines.append(f"| {row['release']} | {row['api'] or '-'} | {row.get('numpy') or '-'} | "
                     f"{row['build']} | {kept} | {row['device']} | {row['demo']} | {tests} | "
                     f"{row.get('seconds', '-')} s |")
    return "\n".join(lines)


def passed(row: dict) -> bool:
    numpy_kept = row["release"] not in NUMPY_1 or row.get("numpy") == \
        NUMPY_1[row["release"]].split("==")[1]
    return (row["build"] == "ok" and row["runtime_kept"] and numpy_kept and row["device"] == "CPU"
            and row["demo"] == "MSE 0" and row.get("tests_ok", False))


def log_tail(release: str, lines: int = 30) -> str:
    log = VENVS / f"{release}.log"
    return "\n".join(log.read_text().splitlines()[-lines:]) if log.exists() else "(no log)"


def main(arguments: list[str]) -> int:
    keep = "--keep" in arguments
    releases = [argument for argument in arguments if argument != "--keep"] or RELEASES
    VENVS.mkdir(exist_ok=True)
    rows = []
    for release in releases:
        print(f"== oneAPI {release}", flush=True)
        row = check_release(release)
        rows.append(row)
        print(f"   {row}", flush=True)
        if not passed(row):
            print(f"   last lines of {VENVS / release}.log:\n{log_tail(release)}", flush=True)
        if not keep:
            shutil.rmtree(VENVS / release, ignore_errors=True)
    report = table(rows)
    (VENVS / "matrix.md").write_text(report + "\n")
    (VENVS / "matrix.json").write_text(json.dumps(rows, indent=1))
    print(report)
    for row in rows:
        if "regen" in row:
            print(f"\n`build_ffi.py --describe` with oneAPI {row['release']}:\n{row['regen']}")
    failed = [row["release"] for row in rows if not passed(row)]
    if failed:
        print(f"\nfailed: {', '.join(failed)} (logs: {VENVS}/<release>.log)")
    print(f"releases: {len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
