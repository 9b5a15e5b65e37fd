"""Validation mode: ``UR_CFFI_VALIDATION=1`` (or ``ur_cffi.init(validation=True)``) runs under
UR's full validation and leak-checking layers, reads what they log, and fails the process on
any leak or validation error.  A slice of the test suite runs once in that mode here (so in CI),
and controls prove that a deliberate leak is caught."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

import crash_probe
import device_under_test
from ur_cffi import _compat, loader

TESTS = Path(__file__).resolve().parent
# Not test_threads.py: its overlap checks race a spinning kernel against other work on two
# cores, which the validation layers slow down enough to lose (a flaky timing, not a leak).
SLICE = ["test_memory.py", "test_queue_event.py", "test_program_kernel.py", "test_lifetime.py",
         "test_device.py", "test_reliability.py", "test_launch_reuse.py"]
"""Suite files run under validation."""


def validation_env(log_dir: Path, **extra) -> dict:
    env = crash_probe.child_env(UR_CFFI_VALIDATION="1", UR_CFFI_VALIDATION_LOG_DIR=log_dir)
    env.pop("UR_LOG_VALIDATION", None)
    return {**env, **{key: str(value) for key, value in extra.items()}}


def logged_problems(log_dir: Path) -> tuple[list[str], int]:
    """Every problem in every validation log of ``log_dir``, and how many spurious lines were
    dropped (proof that the layer was on and logging)."""
    problems, spurious = [], 0
    for log in sorted(log_dir.glob("ur_cffi-validation-*.log")):
        text = log.read_text(errors="replace")
        spurious += sum(text.count(message) for message in loader.SPURIOUS_VALIDATION_MESSAGES)
        problems += [f"{log.name}: {problem}" for problem in loader.parse_validation_log(text)]
    return problems, spurious


@pytest.mark.parametrize("name", SLICE)
def test_the_suite_slice_runs_clean_under_urs_validation_and_leak_checking(tmp_path, name):
    """One file of the slice per test, so that each stays well under a minute on a busy
    machine; left out are the tests that run UR's leak checker in children of their own (the
    soak, test_lifetime's leak-checker tests): here they would only repeat themselves."""
    log_dir = tmp_path / "logs"
    done = crash_probe.run_child(
        # Known bugs (strict xfails) are left out: they may well misuse UR until fixed.
        [str(TESTS / name), "-q", "-p", "no:cacheprovider", "-m", "not xfail", "-k",
         "not soak and not leak_checker", "--basetemp", tmp_path / "inner"],
        code="import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))", check=False,
        env=validation_env(log_dir), timeout=900, cwd=TESTS.parent)
    tail = done.stdout[-3000:] + done.stderr[-3000:]
    # Exit status 3 would be ur_cffi's own verdict: UR reported a leak or an error.
    assert done.returncode == 0, tail
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout, tail
    # (A thread a test left running, or memory still shown, would skip the leak report.)
    assert "ur_cffi: no teardown at exit" not in done.stderr, tail
    problems, spurious = logged_problems(log_dir)
    assert problems == []
    if device_under_test.TYPE == "cpu" and importlib.util.find_spec("triton") is not None:
        # The layer ran: every pool-less USM allocation logs this line (elsewhere pools may
        # serve them all; without Triton the slices' allocating tests skip).
        assert spurious > 0


LEAKER = textwrap.dedent("""
    import sys
    import ur_cffi
    import device_under_test
    from ur_cffi import ffi, lib

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    array = ur_cffi.zeros(100, queue=queue)
    assert ur_cffi.loader.validation_enabled()
    if sys.argv[1] == "leak":
        lib.urContextRetain(context.handle)  # references nobody gives back
        lib.urQueueRetain(queue.handle)
        raw = ffi.new("ur_event_handle_t *")
        lib.urEnqueueEventsWait(queue.handle, 0, ffi.NULL, raw)  # an event nobody releases
        print("leaked", *(hex(int(ffi.cast("uintptr_t", handle)))
                          for handle in (context.handle, queue.handle, raw[0])))
    if sys.argv[2] == "teardown":
        try:
            ur_cffi.loader.teardown()
            print("no problems")
        except ur_cffi.loader.ValidationError as error:
            print("problems", len(error.problems))
        ur_cffi.devices()  # initialised again: this run's log is a new one
    print("end")
""")


