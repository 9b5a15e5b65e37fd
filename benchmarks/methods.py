"""The ways of driving UR that are compared, each as a set of timed operations.

Every method gets the same :class:`Setup` (one device, context and in-order queue; one built
kernel; one USM array for the kernel to write; host and device buffers for the copies) and
returns ``{workload: run(count)}``.  ``run(count)`` performs ``count`` units of the workload:
urQueueFlush calls, launch+finish pairs, launches followed by one finish, copies, or USM
alloc+free pairs.  A method that cannot run here raises :class:`Unavailable` with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import ur_cffi
from ur_cffi import ffi, lib, spirv

from . import kernel

WORKLOADS = ("flush", "launch_finish", "back_to_back", "copy_h2d", "copy_d2h", "usm_alloc_free")


class Unavailable(Exception):
    """The method cannot run in this environment; the message says why."""


def address(handle) -> int:
    """A UR handle or pointer (cdata) as an integer."""
    return int(ffi.cast("uintptr_t", handle))


@dataclass
class Method:
    name: str
    label: str
    ops: dict[str, Callable[[int], None]]
    verify: Callable[[], list[int]]
    """Poison the kernel's output, launch once, wait, return the output."""
    notes: dict[str, str] = field(default_factory=dict)
    """Why a workload is missing, by workload."""
    keep_alive: tuple = ()
    """Memory that the timed calls reach only through raw addresses."""


class Setup:
    """What every method shares: device, queue, the kernel and the copy buffers."""

    def __init__(self, copy_bytes: int, small_bytes: int):
        self.device = ur_cffi.default_device()
        self.context = self.device.create_context()
        self.queue = ur_cffi.Queue(self.context, self.device)
        il, self.shared = kernel.compile_spirv(self.device)
        self.spirv = spirv.drop_capabilities(il)
        self.program = ur_cffi.Program.from_il(self.context, self.spirv)
        signature = ("ptr", "int32") + (("local",) if self.shared else ())
        self.kernel = self.program.kernel(kernel.NAME, signature=signature)
        self.x = ur_cffi.zeros(kernel.BLOCK, np.int32, queue=self.queue)
        self.x_other = ur_cffi.zeros(kernel.BLOCK, np.int32, queue=self.queue)  # see in_turn
        self.copy_bytes, self.small_bytes = copy_bytes, small_bytes
        # Both host arrays written once, so no copy pays for first-touch page faults.
        self.host_src = np.full(copy_bytes, 7, np.uint8)
        self.host_dst = np.full(copy_bytes, 1, np.uint8)
        self.device_buffer = ur_cffi.empty(copy_bytes, np.uint8, queue=self.queue)
        self.device_buffer.copy_from(self.host_src)
        self.graphs: list = []  # how to release the graph methods' command buffers

    def kernel_args(self) -> tuple:
        """The Kernel.launch arguments after the sizes."""
        return (self.x, kernel.N) + ((ur_cffi.Local(self.shared),) if self.shared else ())

    def poison(self) -> None:
        self.x.fill(-1)

    def close(self) -> None:
        for release in self.graphs:  # before the kernel their commands launch
            release()
        for resource in (self.device_buffer, self.x, self.x_other, self.kernel, self.program,
                         self.queue, self.context):
            resource.close()


# ---------------------------------------------------------------------------------------------
# Raw launch arguments shared by the C floor and the raw cffi method


class RawLaunch:
    """``urEnqueueKernelLaunchWithArgsExp``'s size and argument arrays, built once."""

    def __init__(self, setup: Setup):
        enums = ur_cffi.enums
        self.num_args = 3 if setup.shared else 2
        self.args = ffi.new("ur_exp_kernel_arg_properties_t[]", self.num_args)
        self.n = ffi.new("int32_t *", kernel.N)
        stype = enums.ur_structure_type_t.UR_STRUCTURE_TYPE_EXP_KERNEL_ARG_PROPERTIES
        kinds = enums.ur_exp_kernel_arg_type_t
        for index, entry in enumerate(self.args):
            entry.stype, entry.index = stype, index
        self.args[0].type = kinds.UR_EXP_KERNEL_ARG_TYPE_POINTER
        self.args[0].size = ffi.sizeof("void *")
        self.args[0].value.pointer = setup.x.handle
        self.args[1].type, self.args[1].size = kinds.UR_EXP_KERNEL_ARG_TYPE_VALUE, 4  # int32
        self.args[1].value.value = self.n
        if setup.shared:
            self.args[2].type = kinds.UR_EXP_KERNEL_ARG_TYPE_LOCAL
            self.args[2].size = setup.shared
        self.global_size = ffi.new("size_t[1]", [kernel.BLOCK])
        self.local_size = ffi.new("size_t[1]", [kernel.BLOCK])


