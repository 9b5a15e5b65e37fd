"""Find the UR loader and Intel's CPU OpenCL runtime before ``ur_cffi._ur`` is imported.

pip puts the oneAPI runtime wheels' libraries in ``<prefix>/lib``, which is not on the dynamic
linker's path.  Loading ``libur_loader.so.0`` by absolute path first satisfies the compiled
module's dependency on it (its own ``RUNPATH $ORIGIN`` finds the rest), and pointing the OpenCL
ICD loader at ``libintelocl.so`` gives the loader's built-in OpenCL adapter the CPU device.
Settings the user made win over everything here.

It also tells which loader the compiled module was built for and which one a process opened
(:func:`loader_identity`): a module built against one UR release's header does not work with
another release's loader, so ``import ur_cffi`` checks (:func:`check_loader`).  ``build_ffi.py``
loads this file by path, so it imports nothing of the package.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import os
import shutil
import sys
import sysconfig
from pathlib import Path

LOADER_SONAME = "libur_loader.so.0"
CPU_RUNTIME_NAME = "libintelocl.so"


def oneapi_roots() -> list[Path]:
    """Compiler trees of an installed oneAPI: ``CMPLR_ROOT`` (set by ``setvars.sh``),
    ``ONEAPI_ROOT``, and the tree above ``icpx`` on the PATH."""
    roots = []
    if os.environ.get("CMPLR_ROOT"):
        roots.append(Path(os.environ["CMPLR_ROOT"]))
    if os.environ.get("ONEAPI_ROOT"):
        root = Path(os.environ["ONEAPI_ROOT"])
        roots += [root / "compiler" / "latest", root]
    icpx = shutil.which("icpx")
    if icpx:
        roots.append(Path(icpx).resolve().parent.parent)
    return roots


def library_dirs() -> list[Path]:
    """Directories searched for UR's and OpenCL's libraries, most specific first."""
    dirs = []
    if os.environ.get("UR_LIBRARY_DIR"):
        dirs.append(Path(os.environ["UR_LIBRARY_DIR"]))
    for prefix in (sysconfig.get_paths()["data"], sys.prefix, sys.base_prefix):
        dirs.append(Path(prefix) / "lib")
    dirs += [root / "lib" for root in oneapi_roots()]
    return list(dict.fromkeys(dirs))


def _first(name: str) -> Path | None:
    for directory in library_dirs():
        if (directory / name).exists():
            return directory / name
    return None


def expose_cpu_runtime() -> Path | None:
    """Point the OpenCL ICD loader at Intel's CPU runtime unless the user chose ICDs already.

    The ``intel-opencl-rt`` wheel's own ``.icd`` file holds a placeholder path, so the ICD
    loader would find no CPU device without this.  It must happen before the first
    ``urAdapterGet``: the OpenCL adapter enumerates its platforms once per process.
    """
    if "OCL_ICD_FILENAMES" in os.environ or "OCL_ICD_VENDORS" in os.environ:
        return None
    runtime = _first(CPU_RUNTIME_NAME)
    if runtime is not None:
        os.environ["OCL_ICD_FILENAMES"] = str(runtime)
    return runtime


def preload_loader() -> Path | None:
    """Load ``libur_loader.so.0`` by absolute path; return it, or None to leave it to the linker."""
    loader = _first(LOADER_SONAME)
    if loader is not None:
        ctypes.CDLL(str(loader), mode=ctypes.RTLD_GLOBAL)
    return loader


def check_one_module() -> None:
    """Raise ``ImportError`` where the package folder holds two builds of the compiled module
    and Python would load the older: ``make regen`` names it ``_ur.cpython-3XX-*.so``, a pip
    build ``_ur.abi3.so``, and Python prefers the first, so a later pip build went unused."""
    package = Path(__file__).parent
    modules = list(package.glob("_ur.*so"))
    if len(modules) < 2:
        return
    from importlib.machinery import EXTENSION_SUFFIXES

    rank = {suffix: index for index, suffix in enumerate(EXTENSION_SUFFIXES)}
    loadable = [module for module in modules  # (another Python's build is not this one's)
                if module.name[len("_ur"):] in rank and module.exists()]
    if len(loadable) < 2:
        return
    loaded = min(loadable, key=lambda module: rank[module.name[len("_ur"):]])
    newest = max(loadable, key=lambda module: module.stat().st_mtime_ns)
    if newest != loaded:
        raise ImportError(
            f"{package} holds two builds of ur_cffi's module: Python would load {loaded.name}, "
            f"older than {newest.name} beside it. Delete the one you do not want ({loaded} is "
            "the older; `make regen` and pip builds name it differently)")


class LoaderMismatchError(ImportError):
    """The UR loader this process opened is not the one ur_cffi's module was built for."""


