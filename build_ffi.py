"""Generate and build ``ur_cffi._ur``, the raw cffi layer over the whole of ``ur_api.h``.

The generator reads a C header, preprocesses it against ``include_stubs/``, parses it with
pycparser and writes cffi cdef text: every typedef, enum (values evaluated), struct, union,
function-pointer type, exported function and integer or string ``#define``.  It knows nothing
about queues or kernels.

Used three ways:
- by setuptools, through ``cffi_modules=["build_ffi.py:make_ffibuilder"]`` in ``setup.py``;
- by ``make regen`` (``python build_ffi.py``), which compiles the module into ``src/ur_cffi``;
- by the generator tests, which call :func:`generate` on small headers of their own.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import NamedTuple

from pycparser import c_ast, c_generator, c_parser

HERE = Path(__file__).resolve().parent
INCLUDE_STUBS = HERE / "include_stubs"
MODULE_NAME = "ur_cffi._ur"
HEADER_NAME = "ur_api.h"


class HeaderError(Exception):
    """The header holds something the generator cannot turn into cdef text."""


# --------------------------------------------------------------------------------------------
# Finding the header and the loader


# Where ur_api.h stands under an include directory: oneAPI 2026 and later, 2025.1 to 2025.3,
# 2025.0 (and the same three layouts inside the intel-sycl-rt wheel).
HEADER_SUBDIRS = ("unified-runtime", "", "sycl")


def header_candidates() -> list[Path]:
    """Where ``ur_api.h`` is looked for, in order of preference."""
    candidates = []
    if os.environ.get("UR_INCLUDE_DIR"):
        candidates.append(Path(os.environ["UR_INCLUDE_DIR"]))
    for root in _libraries_module().oneapi_roots():
        candidates += [root / "include" / sub for sub in HEADER_SUBDIRS]
    # The intel-sycl-rt wheel installs its headers under its environment's data directory,
    # which during an isolated pip build is the build environment, not sys.prefix.
    candidates += [path.parent for path in wheel_files("intel-sycl-rt", HEADER_NAME)]
    for prefix in dict.fromkeys([sysconfig.get_paths()["data"], sys.prefix, sys.base_prefix]):
        candidates += [Path(prefix) / "include" / sub for sub in HEADER_SUBDIRS]
    return [Path(os.path.normpath(c)) for c in dict.fromkeys(candidates)]


def wheel_files(distribution: str, name: str) -> list[Path]:
    """Files called ``name`` that the installed ``distribution`` owns."""
    from importlib import metadata

    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return []
    return [Path(f.locate()).resolve() for f in files if f.name == name]


def find_header() -> Path:
    """Return the first ``ur_api.h`` found; raise ``FileNotFoundError`` listing every place tried
    (at once where ``UR_INCLUDE_DIR`` names a folder without it: no other header instead)."""
    chosen = os.environ.get("UR_INCLUDE_DIR")
    if chosen:
        for directory in [Path(chosen)] + [Path(chosen) / sub for sub in HEADER_SUBDIRS]:
            if (directory / HEADER_NAME).is_file():
                return (directory / HEADER_NAME).resolve()
        raise FileNotFoundError(
            f"UR_INCLUDE_DIR={chosen}: no {HEADER_NAME} there, nor in its "
            f"{', '.join(HEADER_SUBDIRS)} folders")
    tried = header_candidates()
    for directory in tried:
        if (directory / HEADER_NAME).is_file():
            return (directory / HEADER_NAME).resolve()
    places = "\n  ".join(str(d) for d in tried)
    raise FileNotFoundError(
        f"{HEADER_NAME} not found. Set UR_INCLUDE_DIR, install oneAPI, or pip install "
        f"intel-sycl-rt. Looked in:\n  {places}"
    )


LOADER_NAMES = ("libur_loader.so", "libur_loader.so.0")  # (as linked, as loaded)


def find_loader_dir(header: Path) -> Path:
    """The directory holding ``libur_loader.so`` that belongs with ``header``."""
    if os.environ.get("UR_LIBRARY_DIR"):
        chosen = Path(os.environ["UR_LIBRARY_DIR"]).resolve()  # (linked and run elsewhere)
        if not any((chosen / name).exists() for name in LOADER_NAMES):
            raise FileNotFoundError(f"UR_LIBRARY_DIR={chosen}: no {' or '.join(LOADER_NAMES)} "
                                    "there")
        return chosen
    for parent in header.parents:
        if any((parent / "lib" / name).exists() for name in LOADER_NAMES):
            return parent / "lib"
    raise FileNotFoundError(
        f"no libur_loader.so beside {header}; set UR_LIBRARY_DIR or pip install intel-cmplr-lib-ur"
    )


# --------------------------------------------------------------------------------------------
# Preprocessing


def preprocess(header: Path, include_dirs: list[Path] = ()) -> str:
    """Run the C preprocessor over ``header`` against our stub standard headers only."""
    compiler = shlex.split(os.environ.get("CC", "cc"))
    command = [
        *compiler, "-E", "-undef", "-nostdinc", f"-I{INCLUDE_STUBS}",
        *(f"-I{d}" for d in include_dirs),
        "-D__attribute__(x)=", "-D__declspec(x)=", "-D__cdecl=", str(header),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise HeaderError(f"preprocessing {header} failed:\n{result.stderr}")
    return result.stdout


# --------------------------------------------------------------------------------------------
# Constant folding for enumerator values (cffi wants plain integers)

def _c_quotient(a: int, b: int) -> int:
    """C's integer division: truncated toward zero (Python's // floors), exact for any size."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": _c_quotient, "%": lambda a, b: a - b * _c_quotient(a, b),
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
}  # fmt: skip
_UNARY = {"-": lambda a: -a, "+": lambda a: a, "~": lambda a: ~a, "!": lambda a: int(not a)}