def _read_x(setup: Setup) -> list[int]:
    return setup.x.to_numpy().tolist()


# ---------------------------------------------------------------------------------------------
# The methods


def c_floor(setup: Setup, floor_lib) -> Method:
    """C loops calling UR directly: the floor every other method is measured against."""
    raw = RawLaunch(setup)
    queue, kern = address(setup.queue.handle), address(setup.kernel.handle)
    sizes = (address(raw.global_size), address(raw.local_size))
    args = (raw.num_args, address(raw.args))
    context, device = address(setup.context.handle), address(setup.device.handle)
    src, dst = setup.host_src.ctypes.data, setup.host_dst.ctypes.data
    buffer, nbytes = setup.device_buffer.data_ptr(), setup.copy_bytes

    def ok(result):
        ur_cffi.check(result, "C floor")

    def launch_finish(count):
        ok(floor_lib.floor_launch_finish(queue, kern, 1, *sizes, *args, count))

    def verify():
        setup.poison()
        launch_finish(1)
        return _read_x(setup)

    ops = {
        "flush": lambda count: ok(floor_lib.floor_flush(queue, count)),
        "launch_finish": launch_finish,
        "back_to_back": lambda count: ok(
            floor_lib.floor_launches_then_finish(queue, kern, 1, *sizes, *args, count)),
        "copy_h2d": lambda count: ok(floor_lib.floor_memcpy(queue, buffer, src, nbytes)),
        "copy_d2h": lambda count: ok(floor_lib.floor_memcpy(queue, dst, buffer, nbytes)),
        "usm_alloc_free": lambda count: ok(
            floor_lib.floor_usm_alloc_free(context, device, setup.small_bytes, count)),
    }
    return Method("c", "C calling UR directly", ops, verify, keep_alive=(raw,))


def c_event_floor(setup: Setup, floor_lib) -> Method:
    """C launches that take the runtime's event of each launch and release it: what an
    Event per launch costs UR itself (``Kernel.launch``'s default)."""
    raw = RawLaunch(setup)
    queue, kern = address(setup.queue.handle), address(setup.kernel.handle)
    launch_args = (1, address(raw.global_size), address(raw.local_size), raw.num_args,
                   address(raw.args))

    def ok(result):
        ur_cffi.check(result, "C floor")

    def launch_finish(count):
        ok(floor_lib.floor_event_launch_finish(queue, kern, *launch_args, count))

    def verify():
        setup.poison()
        launch_finish(1)
        return _read_x(setup)

    ops = {"launch_finish": launch_finish,
           "back_to_back": lambda count: ok(
               floor_lib.floor_event_launches_then_finish(queue, kern, *launch_args, count))}
    same = "the same calls as the C row"
    return Method("c_event", "C calling UR, with the runtime's event of each launch", ops,
                  verify, {w: same for w in ("flush", "copy_h2d", "copy_d2h", "usm_alloc_free")},
                  keep_alive=(raw,))


def _fail(function: str):
    raise RuntimeError(f"{function} failed")


