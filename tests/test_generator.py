"""The generator (build_ffi.py) on small headers of our own: pinned output and clear failures."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import cffi
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import build_ffi  # noqa: E402

SAMPLE = Path(__file__).parent / "generator" / "sample.h"
SAMPLE_CDEF = Path(__file__).parent / "generator" / "sample.cdef"


@pytest.fixture(scope="module")
def sample():
    return build_ffi.generate_from_header(SAMPLE)


def test_sample_cdef_is_pinned(sample):
    assert sample.cdef == SAMPLE_CDEF.read_text()


def test_sample_inventory(sample):
    assert sample.functions == ["sampleCreate", "sampleSetCallback"]
    assert sample.structs == ["sample_range_t", "sample_desc_t"]
    assert sample.unions == ["sample_value_t"]
    assert sample.enums["sample_result_t"] == {
        "SAMPLE_RESULT_SUCCESS": 0,
        "SAMPLE_RESULT_ERROR_OLD": 1,  # carries [[deprecated]] in the header
        "SAMPLE_RESULT_ERROR_NEXT": 2,  # implicit value
        "SAMPLE_RESULT_VERSION": (0 << 16) | 12,  # function-like macro folded
        "SAMPLE_RESULT_ERROR_UNKNOWN": 0x7FFFFFFE,
        "SAMPLE_RESULT_FORCE_UINT32": 0x7FFFFFFF,
    }
    assert set(sample.constants) == {"SAMPLE_MAX_DIMS", "SAMPLE_FLAGS_MASK", "SAMPLE_TARGET"}
    assert sample.info_types["SAMPLE_INFO_NAME"] == "char[]"
    assert sample.info_types["SAMPLE_INFO_SIZES"] == "size_t[]"
    assert "sample_bool_t" in sample.typedefs and "size_t" not in sample.typedefs
    assert "[[" not in sample.cdef and "__attribute__" not in sample.cdef


@pytest.mark.parametrize("header", ["sample", "installed"])
def test_pycparser_without_c23_gives_the_same_bindings(header):
    """pycparser before 3.12 (all Python 3.10 has) reads no C23: the header's [[deprecated]]
    and bool are rewritten for it; the bindings must not change."""
    path = SAMPLE if header == "sample" else build_ffi.find_header()
    preprocessed = build_ffi.preprocess(path)
    if "dialect" not in __import__("inspect").signature(
            build_ffi.c_parser.CParser).parameters:
        pytest.skip("this pycparser has no C23 to compare with (3.12 on: Python 3.11 on)")
    as_c23 = build_ffi.generate(preprocessed, path.read_text(), str(path), c23=True)
    as_c11 = build_ffi.generate(preprocessed, path.read_text(), str(path), c23=False)
    assert as_c11 == as_c23


def test_sample_compiles_in_api_mode_with_values_checked_by_the_compiler(sample, tmp_path):
    """cffi's API mode checks every enumerator and struct against the real header."""
    ffi = cffi.FFI()
    ffi.cdef(sample.cdef)
    ffi.set_source("_sample_api", f'#include "{SAMPLE}"\n'
                   "sample_result_t sampleCreate(const sample_desc_t *d, sample_handle_t *h)"
                   " { *h = 0; return d->count; }\n"
                   "sample_result_t sampleSetCallback(sample_handle_t h, sample_callback_t cb,"
                   " void *u) { cb(h, SAMPLE_RESULT_ERROR_NEXT, u); return 0; }\n")
    ffi.compile(tmpdir=str(tmp_path))
    sys.path.insert(0, str(tmp_path))
    try:
        from _sample_api import ffi as compiled_ffi, lib
    finally:
        sys.path.remove(str(tmp_path))
    desc = compiled_ffi.new("sample_desc_t *")
    desc.count = 7
    desc.inner.ranges[2].size = 5
    handle = compiled_ffi.new("sample_handle_t *")
    assert lib.sampleCreate(desc, handle) == 7
    assert lib.SAMPLE_RESULT_VERSION == 12 and lib.SAMPLE_MAX_DIMS == 3
    assert compiled_ffi.string(lib.SAMPLE_TARGET) == b"spir64"
    seen = []
    callback = compiled_ffi.callback("sample_callback_t", lambda h, r, u: seen.append(r))
    lib.sampleSetCallback(compiled_ffi.NULL, callback, compiled_ffi.NULL)
    assert seen == [lib.SAMPLE_RESULT_ERROR_NEXT]


