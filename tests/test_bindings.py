"""The generated raw layer: complete against the header it was built from, enums and errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ur_cffi
from ur_cffi import enums, errors, ffi, lib
from ur_cffi.enums import ur_result_t
from ur_cffi.info import HEADER_FACTS

HEADER_TEXT = Path(HEADER_FACTS["header"]).read_text() if Path(HEADER_FACTS["header"]).exists() \
    else None


@pytest.fixture(scope="module")
def header_text():
    """The header the module was built from; an isolated build's copy is gone, so fall back to
    the one the generator finds now (the same intel-sycl-rt wheel in the test environment)."""
    if HEADER_TEXT is not None:
        return HEADER_TEXT
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import build_ffi

    return build_ffi.find_header().read_text()


def _header_enums(text: str) -> dict[str, dict[str, str]]:
    found = {}
    for body, name in re.findall(r"typedef enum\s+\w+\s*\{(.*?)\}\s*(\w+);", text, re.S):
        body = re.sub(r"//[^\n]*", "", body)
        found[name] = dict(re.findall(r"^\s*(\w+)\s*(?:\[\[\w+\]\])?\s*=\s*(.+?),?\s*$", body,
                                      re.M))
    return found


def test_every_function_is_bound(header_text):
    declared = set(re.findall(r"UR_APIEXPORT\s+ur_result_t\s+UR_APICALL\s+(\w+)\(", header_text))
    assert declared  # as many as this release's header declares (197 in 0.10, 251 in 2026.2)
    bound = {name for name in dir(lib)
             if callable(getattr(lib, name)) and not isinstance(getattr(lib, name), ffi.CData)}
    assert bound == declared


def test_every_struct_and_union_is_bound_complete(header_text):
    structs = set(re.findall(r"typedef struct\s+(\w+)\s*\{", header_text))
    unions = set(re.findall(r"typedef union\s+(\w+)\s*\{", header_text))
    _, bound_structs, bound_unions = ffi.list_types()
    assert structs <= set(bound_structs) and unions == set(bound_unions)
    for name in structs:
        assert ffi.typeof(f"struct {name}").fields, name
    for name in unions:
        assert ffi.typeof(f"union {name}").fields, name
    # Layout comes from the C compiler in API mode: spot-check one struct of every release.
    assert ffi.offsetof("ur_usm_desc_t", "pNext") == 8
    assert ffi.sizeof("ur_usm_desc_t") == 24


def test_every_enum_member_and_value_is_bound(header_text):
    declared = _header_enums(header_text)
    assert sorted(declared) == enums.ENUM_TYPE_NAMES and declared
    for name, members in declared.items():
        for member, text in members.items():
            value = getattr(lib, member)  # every member, aliases included, is in lib
            if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", text):
                assert value == int(text, 0), member
            # Otherwise a macro expression: the compiler checked cffi's value in API mode.
        python_enum = getattr(enums, name)
        assert {m for m in members if not m.endswith("_FORCE_UINT32")} == \
            set(python_enum.__members__), name
        for member in python_enum.__members__:
            assert python_enum[member] == getattr(lib, member), member


def test_flag_enums_are_intflags_and_others_intenums():
    import enum

    assert issubclass(enums.ur_queue_flag_t, enum.IntFlag)
    combined = enums.ur_queue_flag_t.UR_QUEUE_FLAG_PROFILING_ENABLE | \
        enums.ur_queue_flag_t.UR_QUEUE_FLAG_OUT_OF_ORDER_EXEC_MODE_ENABLE
    assert int(combined) == 3
    assert issubclass(ur_result_t, enum.IntEnum) and not issubclass(ur_result_t, enum.IntFlag)
    assert ur_result_t.UR_RESULT_ERROR_INVALID_KERNEL_NAME == 29


def test_defines_are_bound(header_text):
    mask = re.search(r"#define UR_QUEUE_FLAGS_MASK\s+(0x[0-9a-fA-F]+)", header_text).group(1)
    assert lib.UR_QUEUE_FLAGS_MASK == int(mask, 16)
    assert ffi.string(lib.UR_DEVICE_BINARY_TARGET_SPIRV64) == b"spir64"


def test_header_version_is_recorded():
    current = lib.UR_API_VERSION_CURRENT
    assert HEADER_FACTS["version"] == f"{current >> 16}.{current & 0xFFFF}"
    assert HEADER_FACTS["info_types"]["UR_DEVICE_INFO_NAME"] == "char[]"


def test_one_exception_class_per_error_result():
    results = [r for r in ur_result_t if r != ur_result_t.UR_RESULT_SUCCESS]
    classes = {errors.by_result[r] for r in results}
    assert len(classes) == len(results)
    assert errors.by_result[ur_result_t.UR_RESULT_ERROR_INVALID_KERNEL_NAME] is \
        errors.InvalidKernelNameError
    assert issubclass(errors.OutOfDeviceMemoryError, MemoryError)
    assert issubclass(errors.OutOfHostMemoryError, MemoryError)
    assert issubclass(errors.InvalidValueError, ValueError)
    assert issubclass(errors.UnsupportedFeatureError, NotImplementedError)
    assert all(issubclass(c, errors.URError) for c in classes)


def test_check_raises_the_class_with_function_and_result():
    errors.check(0, "urQueueFinish")
    with pytest.raises(errors.InvalidKernelNameError) as raised:
        errors.check(ur_result_t.UR_RESULT_ERROR_INVALID_KERNEL_NAME, "urKernelCreate", "'x'")
    assert raised.value.result is ur_result_t.UR_RESULT_ERROR_INVALID_KERNEL_NAME
    assert raised.value.function == "urKernelCreate"
    assert str(raised.value) == "urKernelCreate returned UR_RESULT_ERROR_INVALID_KERNEL_NAME: 'x'"
    with pytest.raises(errors.URError, match="unknown ur_result_t 12345"):
        errors.check(12345, "urFoo")


def test_exceptions_pickle():
    import pickle

    error = errors.InvalidBinaryError(ur_result_t.UR_RESULT_ERROR_INVALID_BINARY, "urX", "why")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is errors.InvalidBinaryError and str(again) == str(error)
    # The loader's own: DeviceSelectorError did not unpickle (a multiprocessing pool's result
    # thread died of it, and map() waited forever); ValidationError's message came back split
    # into its characters.
    from ur_cffi import loader

    for error in (loader.DeviceSelectorError("opencl:xyz", "is malformed: 'xyz'"),
                  loader.ValidationError(["UR leak: context", "UR leak: queue"])):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and \
            vars(again) == vars(error)


def test_wrong_kernel_name_raises_from_the_device(build_triton):
    program, _ = build_triton("scale_addresses", BLOCK=128)
    with pytest.raises(errors.InvalidKernelNameError, match="urKernelCreate.*'no_such_kernel'"):
        program.kernel("no_such_kernel")


@pytest.mark.cpu_device("programs from IL: the CUDA adapter takes none")
def test_garbage_il_raises_invalid_binary(context, rng):
    garbage = rng.integers(0, 256, 4096, dtype="uint8").tobytes()
    out = ffi.new("ur_program_handle_t *")
    result = lib.urProgramCreateWithIL(context.handle, garbage, len(garbage), ffi.NULL, out)
    expected = GARBAGE_IL_RESULT.get(HEADER_FACTS["version"], INVALID_BINARY)
    assert result == expected
    with pytest.raises(errors.by_result[expected], match="urProgramCreateWithIL"):
        ur_cffi.Program.from_il(context, garbage)


INVALID_BINARY = ur_result_t.UR_RESULT_ERROR_INVALID_BINARY
GARBAGE_IL_RESULT = {"0.10": ur_result_t.UR_RESULT_ERROR_INVALID_VALUE}
"""What UR's OpenCL adapter answers for IL that is not SPIR-V where it is not INVALID_BINARY:
oneAPI 2025.0's (UR 0.10) answers INVALID_VALUE (observed with its raw urProgramCreateWithIL)."""


