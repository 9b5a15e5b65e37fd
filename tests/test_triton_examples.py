"""Run the Triton examples as a user would: each in a fresh process, on the CPU device, with
torch unimportable (a meta-path finder raises ImportError for it), and check what they print."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ur_cffi

pytest.importorskip("triton")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

WITHOUT_TORCH = """
import importlib.abc, runpy, sys

class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, BlockTorch())
sys.argv = [sys.argv[1]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    assert not [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
"""


def run(name, tmp_path_factory):
    """Run ``examples/name``; return its stdout.  Triton's cache is the session's."""
    cache = tmp_path_factory.getbasetemp() / "triton_cache"  # as in test_triton.py
    cache.mkdir(exist_ok=True)
    runner = tmp_path_factory.getbasetemp() / "run_without_torch.py"
    runner.write_text(WITHOUT_TORCH)
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, str(runner), str(EXAMPLES / name)], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=tmp_path_factory.getbasetemp())
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_triton_scale(tmp_path_factory):
    stdout = run("triton_scale.py", tmp_path_factory)
    default = ur_cffi.default_device()  # the CPU device where UR lists no GPU
    assert re.match(rf"device: .+ \({default.type.name}, {default.backend.name}\)", stdout)
    assert re.search(r"^scaled 100003 floats by 10\.0: max error \S+, kernel "
                     r"UR_EVENT_STATUS_COMPLETE$", stdout, re.MULTILINE)


def test_softmax(tmp_path_factory):
    stdout = run("softmax.py", tmp_path_factory)
    error = float(re.search(r"softmax of 823x781 on .+: max error (\S+),", stdout).group(1))
    assert error < 1e-5


def test_matmul(tmp_path_factory):
    stdout = run("matmul.py", tmp_path_factory)
    error = float(re.search(r"max relative error (\S+)$", stdout, re.MULTILINE).group(1))
    assert error < 1e-5


def test_autotune(tmp_path_factory):
    stdout = run("autotune.py", tmp_path_factory)
    timings = re.findall(r"^BLOCK_SIZE: (\d+), num_warps: \d+.*: (\S+) ms$", stdout, re.MULTILINE)
    assert sorted(int(block) for block, _ in timings) == [256, 1024, 4096]
    assert all(float(ms) > 0 for _, ms in timings)
    chosen = re.search(r"^chosen: BLOCK_SIZE: (\d+),", stdout, re.MULTILINE).group(1)
    assert int(chosen) in (256, 1024, 4096)
    assert float(re.search(r"^do_bench: (\S+) ms per call$", stdout, re.MULTILINE).group(1)) > 0
    assert stdout.splitlines()[-1] == "max error 0"


def test_repeated_launches(tmp_path_factory):
    stdout = run("repeated_launches.py", tmp_path_factory)
    rows = re.findall(r"^(.+?) +(\d+\.\d\d) us per launch, exact: (True|False)$", stdout,
                      re.MULTILINE)
    assert [label for label, _, _ in rows] == [
        "kernel[grid](...)", "ur_cffi.triton.prepare(...)()",
        "ur_cffi.triton.prepare(...)(event=False)", "the same, finishing each launch",
        "the same, finishing with blocking waits"]
    assert all(exact == "True" and float(us) > 0 for _, us, exact in rows)
    assert stdout.splitlines()[-1] == "all exact: True"


def test_graph_step(tmp_path_factory):
    stdout = run("graph_step.py", tmp_path_factory)
    assert re.match(r"recorded 5 commands \(copy, launch, launch, launch, copy\) into (a UR "
                    r"command buffer|its commands replayed one by one)$", stdout, re.MULTILINE)
    steps = re.findall(r"^step (\d): weights (\d), max error (\S+)$", stdout, re.MULTILINE)
    assert [(int(step), int(weights)) for step, weights, _ in steps] == \
        [(step, step // 4) for step in range(8)]
    assert all(float(error) < 1e-5 for _, _, error in steps)
    assert stdout.splitlines()[-1].endswith("one enqueue per step: every step within 1e-5")