@pytest.mark.parametrize(
    "source, message",
    [
        ("int sampleBody(void) { return 1; }\n", "function body of 'sampleBody'"),
        ("int sample_global;\n", "global variable 'sample_global'"),
        ("static int sampleStatic(void);\n", "static or inline declaration 'sampleStatic'"),
        ("typedef enum e_t { E_A = sizeof(int) } e_t;\n", "not an integer constant expression"),
        ("typedef struct s_t { int x } s_t;\n", "cannot parse"),
    ],
)
def test_unsupported_constructs_name_the_construct_and_line(tmp_path, source, message):
    header = tmp_path / "bad.h"
    header.write_text("#include <stdint.h>\n\ntypedef int ok_t;\n" + source)
    with pytest.raises(build_ffi.HeaderError) as error:
        build_ffi.generate_from_header(header)
    assert message in str(error.value)
    assert "bad.h:4" in str(error.value)


def test_missing_header_lists_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.delenv("UR_INCLUDE_DIR", raising=False)
    monkeypatch.setattr(build_ffi, "header_candidates", lambda: [tmp_path / "nowhere"])
    with pytest.raises(FileNotFoundError, match="nowhere"):
        build_ffi.find_header()


def test_ur_include_dir_wins(monkeypatch, tmp_path):
    (tmp_path / "ur_api.h").write_text("/* stand-in */\n")
    monkeypatch.setenv("UR_INCLUDE_DIR", str(tmp_path))
    assert build_ffi.find_header() == (tmp_path / "ur_api.h").resolve()


def test_ur_include_dir_without_the_header_is_an_error_not_skipped(monkeypatch, tmp_path):
    """A folder without ur_api.h (a typo, or the include/ above unified-runtime/) was passed
    over silently, and the build took another release's header."""
    (tmp_path / "unified-runtime").mkdir()
    (tmp_path / "unified-runtime" / "ur_api.h").write_text("/* stand-in */\n")
    monkeypatch.setenv("UR_INCLUDE_DIR", str(tmp_path))
    assert build_ffi.find_header() == (tmp_path / "unified-runtime" / "ur_api.h").resolve()
    monkeypatch.setenv("UR_INCLUDE_DIR", str(tmp_path / "typo"))
    with pytest.raises(FileNotFoundError, match="UR_INCLUDE_DIR=.*typo: no ur_api.h there"):
        build_ffi.find_header()


def test_identical_repeated_declarations_are_folded(tmp_path):
    """oneAPI 2025.2's header declares urBindlessImagesFreeMappedLinearMemoryExp twice."""
    header = tmp_path / "twice.h"
    header.write_text("#include <stdint.h>\ntypedef int r_t;\n"
                      "r_t twiceFree(void *p, uint32_t n);\n"
                      "r_t twiceOther(void);\n"
                      "r_t twiceFree(void *p, uint32_t n);\n")
    bindings = build_ffi.generate_from_header(header)
    assert bindings.functions == ["twiceFree", "twiceOther"]
    assert bindings.cdef.count("twiceFree") == 1
    ffi = cffi.FFI()
    ffi.cdef(bindings.cdef)  # cffi itself refuses a function declared twice


def test_enumerators_fold_as_c_computes_them(tmp_path):
    # Python's % and a float division gave -7 % 2 == 1 (C: -1), 7 % -2 == -1 (C: 1), and lost
    # digits past 2**53 in a quotient.
    header = tmp_path / "fold.h"
    header.write_text("typedef enum fold_t {\n FOLD_A = -7 % 2, FOLD_B = 7 % -2, FOLD_C = -7 / 2,"
                      " FOLD_D = 0x7fffffffffffffff / 3, FOLD_E = -(1 << 4) % 5\n} fold_t;\n")
    assert build_ffi.generate_from_header(header).enums["fold_t"] == {
        "FOLD_A": -1, "FOLD_B": 1, "FOLD_C": -3, "FOLD_D": 0x7fffffffffffffff // 3,
        "FOLD_E": -1}


def test_conflicting_repeated_declarations_name_both_lines(tmp_path):
    header = tmp_path / "conflict.h"
    header.write_text("#include <stdint.h>\ntypedef int r_t;\n"
                      "r_t clash(void *p);\n"
                      "\n"
                      "r_t clash(void *p, uint32_t n);\n")
    with pytest.raises(build_ffi.HeaderError) as error:
        build_ffi.generate_from_header(header)
    message = str(error.value)
    assert "'clash'" in message and "conflict.h:5" in message and "conflict.h:3" in message


