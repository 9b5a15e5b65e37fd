"""Find the UR loader and Intel's CPU OpenCL runtime before ``ur_cffi._ur`` is imported.

pip puts the oneAPI runtime wheels' libraries in ``<prefix>/lib``, which is not on the dynamic
linker's path.  Loading ``libur_loader.so.0`` by absolute path first satisfies the compiled
module's dependency on it (its own ``RUNPATH $ORIGIN`` finds the rest), and pointing the OpenCL
ICD loader at ``libintelocl.so`` gives the loader's built-in OpenCL adapter the CPU device.
Settings the user made win over everything here.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import sysconfig
from pathlib import Path

LOADER_SONAME = "libur_loader.so.0"
CPU_RUNTIME_NAME = "libintelocl.so"


def library_dirs() -> list[Path]:
    """Directories searched for UR's and OpenCL's libraries, most specific first."""
    dirs = []
    if os.environ.get("UR_LIBRARY_DIR"):
        dirs.append(Path(os.environ["UR_LIBRARY_DIR"]))
    for prefix in (sysconfig.get_paths()["data"], sys.prefix, sys.base_prefix):
        dirs.append(Path(prefix) / "lib")
    if os.environ.get("ONEAPI_ROOT"):
        root = Path(os.environ["ONEAPI_ROOT"])
        dirs += [root / "compiler" / "latest" / "lib", root / "lib"]
    icpx = shutil.which("icpx")
    if icpx:
        dirs.append(Path(icpx).resolve().parent.parent / "lib")
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