def _int_literal(text: str) -> int:
    digits = text.rstrip("uUlL")
    if re.fullmatch(r"0[0-7]+", digits):  # C octal; Python's int(..., 0) wants 0o
        return int(digits, 8)
    return int(digits, 0)


def evaluate(node: c_ast.Node, known: dict[str, int]) -> int:
    """Fold an integer constant expression; names refer to enumerators seen before it."""
    if isinstance(node, c_ast.Constant) and node.type == "char" and len(node.value) == 3:
        return ord(node.value[1])
    if isinstance(node, c_ast.Constant) and "int" in node.type:
        return _int_literal(node.value)
    if isinstance(node, c_ast.ID) and node.name in known:
        return known[node.name]
    if isinstance(node, c_ast.BinaryOp) and node.op in _BINARY:
        return _BINARY[node.op](evaluate(node.left, known), evaluate(node.right, known))
    if isinstance(node, c_ast.UnaryOp) and node.op in _UNARY:
        return _UNARY[node.op](evaluate(node.expr, known))
    if isinstance(node, c_ast.Cast):
        return evaluate(node.expr, known)
    raise HeaderError(f"{node.coord}: enumerator value is not an integer constant expression")


# --------------------------------------------------------------------------------------------
# The generator proper


def _strip_attributes(node: c_ast.Node) -> None:
    """Drop C23 attributes (``[[deprecated]]``): cffi's own parser does not accept them."""
    if getattr(node, "attributes", None):
        node.attributes = []
    for _, child in node.children():
        _strip_attributes(child)


class Bindings(NamedTuple):
    """What :func:`generate` found in a header: the cdef text and an inventory of it."""

    cdef: str
    functions: list[str]
    enums: dict[str, dict[str, int]]
    structs: list[str]
    unions: list[str]
    typedefs: list[str]
    constants: dict[str, str]
    info_types: dict[str, str]
    version: str | None


def _from_stub(node: c_ast.Node) -> bool:
    return node.coord is not None and Path(node.coord.file).parent == INCLUDE_STUBS


def _fold_enum(enum: c_ast.Enum, known: dict[str, int]) -> dict[str, int]:
    values, next_value = {}, 0
    for enumerator in enum.values.enumerators:
        if enumerator.value is not None:
            next_value = evaluate(enumerator.value, known)
        values[enumerator.name] = known[enumerator.name] = next_value
        enumerator.value = c_ast.Constant("int", str(next_value))
        next_value += 1
    return values