def test_info_types_in_both_comment_placements():
    """UR 0.12 documents an info value type above its enumerator, 0.10 and 0.11 after it."""
    text = """typedef enum ur_x_info_t {
      /// [::ur_bool_t] above
      UR_X_INFO_ABOVE = 0,
      UR_X_INFO_AFTER = 1,                  ///< [size_t[]] after, with a [bracket] later
      UR_X_INFO_LAST [[deprecated]] = 2,    ///< [char[]][optional-query] deprecated, after
      UR_X_INFO_NONE = 3,                   ///< no type
      UR_X_INFO_FORCE_UINT32 = 0x7fffffff
    } ur_x_info_t;
    ur_result_t urXGet(ur_x_handle_t hX, ///< [in] handle of the x
                       size_t n);        ///< [in] count
    """
    assert build_ffi.parse_info_types(text) == {
        "UR_X_INFO_ABOVE": "::ur_bool_t", "UR_X_INFO_AFTER": "size_t[]",
        "UR_X_INFO_LAST": "char[]"}


@pytest.mark.parametrize("layout", ["unified-runtime", "", "sycl"])
@pytest.mark.parametrize("variable", ["CMPLR_ROOT", "ONEAPI_ROOT", "icpx"])
def test_header_found_in_every_oneapi_layout(monkeypatch, tmp_path, layout, variable):
    """oneAPI 2026 keeps ur_api.h in include/unified-runtime, 2025.1-2025.3 in include, 2025.0
    in include/sycl; the tree is named by setvars.sh's CMPLR_ROOT, ONEAPI_ROOT, or found
    above icpx on the PATH."""
    for name in ("UR_INCLUDE_DIR", "UR_LIBRARY_DIR", "CMPLR_ROOT", "ONEAPI_ROOT"):
        monkeypatch.delenv(name, raising=False)
    compiler = tmp_path / "oneapi" / "compiler" / "latest"
    include = compiler / "include" / layout
    include.mkdir(parents=True, exist_ok=True)
    (include / "ur_api.h").write_text("/* stand-in */\n")
    (compiler / "lib").mkdir()
    (compiler / "lib" / "libur_loader.so.0").write_bytes(b"")
    if variable == "CMPLR_ROOT":
        monkeypatch.setenv("CMPLR_ROOT", str(compiler))
    elif variable == "ONEAPI_ROOT":
        monkeypatch.setenv("ONEAPI_ROOT", str(tmp_path / "oneapi"))
    else:
        (compiler / "bin").mkdir()
        icpx = compiler / "bin" / "icpx"
        icpx.write_text("#!/bin/sh\n")
        icpx.chmod(0o755)
        monkeypatch.setenv("PATH", f"{compiler / 'bin'}:{os.environ['PATH']}")
    found = build_ffi.find_header()
    assert found == (include / "ur_api.h").resolve()
    assert build_ffi.find_loader_dir(found) == compiler / "lib"


def test_readme_gives_the_command_the_release_matrix_checks():
    """The README's command for an environment with a runtime already is the one that
    tests/release_matrix.py runs for every release."""
    import release_matrix

    readme = (ROOT / "README.md").read_text()
    assert f"```sh\n{release_matrix.INSTALL_BESIDE_EXISTING_RUNTIME}\n```" in readme


def test_a_pip_build_environments_loader_folder_is_not_the_run_time_path():
    """A pip build recorded its build environment's folder (deleted afterwards, and creatable
    by anyone) as the module's RUNPATH; then ``$ORIGIN/../../..``, which in an editable install
    is the folder above the checkout (a loader planted there ran)."""
    from pathlib import Path

    import tempfile

    for temporary in ("/tmp/pip-build-env-x1y2/overlay/lib",  # pip, python -m build, uv
                      "/var/tmp/build-env-q7w8/lib", "/home/u/.cache/uv/builds-v0/.tmpAb/lib",
                      f"{tempfile.gettempdir()}/ur-build/lib"):
        assert build_ffi._runtime_dirs(Path(temporary)) == [], temporary
    assert build_ffi._runtime_dirs(Path("/opt/intel/oneapi/compiler/latest/lib")) == \
        ["/opt/intel/oneapi/compiler/latest/lib"]