def _direct_call_ops(setup: Setup, api, null, queue, kern, launch_args: tuple,
                     copy_pointers: tuple, alloc_free) -> tuple[dict, Callable]:
    """``(ops, verify)`` of a method that calls UR's functions itself: ``api`` is cffi's
    ``lib`` or a ctypes ``CDLL``, ``null`` its null pointer, ``launch_args`` the launch's
    ``(global size, local size, argument count, arguments)``, ``copy_pointers`` ``(device
    buffer, host source, host destination)``.  Allocation differs in how the pointer comes
    back, so each method passes its own ``alloc_free``."""
    flush, finish = api.urQueueFlush, api.urQueueFinish
    launch, memcpy = api.urEnqueueKernelLaunchWithArgsExp, api.urEnqueueUSMMemcpy
    global_size, local_size, num_args, args = launch_args
    buffer, src, dst = copy_pointers
    nbytes = setup.copy_bytes

    def flush_n(count):
        for _ in range(count):
            if flush(queue):
                _fail("urQueueFlush")

    def launch_finish(count):
        for _ in range(count):
            if launch(queue, kern, 1, null, global_size, local_size, num_args, args, null, 0,
                      null, null):
                _fail("urEnqueueKernelLaunchWithArgsExp")
            if finish(queue):
                _fail("urQueueFinish")

    def back_to_back(count):
        for _ in range(count):
            if launch(queue, kern, 1, null, global_size, local_size, num_args, args, null, 0,
                      null, null):
                _fail("urEnqueueKernelLaunchWithArgsExp")
        if finish(queue):
            _fail("urQueueFinish")

    def copy(dst_ptr, src_ptr):
        if memcpy(queue, True, dst_ptr, src_ptr, nbytes, 0, null, null):
            _fail("urEnqueueUSMMemcpy")

    def verify():
        setup.poison()
        launch_finish(1)
        return _read_x(setup)

    ops = {
        "flush": flush_n,
        "launch_finish": launch_finish,
        "back_to_back": back_to_back,
        "copy_h2d": lambda count: copy(buffer, src),
        "copy_d2h": lambda count: copy(dst, buffer),
        "usm_alloc_free": alloc_free,
    }
    return ops, verify


def raw_cffi(setup: Setup) -> Method:
    """``ur_cffi.lib`` called from Python with prebuilt arguments: the bare cffi call."""
    raw = RawLaunch(setup)
    context, device = setup.context.handle, setup.device.handle
    out = ffi.new("void **")
    NULL = ffi.NULL

    def alloc_free(count):
        for _ in range(count):
            if lib.urUSMDeviceAlloc(context, device, NULL, NULL, setup.small_bytes, out):
                _fail("urUSMDeviceAlloc")
            if lib.urUSMFree(context, out[0]):
                _fail("urUSMFree")

    ops, verify = _direct_call_ops(
        setup, lib, NULL, setup.queue.handle, setup.kernel.handle,
        (raw.global_size, raw.local_size, raw.num_args, raw.args),
        (ffi.cast("void *", setup.device_buffer.data_ptr()),
         ffi.cast("void *", setup.host_src.ctypes.data),
         ffi.cast("void *", setup.host_dst.ctypes.data)), alloc_free)
    return Method("raw", "ur_cffi raw layer (lib.* from Python)", ops, verify, keep_alive=(raw,))


def wrapper(setup: Setup) -> Method:
    """The hand-written layer as a user calls it: Kernel.launch, Queue.finish/flush, USMArray."""
    queue, kern, block = setup.queue, setup.kernel, kernel.BLOCK
    args = setup.kernel_args()

    def flush_n(count):
        for _ in range(count):
            queue.flush()

    def launch_finish(count):
        for _ in range(count):
            kern.launch(queue, block, block, *args)
            queue.finish()

    def back_to_back(count):
        for _ in range(count):
            kern.launch(queue, block, block, *args)
        queue.finish()

    def alloc_free(count):
        for _ in range(count):
            ur_cffi.empty(setup.small_bytes, np.uint8, queue=queue).close()

    def verify():
        setup.poison()
        launch_finish(1)
        return _read_x(setup)

    ops = {
        "flush": flush_n,
        "launch_finish": launch_finish,
        "back_to_back": back_to_back,
        "copy_h2d": lambda count: setup.device_buffer.copy_from(setup.host_src),
        "copy_d2h": lambda count: setup.device_buffer.copy_to(setup.host_dst),
        "usm_alloc_free": alloc_free,
    }
    return Method("wrapper", "defaults: ur_cffi Kernel.launch (an Event) + Queue.finish, "
                  "USMArray, Queue.flush", ops, verify)


MEASURED_APART = ("wrapper_in_turn", "triton_in_turn")
"""Methods measured in rounds of their own, with C: interleaved with the others, the
launches on two arrays in turn slowed the one-array Triton row (its launcher's block refilled
at each switch, its specialized paths taken both ways)."""


