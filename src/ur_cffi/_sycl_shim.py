"""A SYCL queue over a ur_cffi queue's native OpenCL queue, for dpctl (``interop.to_dpctl``).

SYCL objects are made from native handles only through SYCL's C++ API (``make_context``,
``make_queue``), which neither dpctl nor UR exposes to Python.  So a few lines of C++ are
compiled on first use, with the system's C++ compiler (``CXX``, default ``c++``), against the
SYCL headers and the ``libsycl`` the process has loaded (dpctl loads it): the headers must be
those of that very library, ``<prefix>/include/sycl`` beside ``<prefix>/lib/libsycl.so``, as
the ``intel-sycl-rt`` wheel and oneAPI lay them out.  The library is cached in
``UR_CFFI_CACHE_DIR`` (default ``~/.cache/ur_cffi``) under a name made from the source, the
``libsycl`` file and the compiler.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import _forking

SOURCE = r"""
#include <sycl/sycl.hpp>
#include <sycl/backend/opencl.hpp>

// A new sycl::queue (what dpctl's "SyclQueueRef" capsule holds) over an OpenCL queue and its
// context, which SYCL uses without a reference of its own.  nullptr and a message on failure.
extern "C" void *ur_cffi_sycl_queue_from_opencl(void *cl_queue, void *cl_ctx, char *error,
                                                 int error_size) {
  try {
    auto context = sycl::make_context<sycl::backend::opencl>(
        reinterpret_cast<cl_context>(cl_ctx));
    auto queue = sycl::make_queue<sycl::backend::opencl>(
        reinterpret_cast<cl_command_queue>(cl_queue), context);
    return new sycl::queue(queue);
  } catch (const std::exception &e) {
    snprintf(error, error_size, "%s", e.what());
  } catch (...) {
    snprintf(error, error_size, "an exception that is no std::exception");
  }
  return nullptr;
}

extern "C" void ur_cffi_sycl_queue_delete(void *queue) {
  delete static_cast<sycl::queue *>(queue);
}
"""

_lock = _forking.lock()
_library = None


def loaded_libsycl() -> Path:
    """The ``libsycl`` this process has loaded (import dpctl first)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libsycl.so" in path:
                return Path(path)
    raise RuntimeError("no libsycl is loaded in this process: import dpctl first")


def library():
    """The compiled shim (``ctypes.CDLL``), built on first use."""
    global _library
    with _lock:
        if _library is None:
            _library = _load(_build())
        return _library


def _build() -> Path:
    libsycl = loaded_libsycl()
    include = libsycl.parent.parent / "include"
    if not (include / "sycl" / "sycl.hpp").is_file():
        raise RuntimeError(f"no SYCL headers at {include}/sycl beside the loaded {libsycl}: "
                           "install the intel-sycl-rt wheel of the same release (it has them)")
    compiler = os.environ.get("CXX") or "c++"
    try:  # (a command with its launcher or flags, as make reads CXX: "ccache g++", "g++ -O2")
        program, *compiler_flags = shlex.split(compiler)
    except ValueError as error:
        raise RuntimeError(f"CXX={compiler!r} is no command: {error}") from None
    compiler_path = shutil.which(program)
    if compiler_path is None:
        raise RuntimeError(f"ur_cffi.interop.to_dpctl compiles a small C++ shim and needs a C++ "
                           f"compiler: {program!r} (of CXX={compiler!r}) is not on PATH")
    flags = ["-std=c++17", "-shared", "-fPIC", "-O1", "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING"]
    stat = libsycl.stat()
    key = hashlib.blake2b(f"{SOURCE}|{libsycl.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|"
                          f"{compiler_path}|{compiler_flags}|{flags}".encode(),
                          digest_size=10).hexdigest()
    cache = Path(os.environ.get("UR_CFFI_CACHE_DIR") or Path.home() / ".cache" / "ur_cffi")
    target = cache / f"sycl_shim-{key}.so"
    if target.is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RuntimeError(f"the SYCL shim's cache folder {str(cache)!r} (UR_CFFI_CACHE_DIR, "
                           f"default ~/.cache/ur_cffi) cannot be made: {error}") from None
    with tempfile.TemporaryDirectory(dir=cache) as work:
        source = Path(work) / "sycl_shim.cpp"
        source.write_text(SOURCE)
        built = Path(work) / target.name
        command = [compiler_path, *compiler_flags, *flags, f"-I{include}", "-o", str(built),
                   str(source),
                   f"-L{libsycl.parent}", f"-l:{libsycl.name}", f"-Wl,-rpath,{libsycl.parent}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"compiling the SYCL shim took over 300 s: "
                               f"{' '.join(command)}") from None
        if done.returncode:
            raise RuntimeError(f"compiling the SYCL shim failed ({' '.join(command)}):\n"
                               f"{done.stderr[-3000:]}")
        os.replace(built, target)  # atomic: another process may build the same one
    return target


def _load(path: Path):
    library = ctypes.CDLL(str(path))
    library.ur_cffi_sycl_queue_from_opencl.restype = ctypes.c_void_p
    library.ur_cffi_sycl_queue_from_opencl.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                       ctypes.c_char_p, ctypes.c_int]
    library.ur_cffi_sycl_queue_delete.restype = None
    library.ur_cffi_sycl_queue_delete.argtypes = [ctypes.c_void_p]
    return library


def sycl_queue_from_opencl(cl_queue: int, cl_context: int) -> int:
    """A new ``sycl::queue *`` over the OpenCL queue and context (delete it with
    :func:`delete_sycl_queue` once dpctl has copied it)."""
    shim = library()
    error = ctypes.create_string_buffer(1024)
    pointer = shim.ur_cffi_sycl_queue_from_opencl(cl_queue, cl_context, error, len(error))
    if not pointer:
        raise RuntimeError(f"SYCL could not make a queue over the OpenCL queue: "
                           f"{error.value.decode(errors='replace')}")
    return pointer


def delete_sycl_queue(pointer: int) -> None:
    """Delete a ``sycl::queue`` that :func:`sycl_queue_from_opencl` made."""
    library().ur_cffi_sycl_queue_delete(pointer)