REBUILD_HINT = (
    "Rebuild ur_cffi against the runtime you use, with that release's ur_api.h installed "
    "(pip install \"intel-sycl-rt==<the intel-cmplr-lib-ur version>\", or an installed oneAPI): "
    "pip install --no-build-isolation --force-reinstall --no-deps <ur_cffi source>, or "
    "`make regen` in a source checkout")


def loader_identity(path: Path) -> dict:
    """What identifies the loader file at ``path``: its resolved ``path``, a ``digest`` of its
    bytes, its size and modification time (``stat``) and a ``release`` a person can read (the
    owning wheel's version, else the newest UR API version its symbols carry)."""
    path = Path(path).resolve()
    data = path.read_bytes()
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    stat = path.stat()
    return {"path": str(path), "digest": digest, "release": _release_of(path, data),
            "stat": [stat.st_size, stat.st_mtime_ns]}


_SYMBOL_VERSION = re.compile(rb"LIBUR_LOADER_(\d+)\.(\d+)")


def _release_of(path: Path, data: bytes) -> str:
    from importlib import metadata

    try:
        distribution = metadata.distribution("intel-cmplr-lib-ur")
    except metadata.PackageNotFoundError:
        distribution = None
    for file in (distribution.files or ()) if distribution else ():
        if file.name == path.name or file.name == LOADER_SONAME:
            if Path(file.locate()).resolve() == path:
                return f"intel-cmplr-lib-ur {distribution.version}"
    versions = {(int(major), int(minor)) for major, minor in _SYMBOL_VERSION.findall(data)}
    if not versions:
        return "an unknown release"
    return "UR API {}.{}".format(*max(versions))


def opened_loader() -> Path | None:
    """The ``libur_loader.so`` file this process has mapped, None if none is."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/libur_loader.so" in line:
                    return Path(line.split(None, 5)[5].strip())
    except OSError:
        pass
    return None


def check_loader(built_for: dict | None) -> None:
    """Raise :class:`LoaderMismatchError` if the opened loader is not ``built_for`` (the
    :func:`loader_identity` recorded at build time)."""
    opened = opened_loader()
    if not built_for or opened is None:
        return
    stat = opened.resolve().stat()
    if str(opened.resolve()) == built_for["path"] and \
            [stat.st_size, stat.st_mtime_ns] == built_for["stat"]:
        return  # the very file the module was built against, untouched since: no need to read it
    found = loader_identity(opened)
    if found["digest"] != built_for["digest"]:
        raise LoaderMismatchError(
            f"ur_cffi was built for the UR loader of {built_for['release']} "
            f"({built_for['path']}), but this process opened {found['release']} "
            f"({found['path']}). {_use_built_for(built_for)}{REBUILD_HINT}")


def _use_built_for(built_for: dict) -> str:
    """How to open the loader the module was built for, where it is still there."""
    path = Path(built_for["path"])
    if not path.exists():
        return ""
    return f"To use the one it was built for: UR_LIBRARY_DIR={path.parent}. Or: "


def explain_failed_load(error: ImportError) -> None:
    """Raise :class:`LoaderMismatchError` from ``error`` (the compiled module did not load) if
    the module was built for another loader than the one found, naming both."""
    from importlib.util import find_spec

    try:
        spec = find_spec("ur_cffi._ur")
    except (ImportError, ValueError):
        return
    facts = _facts_in_file(spec.origin) if spec and spec.origin else None
    loader = _first(LOADER_SONAME)
    built_for = (facts or {}).get("loader")
    if loader is None and LOADER_SONAME in str(error):
        searched = "\n  ".join(str(directory) for directory in library_dirs())
        release = f" ({built_for['release']})" if built_for else ""
        raise ImportError(
            f"UR's loader ({LOADER_SONAME}) was not found: {error}. ur_cffi was built for "
            f"{built_for['path'] if built_for else 'a UR loader'}{release}. Install it (pip "
            "install intel-cmplr-lib-ur, of the release of the header ur_cffi was built "
            "from), source oneAPI's setvars.sh, or set UR_LIBRARY_DIR to the folder that "
            f"holds it. Looked in:\n  {searched}") from error
    if not built_for or loader is None:
        return
    found = loader_identity(loader)
    if found["digest"] != built_for["digest"]:
        raise LoaderMismatchError(
            f"ur_cffi's module was built for the UR loader of {built_for['release']} "
            f"({built_for['path']}) and does not load with {found['release']} "
            f"({found['path']}): {error}. {_use_built_for(built_for)}{REBUILD_HINT}") from error


def _facts_in_file(module_file: str) -> dict | None:
    """The build facts embedded in the compiled module's file, read without loading it."""
    try:
        data = Path(module_file).read_bytes()
    except OSError:
        return None
    start = data.find(FACTS_MARKER)
    if start < 0:
        return None
    end = data.find(b"\0", start)
    try:
        return json.loads(data[start:end].decode())
    except ValueError:
        return None


FACTS_MARKER = b'{"ur_cffi_build": 1'
"""How the build facts string in the compiled module begins."""
