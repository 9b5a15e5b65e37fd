"""``python -m benchmarks --quick`` runs end to end and writes JSON with every expected key.

No timing is asserted: the quick figures come from a handful of iterations.  It runs in a
subprocess because the benchmark pins its process to one core.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import device_under_test

pytest.importorskip("triton", reason="make bench's kernel: " + device_under_test.NO_TRITON)

from benchmarks import instructions, report  # noqa: E402
from ur_cffi import _compat  # noqa: E402

pytestmark = pytest.mark.cpu_device("make bench measures the CPU device against C and dpctl; "
                                    "benchmarks/gpu.py measures a GPU (scripts/gpu_check.sh)")

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = ("flush", "launch_finish", "back_to_back", "copy_h2d", "copy_d2h", "usm_alloc_free")
METHODS = ("c", "c_event", "raw", "wrapper", "lean", "prepared", "triton", "triton_prepared",
           "triton_dispatch", "triton_dispatch_prepared", "graph_raw", "graph", "graph_triton",
           "graph_one_by_one", "ctypes", "dpctl")
ALWAYS_RUN = ("c", "raw", "wrapper", "ctypes")  # need nothing beyond ur_cffi and a C compiler
LAUNCHES_ONLY = ("c_event", "lean", "prepared")  # the same, launch workloads only
APART = ("c", "wrapper_in_turn", "triton_in_turn")  # measured in rounds of their own
FIGURE_KEYS = {"value", "value_a", "value_b", "ratio_to_c", "ratio_to_c_a", "ratio_to_c_b",
               "unit", "rounds_s", "skipped"}
STARTUP_KEYS = {"import_s", "import_process_s", "demo", "demo_cold_s", "demo_cold_exit_s",
                "demo_warm_s", "demo_warm_exit_s"}
TARGET_KEYS = {"target", "workload", "method", "reference", "limit", "value", "value_a",
               "value_b", "verdict"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    if not _compat.HAS_LAUNCH_WITH_ARGS:
        pytest.skip("make bench's C floor needs urEnqueueKernelLaunchWithArgsExp (oneAPI 2026.0 "
                    "on; benchmarks/floor.py says so when run)")
    path = tmp_path_factory.mktemp("bench") / "quick.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--json", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, json.loads(path.read_text())


def test_prints_the_tables(quick_run):
    stdout, _ = quick_run
    assert "| method |" in stdout
    assert "| target |" in stdout
    assert "| start-up |" in stdout
    assert "checked again after the measurement (poisoned output, launched once): c, " in stdout


def test_json_has_every_top_level_key(quick_run):
    _, results = quick_run
    assert set(results) >= {"environment", "quick", "rounds", "workloads", "methods",
                            "unavailable", "figures", "startup", "targets", "elapsed_s"}
    assert results["quick"] is True
    assert set(results["workloads"]) == set(WORKLOADS)
    assert set(results["methods"]) == set(METHODS) | set(APART)
    environment = results["environment"]
    assert set(environment) >= {"date", "machine", "python", "versions", "ur_api", "commit",
                                "device"}
    assert environment["machine"]["cpu_model"]
    apart = results["measured_apart"]
    assert set(apart) == {"launch_finish", "back_to_back"}
    for workload in apart.values():
        assert set(workload) == set(APART)
        for name in ("c", "wrapper_in_turn"):
            assert workload[name]["value"] > 0 and workload[name]["ratio_to_c"] > 0, name
    allocator_rows = {row["row"]: row for row in results["allocator"]}
    for row in ("USM alloc+free 4 KiB (measured apart from the table above)",
                "temporary + launch + drop, 100 per finish"):
        assert allocator_rows[row]["c_us"] > 0 and allocator_rows[row]["ratio"] > 0, row
    # The loop's waits, counted: one finish at its end, none per temporary freed.
    assert "ur_cffi's loop made 1 urQueueFinish and 0 urEventWait in 100 iterations" in \
        allocator_rows["temporary + launch + drop, 100 per finish"]["note"]


def test_every_method_has_every_figure(quick_run):
    _, results = quick_run
    figures = results["figures"]
    assert set(figures) == set(WORKLOADS)
    for workload in WORKLOADS:
        assert set(figures[workload]) == set(METHODS)
        for method in METHODS:
            entry = figures[workload][method]
            assert set(entry) >= FIGURE_KEYS, (workload, method)
            if entry["value"] is None:
                assert entry["skipped"], (workload, method)  # a missing figure says why
    for method in ALWAYS_RUN + LAUNCHES_ONLY:
        for workload in WORKLOADS:
            entry = figures[workload][method]
            if method in LAUNCHES_ONLY and workload not in ("launch_finish", "back_to_back"):
                assert entry["value"] is None and entry["skipped"], (workload, method)
                continue
            assert entry["value"] > 0 and entry["ratio_to_c"] > 0, (workload, method)
            assert len(entry["rounds_s"]) == results["rounds"]


def test_startup_and_targets_are_reported(quick_run):
    _, results = quick_run
    assert set(results["startup"]) >= STARTUP_KEYS
    assert results["startup"]["import_s"] > 0
    targets = results["targets"]
    # + the warm start
    assert len(targets) == len(report.RATIO_TARGETS) + len(report.DIFFERENCE_TARGETS) + 1
    for entry in targets:
        assert set(entry) >= TARGET_KEYS
        assert entry["verdict"] in ("PASS", "MISS", "n/a")


@pytest.mark.parametrize("stub_ur", [False, True], ids=["real", "stub-ur"])
@pytest.mark.parametrize("operation", instructions.OPERATIONS)
def test_each_counted_operation_does_its_work(operation, stub_ur):
    # What ``python -m benchmarks.instructions`` runs under callgrind, here without it: the
    # child checks the kernel's output (poisoned first) or that the cache served every
    # allocation, and fails otherwise; with --stub-ur, also unless every counted launch
    # reached the stub.
    done = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--child", operation,
                           "3"] + (["--stub-ur"] if stub_ur else []), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
