"""Figures, targets and the environment, as a markdown table and as JSON."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import sys

from . import harness

# (workload, method, reference, limit, description): the method's time must be at most
# ``limit`` times the reference's, as a median of per-round ratios.  "defaults" is what a user
# writes first; "fast path" what the README recommends where speed matters.
RATIO_TARGETS = (
    ("launch_finish", "wrapper", "c", 2.0,
     "defaults: Kernel.launch + Queue.finish within 2x of C"),
    ("launch_finish", "wrapper", "dpctl", 1.0,
     "defaults: Kernel.launch + Queue.finish ahead of dpctl"),
    ("back_to_back", "wrapper", "c", 2.0,
     "defaults: Kernel.launch back-to-back within 2x of C"),
    ("back_to_back", "wrapper", "dpctl", 1.0,
     "defaults: Kernel.launch back-to-back ahead of dpctl"),
    ("back_to_back", "triton", "c", 3.0,
     "defaults: Triton kernel[grid] back-to-back within 3x of C"),
    ("back_to_back", "triton", "dpctl", 1.0,
     "defaults: Triton kernel[grid] back-to-back ahead of dpctl"),
    ("launch_finish", "triton", "dpctl", 1.0,
     "defaults: Triton kernel[grid] + finish ahead of dpctl"),
    ("launch_finish", "lean", "c", 1.3,
     "fast path: Kernel.launch(event=False) + finish within 1.3x of C"),
    ("back_to_back", "lean", "c", 1.3,
     "fast path: Kernel.launch(event=False) back-to-back within 1.3x of C"),
    ("launch_finish", "lean", "dpctl", 1.0,
     "fast path: Kernel.launch(event=False) + finish ahead of dpctl"),
    ("back_to_back", "prepared", "c", 1.3,
     "fast path: prepared launch back-to-back within 1.3x of C"),
    ("back_to_back", "triton_prepared", "c", 2.0,
     "fast path: ur_cffi.triton.prepare back-to-back within 2x of C"),
    ("back_to_back", "graph", "c", 0.5,
     "Kernel.launch recorded in a graph, per launch of a replay, within 0.5x of C's launch"),
    ("back_to_back", "graph_triton", "c", 0.5,
     "Triton kernel[grid] recorded in a graph, per launch of a replay, within 0.5x of C's launch"),
    ("usm_alloc_free", "wrapper", "c", 1.3,
     "ur_cffi.empty(4 KiB) + close (caching allocator) within 1.3x of C urUSMDeviceAlloc + "
     "urUSMFree"),
    ("flush", "wrapper", "raw", 1.3, "Queue.flush within 1.3x of a bare cffi urQueueFlush"),
    ("copy_h2d", "wrapper", "c", 1.05, "USMArray.copy_from (256 MiB) within 5% of C"),
    ("copy_d2h", "wrapper", "c", 1.05, "USMArray.copy_to (256 MiB) within 5% of C"),
)

# (workload, methods added, methods subtracted, limit, description): per round, the added
# times minus the subtracted ones, per unit of work, must be at most ``limit`` microseconds.
DIFFERENCE_TARGETS = (
    ("back_to_back", ("triton",), ("triton_dispatch", "triton_prepared"), 1.0,
     "defaults: Triton kernel[grid], ur_cffi's share (minus Triton's dispatch alone) at most a "
     "prepared launch's + 1 us"),
    ("back_to_back", ("triton",), ("triton_dispatch_prepared",), 1.0,
     "defaults: Triton kernel[grid], ur_cffi's launcher at most a prepared launch's + 1 us, "
     "both after Triton's dispatch in the same loop (the same pace)"),
    ("back_to_back", ("wrapper", "c"), ("lean", "c_event"), 0.0,
     "defaults: the Event of Kernel.launch costs what the runtime's event costs (Event minus "
     "no Event, less the same in C)"),
)
WARM_START_LIMIT_S = 1.0


def _stats(values):
    every, first, second = harness.halves(values)
    return harness.median_of(every), harness.median_of(first), harness.median_of(second)


def figures(times, workloads, methods, skipped) -> dict:
    """``{workload: {method: {...}}}`` for every workload and every method, run or not."""
    out = {}
    for workload in workloads:
        per_method = times[workload.name]
        row = {}
        for name in methods:
            if name not in per_method:
                row[name] = {"value": None, "value_a": None, "value_b": None,
                             "ratio_to_c": None, "ratio_to_c_a": None, "ratio_to_c_b": None,
                             "unit": workload.unit, "rounds_s": [],
                             "skipped": skipped.get((name, workload.name), "not run")}
                continue
            value, value_a, value_b = (None if v is None else workload.figure(v)
                                       for v in _stats(per_method[name]))
            ratio = harness.ratios(per_method, name, "c")
            ratio, ratio_a, ratio_b = _stats(ratio) if ratio else (None, None, None)
            row[name] = {"value": value, "value_a": value_a, "value_b": value_b,
                         "ratio_to_c": ratio, "ratio_to_c_a": ratio_a, "ratio_to_c_b": ratio_b,
                         "unit": workload.unit, "rounds_s": per_method[name], "skipped": None}
        out[workload.name] = row
    return out


def targets(times, start) -> list[dict]:
    """Each target's measured ratio (or seconds), its limit and PASS / MISS / n/a."""
    results = []
    for workload, method, reference, limit, description in RATIO_TARGETS:
        per_round = harness.ratios(times.get(workload, {}), method, reference)
        entry = {"target": description, "workload": workload, "method": method,
                 "reference": reference, "limit": limit}
        if not per_round:
            entry.update(value=None, value_a=None, value_b=None, verdict="n/a")
        else:
            value, value_a, value_b = _stats(per_round)
            entry.update(value=value, value_a=value_a, value_b=value_b,
                         verdict="PASS" if value <= limit else "MISS",
                         noisy=(value_a <= limit) != (value_b <= limit))
        results.append(entry)
    for workload, added, subtracted, limit, description in DIFFERENCE_TARGETS:
        per_method = times.get(workload, {})
        entry = {"target": description, "workload": workload, "method": "+".join(added),
                 "reference": "+".join(subtracted), "limit": limit, "unit": " us"}
        if not all(name in per_method for name in added + subtracted):
            entry.update(value=None, value_a=None, value_b=None, verdict="n/a")
        else:
            rounds = zip(*(per_method[name] for name in added + subtracted))
            per_round = [1e6 * (sum(row[:len(added)]) - sum(row[len(added):]))
                         for row in rounds]
            value, value_a, value_b = _stats(per_round)
            entry.update(value=value, value_a=value_a, value_b=value_b,
                         verdict="PASS" if value <= limit else "MISS",
                         noisy=(value_a <= limit) != (value_b <= limit))
        results.append(entry)
    warm = start.get("demo_warm_s")
    results.append({"target": f"warm start to first result under {WARM_START_LIMIT_S:g} s",
                    "workload": "startup", "method": "demo", "reference": None,
                    "limit": WARM_START_LIMIT_S, "value": warm, "value_a": None, "value_b": None,
                    "verdict": "n/a" if warm is None else
                    ("PASS" if warm < WARM_START_LIMIT_S else "MISS")})
    return results


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(setup, pinned_cpu) -> dict:
    """Date, machine, versions and device: what a figure is only valid for."""
    from ur_cffi.info import HEADER_FACTS

    device = setup.device
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpu_model": _cpu_model(), "logical_cpus": os.cpu_count(),
                    "pinned_cpu": pinned_cpu, "kernel": platform.release()},
        "python": sys.version.split()[0],
        "versions": {name: _version(name) for name in (
            "ur_cffi", "cffi", "numpy", "triton-xpu", "dpctl", "intel-cmplr-lib-ur",
            "intel-opencl-rt", "intel-sycl-rt")},
        "ur_api": HEADER_FACTS.get("version"),
        "commit": _commit(),
        "device": {"name": device.name, "backend": device.backend.name,
                   "driver_version": device.driver_version,
                   "max_compute_units": device.max_compute_units},
    }


