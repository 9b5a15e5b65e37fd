"""Run the RAII-layer examples as a user would, each in a fresh process on the default device
(the CPU device where UR lists no GPU), and check what they print.  (Examples owned by the
Triton driver are tested with it.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ur_cffi

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def default_kind() -> tuple[str, str]:
    """Type and backend of the device the examples pick: ``("UR_DEVICE_TYPE_CPU",
    "UR_BACKEND_OPENCL")`` in CI."""
    device = ur_cffi.default_device()
    return device.type.name, device.backend.name


def run(name, tmp_path, *python_options):
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton_cache"))
    done = subprocess.run([sys.executable, *python_options, str(EXAMPLES / name)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout, done.stderr


# The demo run as a script, then whether torch got loaded.  (Not from -X importtime alone:
# it also lists an import that failed, such as Triton 3.6's attempt while ur_cffi blocks it.)
DEMO_THEN_TORCH = """
import runpy, sys
sys.argv, status = [sys.argv[1]], 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exit:
    status = exit.code
print("torch loaded:", [m for m in sys.modules if m == "torch" or m.startswith("torch.")
                        if sys.modules[m] is not None])
sys.exit(status)
"""


def test_demo(tmp_path):
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton_cache"))
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", DEMO_THEN_TORCH,
                           str(EXAMPLES / "demo.py")], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, f"demo.py exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.splitlines()
    assert lines[-2] == "MSE: 0.0"
    assert lines[-1] == "torch loaded: []"
    assert re.match(r"device: .+ \(%s, %s\)" % default_kind(), done.stdout)
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")]
    assert "triton" in imported


def test_devices(tmp_path):
    stdout, _ = run("devices.py", tmp_path)
    assert re.search(r"^\[0\] .+", stdout, re.MULTILINE)
    assert "type %s, backend %s" % default_kind() in stdout
    assert "(default)" in stdout
    assert re.search(r"sub-groups \[\d+(, \d+)*\]", stdout)
    assert re.search(rf"CPU devices: {len(ur_cffi.devices('cpu'))}, "
                     rf"GPU devices: {len(ur_cffi.devices('gpu'))}", stdout)


def test_usm_copies(tmp_path):
    stdout, _ = run("usm_copies.py", tmp_path)
    for kind in ("device", "host", "shared"):
        assert re.search(rf"^{kind} +\(300, 7\) float64 16800 bytes at 0x[0-9a-f]+: "
                         r"round trip exact True$", stdout, re.MULTILINE)
    assert "device to device, fill and partial copies exact True" in stdout
    assert "refused: copy_from: 20 element(s) at offset 2097 do not fit in 2100" in stdout
    assert stdout.splitlines()[-1] == "all exact"


def test_events_profiling(tmp_path):
    stdout, _ = run("events_profiling.py", tmp_path)
    for step in ("upload", "poison b", "a to b", "fill head", "download"):
        assert re.search(rf"^{step} +\d+\.\d{{3}} ms", stdout, re.MULTILINE)
    assert stdout.splitlines()[-1] == ("result exact: True; each step started after the ones "
                                       "it waited for: True")


def test_buffers(tmp_path):
    stdout, _ = run("buffers.py", tmp_path)
    assert re.search(rf"^40028 bytes, native {default_kind()[1]} handle 0x[0-9a-f]+$", stdout,
                     re.MULTILINE)
    assert "write, partial write and read exact: True" in stdout
    assert "refused: read: 40 bytes at offset 40020 do not fit in 40028" in stdout