def _walk_tags(node: c_ast.Node, enums, structs, unions, known):
    """Collect every enum, struct and union defined anywhere inside ``node``."""
    for _, child in node.children():
        _walk_tags(child, enums, structs, unions, known)
    if isinstance(node, c_ast.Enum) and node.values is not None:
        enums[node.name] = _fold_enum(node, known)
    elif isinstance(node, c_ast.Struct) and node.decls is not None and node.name:
        structs.append(node.name)
    elif isinstance(node, c_ast.Union) and node.decls is not None and node.name:
        unions.append(node.name)


_SUPPORTED_DECL_TYPES = (c_ast.FuncDecl, c_ast.Struct, c_ast.Union, c_ast.Enum)


def _check_supported(node: c_ast.Node) -> None:
    where = _where(node)
    if isinstance(node, c_ast.FuncDef):
        raise HeaderError(f"{where}: function body of {node.decl.name!r} (only declarations bind)")
    if isinstance(node, c_ast.Pragma | c_ast.StaticAssert):
        return
    if not isinstance(node, c_ast.Typedef | c_ast.Decl):
        raise HeaderError(f"{where}: unsupported top-level construct {type(node).__name__}")
    if isinstance(node, c_ast.Decl):
        if "static" in node.storage or "inline" in node.funcspec:
            raise HeaderError(f"{where}: static or inline declaration {node.name!r}")
        if not isinstance(node.type, _SUPPORTED_DECL_TYPES):
            raise HeaderError(f"{where}: global variable {node.name!r} (only functions bind)")


def _int_define(value: str) -> bool:
    return re.fullmatch(r"\(?\s*-?(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?", value) is not None


_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)


def _without_comment(match: re.Match) -> str:
    """A string literal as it is, a comment as one space (as C reads it)."""
    text = match[0]
    return text if text.startswith('"') else " "


def parse_defines(header_text: str) -> dict[str, str]:
    """Object-like ``#define``s with an integer or string literal value, as cdef lines
    (comments left out: one after a value, or a ``#define`` inside one)."""
    constants = {}
    text = _COMMENT_OR_STRING.sub(_without_comment, header_text)
    for name, value in re.findall(r"^\s*#\s*define\s+(\w+)[ \t]+([^\n]+?)\s*$", text, re.M):
        if _int_define(value):
            constants[name] = f"#define {name} {value.strip('()').strip()}"
        elif re.fullmatch(r'"[^"\\]*"', value):
            constants[name] = f"static const char *const {name};"
    return constants


def _leading_bracket(comment: str) -> str | None:
    """The text inside a comment's leading ``[...]``, nested brackets kept (``size_t[]``)."""
    if not comment.startswith("["):
        return None
    depth = 0
    for index, char in enumerate(comment):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return comment[1:index]
    return None


def parse_info_types(header_text: str) -> dict[str, str]:
    """Map each enumerator whose doc comment opens with ``[type]`` to that type text.

    UR documents the value type of every info query this way, in one of two placements: a
    ``/// [::ur_bool_t] ...`` line above the enumerator (UR 0.12), or a trailing
    ``///< [::ur_bool_t] ...`` after it (UR 0.10 and 0.11).  The preprocessor drops comments,
    so this reads the raw header.
    """
    info_types, pending, in_comment = {}, None, False
    for line in header_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("///") and not stripped.startswith("///<"):
            if not in_comment:
                pending = _leading_bracket(stripped[3:].strip())
            in_comment = True
            continue
        in_comment = False
        match = re.match(r"(\w+)\s*(?:\[\[[^\]]*\]\])?\s*(=[^/]*|,)", stripped)
        if match:
            trailing = re.search(r"///<\s*(.*)$", stripped)
            found = _leading_bracket(trailing.group(1)) if trailing else None
            if found is not None:
                info_types[match.group(1)] = found
            elif pending is not None and match.group(2).startswith("="):
                info_types[match.group(1)] = pending
        pending = None
    return info_types


def _where(node: c_ast.Node) -> str:
    return f"{node.coord.file}:{node.coord.line}" if node.coord else "?"


