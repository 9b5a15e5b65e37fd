"""The original demo's flow through the raw layer alone, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import device_under_test

SCRIPT = Path(__file__).parent / "raw_flow.py"


@pytest.mark.cpu_device("the raw layer alone, with SPIR-V from Triton's Intel backend")
def test_raw_flow_runs_a_triton_kernel_on_ur_addresses(tmp_path):
    pytest.importorskip("triton", reason=device_under_test.NO_TRITON)
    spv = tmp_path / "scale.spv"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
    subprocess.run([sys.executable, str(SCRIPT), "compile", str(spv)], check=True, env=env,
                   timeout=300)
    assert spv.read_bytes()[:4] == (0x07230203).to_bytes(4, "little")
    done = subprocess.run([sys.executable, str(SCRIPT), "run", str(spv)], check=True, env=env,
                          capture_output=True, text=True, timeout=300)
    checks = json.loads(done.stdout.strip().splitlines()[-1])
    assert checks["adapters"] >= 1
    assert checks["buffer_round_trip"] is True
    assert checks["nan_left"] == 0
    # x * 2.5 in fp32 against float64: within one fp32 rounding of the result.
    assert checks["max_abs_error"] <= checks["max_abs_reference"] * 2**-23
    assert checks["torch_imported"] is False