def test_impossible_allocation_raises(queue):
    too_big = queue.device.global_mem_size * 4
    with pytest.raises(errors.URError, match="urUSMDeviceAlloc returned") as raised:
        ur_cffi.USMArray(queue, too_big, "uint8")
    assert raised.value.result in (ur_result_t.UR_RESULT_ERROR_INVALID_USM_SIZE,
                                   ur_result_t.UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
                                   ur_result_t.UR_RESULT_ERROR_OUT_OF_HOST_MEMORY)



LOADER_CHECK = """
import sys
try:
    import ur_cffi
except ImportError as error:
    print(type(error).__name__, error)
    sys.exit(0)
print("imported", ur_cffi._libraries.opened_loader())
"""


@pytest.mark.parametrize("altered", [False, True])
def test_import_checks_the_loader_is_the_one_built_for(tmp_path, altered):
    """A copy of the loader elsewhere is the same loader; a different file (the copy with bytes
    appended, which still loads) makes ``import ur_cffi`` name both and the rebuild command."""
    import os
    import shutil
    import subprocess
    import sys

    built_for = HEADER_FACTS["loader"]
    opened = ur_cffi._libraries.opened_loader()  # an isolated build's loader is gone by now
    copy = tmp_path / "libur_loader.so.0"
    shutil.copy(opened, copy)
    if altered:
        with open(copy, "ab") as file:
            file.write(b"\0" * 64)
    env = dict(os.environ, UR_LIBRARY_DIR=str(tmp_path), LD_LIBRARY_PATH=str(opened.parent))
    done = subprocess.run([sys.executable, "-c", LOADER_CHECK], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    if altered:
        assert done.stdout.startswith("LoaderMismatchError"), done.stdout
        assert built_for["release"] in done.stdout and str(copy) in done.stdout
        # A loader outside the runtime's wheel was named by its path twice, with no release.
        assert done.stdout.count(str(copy)) == 1, done.stdout
        assert re.search(r"UR API \d+\.\d+ \(" + re.escape(str(copy)), done.stdout), done.stdout
        assert "--no-build-isolation" in done.stdout
        if os.path.exists(built_for["path"]):  # (an isolated build's loader is gone)
            assert f"UR_LIBRARY_DIR={os.path.dirname(built_for['path'])}" in done.stdout
    else:
        assert done.stdout.strip() == f"imported {copy}"


def test_a_missing_loader_is_named_with_what_provides_it(monkeypatch):
    """The import failed with the dynamic linker's message alone."""
    from ur_cffi import _libraries

    monkeypatch.setattr(_libraries, "_first", lambda name: None)
    linker = ImportError(f"{_libraries.LOADER_SONAME}: cannot open shared object file: No such "
                         "file or directory")
    with pytest.raises(ImportError) as raised:
        _libraries.explain_failed_load(linker)
    message = str(raised.value)
    assert raised.value.__cause__ is linker
    for named in ("intel-cmplr-lib-ur", "setvars.sh", "UR_LIBRARY_DIR", "Looked in"):
        assert named in message, message


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("OFF", False),
                                                 (" no ", False), ("0", False),
                                                 ("true", True), ("Yes", True), ("1", True),
                                                 ("", "default")])
