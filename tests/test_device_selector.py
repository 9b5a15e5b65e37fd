"""``ONEAPI_DEVICE_SELECTOR`` applied fully, as UR's ``urDeviceGetSelected`` applies it (device
types, indices, negative terms), and a malformed one refused with an error naming it.

UR reads the selector when the loader initialises, so every case that reaches UR runs in a
child process of its own.  Expectations were checked against what UR itself does on this CPU
device (the OpenCL adapter): with a raw ``urDeviceGetSelected`` on oneAPI 2025.0 to 2026.2,
where a malformed selector is ignored, drops every adapter, is answered
``UR_RESULT_ERROR_INVALID_VALUE`` or crashes the process, depending on the release.  Some
selectors are read otherwise by some releases (``_compat``): ``!`` terms alone select nothing
before 2025.2 with the loader's filter on (ur_cffi turns it off for them), ``!`` terms of
other backends are refused before 2025.3, and device types in capitals select nothing from
2025.2 on (unless the backend is in capitals too, from 2025.3); the errors say so.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import ur_cffi
from ur_cffi import _compat, loader

CHILD = r"""
import json
import ur_cffi
from ur_cffi import loader

out = {}
try:
    out["devices"] = [[d.name, d.type.name, d.backend.name] for d in ur_cffi.devices()]
except Exception as error:
    out["devices_error"] = [type(error).__name__, isinstance(error, ValueError), str(error)]
try:
    out["default"] = ur_cffi.default_device().name
except Exception as error:
    out["default_error"] = [type(error).__name__, isinstance(error, ValueError), str(error)]
out["initialized"] = loader.initialized()
print(json.dumps(out))
"""


def run_child(selector, **settings):
    """What ``devices()`` and ``default_device()`` give in a fresh process with ``selector``
    (None: unset) and the environment ``settings``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONEAPI_DEVICE_SELECTOR", loader.PRELOAD_FILTER_ENV)}
    env.update(settings)
    if selector is not None:
        env["ONEAPI_DEVICE_SELECTOR"] = selector
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"child died ({done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def unselected():
    """The devices of a process with no selector: the CPU device among them."""
    found = run_child(None)
    cpus = [d for d in found["devices"] if d[1] == "UR_DEVICE_TYPE_CPU"]
    if not cpus:
        pytest.skip("no UR CPU device: install the 'cpu' extra (intel-opencl-rt)")
    return found


def test_no_selector_and_an_empty_one_select_every_device(unselected):
    assert unselected["default"] == unselected["devices"][0][0]
    assert run_child("") == unselected


FILTER_ON = "selects nothing with '!' terms alone while UR_LOADER_PRELOAD_FILTER='1' keeps " \
    "its filter on: unset it, or put '*:*;' in front"
UNNAMED = "no device of a backend that no term names"
REFUSED = "refuse '!' terms of a backend other than the platform's (opencl): leave out " \
    "those of '!level_zero'"
CAPITALS = "matches device types in lower case"
NATIVE_CPU_UNKNOWN = "the loaders of oneAPI 2025.0 and 2025.1 know no native_cpu backend"
"""What default_device()'s error says where such selectors selected nothing."""


# '!opencl:1' (the CPU device is OpenCL's device 0): UR's loader dropped the whole OpenCL
# adapter before urDeviceGetSelected could keep device 0 (oneAPI 2026.2).
@pytest.mark.parametrize("selector", ["opencl:cpu", "opencl:0", "*:cpu", "OPENCL:CPU",
                                      "opencl:cpu,gpu", "!opencl:gpu", "opencl:cpu;",
                                      "!opencl:1", "*:*;!opencl:1", "!opencl:1.*"])
def test_a_selector_that_matches_the_cpu_device_yields_it(selector, unselected):
    found = run_child(selector)
    cpu = next(d for d in unselected["devices"] if d[1] == "UR_DEVICE_TYPE_CPU")
    if selector == "OPENCL:CPU" and not _compat.CAPITAL_DEVICE_TYPES_READ and \
            not _compat.HAS_LAUNCH_WITH_ARGS and not found["devices"]:
        assert CAPITALS in found["default_error"][2]  # 2025.2 (read from 2025.3 on)
        return
    assert found["devices"] == [cpu]
    assert found["default"] == cpu[0]


