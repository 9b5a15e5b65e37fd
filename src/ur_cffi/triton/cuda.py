"""Triton's NVIDIA backend on UR's CUDA adapter: target, cubin loading and launch extras.

What Triton's own ``CudaDriver``/``CudaLauncher`` (``triton/backends/nvidia/driver.py``) do
through the CUDA driver API, done here through UR:

- **Target**: ``GPUTarget("cuda", capability, 32)``; the CUDA adapter reports the compute
  capability as the device version (``UR_DEVICE_INFO_VERSION`` is ``"9.0"`` on an H200).
- **Binary**: the cubin, through ``urProgramCreateWithBinary`` (one program per context and
  cubin, ``programs.load_binary``); the kernel's argument count comes from the cubin's
  parameter table (``ur_cffi.signatures``), as the adapter cannot report it.
- **Dynamic shared memory** (``metadata.shared``) is not a kernel argument: it travels as the
  launch's ``ur_kernel_launch_workgroup_property_t``.  The adapter opts in to more than 48 KiB
  itself (``cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)``).  The
  property follows a ``ur_kernel_launch_ext_properties_t`` carrying the flags: the CUDA adapter
  reads ``flags`` from the first entry of the list whatever its type.
- **Cooperative grids** and **programmatic dependent launch** (``launch_cooperative_grid``,
  ``launch_pdl``) are the flags ``UR_KERNEL_LAUNCH_FLAG_COOPERATIVE`` and
  ``..._OPPORTUNISTIC_QUEUE_SERIALIZE``.  **Clusters** (``num_ctas > 1``) are refused
  (``backend.check_num_ctas``): UR's cluster property reverses dimensions for 3-D launches,
  and that path is untested.
- **Scratch** (``global_scratch_size``, ``profile_scratch_size`` per program instance): USM
  device memory of ``grid * size`` bytes where the size is not zero, else a null pointer, as
  Triton's allocator hook would give.  On an in-order queue one growing allocation per queue
  serves every launch (they run one after another); on an out-of-order queue each launch gets
  its own, kept until its event completes; a prepared launch holds its own.
"""

from __future__ import annotations

import numpy as np

from .. import _compat, _forking
from .._ur import lib
from ..enums import ur_device_info_t, ur_kernel_group_info_t
from ..errors import URError
from ..info import query
from ..memory import USMArray

WARP_SIZE = 32


def capability(version: str) -> int:
    """``90`` for the CUDA adapter's device version ``"9.0"``; ``ValueError`` otherwise."""
    try:
        major, minor = version.strip().split(".")[:2]
        if not (major.isdigit() and minor.isdigit()):
            raise ValueError(version)
        return int(major) * 10 + int(minor)
    except (ValueError, AttributeError):
        raise ValueError(f"device version {version!r} is not a CUDA compute capability "
                         "(major.minor)") from None


def gpu_target(device, arch: int | None = None):
    """The ``GPUTarget`` of a CUDA ``device`` (or of compute capability ``arch``)."""
    from triton.backends.compiler import GPUTarget

    if arch is None:
        arch = capability(device.info(ur_device_info_t.UR_DEVICE_INFO_VERSION))
    return GPUTarget("cuda", arch, WARP_SIZE)


def compile(fn, signature: dict, constants: dict | None = None, *, arch: int = 90,
            **options):
    """Compile a ``@triton.jit`` function for compute capability ``arch`` with Triton's NVIDIA
    backend, without a device or torch; returns Triton's ``CompiledKernel`` (``.asm["cubin"]``,
    ``.asm["ptx"]``)."""
    import triton

    from .. import _checks
    from .backend import check_num_ctas, check_options
    from .source import checked_source

    target = gpu_target(None, _checks.integer("cuda.compile: arch", arch, 1))
    check_options(target, options)
    check_num_ctas(options.get("num_ctas", 1))  # as every compile for ur_cffi.triton
    return triton.compile(checked_source(fn, signature, constants), target=target,
                          options=options)


def max_threads(kernel, device) -> int:
    """The most threads per block ``kernel`` launches with (what Triton 3.6's ``load_binary``
    returns as ``n_max_threads``)."""
    try:
        return int(query("urKernelGetGroupInfo", kernel.handle, device.handle,
                         ur_kernel_group_info_t.UR_KERNEL_GROUP_INFO_WORK_GROUP_SIZE))
    except URError:
        return int(device.max_work_group_size)


def launch_properties(metadata):
    """The launch-property list for a compiled kernel (``cdata`` to keep alive while launches
    use it), or ``ffi.NULL`` where it needs none.  Raises ``NotImplementedError`` where the
    UR header has no launch properties (clusters are refused before, by the launcher)."""
    flags = 0
    if getattr(metadata, "launch_cooperative_grid", False):
        flags |= _flag("UR_KERNEL_LAUNCH_FLAG_COOPERATIVE")
    if getattr(metadata, "launch_pdl", False):
        flags |= _flag("UR_KERNEL_LAUNCH_FLAG_OPPORTUNISTIC_QUEUE_SERIALIZE")
    return _compat.launch_properties(flags, int(metadata.shared))


def _flag(name: str) -> int:
    return int(_compat.require("ur_kernel_launch_flag_t", name))


def scratch_layout(rules, metadata) -> list[tuple[int, int, int]]:
    """``[(scratch pointer index, bytes per program instance, alignment)]`` of the scratch
    pointers whose size is not zero."""
    found = []
    for index, prefix in enumerate(rules.scratch_metadata):
        size = int(getattr(metadata, f"{prefix}_size", 0) or 0)
        if size:
            found.append((index, size, int(getattr(metadata, f"{prefix}_align", 1) or 1)))
    return found


_lock = _forking.lock()


def scratch(queue, index: int, nbytes: int, align: int, fresh: bool = False):
    """``(address, memory, owned)`` of ``nbytes`` of device memory aligned to ``align`` for
    scratch pointer ``index``: the queue's shared allocation (grown as needed: not ``owned``)
    on an in-order queue unless ``fresh``, else a new one (``owned``: the launch keeps it until
    it completes).  The caller holds ``memory`` until its launch is enqueued either way: a
    larger launch on another thread replaces the shared one meanwhile, and the one replaced
    goes back to the allocator, in the queue's order, only once no launch holds it.  The
    queue holds its shared ones (``Queue.triton_scratch``) until it is closed (each holds the
    queue too: a queue dropped without ``close()`` keeps them, and itself, to the end)."""
    if fresh or queue.out_of_order:
        memory = USMArray(queue, nbytes + align, np.uint8)
        return _aligned(memory.data_ptr(), align), memory, True
    with _lock:
        held = queue.triton_scratch
        while len(held) <= index:
            held.append(None)
        memory = held[index]
        if memory is None or memory.nbytes < nbytes + align:
            memory = held[index] = USMArray(queue, 2 * (nbytes + align), np.uint8)
        return _aligned(memory.data_ptr(), align), memory, False


def _aligned(address: int, align: int) -> int:
    return (address + align - 1) // align * align


def keep_until_complete(event_handle, owners: list) -> None:
    """Hold ``owners`` (scratch memory of an out-of-order launch) until the launch whose event
    is ``event_handle`` completes."""
    from .. import queue as queue_module

    if lib.urEventRetain(event_handle) == 0:
        queue_module._release_when_complete(event_handle, tuple(owners))