def _fold_repeated_functions(nodes: list[c_ast.Node], writer) -> list[c_ast.Node]:
    """Drop a function declared again identically (UR 0.12 of oneAPI 2025.2 declares
    ``urBindlessImagesFreeMappedLinearMemoryExp`` twice); a conflicting redeclaration raises
    :class:`HeaderError` naming both places."""
    first: dict[str, tuple[c_ast.Node, str]] = {}
    kept = []
    for node in nodes:
        if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
            text = writer.visit(node)
            if node.name in first:
                earlier, earlier_text = first[node.name]
                if text != earlier_text:
                    raise HeaderError(
                        f"{_where(node)}: {node.name!r} is declared differently than at "
                        f"{_where(earlier)}:\n  {earlier_text}\n  {text}")
                continue
            first[node.name] = (node, text)
        kept.append(node)
    return kept


def parse(preprocessed: str, filename: str = HEADER_NAME, c23: bool | None = None) -> c_ast.FileAST:
    """The header's syntax tree.  ``ur_api.h`` is C23 where it marks deprecated enumerators
    (``[[deprecated]]``) and in its ``bool``; pycparser reads C23 from 3.12 on, which needs
    Python 3.11.  Older pycparser (3.0 to 3.11: Python 3.10) reads the text with those two
    written as C11 has them, line for line: the attributes dropped (as :func:`generate` drops
    them anyway) and ``bool`` as ``_Bool``, named ``bool`` again in the tree, so that the
    bindings are the same.  ``c23`` None: the first where pycparser has it."""
    if c23 is None:
        c23 = "dialect" in inspect.signature(c_parser.CParser).parameters
    if c23:
        return c_parser.CParser(dialect="c23").parse(preprocessed, filename)
    as_c11 = re.sub(r"\bbool\b", "_Bool", re.sub(r"\[\[[^\[\]]*\]\]", "", preprocessed))
    ast = c_parser.CParser().parse(as_c11, filename)
    _BoolNamedBool().visit(ast)
    return ast


class _BoolNamedBool(c_ast.NodeVisitor):
    def visit_IdentifierType(self, node: c_ast.IdentifierType) -> None:
        node.names = ["bool" if name == "_Bool" else name for name in node.names]


def generate(preprocessed: str, header_text: str = "", filename: str = HEADER_NAME,
             c23: bool | None = None) -> Bindings:
    """Turn preprocessed header text into cdef text plus an inventory of what it declares
    (``c23``: as :func:`parse` takes it)."""
    try:
        ast = parse(preprocessed, filename, c23)
    except c_parser.ParseError as error:
        raise HeaderError(f"cannot parse {filename}: {error}") from None

    enums, structs, unions, known = {}, [], [], {}
    typedefs, kept = [], []
    for node in ast.ext:
        if _from_stub(node):
            continue
        _check_supported(node)
        if isinstance(node, c_ast.Pragma | c_ast.StaticAssert):
            continue
        _walk_tags(node, enums, structs, unions, known)
        _strip_attributes(node)
        if isinstance(node, c_ast.Typedef):
            typedefs.append(node.name)
            if isinstance(node.type.type, c_ast.Enum) and node.type.type.values is not None:
                enums[node.name] = enums.pop(node.type.type.name or node.name, None) or {}
        kept.append(node)

    writer = c_generator.CGenerator()
    kept = _fold_repeated_functions(kept, writer)
    functions = [node.name for node in kept
                 if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl)]
    declarations = [writer.visit(node) + ";" for node in kept]
    constants = parse_defines(header_text)
    version = None
    if "UR_API_VERSION_CURRENT" in known:
        current = known["UR_API_VERSION_CURRENT"]
        version = f"{current >> 16}.{current & 0xFFFF}"
    return Bindings(
        cdef="\n".join(declarations + list(constants.values())) + "\n",
        functions=functions,
        enums=enums,
        structs=structs,
        unions=unions,
        typedefs=typedefs,
        constants=constants,
        info_types=parse_info_types(header_text),
        version=version,
    )


def generate_from_header(header: Path) -> Bindings:
    """Preprocess and generate from a header file on disk; ``HeaderError`` where it is not
    UTF-8 text."""
    try:
        text = header.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise HeaderError(f"{header} is not UTF-8 text ({error})") from None
    return generate(preprocess(header), text, str(header))