def test_a_relative_loader_folder_is_made_absolute(tmp_path, monkeypatch):
    """``UR_LIBRARY_DIR=lib`` was linked from cffi's build folder (``cannot find
    -lur_loader``) and recorded as a RUNPATH relative to the importing process's folder."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libur_loader.so.0").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("UR_LIBRARY_DIR", "lib")
    assert build_ffi.find_loader_dir(tmp_path / "include" / "ur_api.h") == \
        (tmp_path / "lib").resolve()


def test_a_loader_folder_without_the_development_name_links_the_file_itself(tmp_path,
                                                                         monkeypatch):
    """A folder with only libur_loader.so.0 (a runtime package's, a UR build's) was accepted,
    and the link failed: "ld: cannot find -lur_loader".  A UR_LIBRARY_DIR without the loader
    was not checked (the same linker error)."""
    (tmp_path / "libur_loader.so.0").write_bytes(b"")
    assert build_ffi._link_options(tmp_path) == {
        "extra_link_args": [str(tmp_path / "libur_loader.so.0")]}
    (tmp_path / "libur_loader.so").write_bytes(b"")
    assert build_ffi._link_options(tmp_path) == {"libraries": ["ur_loader"],
                                                 "library_dirs": [str(tmp_path)]}
    monkeypatch.setenv("UR_LIBRARY_DIR", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="UR_LIBRARY_DIR=.*empty: no libur_loader.so"):
        build_ffi.find_loader_dir(tmp_path / "ur_api.h")


@pytest.mark.parametrize("argv", [["--help"], ["--descrbe"], ["--describe", "x"]])
def test_the_command_line_refuses_what_it_does_not_know(argv, capsys):
    # Anything but --describe rebuilt and replaced the package's module (a typo included).
    with pytest.raises(SystemExit, match=r"usage: python build_ffi.py \[--describe\]"):
        build_ffi.main(argv)


@pytest.mark.parametrize("text", [b"", b"typedef int other_t;\nint other(void);\n",
                                  b"/* caf\xe9 */\ntypedef int other_t;\n"])
def test_a_header_that_is_not_urs_is_refused_naming_it(tmp_path, text):
    """An empty or unrelated header built a module of nothing (``make regen`` replaced the
    working one with it, and the import failed on a missing ur_result_t); a byte that is not
    UTF-8 gave a bare UnicodeDecodeError."""
    header = tmp_path / "ur_api.h"
    header.write_bytes(text)
    with pytest.raises(build_ffi.HeaderError, match=f"{re.escape(str(header))} is not (UR's "
                                                    "ur_api.h|UTF-8)"):
        build_ffi.generate_from_ur_header(header)


def test_a_loader_without_a_function_the_header_declares_is_refused_naming_both(tmp_path):
    """A header newer than the loader built a module whose import failed with the dynamic
    linker's bare "undefined symbol: ...", naming neither release."""
    from ur_cffi import _libraries

    header = build_ffi.find_header()
    bindings = build_ffi.generate_from_ur_header(header)
    loader = _libraries.opened_loader()
    build_ffi.check_loader_exports(loader.parent, header, bindings)  # the pair it was built of
    older = tmp_path / "libur_loader.so.0"
    older.write_bytes(loader.read_bytes().replace(b"urQueueFinish\0", b"urQueueFinisX\0"))
    with pytest.raises(build_ffi.HeaderError, match=f"the UR loader {re.escape(str(older))} "
                       "has no urQueueFinish of the [0-9]+ functions .*ur_api.h \\(UR API "
                       "[0-9.]+\\) declares: they are of different UR releases"):
        build_ffi.check_loader_exports(tmp_path, header, bindings)


def test_defines_are_read_past_comments():
    """``#define A 5 /* c */`` was left out (README: literal number defines are bound), and a
    ``#define`` inside a block comment was bound (the build then failed)."""
    text = ('#define A 5 /* after */\n/* #define B 6\n   #define B2 7 */\n'
            '#define C "x//y" // after\n// a /* in a line comment\n#define D 0x10\n/* end */\n')
    text += "#define E /* a comment\n   over lines */ 5\n"
    assert build_ffi.parse_defines(text) == {"A": "#define A 5", "E": "#define E 5",
                                             "C": "static const char *const C;",
                                             "D": "#define D 0x10"}