def _in_turn_method(name: str, label: str, setup: Setup, launch) -> Method:
    """A method of ``launch(array)`` on ``x`` and another array in turn: a launch that differs
    from the one before in its array (ping-pong buffers), which the other rows, launching on
    ``x`` each time, do not measure."""
    queue, in_turn = setup.queue, (setup.x, setup.x_other)

    def launch_finish(count):
        for index in range(count):
            launch(in_turn[index & 1])
            queue.finish()

    def back_to_back(count):
        for index in range(count):
            launch(in_turn[index & 1])
        queue.finish()

    def verify():  # both arrays: x's result where the other array's is the same
        setup.poison()
        setup.x_other.fill(-1)
        launch_finish(2)
        x, other = _read_x(setup), setup.x_other.to_numpy().tolist()
        return x if other == x else other

    return Method(name, label, {"launch_finish": launch_finish, "back_to_back": back_to_back},
                  verify, {w: "launches only" for w in ("flush", "copy_h2d", "copy_d2h",
                                                        "usm_alloc_free")})


def wrapper_in_turn(setup: Setup) -> Method:
    """``Kernel.launch`` with its defaults, on two arrays in turn."""
    queue, kern, block = setup.queue, setup.kernel, kernel.BLOCK
    rest = setup.kernel_args()[1:]
    return _in_turn_method("wrapper_in_turn", "defaults: ur_cffi Kernel.launch + Queue.finish, "
                           "on two arrays in turn", setup,
                           lambda array: kern.launch(queue, block, block, array, *rest))


def lean_launch(setup: Setup) -> Method:
    """``Kernel.launch(..., event=False)`` and ``Queue.finish``: the high-level layer's fast
    path (no Event object)."""
    queue, kern, block = setup.queue, setup.kernel, kernel.BLOCK
    args = setup.kernel_args()

    def launch_finish(count):
        for _ in range(count):
            kern.launch(queue, block, block, *args, event=False)
            queue.finish()

    def back_to_back(count):
        for _ in range(count):
            kern.launch(queue, block, block, *args, event=False)
        queue.finish()

    def verify():
        setup.poison()
        ops["launch_finish"](1)
        return _read_x(setup)

    ops = {"launch_finish": launch_finish, "back_to_back": back_to_back}
    same = "the same calls as the high-level row"
    return Method("lean", "fast path: ur_cffi Kernel.launch(event=False) + Queue.finish", ops,
                  verify,
                  {w: same for w in ("flush", "copy_h2d", "copy_d2h", "usm_alloc_free")})


def _prepared_method(name: str, label: str, setup: Setup, launch) -> Method:
    """A method that calls the ``PreparedLaunch`` ``launch(event=False)``, then
    ``Queue.finish``."""
    queue = setup.queue

    def launch_finish(count):
        for _ in range(count):
            launch(event=False)
            queue.finish()

    def back_to_back(count):
        for _ in range(count):
            launch(event=False)
        queue.finish()

    def verify():
        setup.poison()
        ops["launch_finish"](1)
        return _read_x(setup)

    ops = {"launch_finish": launch_finish, "back_to_back": back_to_back}
    missing = "a prepared launch only launches"
    return Method(name, label, ops, verify,
                  {w: missing for w in ("flush", "copy_h2d", "copy_d2h", "usm_alloc_free")})


def prepared_launch(setup: Setup) -> Method:
    """``Kernel.prepare(...)`` once, then ``launch(event=False)`` and ``Queue.finish``."""
    launch = setup.kernel.prepare(setup.queue, kernel.BLOCK, kernel.BLOCK, *setup.kernel_args())
    return _prepared_method("prepared", "fast path: ur_cffi Kernel.prepare(...)(event=False) + "
                            "Queue.finish", setup, launch)