def test_switches_in_the_environment_read_words(monkeypatch, value, expected):
    """UR_CFFI_VALIDATION=false turned validation on: every value but "0" was on."""
    from ur_cffi import _checks

    monkeypatch.setenv("UR_CFFI_GRAPH_NATIVE", value)
    assert _checks.env_flag("UR_CFFI_GRAPH_NATIVE", "default") == expected


def test_a_switch_that_is_not_one_is_named(monkeypatch, context):
    monkeypatch.setenv("UR_CFFI_GRAPH_NATIVE", "maybe")
    with pytest.raises(ValueError, match="UR_CFFI_GRAPH_NATIVE='maybe': a switch is one of"):
        ur_cffi.Graph(context)


def test_validation_false_in_the_environment_is_off():
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import ur_cffi; ur_cffi.init(); "
                               "print(ur_cffi.loader.validation_enabled())"],
        env=dict(os.environ, UR_CFFI_VALIDATION="false"), capture_output=True, text=True,
        timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr[-2000:]


def test_two_builds_of_the_module_where_the_older_would_load_are_named(monkeypatch, tmp_path):
    """`make regen` writes _ur.cpython-3XX-*.so, a pip build _ur.abi3.so; Python loads the first,
    so a pip build after a regen went unused (its bindings never seen), without a word."""
    import os
    from importlib.machinery import EXTENSION_SUFFIXES

    from ur_cffi import _libraries

    preferred, other = (tmp_path / f"_ur{suffix}" for suffix in
                        (EXTENSION_SUFFIXES[0], EXTENSION_SUFFIXES[1]))
    preferred.write_bytes(b"older")
    other.write_bytes(b"newer")
    os.utime(preferred, ns=(10**18, 10**18))
    os.utime(other, ns=(2 * 10**18, 2 * 10**18))
    monkeypatch.setattr(_libraries, "__file__", str(tmp_path / "_libraries.py"))
    with pytest.raises(ImportError, match=f"would load {preferred.name}, older than {other.name}"):
        _libraries.check_one_module()
    os.utime(preferred, ns=(3 * 10**18, 3 * 10**18))
    _libraries.check_one_module()  # the newer one loads: nothing to say
    other_python = tmp_path / "_ur.cpython-399-x86_64-linux-gnu.so"  # not loadable here
    other_python.write_bytes(b"newest, of another Python")
    os.utime(other_python, ns=(4 * 10**18, 4 * 10**18))
    _libraries.check_one_module()


def test_a_validation_log_folder_that_cannot_be_one_is_named(tmp_path):
    """A ',' was refused only after the folder was made; an unusable folder raised a bare
    OSError without the variable's name."""
    import os
    import subprocess
    import sys

    code = ("import ur_cffi\ntry:\n    ur_cffi.init()\nexcept ValueError as error:\n"
            "    print('ValueError', error)\n")
    for folder in (tmp_path / "a,b", tmp_path / "file" / "below"):
        (tmp_path / "file").write_text("")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, UR_CFFI_VALIDATION="1",
                                                    UR_CFFI_VALIDATION_LOG_DIR=str(folder)))
        assert done.stdout.startswith("ValueError UR_CFFI_VALIDATION_LOG_DIR="), \
            done.stdout + done.stderr[-2000:]
    assert not (tmp_path / "a,b").exists()