def _commit() -> str | None:
    """The checkout's commit, with " (modified)" where tracked files differ from it; None
    outside a git checkout."""
    import subprocess

    where = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where,
                                capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 cwd=where, capture_output=True, text=True,
                                 check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + (" (modified)" if changed else "")


# ---------------------------------------------------------------------------------------------
# Printing

COLUMNS = ("launch_finish", "back_to_back", "flush", "copy_h2d", "copy_d2h", "usm_alloc_free")


def _cell(entry, digits) -> str:
    if entry["value"] is None:
        return "-"
    text = f"{entry['value']:.{digits}f}"
    if entry["ratio_to_c"] is not None:
        text += f" ({entry['ratio_to_c']:.2f}x)"
    return text


def _digits(unit: str) -> int:
    return {"ns": 0, "us": 2, "GB/s": 2}[unit]


def table(figs, workloads, labels) -> str:
    """The main markdown table: median of round medians, with the time ratio to C."""
    by_name, columns = {w.name: w for w in workloads}, [c for c in COLUMNS if c in figs]
    header = "| method | " + " | ".join(f"{by_name[c].title} ({by_name[c].unit})"
                                       for c in columns) + " |"
    lines = [header, "|" + " --- |" * (len(columns) + 1)]
    for method, label in labels.items():
        cells = [_cell(figs[c][method], _digits(by_name[c].unit)) for c in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def noise_table(figs, workloads, labels) -> str:
    """The same figures over the first and the second half of the rounds."""
    by_name, columns = {w.name: w for w in workloads}, [c for c in COLUMNS if c in figs]
    lines = ["| method | " + " | ".join(f"{by_name[c].title} A / B" for c in columns) + " |",
             "|" + " --- |" * (len(columns) + 1)]
    for method, label in labels.items():
        cells = []
        for column in columns:
            entry, digits = figs[column][method], _digits(by_name[column].unit)
            cells.append("-" if entry["value"] is None else
                         f"{entry['value_a']:.{digits}f} / {entry['value_b']:.{digits}f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(results) -> str:
    lines = ["| target | measured | halves A / B | limit | verdict |",
             "| --- | --- | --- | --- | --- |"]
    for entry in results:
        unit = entry.get("unit") or (" s" if entry["workload"] == "startup" else "x")
        value = "-" if entry["value"] is None else f"{entry['value']:.2f}{unit}"
        halves = ("-" if entry["value_a"] is None else
                  f"{entry['value_a']:.2f} / {entry['value_b']:.2f}")
        verdict = entry["verdict"] + (" (halves disagree)" if entry.get("noisy") else "")
        lines.append(f"| {entry['target']} | {value} | {halves} | {entry['limit']:g}{unit} | "
                     f"{verdict} |")
    return "\n".join(lines)


def startup_table(start) -> str:
    def seconds(key):
        value = start.get(key)
        return "-" if value is None else f"{value * 1000:.0f} ms"

    lines = ["| start-up | time |", "| --- | --- |",
             f"| `import ur_cffi` (in process) | {seconds('import_s')} |",
             f"| `python -c 'import ur_cffi'` (whole process) | {seconds('import_process_s')} |",
             f"| demo, cold Triton cache: start to first result | {seconds('demo_cold_s')} |",
             f"| demo, cold Triton cache: start to exit | {seconds('demo_cold_exit_s')} |",
             f"| demo, warm Triton cache: start to first result | {seconds('demo_warm_s')} |",
             f"| demo, warm Triton cache: start to exit | {seconds('demo_warm_exit_s')} |"]
    return "\n".join(lines)