def generate_from_ur_header(header: Path) -> Bindings:
    """:func:`generate_from_header`, and ``HeaderError`` where the header is not UR's (it
    declares no ``ur_result_t`` or no API version): a module of nothing would be built."""
    bindings = generate_from_header(header)
    if "ur_result_t" not in bindings.enums or bindings.version is None:
        raise HeaderError(f"{header} is not UR's {HEADER_NAME}: it declares no ur_result_t or "
                          "no UR_API_VERSION_CURRENT (nothing was built or replaced)")
    return bindings


# --------------------------------------------------------------------------------------------
# The cffi builder

# The symbols in ``lib`` that are not UR's.  Facts the generator read from the header that
# the compiled module cannot recover by itself (which header, its version, info value types):
FACTS_SYMBOL = "ur_cffi_header_facts"

# DLPack's deleter of the tensors ur_cffi exports (``ur_cffi.interop``), written by hand: a
# consumer may call it with an exception pending (numpy frees a temporary array while the
# exception of its expression propagates), and Python code run then turns that exception into
# a SystemError.  The C function sets the pending exception aside around the Python one,
# ``_ur_cffi_dlpack_deleted``, which ``ur_cffi.interop`` defines with ``ffi.def_extern``.
DLPACK_DELETER_SYMBOL = "ur_cffi_dlpack_deleter"
DLPACK_DELETER_CDEF = f"""
extern "Python" void _ur_cffi_dlpack_deleted(void *);
static void (*const {DLPACK_DELETER_SYMBOL})(void *);
"""
DLPACK_DELETER_C = f"""
static void _ur_cffi_dlpack_deleted(void *);
static void _ur_cffi_dlpack_deleter(void *managed)
{{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    _ur_cffi_dlpack_deleted(managed);
    PyErr_Restore(type, value, traceback);
    PyGILState_Release(gil);
}}
static void (*const {DLPACK_DELETER_SYMBOL})(void *) = _ur_cffi_dlpack_deleter;
"""