def triton_jit(setup: Setup) -> Method:
    """``kernel[grid](...)`` through ``ur_cffi.triton`` on the same queue, then
    ``Queue.finish``: what a user writes first."""
    try:
        import ur_cffi.triton as ur_triton
    except ImportError as error:
        raise Unavailable(f"ur_cffi.triton is not importable ({error})") from None
    activate = getattr(ur_triton, "activate", None)
    if activate is None:
        raise Unavailable("ur_cffi.triton has no activate(queue)")
    activate(setup.queue)
    queue, x, n, grid = setup.queue, setup.x, kernel.N, (1,)
    tiny, block, warps = kernel.tiny, kernel.BLOCK, kernel.NUM_WARPS

    def launch_finish(count):  # (kernel[grid] in the loop, as a user writes it: ur_cffi's
        for _ in range(count):  # __getitem__ runs on each call)
            tiny[grid](x, n, BLOCK=block, num_warps=warps)
            queue.finish()

    def back_to_back(count):
        for _ in range(count):
            tiny[grid](x, n, BLOCK=block, num_warps=warps)
        queue.finish()

    def verify():
        setup.poison()
        ops["launch_finish"](1)
        return _read_x(setup)

    ops = {"launch_finish": launch_finish, "back_to_back": back_to_back}
    missing = "Triton launches kernels only"
    return Method("triton", "defaults: Triton kernel[grid] via ur_cffi.triton + Queue.finish", ops,
                  verify, {w: missing for w in ("flush", "copy_h2d", "copy_d2h",
                                                "usm_alloc_free")})


def triton_in_turn(setup: Setup) -> Method:
    """``kernel[grid](...)``, on two arrays in turn."""
    triton_jit(setup)  # (ur_cffi.triton active on the setup's queue, or Unavailable)
    tiny, n, block, warps = kernel.tiny, kernel.N, kernel.BLOCK, kernel.NUM_WARPS
    return _in_turn_method("triton_in_turn", "defaults: Triton kernel[grid] via ur_cffi.triton "
                           "+ Queue.finish, on two arrays in turn", setup,
                           lambda array: tiny[(1,)](array, n, BLOCK=block, num_warps=warps))


def triton_prepared(setup: Setup) -> Method:
    """``ur_cffi.triton.prepare(kernel, grid, ...)`` once, then ``launch(event=False)``."""
    import ur_cffi.triton as ur_triton

    ur_triton.activate(setup.queue)
    launch = ur_triton.prepare(kernel.tiny, (1,), setup.x, kernel.N, BLOCK=kernel.BLOCK,
                               num_warps=kernel.NUM_WARPS)
    return _prepared_method("triton_prepared", "fast path: Triton kernel via "
                            "ur_cffi.triton.prepare(...)(event=False) + Queue.finish", setup,
                            launch)


def triton_dispatch(setup: Setup) -> Method:
    """Triton's own ``kernel[grid]`` dispatch with a launcher that does nothing: the part of
    the Triton figures that is Triton's Python, not ur_cffi's (nothing reaches the device)."""
    import ur_cffi.triton  # noqa: F401 - activated by triton_jit

    x, n, grid = setup.x, kernel.N, (1,)
    tiny, block, warps = kernel.tiny, kernel.BLOCK, kernel.NUM_WARPS

    def back_to_back(count):
        with _launcher_doing_nothing():
            for _ in range(count):
                tiny[grid](x, n, BLOCK=block, num_warps=warps)

    def verify():  # the very call, with the real launcher
        setup.poison()
        tiny[grid](x, n, BLOCK=block, num_warps=warps)
        setup.queue.finish()
        return _read_x(setup)

    missing = "a reference for Triton's own overhead: it launches nothing"
    return Method("triton_dispatch", "Triton kernel[grid] dispatch alone (launcher does nothing)",
                  {"back_to_back": back_to_back}, verify,
                  {w: missing for w in WORKLOADS if w != "back_to_back"})


