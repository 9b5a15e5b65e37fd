"""``python -m benchmarks`` (``make bench``): ur_cffi against C, ctypes, dpctl and Triton.

One process, pinned to one core; every method in every round; figures are medians of round
medians and ratios are taken within rounds.  Prints markdown tables and writes JSON to
``benchmarks/results/`` (or ``--json PATH``).  ``--quick`` runs tiny iterations to check that
everything works; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COPY_BYTES = 256 << 20
SMALL_BYTES = 4096


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="tiny iterations and sizes: checks the harness, not speed")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 60, quick 2)")
    parser.add_argument("--cpu", type=int,
                        help="core to pin to (default: the highest this process may use)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    parser.add_argument("--json", type=Path, help="where to write the JSON results")
    parser.add_argument("--skip", action="append", default=[], metavar="METHOD",
                        help="leave a method out (c is always run): c_event, raw, wrapper, "
                             "wrapper_in_turn, lean, prepared, triton, triton_in_turn, "
                             "triton_prepared, triton_dispatch, "
                             "triton_dispatch_prepared, graph_raw, "
                             "graph, graph_triton, graph_one_by_one, ctypes, dpctl")
    return parser.parse_args(argv)


def _pin(args) -> int | None:
    # Before the CPU runtime starts: its worker threads inherit the affinity.
    if args.no_pin or not hasattr(os, "sched_setaffinity"):
        return None
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def _workloads(quick: bool):
    from .harness import Workload

    copy_bytes = (1 << 20) if quick else COPY_BYTES
    scale = (lambda full, small: small) if quick else (lambda full, small: full)
    copy_title = f"{copy_bytes >> 20} MiB"
    return copy_bytes, (
        Workload("launch_finish", "launch + finish", "us", scale(100, 3), scale(5, 1)),
        Workload("back_to_back", "back-to-back, 100 deep, per launch", "us", scale(100, 10),
                 scale(5, 1)),
        Workload("flush", "urQueueFlush", "ns", scale(2000, 20), scale(5, 1)),
        Workload("copy_h2d", f"{copy_title} host to device", "GB/s", 1, scale(2, 1), copy_bytes),
        Workload("copy_d2h", f"{copy_title} device to host", "GB/s", 1, scale(2, 1), copy_bytes),
        Workload("usm_alloc_free", "USM alloc+free 4 KiB", "us", scale(200, 5), scale(5, 1)),
    )


def main(argv=None) -> int:
    args = _parse(argv)
    pinned = _pin(args)
    began = time.perf_counter()

    import ur_cffi  # noqa: F401 - after pinning; sets OCL_ICD_FILENAMES for dpctl as well

    from . import floor, harness, kernel, methods, report, startup

    rounds = args.rounds or (2 if args.quick else 60)
    copy_bytes, workloads = _workloads(args.quick)
    where = "not pinned" if pinned is None else f"pinned to CPU {pinned}"
    print(f"ur_cffi benchmarks{' (quick: figures are meaningless)' if args.quick else ''}; "
          f"{where}")

    print("setting up (Triton compile, program build, buffers)...")
    setup = methods.Setup(copy_bytes, SMALL_BYTES)
    floor_lib = floor.build()
    factories = {"c": lambda: methods.c_floor(setup, floor_lib),
                 "c_event": lambda: methods.c_event_floor(setup, floor_lib),
                 "raw": lambda: methods.raw_cffi(setup),
                 "wrapper": lambda: methods.wrapper(setup),
                 "wrapper_in_turn": lambda: methods.wrapper_in_turn(setup),
                 "lean": lambda: methods.lean_launch(setup),
                 "prepared": lambda: methods.prepared_launch(setup),
                 "triton": lambda: methods.triton_jit(setup),
                 "triton_in_turn": lambda: methods.triton_in_turn(setup),
                 "triton_prepared": lambda: methods.triton_prepared(setup),
                 "triton_dispatch": lambda: methods.triton_dispatch(setup),
                 "triton_dispatch_prepared": lambda: methods.triton_dispatch_prepared(setup),
                 "graph_raw": lambda: methods.graph_raw(setup),
                 "graph": lambda: methods.graph_launch(setup),
                 "graph_triton": lambda: methods.graph_triton(setup),
                 "graph_one_by_one": lambda: methods.graph_one_by_one(setup),
                 "ctypes": lambda: methods.ctypes_argtypes(setup),
                 "dpctl": lambda: methods.dpctl_sycl(setup)}
    labels, available, skipped, unavailable = {}, [], {}, {}
    for name, make in factories.items():
        if name in args.skip and name != "c":
            reason = "left out with --skip"
        else:
            try:
                method = make()
            except methods.Unavailable as error:
                reason = str(error)
            else:
                expected, got = kernel.expected(), method.verify()
                if got != expected:
                    raise SystemExit(f"{name}: the kernel wrote {got[:4]}..., not "
                                     f"{expected[:4]}...")
                labels[name] = method.label
                available.append(method)
                for workload, why in method.notes.items():
                    skipped[(name, workload)] = why
                continue
        print(f"  skipping {name}: {reason}")
        labels[name] = name
        unavailable[name] = reason
        for workload in methods.WORKLOADS:
            skipped[(name, workload)] = reason

    apart = [m for m in available if m.name in methods.MEASURED_APART]
    print(f"measuring {len(available) - len(apart)} methods, {rounds} interleaved rounds...")
    times = harness.measure([m for m in available if m not in apart], workloads, rounds)
    launches = [w for w in workloads if w.name in ("launch_finish", "back_to_back")]
    apart_names = ["c"] + [m.name for m in apart]
    if apart:
        print(f"measuring {', '.join(m.name for m in apart)} with c, {rounds} rounds...")
        c_method = next(m for m in available if m.name == "c")
        apart_times = harness.measure([c_method, *apart], launches, rounds)

    expected = kernel.expected()
    wrong = [m.name for m in available if m.verify() != expected]  # (one that stopped doing
    if wrong:                                                     # its work looks faster)
        raise SystemExit(f"after the measurement, these did not write the kernel's output: "
                         f"{', '.join(wrong)}")
    print("checked again after the measurement (poisoned output, launched once): "
          f"{', '.join(m.name for m in available)}")

    from . import allocator

    print("caching allocator rows...")
    allocator_rows = allocator.measure(setup, floor_lib, rounds, 10 if args.quick else 200)

    print("start-up (subprocesses)...")
    start = startup.measure(import_runs=2 if args.quick else 7, cold_runs=1 if args.quick else 3,
                            warm_runs=1 if args.quick else 5)

    figs = report.figures(times, workloads,
                          [name for name in factories if name not in methods.MEASURED_APART],
                          skipped)
    apart_figs = report.figures(apart_times, launches, apart_names, skipped) if apart else {}
    verdicts = report.targets(times, start)
    env = report.environment(setup, pinned)
    elapsed = time.perf_counter() - began

    print()
    print(f"## ur_cffi benchmarks, {env['date']}")
    print(f"{env['machine']['cpu_model']}, {env['machine']['logical_cpus']} logical CPUs, "
          f"pinned to CPU {pinned}; device {env['device']['name']} "
          f"({env['device']['backend']}, driver {env['device']['driver_version']}); "
          f"UR API {env['ur_api']}; commit {env['commit']}; Python {env['python']}; "
          + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v))
    print(f"Median of {rounds} round medians; (Nx) is the time relative to C in the same "
          "rounds (lower is better, also for GB/s columns).\n")
    main_labels = {n: label for n, label in labels.items() if n not in methods.MEASURED_APART}
    print(report.table(figs, workloads, main_labels))
    print("\nNoise: the same medians over the first (A) and second (B) half of the rounds.\n")
    print(report.noise_table(figs, workloads, main_labels))
    if apart:
        print("\nMeasured apart, with C in the same rounds (interleaved with the rows above, "
              "they slowed the Triton row's launcher, which then refills its block; A / B "
              "the halves):\n")
        apart_labels = {n: labels[n] for n in apart_names}
        print(report.table(apart_figs, launches, apart_labels))
        print()
        print(report.noise_table(apart_figs, launches, apart_labels))
    print()
    print(report.startup_table(start))
    print(f"\nDemo timed: {start.get('demo')}")
    for key in ("import_error", "demo_cold_error", "demo_warm_error"):
        if start.get(key):
            print(f"{key}: {start[key]}")
    print()
    print(allocator.table(allocator_rows))
    print()
    print(report.targets_table(verdicts))
    for name, reason in unavailable.items():
        print(f"\nnot measured: {name}: {reason}")
    print(f"\ntotal {elapsed:.0f} s")

    results = {
        "environment": env,
        "quick": args.quick,
        "rounds": rounds,
        "workloads": {w.name: {"title": w.title, "unit": w.unit, "count": w.count,
                               "samples": w.samples, "nbytes": w.nbytes} for w in workloads},
        "methods": labels,
        "unavailable": unavailable,
        "figures": figs,
        "measured_apart": apart_figs,
        "startup": start,
        "targets": verdicts,
        "allocator": allocator_rows,
        "elapsed_s": elapsed,
    }
    path = args.json or RESULTS / f"bench-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")
    setup.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