@functools.cache
def _libraries_module():
    """``ur_cffi/_libraries.py``, loaded by path (the package itself needs the built module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_ur_cffi_libraries",
                                                  HERE / "src" / "ur_cffi" / "_libraries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loader_identity(loader_dir: Path) -> dict | None:
    """The identity (``_libraries.loader_identity``) of the loader in ``loader_dir``."""
    for name in reversed(LOADER_NAMES):
        if (loader_dir / name).exists():
            return _libraries_module().loader_identity(loader_dir / name)
    return None


def check_loader_exports(loader_dir: Path, header: Path, bindings: Bindings) -> None:
    """Raise ``HeaderError`` where the loader in ``loader_dir`` lacks a function ``header``
    declares: they are of different UR releases (the module would build, and its import fail
    with the dynamic linker's "undefined symbol").  A name is looked for in the file's bytes
    as its symbol table holds it, NUL-terminated."""
    loader = next((loader_dir / name for name in reversed(LOADER_NAMES)
                   if (loader_dir / name).exists()), None)
    if loader is None:
        return
    data = loader.read_bytes()
    missing = [name for name in bindings.functions if name.encode() + b"\0" not in data]
    if missing:
        raise HeaderError(
            f"the UR loader {loader.resolve()} has no {', '.join(missing[:5])}"
            f"{f' (and {len(missing) - 5} more)' if len(missing) > 5 else ''} of the "
            f"{len(bindings.functions)} functions {header} (UR API {bindings.version}) "
            "declares: they are of different UR releases. Set UR_INCLUDE_DIR and "
            "UR_LIBRARY_DIR to one release's header and loader")


def make_ffibuilder(header: Path | None = None, bindings: Bindings | None = None):
    """Return a cffi ``FFI`` with the whole header declared and ``ur_cffi._ur`` as its source."""
    import cffi

    header = header or find_header()
    bindings = bindings or generate_from_ur_header(header)
    loader_dir = find_loader_dir(header)
    check_loader_exports(loader_dir, header, bindings)
    libraries = _libraries_module()
    facts = json.dumps(
        {"ur_cffi_build": 1, "header": str(header), "version": bindings.version,
         "loader": loader_identity(loader_dir), "info_types": bindings.info_types}
    )
    assert facts.encode().startswith(libraries.FACTS_MARKER)
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(bindings.cdef)
    ffibuilder.cdef(f"static const char *const {FACTS_SYMBOL};")
    ffibuilder.cdef(DLPACK_DELETER_CDEF)
    ffibuilder.set_source(
        MODULE_NAME,
        # ur_api.h uses bool without <stdbool.h>: C23 and C++ have it built in.
        f'#include <stdbool.h>\n#include "{HEADER_NAME}"\n'
        f"static const char *const {FACTS_SYMBOL} = {json.dumps(facts)};\n"
        + DLPACK_DELETER_C,
        include_dirs=[str(header.parent)],
        **_link_options(loader_dir),
        runtime_library_dirs=_runtime_dirs(loader_dir),
        # Binding the [[deprecated]] enumerators too is the point of a 1:1 layer.
        extra_compile_args=["-Wno-deprecated-declarations"],
    )
    return ffibuilder


def _link_options(loader_dir: Path) -> dict:
    """How the module links the loader: ``-lur_loader`` where the development name is there,
    else the versioned file itself (a runtime-only folder, as a distribution's runtime package
    or a build of UR lays it out: ``-lur_loader`` would not find it)."""
    if (loader_dir / LOADER_NAMES[0]).exists():
        return {"libraries": ["ur_loader"], "library_dirs": [str(loader_dir)]}
    return {"extra_link_args": [str(loader_dir / LOADER_NAMES[1])]}


_BUILD_ENVIRONMENTS = ("pip-build-env-", "build-env-", "builds-v0")
"""How the temporary environments of pip, ``python -m build`` and uv name their folders."""


def _runtime_dirs(loader_dir: Path) -> list[str]:
    """Where the built module looks for the loader at run time (``import ur_cffi`` loads it by
    path first, from the folders ``_libraries.library_dirs`` lists): ``loader_dir``, except a
    temporary one (a build environment's, or one under the temporary folder), which is deleted
    after the build and could be made again by anyone: then none (a path relative to the
    module, ``$ORIGIN/...``, reaches a folder above the checkout in an editable install)."""
    temporary = Path(tempfile.gettempdir()).resolve()
    if any(part.startswith(_BUILD_ENVIRONMENTS) for part in loader_dir.parts) or \
            temporary in loader_dir.resolve().parents:
        return []
    return [str(loader_dir)]


def describe(header: Path, bindings: Bindings) -> str:
    """What ``make regen`` reports about a header: where it is, its UR version, the loader
    that goes with it and what was bound."""
    loader = loader_identity(find_loader_dir(header))
    return "\n".join([
        f"header: {header}",
        f"UR API version: {bindings.version}",
        f"loader: {loader['path']} ({loader['release']})" if loader else "loader: none found",
        f"bound: {len(bindings.functions)} functions, {len(bindings.enums)} enums, "
        f"{len(bindings.structs)} structs, {len(bindings.unions)} unions, "
        f"{len(bindings.constants)} constants",
    ])


def main(argv: list[str]) -> None:
    """``make regen``: rebuild ``src/ur_cffi/_ur*.so`` from whatever header is found.
    ``--describe`` prints what it would build from, and builds nothing."""
    if argv not in ([], ["--describe"]):
        raise SystemExit(f"usage: python build_ffi.py [--describe] (not {' '.join(argv)}): "
                         "rebuilds src/ur_cffi/_ur*.so from the header found; --describe "
                         "prints what it would build from")
    header = find_header()
    bindings = generate_from_ur_header(header)
    if argv == ["--describe"]:
        print(describe(header, bindings))
        return
    built = Path(make_ffibuilder(header, bindings).compile(tmpdir=str(HERE / "build" / "regen")))
    package = HERE / "src" / "ur_cffi"
    for stale in package.glob("_ur.*so"):  # e.g. an editable install's _ur.abi3.so
        stale.unlink()
    shutil.copy2(built, package / built.name)
    print(describe(header, bindings))
    print(f"module: {(package / built.name).relative_to(HERE)}")


if __name__ == "__main__":
    main(sys.argv[1:])
