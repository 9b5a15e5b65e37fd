"""The C floor: loops that call UR directly, compiled at benchmark time.

The module is built by cffi from the installed ``ur_api.h`` (found the way ``build_ffi.py``
finds it) against the same ``libur_loader`` that ur_cffi loads, in a temporary directory that
is deleted afterwards: no binary is kept.  Handles and pointers cross as integers, so the
loops run on the very queue, kernel and memory the Python methods use.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

MODULE = "_ur_bench_floor"

CDEF = """
int floor_flush(uintptr_t queue, int64_t count);
int floor_launch_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims, uintptr_t global_size,
                        uintptr_t local_size, uint32_t num_args, uintptr_t args, int64_t count);
int floor_launches_then_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                               uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                               uintptr_t args, int64_t count);
int floor_event_launch_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                              uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                              uintptr_t args, int64_t count);
int floor_event_launches_then_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                                     uintptr_t global_size, uintptr_t local_size,
                                     uint32_t num_args, uintptr_t args, int64_t count);
int floor_memcpy(uintptr_t queue, uintptr_t dst, uintptr_t src, size_t nbytes);
int floor_usm_alloc_free(uintptr_t context, uintptr_t device, size_t nbytes, int64_t count);
int floor_temporary_launch(uintptr_t context, uintptr_t device, uintptr_t queue, uintptr_t kernel,
                           uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                           uintptr_t args, size_t nbytes, int64_t count);
"""

SOURCE = r"""
#include <stdbool.h>  /* ur_api.h uses bool without including it */
#include <stdint.h>
#include "ur_api.h"

#define RETURN_IF_FAILED(call) do { ur_result_t r_ = (call); if (r_) return (int)r_; } while (0)

int floor_flush(uintptr_t queue, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        RETURN_IF_FAILED(urQueueFlush((ur_queue_handle_t)queue));
    return 0;
}

static ur_result_t launch_with(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                               uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                               uintptr_t args, ur_event_handle_t *event) {
    return urEnqueueKernelLaunchWithArgsExp(
        (ur_queue_handle_t)queue, (ur_kernel_handle_t)kernel, dims, NULL,
        (const size_t *)global_size, (const size_t *)local_size, num_args,
        (const ur_exp_kernel_arg_properties_t *)args, NULL, 0, NULL, event);
}

static ur_result_t launch(uintptr_t queue, uintptr_t kernel, uint32_t dims, uintptr_t global_size,
                          uintptr_t local_size, uint32_t num_args, uintptr_t args) {
    return launch_with(queue, kernel, dims, global_size, local_size, num_args, args, NULL);
}

int floor_launch_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims, uintptr_t global_size,
                        uintptr_t local_size, uint32_t num_args, uintptr_t args, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        RETURN_IF_FAILED(launch(queue, kernel, dims, global_size, local_size, num_args, args));
        RETURN_IF_FAILED(urQueueFinish((ur_queue_handle_t)queue));
    }
    return 0;
}

int floor_launches_then_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                               uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                               uintptr_t args, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        RETURN_IF_FAILED(launch(queue, kernel, dims, global_size, local_size, num_args, args));
    RETURN_IF_FAILED(urQueueFinish((ur_queue_handle_t)queue));
    return 0;
}

/* With the runtime's event of each launch, released as soon as it is not needed: what the
   Event of Kernel.launch costs at the least. */
int floor_event_launch_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                              uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                              uintptr_t args, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        ur_event_handle_t event = NULL;
        RETURN_IF_FAILED(launch_with(queue, kernel, dims, global_size, local_size, num_args,
                                     args, &event));
        RETURN_IF_FAILED(urQueueFinish((ur_queue_handle_t)queue));
        RETURN_IF_FAILED(urEventRelease(event));
    }
    return 0;
}

int floor_event_launches_then_finish(uintptr_t queue, uintptr_t kernel, uint32_t dims,
                                     uintptr_t global_size, uintptr_t local_size,
                                     uint32_t num_args, uintptr_t args, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        ur_event_handle_t event = NULL;
        RETURN_IF_FAILED(launch_with(queue, kernel, dims, global_size, local_size, num_args,
                                     args, &event));
        RETURN_IF_FAILED(urEventRelease(event));
    }
    RETURN_IF_FAILED(urQueueFinish((ur_queue_handle_t)queue));
    return 0;
}

int floor_memcpy(uintptr_t queue, uintptr_t dst, uintptr_t src, size_t nbytes) {
    RETURN_IF_FAILED(urEnqueueUSMMemcpy((ur_queue_handle_t)queue, 1, (void *)dst,
                                        (const void *)src, nbytes, 0, NULL, NULL));
    return 0;
}

/* Allocate a temporary, launch on it, free it: without a caching allocator C must finish the
   queue before urUSMFree (the launch may still use the memory). args[0] is the pointer. */
int floor_temporary_launch(uintptr_t context, uintptr_t device, uintptr_t queue, uintptr_t kernel,
                           uintptr_t global_size, uintptr_t local_size, uint32_t num_args,
                           uintptr_t args, size_t nbytes, int64_t count) {
    ur_exp_kernel_arg_properties_t *entries = (ur_exp_kernel_arg_properties_t *)args;
    for (int64_t i = 0; i < count; i++) {
        void *p = NULL;
        RETURN_IF_FAILED(urUSMDeviceAlloc((ur_context_handle_t)context,
                                          (ur_device_handle_t)device, NULL, NULL, nbytes, &p));
        entries[0].value.pointer = p;
        RETURN_IF_FAILED(launch(queue, kernel, 1, global_size, local_size, num_args, args));
        RETURN_IF_FAILED(urQueueFinish((ur_queue_handle_t)queue));
        RETURN_IF_FAILED(urUSMFree((ur_context_handle_t)context, p));
    }
    return 0;
}

int floor_usm_alloc_free(uintptr_t context, uintptr_t device, size_t nbytes, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        void *p = NULL;
        RETURN_IF_FAILED(urUSMDeviceAlloc((ur_context_handle_t)context,
                                          (ur_device_handle_t)device, NULL, NULL, nbytes, &p));
        RETURN_IF_FAILED(urUSMFree((ur_context_handle_t)context, p));
    }
    return 0;
}
"""


def build():
    """Compile the floor module and return its ``lib``; raises if no compiler or header, or
    (``NotImplementedError``) for a ur_cffi built against a release before oneAPI 2026.0."""
    import cffi

    from ur_cffi import _compat

    if not _compat.HAS_LAUNCH_WITH_ARGS:
        raise NotImplementedError(
            "make bench's C floor launches with urEnqueueKernelLaunchWithArgsExp, which UR has "
            "from oneAPI 2026.0 on; this ur_cffi was built against an older ur_api.h")

    repo = Path(__file__).resolve().parent.parent
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    import build_ffi  # the generator's own search for ur_api.h and the loader

    header = build_ffi.find_header()
    loader_dir = build_ffi.find_loader_dir(header)
    builder = cffi.FFI()
    builder.cdef(CDEF)
    builder.set_source(
        MODULE, SOURCE, include_dirs=[str(header.parent)], library_dirs=[str(loader_dir)],
        libraries=["ur_loader"], extra_compile_args=["-O2"],
        extra_link_args=[f"-Wl,-rpath,{loader_dir}"],
    )
    tmp = tempfile.mkdtemp(prefix="ur_bench_floor_")
    try:
        path = builder.compile(tmpdir=tmp, verbose=False)
        spec = importlib.util.spec_from_file_location(MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # the .so stays mapped after its file is deleted
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return module.lib