def triton_dispatch_prepared(setup: Setup) -> Method:
    """Triton's ``kernel[grid]`` dispatch with a launcher that does nothing, then the
    ``ur_cffi.triton.prepare`` launch, in one loop: a prepared launch at ``kernel[grid]``'s pace.

    On the CPU device a launch costs more in a slower loop (the runtime's workers, on the same
    core, run each kernel alone instead of several together), so ``kernel[grid]`` minus the
    dispatch alone is not comparable with a prepared launch in a tight loop; it is with this."""
    import ur_cffi.triton as ur_triton

    ur_triton.activate(setup.queue)
    queue, x, n, grid = setup.queue, setup.x, kernel.N, (1,)
    tiny, block, warps = kernel.tiny, kernel.BLOCK, kernel.NUM_WARPS
    launch = ur_triton.prepare(tiny, grid, x, n, BLOCK=block, num_warps=warps)

    def back_to_back(count):
        with _launcher_doing_nothing():
            for _ in range(count):
                tiny[grid](x, n, BLOCK=block, num_warps=warps)
                launch(event=False)
        queue.finish()

    def verify():  # the prepared launch alone writes x: the dispatch launches nothing
        setup.poison()
        ops["back_to_back"](1)
        return _read_x(setup)

    ops = {"back_to_back": back_to_back}
    missing = "a reference for kernel[grid]'s launcher at its pace: back to back only"
    return Method("triton_dispatch_prepared", "Triton kernel[grid] dispatch (launcher does "
                  "nothing), then ur_cffi.triton.prepare(...)(event=False): a prepared launch "
                  "at kernel[grid]'s pace", ops, verify,
                  {w: missing for w in WORKLOADS if w != "back_to_back"})


def _launch_nothing(*args) -> None:
    return None


@contextlib.contextmanager
def _launcher_doing_nothing():
    """ur_cffi.triton's launcher replaced by one that does nothing, for the block."""
    from ur_cffi.triton.launcher import Launcher

    launcher_call = Launcher.__call__
    Launcher.__call__ = _launch_nothing
    try:
        yield
    finally:
        Launcher.__call__ = launcher_call


class _ArgProperties(ctypes.Structure):
    """``ur_exp_kernel_arg_properties_t`` by hand, as the original ctypes demo declared it."""

    _fields_ = [("stype", ctypes.c_int), ("pNext", ctypes.c_void_p), ("type", ctypes.c_int),
                ("index", ctypes.c_uint32), ("size", ctypes.c_size_t),
                ("value", ctypes.c_void_p), ("value_rest", ctypes.c_void_p)]


def ctypes_argtypes(setup: Setup) -> Method:
    """``ctypes.CDLL`` of the loader with hand-declared argtypes (the original demo's way)."""
    from ur_cffi import _libraries

    path = _libraries._first(_libraries.LOADER_SONAME)
    loader = ctypes.CDLL(str(path) if path else _libraries.LOADER_SONAME)
    P, U32, SIZE = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t
    sizes = ctypes.POINTER(SIZE)
    declared = {
        "urQueueFlush": [P],
        "urQueueFinish": [P],
        "urEnqueueKernelLaunchWithArgsExp": [P, P, U32, sizes, sizes, sizes, U32,
                                             ctypes.POINTER(_ArgProperties), P, U32, P, P],
        "urEnqueueUSMMemcpy": [P, ctypes.c_bool, P, P, SIZE, U32, P, P],
        "urUSMDeviceAlloc": [P, P, P, P, SIZE, ctypes.POINTER(P)],
        "urUSMFree": [P, P],
    }
    for name, argtypes in declared.items():
        function = getattr(loader, name)
        function.argtypes, function.restype = argtypes, ctypes.c_int

    if ctypes.sizeof(_ArgProperties) != ffi.sizeof("ur_exp_kernel_arg_properties_t"):
        raise Unavailable("ur_exp_kernel_arg_properties_t changed layout")
    enums = ur_cffi.enums
    stype = enums.ur_structure_type_t.UR_STRUCTURE_TYPE_EXP_KERNEL_ARG_PROPERTIES
    kinds = enums.ur_exp_kernel_arg_type_t
    n = ctypes.c_int32(kernel.N)
    entries = [_ArgProperties(stype, None, kinds.UR_EXP_KERNEL_ARG_TYPE_POINTER, 0,
                              ctypes.sizeof(ctypes.c_void_p),
                              setup.x.data_ptr(), None),
               _ArgProperties(stype, None, kinds.UR_EXP_KERNEL_ARG_TYPE_VALUE, 1, 4,
                              ctypes.addressof(n), None)]
    if setup.shared:
        entries.append(_ArgProperties(stype, None, kinds.UR_EXP_KERNEL_ARG_TYPE_LOCAL, 2,
                                      setup.shared, None, None))
    args = (_ArgProperties * len(entries))(*entries)
    context, device = P(address(setup.context.handle)), P(address(setup.device.handle))
    out = P()

    def alloc_free(count):
        for _ in range(count):
            if loader.urUSMDeviceAlloc(context, device, None, None, setup.small_bytes,
                                       ctypes.byref(out)):
                _fail("urUSMDeviceAlloc")
            if loader.urUSMFree(context, out):
                _fail("urUSMFree")

    ops, verify = _direct_call_ops(
        setup, loader, None, P(address(setup.queue.handle)), P(address(setup.kernel.handle)),
        ((SIZE * 1)(kernel.BLOCK), (SIZE * 1)(kernel.BLOCK), len(entries), args),
        (P(setup.device_buffer.data_ptr()), P(setup.host_src.ctypes.data),
         P(setup.host_dst.ctypes.data)), alloc_free)
    return Method("ctypes", "ctypes with argtypes", ops, verify, keep_alive=(n, args))