def run_leaker(tmp_path, *args, **env):
    script = tmp_path / "leaker.py"
    script.write_text(LEAKER)
    return crash_probe.run_child(args, script=script, check=False, timeout=120,
                                 env=validation_env(tmp_path / "logs", **env))


def test_a_clean_program_exits_0_under_validation(tmp_path):
    done = run_leaker(tmp_path, "clean", "exit")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "end" in done.stdout and "validation layer reported" not in done.stderr
    problems, spurious = logged_problems(tmp_path / "logs")
    assert problems == []
    if device_under_test.TYPE == "cpu":  # the OpenCL adapter's known false reports: proof
        assert spurious > 0                 # that the layer was on (elsewhere, the next test's)


def test_an_exit_with_memory_numpy_still_uses_says_it_made_no_report(tmp_path):
    # The exit frees nothing numpy may still read (test_lifetime.py), so UR makes no leak
    # report: said, not passed over.
    done = crash_probe.run_child(
        code="import numpy as np, ur_cffi, device_under_test\n"
             "kept = np.asarray(ur_cffi.full(8, 1.0, queue=ur_cffi.Queue(\n"
             "    device_under_test.get().create_context()), kind='host'))\n"
             "print(kept.sum())",
        check=False, timeout=120, env=validation_env(tmp_path / "logs"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["8.0"]
    assert "ur_cffi: no teardown at exit, so no leak report: the memory of 1 array(s) is " \
           "still used outside ur_cffi" in done.stderr


@pytest.mark.parametrize("selector, chooses", [("*:*", True), ("*:fpga", False),
                                               ("level_zero:*;hip:*", False),
                                               ("!level_zero:*", False)])
def test_devices_a_selector_chose_leave_no_reference_behind(tmp_path, selector, chooses):
    # The count of urDeviceGetSelected alone kept a device reference in UR's leak checker
    # (oneAPI 2026.2): any program run with a selector exited 3 under validation; so did one
    # whose selector chose none of a platform's devices (the loader keeps those it drops), and
    # one that named only absent backends failed (urAdapterGet of no adapters, INVALID_SIZE).
    # A selector with no term for the platform's backend: the loader fetches no device.
    done = crash_probe.run_child(
        code="import ur_cffi; print(len(ur_cffi.devices()), len(ur_cffi.devices('default')))",
        check=False, timeout=120,
        env=validation_env(tmp_path / "logs", ONEAPI_DEVICE_SELECTOR=selector))
    if selector.startswith("!") and "is refused by UR's urDeviceGetSelected" in done.stderr:
        assert done.returncode == 1 and "reported" not in done.stderr  # (oneAPI 2025.0 to
        return                                                          # 2025.2 refuse it)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = [int(count) for count in done.stdout.split()]
    assert len(counts) == 2 and all((count >= 1) == chooses for count in counts), done.stdout
    assert "reported" not in done.stderr
    assert logged_problems(tmp_path / "logs")[0] == []


def test_a_deliberate_leak_fails_the_process_naming_each_handle(tmp_path):
    done = run_leaker(tmp_path, "leak", "exit")
    assert done.returncode == loader.VALIDATION_EXIT_STATUS
    leaked = done.stdout.split("leaked ")[1].split()[:3]
    if not _compat.LEAK_CHECKER_RECORDS_EVENTS:
        leaked.pop()  # (UR 0.10 and 0.11: the checker knows no enqueued event, nor its leak)
    assert "end" in done.stdout
    report = done.stderr.split("ur_cffi: ")[-1]
    assert f"UR's validation layer reported {len(leaked)} problem(s)" in report
    for handle in leaked:
        assert f"Retained 1 reference(s) to handle {handle}" in report
    assert "was recorded for first time here" in report  # with UR's backtrace
    problems, _ = logged_problems(tmp_path / "logs")
    assert len(problems) == len(leaked)


def test_teardown_raises_validation_error_and_a_new_initialisation_starts_clean(tmp_path):
    done = run_leaker(tmp_path, "leak", "teardown")
    leaks = 3 if _compat.LEAK_CHECKER_RECORDS_EVENTS else 2  # context, queue (and event)
    assert f"problems {leaks}" in done.stdout
    assert done.returncode == 0, done.stderr[-2000:]  # (the second initialisation's reports
    # go to stderr: UR's logger takes its output once a process)


IN_FLIGHT = textwrap.dedent("""
    import sys
    import numpy as np
    import ur_cffi
    import device_under_test
    from ur_cffi import queue as queue_module

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device)
    host = np.ones(1 << 22, np.float32)
    arrays = [ur_cffi.empty(host.size, np.float32, queue=queue) for _ in range(8)]
    queue.finish()
    events = [array.copy_from(host, blocking=False) for array in arrays]  # each keeps host
    if sys.argv[1] == "teardown":
        ur_cffi.loader.teardown()
        print("orphans", len(queue_module._orphans), "closed", all(e.closed for e in events))
    print("end")
""")


@pytest.mark.parametrize("end", ["exit", "teardown"])
def test_copies_in_flight_at_teardown_are_waited_for_and_released(tmp_path, end):
    """An Event with memory to keep whose copy still ran at teardown went to the orphans
    after they were released: leaked (exit status 3 under validation), and its handle used
    by the next loader initialisation."""
    script = tmp_path / "in_flight.py"
    script.write_text(IN_FLIGHT)
    done = crash_probe.run_child((end,), script=script, check=False, timeout=120,
                                 env=validation_env(tmp_path / "logs"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "end" in done.stdout and "validation layer reported" not in done.stderr
    if end == "teardown":
        assert "orphans 0 closed True" in done.stdout
    assert logged_problems(tmp_path / "logs")[0] == []


def test_a_second_validated_initialisation_says_its_reports_go_unread(tmp_path):
    """After a teardown, UR's validation layer reports to stderr whatever it is told: a
    second initialisation's leaks never reached ur_cffi, and its teardown raised nothing
    without saying why."""
    done = run_leaker(tmp_path, "clean", "teardown")
    assert done.returncode == 0 and "no problems" in done.stdout, done.stderr[-2000:]
    assert "RuntimeWarning: the UR loader is initialised again in validation mode: UR's " \
           "validation layer now reports to stderr only" in done.stderr
    assert len(list((tmp_path / "logs").glob("ur_cffi-validation-*.log"))) == 1


SECOND_INIT_LEAK = textwrap.dedent("""
    import ur_cffi
    import device_under_test
    from ur_cffi import ffi, lib

    device_under_test.get()
    ur_cffi.loader.teardown()
    device = device_under_test.get()  # initialised again, validated
    context = device.create_context()
    lib.urContextRetain(context.handle)
    print("leaked", hex(int(ffi.cast("uintptr_t", context.handle))))
""")


def test_a_second_validated_initialisation_reports_to_stderr(tmp_path):
    # Its warning said so, and UR reported nowhere: it writes to stderr only when told.
    script = tmp_path / "second.py"
    script.write_text(SECOND_INIT_LEAK)
    done = crash_probe.run_child(script=script, check=False, timeout=120,
                                 env=validation_env(tmp_path / "logs"))
    assert done.returncode == 0, done.stderr[-2000:]
    context = done.stdout.split("leaked ")[1].split()[0]
    assert f"Retained 1 reference(s) to handle {context}" in done.stderr


@pytest.mark.parametrize("variable", ["UR_CFFI_VALIDATION_LOG_DIR", "TMPDIR"])
def test_a_log_path_urs_setting_would_split_is_refused(tmp_path, variable):
    # UR's log setting splits at ':' too: it logged nowhere, and a leak passed unseen.
    directory = tmp_path / "logs:here"
    directory.mkdir()
    env = validation_env(tmp_path / "logs")
    if variable == "TMPDIR":
        env.pop("UR_CFFI_VALIDATION_LOG_DIR")
    env[variable] = str(directory)
    done = crash_probe.run_child(code="import ur_cffi; ur_cffi.devices()", check=False,
                                 timeout=120, env=env)
    assert done.returncode == 1 and "ValueError" in done.stderr
    assert "',', ';' or ':'" in done.stderr.splitlines()[-1]
    assert ("UR_CFFI_VALIDATION_LOG_DIR=" if variable != "TMPDIR" else "(TMPDIR;") in \
        done.stderr.splitlines()[-1]


def test_the_variable_counts_at_initialisation_only(tmp_path):
    # A value set after it made every later devices() raise.
    done = crash_probe.run_child(code=textwrap.dedent("""
        import os
        import ur_cffi
        ur_cffi.devices()
        for value in ("1", "maybe"):
            os.environ["UR_CFFI_VALIDATION"] = value
            ur_cffi.devices(), ur_cffi.init(), ur_cffi.loader.adapters()
        print(ur_cffi.loader.validation_enabled())
    """), env=crash_probe.child_env(UR_CFFI_VALIDATION="0"))
    assert done.stdout.split() == ["False"]


def test_a_validation_log_of_the_users_own_is_left_alone(tmp_path):
    # UR_LOG_VALIDATION set by the user: UR logs where they said; ur_cffi reads nothing.
    done = run_leaker(tmp_path, "leak", "exit",
                      UR_LOG_VALIDATION="level:warning;output:stderr")
    assert done.returncode == 0
    context = done.stdout.split("leaked ")[1].split()[0]
    assert f"Retained 1 reference(s) to handle {context}" in done.stderr
    assert not list((tmp_path / "logs").glob("*.log"))


def test_without_the_variable_there_is_no_validation_layer(tmp_path):
    done = crash_probe.run_child(code=textwrap.dedent("""
        import ur_cffi
        ur_cffi.devices()
        print(ur_cffi.loader.validation_enabled(), ur_cffi.loader.validation_problems())
    """), env=crash_probe.child_env(UR_CFFI_VALIDATION="0",
                                    UR_CFFI_VALIDATION_LOG_DIR=tmp_path / "logs"))
    assert done.stdout.split() == ["False", "None"]
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("records_events", [True, False])
def test_the_log_parser_drops_only_the_known_spurious_lines(records_events, monkeypatch):
    """Where UR's leak checker does not record events (UR 0.10, 0.11), its reports of unknown
    handles and negative counts are dropped too, with their backtraces; leaks stay."""
    monkeypatch.setattr(_compat, "LEAK_CHECKER_RECORDS_EVENTS", records_events)
    log = textwrap.dedent("""\
        <VALIDATION>[ERROR]: There are no valid references to handle 0
        <VALIDATION>[ERROR]: Retained 1 reference(s) to handle 0x5581
        <VALIDATION>[ERROR]: Handle 0x5581 was recorded for first time here:
        <VALIDATION>[ERROR]: #0 libur_loader.so.0(+0x1ee40b) [0x7fc2]
        <VALIDATION>[ERROR]: #1 libur_loader.so.0(urContextCreate+0x94) [0x7fc3]
        <VALIDATION>[ERROR]: There are no valid references to handle 0x5590
        <VALIDATION>[ERROR]: Attempting to release nonexistent handle 0x5591
        <VALIDATION>[ERROR]: Retained -3 reference(s) to handle 0x5591
        <VALIDATION>[ERROR]: Handle 0x5591 was recorded for first time here:
        <VALIDATION>[ERROR]: #0 libur_loader.so.0(+0x1ee40b) [0x7fc4]
        <VALIDATION>[ERROR]: Handle 0x5591 already exists
        <VALIDATION>[WARNING]: There are no valid references to handle 0 and more
        some line in no known format
    """)
    problems = loader.parse_validation_log(log)
    leak = ("[ERROR] Retained 1 reference(s) to handle 0x5581\n"
            "    Handle 0x5581 was recorded for first time here:\n"
            "    #0 libur_loader.so.0(+0x1ee40b) [0x7fc2]\n"
            "    #1 libur_loader.so.0(urContextCreate+0x94) [0x7fc3]")
    unrecorded = ["[ERROR] There are no valid references to handle 0x5590",
                  "[ERROR] Attempting to release nonexistent handle 0x5591",
                  "[ERROR] Retained -3 reference(s) to handle 0x5591\n"
                  "    Handle 0x5591 was recorded for first time here:\n"
                  "    #0 libur_loader.so.0(+0x1ee40b) [0x7fc4]",
                  "[ERROR] Handle 0x5591 already exists"]
    others = ["some line in no known format"]
    if records_events:
        others.insert(0, "[WARNING] There are no valid references to handle 0 and more")
    assert problems == [leak] + (unrecorded if records_events else []) + others


def test_the_validation_error_lists_every_problem():
    error = loader.ValidationError(["[ERROR] a", "[ERROR] b"])
    assert error.problems == ["[ERROR] a", "[ERROR] b"]
    assert str(error).splitlines() == ["UR's validation layer reported 2 problem(s):",
                                       "[ERROR] a", "[ERROR] b"]
    assert isinstance(error, RuntimeError)