@pytest.mark.parametrize("selector, hint", [
    ("opencl:gpu", None), ("level_zero:*", None), ("opencl:99", None),
    ("!opencl:*", None), ("opencl:*;!opencl:cpu", None), ("opencl:0.*", None),
    ("!opencl:*;!level_zero:GPU", None), ("!level_zero:*", UNNAMED), ("native_cpu:*", None)])
def test_a_selector_that_matches_nothing_yields_no_device(selector, hint, unselected):
    found = run_child(selector)
    if "devices_error" in found:  # oneAPI 2025.0 to 2025.2 refuse '!' terms of other backends
        assert "is refused by UR's urDeviceGetSelected" in found["devices_error"][2]
        if selector == "native_cpu:*":  # 2025.0's, 2025.1's loaders know no native_cpu
            assert not _compat.SELECTOR_KNOWS_NATIVE_CPU  # (the hint was the '!' terms')
            assert NATIVE_CPU_UNKNOWN in found["devices_error"][2]
            return
        assert "!level_zero:" in selector
        assert REFUSED in found["devices_error"][2]
        return
    assert found["devices"] == []
    name, is_value_error, message = found["default_error"]
    assert name == "RuntimeError" and not is_value_error
    assert f"ONEAPI_DEVICE_SELECTOR={selector!r}" in message
    assert "no UR device is selected" in message
    assert (hint in message) if hint else ("loader" not in message)


def test_negative_terms_alone_with_the_loaders_filter_kept_on(unselected):
    # Before oneAPI 2025.2 the loader's own filter drops every adapter for '!' terms alone;
    # ur_cffi turns it off for them, unless UR_LOADER_PRELOAD_FILTER is set.
    found = run_child("!opencl:gpu", UR_LOADER_PRELOAD_FILTER="1")
    if _compat.NEGATIVE_TERMS_ALONE_SELECT:
        assert found["devices"] == [d for d in unselected["devices"]
                                    if d[1] == "UR_DEVICE_TYPE_CPU"]
    else:
        assert found["devices"] == []
        assert FILTER_ON in found["default_error"][2]