def dpctl_sycl(setup: Setup) -> Method:
    """dpctl (SYCL) on the same CPU OpenCL device, running the same SPIR-V."""
    try:
        import dpctl
        import dpctl.memory
        import dpctl.program
    except ImportError as error:
        raise Unavailable(f"dpctl is not installed ({error}); pip install -e '.[bench]'") \
            from None
    try:
        queue = dpctl.SyclQueue("opencl:cpu", property="in_order")
        program = dpctl.program.create_program_from_spirv(queue, setup.spirv)
        sycl_kernel = program.get_sycl_kernel(kernel.NAME)
    except Exception as error:  # dpctl raises its own SyclQueueCreationError and others
        raise Unavailable(f"dpctl cannot run the kernel here: {error}") from None
    if setup.shared:
        raise Unavailable("the kernel needs local memory, which dpctl's submit cannot pass")
    x = dpctl.memory.MemoryUSMDevice(kernel.BLOCK * 4, queue=queue)
    args = [x, ctypes.c_int32(kernel.N)]
    size = [kernel.BLOCK]
    buffer = dpctl.memory.MemoryUSMDevice(setup.copy_bytes, queue=queue)
    queue.memcpy(buffer, setup.host_src, setup.copy_bytes)
    submit, nbytes = queue.submit_async, setup.copy_bytes

    def launch_finish(count):
        for _ in range(count):
            submit(sycl_kernel, args, size, size).wait()

    def back_to_back(count):
        for _ in range(count):
            submit(sycl_kernel, args, size, size)
        queue.wait()

    def alloc_free(count):
        for _ in range(count):
            dpctl.memory.MemoryUSMDevice(setup.small_bytes, queue=queue)  # freed at once

    def verify():
        host = np.full(kernel.BLOCK, -1, np.int32)
        queue.memcpy(x, host, host.nbytes)
        launch_finish(1)
        queue.memcpy(host, x, host.nbytes)
        return host.tolist()

    ops = {
        "launch_finish": launch_finish,
        "back_to_back": back_to_back,
        "copy_h2d": lambda count: queue.memcpy(buffer, setup.host_src, nbytes),
        "copy_d2h": lambda count: queue.memcpy(setup.host_dst, buffer, nbytes),
        "usm_alloc_free": alloc_free,
    }
    return Method("dpctl", f"dpctl {dpctl.__version__} submit_async(...).wait()", ops, verify,
                  {"flush": "SYCL has no queue flush"})


# ---------------------------------------------------------------------------------------------
# Graphs: the back-to-back launches recorded once, replayed with one enqueue and a finish


def _graph_method(name: str, label: str, setup: Setup, record) -> Method:
    """A method whose back-to-back workload replays a graph of ``count`` launches (made once
    per count by ``record(count)``, which returns what replays it) and finishes (blocking)."""
    queue, graphs = setup.queue, {}

    def back_to_back(count):
        replay = graphs.get(count)
        if replay is None:
            replay = graphs[count] = record(count)
        replay()
        queue.finish()

    def verify():
        setup.poison()
        ops["back_to_back"](1)
        return _read_x(setup)

    ops = {"back_to_back": back_to_back}
    missing = "a graph replays the back-to-back launches"
    return Method(name, label, ops, verify, {w: missing for w in WORKLOADS if w != "back_to_back"},
                  keep_alive=(graphs,))


def _native_graphs(setup: Setup) -> None:
    supported, _, why = ur_cffi.graph.command_buffer_support(setup.device)
    if not supported:
        raise Unavailable(why)


def graph_raw(setup: Setup) -> Method:
    """A UR command buffer of the launches made with the raw layer, replayed with
    ``urEnqueueCommandBufferExp``: the floor for graphs."""
    _native_graphs(setup)
    if not hasattr(lib, "urCommandBufferAppendKernelLaunchWithArgsExp"):
        raise Unavailable("this UR has no urCommandBufferAppendKernelLaunchWithArgsExp")
    raw = RawLaunch(setup)
    queue, kern, NULL = setup.queue.handle, setup.kernel.handle, ffi.NULL
    enums = ur_cffi.enums

    def record(count):
        desc = ffi.new("ur_exp_command_buffer_desc_t *", {
            "stype": enums.ur_structure_type_t.UR_STRUCTURE_TYPE_EXP_COMMAND_BUFFER_DESC,
            "isInOrder": True})
        out = ffi.new("ur_exp_command_buffer_handle_t *")
        ur_cffi.check(lib.urCommandBufferCreateExp(setup.context.handle, setup.device.handle,
                                                   desc, out), "urCommandBufferCreateExp")
        buffer = out[0]
        setup.graphs.append(lambda: lib.urCommandBufferReleaseExp(buffer))
        for _ in range(count):
            ur_cffi.check(lib.urCommandBufferAppendKernelLaunchWithArgsExp(
                buffer, kern, 1, NULL, raw.global_size, raw.local_size, raw.num_args, raw.args,
                0, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL),
                "urCommandBufferAppendKernelLaunchWithArgsExp")
        ur_cffi.check(lib.urCommandBufferFinalizeExp(buffer), "urCommandBufferFinalizeExp")

        def replay():
            if lib.urEnqueueCommandBufferExp(queue, buffer, 0, NULL, NULL):
                _fail("urEnqueueCommandBufferExp")
        return replay

    return _graph_method("graph_raw", "graph: UR command buffer, raw layer "
                         "(urEnqueueCommandBufferExp), blocking finish", setup, record)


def _recorded(setup: Setup, native: bool | None, launch):
    """``record(count)`` for :func:`_graph_method`: a ``ur_cffi.Graph`` of ``count`` calls of
    ``launch()`` recorded on the setup's queue."""

    def record(count):
        graph = ur_cffi.Graph(setup.context, native=native)
        setup.graphs.append(graph.close)
        with graph.recording(setup.queue):
            for _ in range(count):
                launch()
        graph.finalize()
        return lambda: graph.replay(setup.queue, event=False)

    return record


def graph_launch(setup: Setup) -> Method:
    """``Kernel.launch`` calls recorded into a ``ur_cffi.Graph``, replayed."""
    _native_graphs(setup)
    queue, kern, block, args = setup.queue, setup.kernel, kernel.BLOCK, setup.kernel_args()
    return _graph_method(
        "graph", "graph: ur_cffi.Graph of Kernel.launch calls, replay(event=False), blocking "
        "finish", setup,
        _recorded(setup, None, lambda: kern.launch(queue, block, block, *args, event=False)))


def graph_triton(setup: Setup) -> Method:
    """Triton ``kernel[grid]`` calls recorded into a ``ur_cffi.Graph``, replayed."""
    _native_graphs(setup)
    import ur_cffi.triton as ur_triton

    ur_triton.activate(setup.queue)
    jit, x, n = kernel.tiny[(1,)], setup.x, kernel.N
    return _graph_method(
        "graph_triton", "graph: ur_cffi.Graph of Triton kernel[grid] calls, replay(event=False), "
        "blocking finish", setup,
        _recorded(setup, None, lambda: jit(x, n, BLOCK=kernel.BLOCK, num_warps=kernel.NUM_WARPS)))


def graph_one_by_one(setup: Setup) -> Method:
    """The same graph of ``Kernel.launch`` calls made with ``native=False``: a replay
    enqueues the launches one by one (what a device without command buffers gets)."""
    queue, kern, block, args = setup.queue, setup.kernel, kernel.BLOCK, setup.kernel_args()
    return _graph_method(
        "graph_one_by_one", "graph: ur_cffi.Graph(native=False) of Kernel.launch calls, replayed "
        "one by one, blocking finish", setup,
        _recorded(setup, False, lambda: kern.launch(queue, block, block, *args, event=False)))