@pytest.mark.parametrize("selector", ["opencl:CPU", "*:CPU", "opencl:Cpu"])
def test_device_types_in_capitals_where_the_loader_reads_them_or_not(selector, unselected):
    found = run_child(selector)
    if _compat.CAPITAL_DEVICE_TYPES_READ:  # before 2025.2
        assert found["devices"] == [d for d in unselected["devices"]
                                    if d[1] == "UR_DEVICE_TYPE_CPU"]
    else:
        assert found["devices"] == []
        assert CAPITALS in found["default_error"][2]
        # python -m ur_cffi gives the same hint (it said "may filter every device out")
        env = {**os.environ, "ONEAPI_DEVICE_SELECTOR": selector}
        listing = subprocess.run([sys.executable, "-m", "ur_cffi"], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert listing.returncode == 1 and CAPITALS in listing.stdout, listing.stdout


@pytest.mark.parametrize("selector, reason", [
    ("foo", "needs one ':'"),
    ("opencl:", "names no device"),
    (":cpu", "names no backend"),
    ("!:cpu", "names no backend"),
    ("foo:cpu", "unknown backend 'foo'"),
    (" opencl:cpu", "unknown backend ' opencl'"),
    ("opencl:cpu:gpu", "needs one ':'"),
    ("opencl:cpu;opencl:gpu", "two terms"),  # oneAPI 2025.0 crashes, 2025.2 aborts on this
    (";opencl:cpu", "empty term"),  # 2025.0 crashes
    ("opencl:cpu;;opencl:0", "empty term"),
    ("opencl:cpu,", "empty device"),
    ("opencl:bar", "'bar' is not *, cpu, gpu, fpga or an index"),
    ("opencl:1.gpu", "'gpu' is not * or an index"),
    ("opencl:*.1", "only '*' may follow '*'"),
    ("opencl:0.*.1", "only '*' may follow '*'"),
    ("opencl:0.0.0.0", "more than two '.'"),
    ("opencl:99999999999999999999999", "too large"),  # 2025.0 crashes
    ("opencl:4294967296", "index 4294967296 is too large"),  # (2**32 - 1 is the largest)
    ("opencl:0.4294967296", "too large"),
    ("opencl:\u0663", "is not *, cpu"),  # a digit, but not an ASCII one
])
def test_a_malformed_selector_is_refused_naming_it(selector, reason, monkeypatch):
    monkeypatch.setenv("ONEAPI_DEVICE_SELECTOR", selector)
    with pytest.raises(loader.DeviceSelectorError) as raised:
        loader.device_selector()
    message = str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert raised.value.selector == selector
    assert f"ONEAPI_DEVICE_SELECTOR={selector!r} is malformed" in message
    assert reason in message
    assert "'[!]backend:device[,device...]'" in message  # the form is spelt out


@pytest.mark.parametrize("selector", ["opencl:cpu", "!opencl:*;opencl:0,cpu", "*:*",
                                      "level_zero:0.*.*,1.2.3", "Opencl:Fpga", "hip:*;",
                                      "cuda:4294967295"])
def test_a_well_formed_selector_is_parsed(selector, monkeypatch):
    monkeypatch.setenv("ONEAPI_DEVICE_SELECTOR", selector)
    terms = loader.device_selector()
    assert terms and all(isinstance(negative, bool) and backend == backend.lower()
                         for negative, backend, _ in terms)


def test_backend_names_are_the_headers(monkeypatch):
    for member in ur_cffi.Backend:
        name = member.name.split("BACKEND_", 1)[1].lower()
        monkeypatch.setenv("ONEAPI_DEVICE_SELECTOR", f"{name}:*")
        if name == "unknown":
            with pytest.raises(loader.DeviceSelectorError):
                loader.device_selector()
        else:
            assert loader.device_selector() == ((False, name, ("*",)),)


@pytest.mark.parametrize("selector", ["foo", "opencl:", ":cpu"])
def test_a_malformed_selector_fails_before_the_loader_initialises(selector):
    found = run_child(selector)
    for key in ("devices_error", "default_error"):
        name, is_value_error, message = found[key]
        assert name == "DeviceSelectorError" and is_value_error
        assert f"ONEAPI_DEVICE_SELECTOR={selector!r} is malformed" in message
    assert found["initialized"] is False  # UR never saw it


def test_the_listing_tool_takes_no_arguments_and_reports_a_malformed_selector():
    """``python -m ur_cffi``: ``--help``, a refused unknown option, and a malformed selector
    said in one line (no traceback), exit 1."""
    env = {k: v for k, v in os.environ.items() if k != "ONEAPI_DEVICE_SELECTOR"}
    tool = [sys.executable, "-m", "ur_cffi"]
    helped = subprocess.run(tool + ["--help"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "ONEAPI_DEVICE_SELECTOR" in helped.stdout
    assert "UR API" not in helped.stdout  # it listed nothing
    unknown = subprocess.run(tool + ["--bogus"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert unknown.returncode == 2 and "unrecognized arguments: --bogus" in unknown.stderr
    env["ONEAPI_DEVICE_SELECTOR"] = "garbage!!"
    malformed = subprocess.run(tool, env=env, capture_output=True, text=True, timeout=120)
    assert malformed.returncode == 1 and "Traceback" not in malformed.stderr
    assert "ONEAPI_DEVICE_SELECTOR='garbage!!' is malformed" in malformed.stderr


def test_the_listing_tool_says_a_bad_switch_in_one_line_and_stops_quietly_at_a_closed_pipe():
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONEAPI_DEVICE_SELECTOR", "UR_CFFI_VALIDATION",
                        "UR_CFFI_INTERRUPTIBLE_WAITS")}
    tool = [sys.executable, "-m", "ur_cffi"]
    # (UR_CFFI_INTERRUPTIBLE_WAITS was read in import ur_cffi: a 20-line traceback)
    for variable in ("UR_CFFI_VALIDATION", "UR_CFFI_INTERRUPTIBLE_WAITS"):
        bad = subprocess.run(tool, env={**env, variable: "maybe"},
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert f"{variable}='maybe': a switch is one of" in bad.stderr
    # A value that is not UTF-8, printed where stdout is strict UTF-8 (UnicodeEncodeError)
    strict = subprocess.run(tool, env={**env, "OCL_ICD_VENDORS": "/tmp/\udcff",
                                       "PYTHONIOENCODING": "utf-8:strict"},
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in strict.stderr and "OCL_ICD_VENDORS=/tmp/\\xff" in strict.stdout
    # Started with stdout closed (AttributeError), or writing to a full disk (OSError)
    closed = subprocess.run(tool, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=120, pass_fds=(),
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode in (0, 1) and "Traceback" not in closed.stderr, closed.stderr
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            written = subprocess.run(tool, env=env, stdout=full, stderr=subprocess.PIPE,
                                     text=True, timeout=120)
        assert written.returncode == 1 and "Traceback" not in written.stderr, written.stderr
        assert "No space left on device" in written.stderr
    # A reader that stops after one line (| head -1) closed the pipe: no BrokenPipeError.
    listing = subprocess.Popen(tool, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listing.stdout.readline()
    listing.stdout.close()
    stderr = listing.stderr.read().decode()
    assert listing.wait(timeout=120) in (0, 1) and "BrokenPipeError" not in stderr, stderr


def test_the_listing_tool_names_ocl_icd_vendors_where_it_leaves_no_device(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONEAPI_DEVICE_SELECTOR", "OCL_ICD_FILENAMES")}
    done = subprocess.run([sys.executable, "-m", "ur_cffi"],
                          env={**env, "OCL_ICD_VENDORS": str(tmp_path)}, capture_output=True,
                          text=True, timeout=120)
    if done.returncode == 0:  # a system OpenCL runtime, or another adapter, found a device
        assert f"OCL_ICD_VENDORS={tmp_path}" in done.stdout
        return
    assert done.returncode == 1
    assert f"OCL_ICD_VENDORS={tmp_path} is set: ur_cffi leaves the OpenCL runtimes to it" \
        in done.stdout
    assert "pip install intel-opencl-rt" not in done.stdout


def test_the_listing_tool_names_ur_adapters_force_load_where_it_leaves_no_adapter(tmp_path):
    missing = tmp_path / "libur_adapter_none.so"
    done = subprocess.run([sys.executable, "-m", "ur_cffi"],
                          env={**os.environ, "UR_ADAPTERS_FORCE_LOAD": str(missing)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"UR_ADAPTERS_FORCE_LOAD={missing} is set: UR's loader loads the adapters it " \
           "names, and no others" in done.stdout


def test_the_selector_is_the_one_the_loader_read_at_initialisation():
    # It was read again from os.environ later: devices("default") raised for a value set after
    # UR read the variable, and default_device() named a value UR never saw.
    child = textwrap.dedent("""
        import os, sys
        import ur_cffi
        first = ur_cffi.devices()
        os.environ["ONEAPI_DEVICE_SELECTOR"] = sys.argv[1]
        assert ur_cffi.devices("default") == ur_cffi.devices("default", None) != []
        assert ur_cffi.devices() == first
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "ONEAPI_DEVICE_SELECTOR"}
    done = subprocess.run([sys.executable, "-c", child, "foo"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr[-2000:]
    nothing = textwrap.dedent("""
        import os
        import ur_cffi
        assert ur_cffi.devices() == []
        del os.environ["ONEAPI_DEVICE_SELECTOR"]
        try:
            ur_cffi.default_device()
        except RuntimeError as error:
            print(error)
    """)
    done = subprocess.run([sys.executable, "-c", nothing],
                          env={**env, "ONEAPI_DEVICE_SELECTOR": "*:fpga"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no UR device is selected by ONEAPI_DEVICE_SELECTOR='*:fpga'" in done.stdout


def test_a_context_of_devices_of_two_platforms_is_refused_naming_them():
    """UR refused it as UR_RESULT_ERROR_UNKNOWN, naming nothing.  Two platforms: the CPU
    runtime named twice to the ICD loader (by its name and by its versioned file)."""
    from ur_cffi import _libraries

    runtime = _libraries._first(_libraries.CPU_RUNTIME_NAME)
    versioned = sorted(runtime.parent.glob(runtime.name + ".[0-9]*")) if runtime else []
    if not versioned:
        pytest.skip("needs the intel-opencl-rt wheel's CPU runtime and its versioned file")
    child = textwrap.dedent("""
        import ur_cffi
        devices = ur_cffi.devices("cpu")
        assert len({id(d.platform) for d in devices}) == 2, devices
        try:
            ur_cffi.Context(devices)
        except ValueError as error:
            print(error)
    """)
    env = {k: v for k, v in os.environ.items() if k != "ONEAPI_DEVICE_SELECTOR"}
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=120, env={**env, "OCL_ICD_FILENAMES":
                                            f"{runtime}:{versioned[0]}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("a Context's devices must be of one platform: <Device ") and \
        done.stdout.count("of <Platform") == 2, done.stdout
