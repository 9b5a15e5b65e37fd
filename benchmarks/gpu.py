"""``python -m benchmarks.gpu``: ur_cffi on a CUDA GPU against CuPy, Triton's own launcher and
Triton on torch, with the same interleaved harness as ``make bench`` (``harness.measure``).

Launch paths all run one cubin: ``benchmarks/kernel.py``'s one-warp kernel, compiled once by
Triton's NVIDIA backend through ur_cffi.triton.  Copies move 256 MiB from pageable (numpy)
and pinned (USM host / ``cupyx.empty_pinned``) memory.  The vector add moves 3 GiB (two 1 GiB
inputs, one output) against CuPy's copy kernel on 1 GiB (2 GiB moved); the fp16 matmul
(8192^3) is the same compiled kernel launched by ur_cffi.triton and by Triton's own
``CudaLauncher``.  Every ur_cffi row runs with the library's default waits (a wait for work
measured short is UR's blocking call; ``ur_cffi._durations``).  After the measurement each
method runs once more on poisoned memory and its output is compared: a wrong one voids its
verdicts and the exit status is 1.  Verdicts are medians of per-round ratios.

torch is imported here, before ur_cffi.triton is activated, for the Triton-on-torch method
(so that Triton's specializer knows torch tensors); the test suite checks ur_cffi itself
never imports it.  A method that cannot run says why.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import triton
import triton.language as tl

from . import harness, kernel

RESULTS = Path(__file__).resolve().parent / "results"
COPY_BYTES = 256 << 20
VECTOR_ELEMENTS = 1 << 28  # float32: 1 GiB per array
MATMUL = 8192


class Method:
    def __init__(self, name: str, label: str):
        self.name, self.label, self.ops, self.notes = name, label, {}, {}
        self.verify = None  # () -> problems (strings), after the measurement


def _all_succeeded(results: list) -> None:
    """Raise unless every UR call of a raw sample returned UR_RESULT_SUCCESS (0)."""
    if any(results):
        from ur_cffi.enums import ur_result_t

        bad = next(result for result in results if result)
        raise RuntimeError("a raw launch or finish returned "
                           f"{ur_result_t(bad).name if bad in ur_result_t._value2member_map_ else bad}")


def _launch_check(method: Method, poison, read) -> None:
    """Give ``method`` a ``verify`` that runs each of its launch workloads once on poisoned
    ``x`` and compares what the kernel wrote with ``kernel.expected()``."""
    def verify():
        problems = []
        for workload in ("back_to_back", "launch_wait"):
            if workload in method.ops:
                poison()
                method.ops[workload](1)
                got = [int(v) for v in read()[:kernel.N]]
                if got != kernel.expected():
                    problems.append(f"{workload}: x[:{kernel.N}] = {got[:4]}..., not "
                                    f"{kernel.expected()[:4]}...")
        return problems

    _also_check(method, verify)


def _also_check(method: Method, check) -> None:
    """Run ``check`` (``() -> problems``) after what ``method`` verifies already."""
    before = method.verify

    def verify():
        return (before() if before is not None else []) + check()

    method.verify = verify


def _workloads(quick: bool) -> list[harness.Workload]:
    scale = 10 if quick else 1
    copy = COPY_BYTES // scale
    return [
        harness.Workload("back_to_back", "launch back-to-back (us per launch)", "us",
                         200 // scale, 3),
        harness.Workload("launch_wait", "launch + wait (us)", "us", 50 // scale, 3),
        harness.Workload("h2d_pageable", "pageable host to device (GB/s)", "GB/s", 1, 3, copy),
        harness.Workload("d2h_pageable", "device to pageable host (GB/s)", "GB/s", 1, 3, copy),
        harness.Workload("h2d_pinned", "pinned host to device (GB/s)", "GB/s", 1, 3, copy),
        harness.Workload("d2h_pinned", "device to pinned host (GB/s)", "GB/s", 1, 3, copy),
        harness.Workload("stream", "vector add 1 GiB / copy kernel (GB/s)", "GB/s", 5, 2,
                         3 * 4 * VECTOR_ELEMENTS // scale),
        harness.Workload("matmul", f"fp16 matmul {MATMUL}^3 (TFLOP/s)", "GB/s", 3, 2,
                         2 * MATMUL ** 3 // 1000 // (scale ** 3)),  # "GB/s" of kFLOP = TFLOP/s
    ]


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
             + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def _matmul_kernel():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_gpu import matmul_fp16  # one kernel for the test and the figures

    return matmul_fp16


class GPU:
    """What every method shares: the UR device, queue, compiled kernels and sizes."""

    def __init__(self, quick: bool):
        import ur_cffi
        import ur_cffi.triton

        self.quick = quick
        self.device = ur_cffi.default_device()
        self.context = self.device.create_context()
        self.queue = ur_cffi.Queue(self.context, self.device)
        ur_cffi.triton.activate(self.queue)
        self.x = ur_cffi.zeros(kernel.BLOCK, np.int32, queue=self.queue)
        self.tiny = kernel.tiny[(1,)](self.x, kernel.N, BLOCK=kernel.BLOCK,
                                      num_warps=kernel.NUM_WARPS)
        self.queue.finish()
        self.cubin = self.tiny.asm["cubin"]
        self.cubin_path = Path(tempfile.mkdtemp()) / "tiny.cubin"
        self.cubin_path.write_bytes(self.cubin)
        self.program = ur_cffi.Program.from_binary(self.context, self.cubin)
        self.kernel = self.program.kernel(kernel.NAME)
        self.scratch = [np.uint64(0)] * (self.kernel.num_args - 2)
        self.elements = VECTOR_ELEMENTS // (10 if quick else 1)
        self.matmul_size = MATMUL // (10 if quick else 1)
        self.triton = triton
        self.notes: dict[str, str] = {}


def ur_methods(gpu: GPU) -> list[Method]:
    import ur_cffi
    import ur_cffi.triton
    from ur_cffi import _compat, ffi, lib

    q, k, x = gpu.queue, gpu.kernel, gpu.x
    n = np.int32(kernel.N)
    finish, qh = lib.urQueueFinish, q.handle
    prepared = k.prepare(q, kernel.BLOCK, kernel.BLOCK, x, n, *gpu.scratch)
    kh, (head, _) = k.handle, prepared._call_args
    call_args = (*head, 0, ffi.NULL, ffi.NULL)
    launch = _compat.enqueue_launch
    grid, tiny, block, warps = (1,), kernel.tiny, kernel.BLOCK, kernel.NUM_WARPS
    tprepared = ur_cffi.triton.prepare(tiny, grid, x, kernel.N, BLOCK=block, num_warps=warps)

    raw = Method("raw", "ur_cffi raw layer (lib.urEnqueueKernelLaunchWithArgsExp)")
    raw.ops["back_to_back"] = lambda c: _all_succeeded(
        [launch(qh, kh, *call_args) for _ in range(c)] + [finish(qh)])
    raw.ops["launch_wait"] = lambda c: _all_succeeded(
        [launch(qh, kh, *call_args) or finish(qh) for _ in range(c)])

    # The same with an event out, released at once: what an Event per launch costs in UR.
    out = ffi.new("ur_event_handle_t *")
    with_event = (*head, 0, ffi.NULL, out)
    release = lib.urEventRelease

    def raw_event_launches(count, each):
        results = []
        for _ in range(count):
            results.append(launch(qh, kh, *with_event))
            if results[-1]:  # (no event out)
                break
            release(out[0])
            if each:
                results.append(finish(qh))
        if not each:
            results.append(finish(qh))
        _all_succeeded(results)

    raw_event = Method("raw_event", "ur_cffi raw layer, an event per launch (released)")
    raw_event.ops["back_to_back"] = lambda c: raw_event_launches(c, False)
    raw_event.ops["launch_wait"] = lambda c: raw_event_launches(c, True)

    # Triton's own kernel[grid] dispatch with ur_cffi's launcher doing nothing.
    from ur_cffi.triton.launcher import Launcher

    launcher_call = Launcher.__call__

    def dispatch_only(count):
        Launcher.__call__ = lambda *args: None
        try:
            for _ in range(count):
                tiny[grid](x, kernel.N, BLOCK=block, num_warps=warps)
        finally:
            Launcher.__call__ = launcher_call

    dispatch = Method("triton_dispatch", "Triton kernel[grid] dispatch alone (launcher does "
                                         "nothing)")
    dispatch.ops["back_to_back"] = dispatch_only

    defaults = Method("defaults", "defaults: ur_cffi Kernel.launch (an Event) + Queue.finish")

    def with_defaults(count, each):
        for _ in range(count):
            k.launch(q, block, block, x, n, *gpu.scratch)
            if each:
                q.finish()
        if not each:
            q.finish()

    defaults.ops["back_to_back"] = lambda c: with_defaults(c, False)
    defaults.ops["launch_wait"] = lambda c: with_defaults(c, True)

    lean = Method("launch", "fast path: ur_cffi Kernel.launch(event=False)")
    scratch = gpu.scratch
    lean.ops["back_to_back"] = lambda c: ([k.launch(q, block, block, x, n, *scratch, event=False)
                                           for _ in range(c)], q.finish())
    lean.ops["launch_wait"] = lambda c: [(k.launch(q, block, block, x, n, *scratch, event=False),
                                          q.finish()) for _ in range(c)]

    prep = Method("prepared", "fast path: ur_cffi Kernel.prepare(...)(event=False)")
    prep.ops["back_to_back"] = lambda c: ([prepared(event=False) for _ in range(c)], q.finish())
    prep.ops["launch_wait"] = lambda c: [(prepared(event=False), q.finish()) for _ in range(c)]

    jit = Method("triton", "defaults: Triton kernel[grid] via ur_cffi.triton")
    jit.ops["back_to_back"] = lambda c: ([tiny[grid](x, kernel.N, BLOCK=block, num_warps=warps)
                                          for _ in range(c)], q.finish())
    jit.ops["launch_wait"] = lambda c: [(tiny[grid](x, kernel.N, BLOCK=block, num_warps=warps),
                                         q.finish()) for _ in range(c)]

    tprep = Method("triton_prepared", "fast path: Triton kernel via "
                                      "ur_cffi.triton.prepare(...)(event=False)")
    tprep.ops["back_to_back"] = lambda c: ([tprepared(event=False) for _ in range(c)],
                                           q.finish())
    tprep.ops["launch_wait"] = lambda c: [(tprepared(event=False), q.finish()) for _ in range(c)]

    def dispatch_then_prepared(count):  # a prepared launch at kernel[grid]'s pace
        Launcher.__call__ = lambda *args: None
        try:
            for _ in range(count):
                tiny[grid](x, kernel.N, BLOCK=block, num_warps=warps)
                tprepared(event=False)
        finally:
            Launcher.__call__ = launcher_call
        q.finish()

    paced = Method("triton_dispatch_prepared", "Triton kernel[grid] dispatch (launcher does "
                   "nothing), then ur_cffi.triton.prepare(...)(event=False)")
    paced.ops["back_to_back"] = dispatch_then_prepared

    # Copies: pageable numpy memory and pinned USM host memory.
    nbytes = COPY_BYTES // (10 if gpu.quick else 1)
    device_buffer = ur_cffi.empty(nbytes, np.uint8, queue=q)
    pageable = np.ones(nbytes, np.uint8)
    pinned = ur_cffi.empty(nbytes, np.uint8, queue=q, kind="host")
    pinned.fill(1)
    lean.ops["h2d_pageable"] = lambda c: [device_buffer.copy_from(pageable) for _ in range(c)]
    lean.ops["d2h_pageable"] = lambda c: [device_buffer.copy_to(pageable) for _ in range(c)]
    lean.ops["h2d_pinned"] = lambda c: [device_buffer.copy_from(pinned) for _ in range(c)]
    lean.ops["d2h_pinned"] = lambda c: [device_buffer.copy_to(pinned) for _ in range(c)]

    gpu.keep = (device_buffer, pinned, prepared, tprepared)
    poison = lambda: x.fill(-1)  # noqa: E731
    for method in (raw, raw_event, defaults, prep, jit, tprep, paced):
        _launch_check(method, poison, x.to_numpy)
    _launch_check(lean, poison, x.to_numpy)
    pinned_view = np.asarray(pinned)

    def copies_verified():
        problems = []
        for value, (workload, source, target) in enumerate((
                ("h2d_pageable", pageable, None), ("d2h_pageable", None, pageable),
                ("h2d_pinned", pinned_view, None), ("d2h_pinned", None, pinned_view)), 7):
            if source is None:
                device_buffer.fill(value)
                target.fill(0)
            else:
                source.fill(value)
                device_buffer.fill(0)
            q.finish()
            lean.ops[workload](1)
            q.finish()
            written = device_buffer.to_numpy() if target is None else target
            if not (written == value).all():
                problems.append(f"{workload}: the copy left bytes other than {value}")
        pageable.fill(1)
        pinned_view.fill(1)
        return problems

    _also_check(lean, copies_verified)
    try:
        _ur_bandwidth(gpu, jit)
    except Exception as error:  # noqa: BLE001 - reported with the figures
        gpu.notes["ur vector add"] = f"{type(error).__name__}: {error}"
    try:
        _ur_matmul(gpu, jit)
    except Exception as error:  # noqa: BLE001
        gpu.notes["ur matmul"] = f"{type(error).__name__}: {error}"
    return [raw, raw_event, defaults, lean, prep, jit, tprep, dispatch, paced]


def _ur_bandwidth(gpu: GPU, jit: Method) -> None:
    """The Triton vector add on 1 GiB arrays through ur_cffi.triton."""
    import ur_cffi

    q, count = gpu.queue, gpu.elements
    vx = ur_cffi.empty(count, np.float32, queue=q)
    vy = ur_cffi.empty(count, np.float32, queue=q)
    vo = ur_cffi.empty(count, np.float32, queue=q)
    vx.fill(1.0)
    vy.fill(2.0)
    vgrid = (triton.cdiv(count, 4096),)
    gpu.vector_add_compiled = vector_add[vgrid](vx, vy, vo, count, BLOCK=4096)
    q.finish()
    if not (vo.to_numpy()[:: 1 << 20] == 3.0).all():
        raise AssertionError("the vector add gave wrong results")
    jit.ops["stream"] = lambda c: ([vector_add[vgrid](vx, vy, vo, count, BLOCK=4096)
                                    for _ in range(c)], q.finish())
    gpu.keep += (vx, vy, vo)
    def verified():
        vo.fill(np.nan)
        jit.ops["stream"](1)
        return _filled_problems("vector add", vo.to_numpy(), 3.0)

    _also_check(jit, verified)


def _ur_matmul(gpu: GPU, jit: Method) -> None:
    """The fp16 matmul through ur_cffi.triton."""
    import ur_cffi

    q, size = gpu.queue, gpu.matmul_size
    matmul = _matmul_kernel()
    ma = ur_cffi.asarray(np.random.default_rng(0).standard_normal((size, size))
                         .astype(np.float16), queue=q)
    mb = ur_cffi.asarray(np.random.default_rng(1).standard_normal((size, size))
                         .astype(np.float16), queue=q)
    mc = ur_cffi.empty((size, size), np.float16, queue=q)
    mgrid = (triton.cdiv(size, 128) * triton.cdiv(size, 256),)
    margs = (ma, mb, mc, size, size, size, size, size, size)
    mopts = dict(BM=128, BN=256, BK=64, GROUP=8, num_warps=8, num_stages=3)
    gpu.matmul_compiled = matmul[mgrid](*margs, **mopts)
    q.finish()
    jit.ops["matmul"] = lambda c: ([matmul[mgrid](*margs, **mopts) for _ in range(c)],
                                   q.finish())
    gpu.keep += (ma, mb, mc)
    def verified():
        mc.fill(np.nan)
        jit.ops["matmul"](1)
        return _matmul_problems(ma.to_numpy(), mb.to_numpy(), mc.to_numpy())

    _also_check(jit, verified)


def _matmul_problems(a, b, c) -> list[str]:
    """``c`` (poisoned with NaN before the launch) against ``a @ b`` in float64: no NaN left,
    and its first and last four rows."""
    if np.isnan(c).any():
        return [f"matmul: {np.isnan(c).sum()} of {c.size} elements not written"]
    rows = np.r_[0:4, len(c) - 4:len(c)]
    reference = a[rows].astype(np.float64) @ b.astype(np.float64)
    if np.allclose(c[rows].astype(np.float64), reference, rtol=1e-2, atol=0.5):
        return []
    return [f"matmul: rows {list(rows)} differ from float64 numpy by up to "
            f"{np.abs(c[rows] - reference).max():.3g}"]


def _filled_problems(what: str, values, expected: float) -> list[str]:
    """``values`` (poisoned before the launch) all ``expected``?"""
    if (values == expected).all():
        return []
    return [f"{what}: {(values != expected).sum()} of {values.size} elements not {expected}"]


def cupy_methods(gpu: GPU) -> list[Method]:
    import cupy
    import cupyx

    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()
    module = cupy.RawModule(path=str(gpu.cubin_path))
    function = module.get_function(kernel.NAME)
    x = cupy.zeros(kernel.BLOCK, np.int32)
    args = (x, np.int32(kernel.N), *gpu.scratch)
    block = (kernel.BLOCK,)
    sync = stream.synchronize
    method = Method("cupy", f"CuPy {cupy.__version__} RawModule (same cubin)")
    method.ops["back_to_back"] = lambda c: ([function((1,), block, args) for _ in range(c)],
                                            sync())
    method.ops["launch_wait"] = lambda c: [(function((1,), block, args), sync())
                                           for _ in range(c)]
    nbytes = COPY_BYTES // (10 if gpu.quick else 1)
    device_buffer = cupy.empty(nbytes, np.uint8)
    pageable = np.ones(nbytes, np.uint8)
    pinned = cupyx.empty_pinned(nbytes, np.uint8)
    pinned[:] = 1
    # set()/get() are asynchronous on the current stream for pinned memory: wait for each.
    method.ops["h2d_pageable"] = lambda c: [(device_buffer.set(pageable), sync())
                                            for _ in range(c)]
    method.ops["d2h_pageable"] = lambda c: [(device_buffer.get(out=pageable), sync())
                                            for _ in range(c)]
    method.ops["h2d_pinned"] = lambda c: [(device_buffer.set(pinned), sync()) for _ in range(c)]
    method.ops["d2h_pinned"] = lambda c: [(device_buffer.get(out=pinned), sync())
                                          for _ in range(c)]
    # CuPy's copy kernel on 1 GiB moves 2 GiB; reported per 3 GiB like the add, so scale.
    source = cupy.ones(gpu.elements, np.float32)
    target = cupy.empty(gpu.elements, np.float32)

    def copies(count):
        for _ in range(count):
            cupy.copyto(target, source)
        sync()

    method.ops["stream"] = copies
    method.notes["stream"] = "copy kernel: 2 bytes moved per 3 of the add (scaled below)"
    _launch_check(method, lambda: (x.fill(-1), cupy.cuda.Device().synchronize()), x.get)
    def verified():
        target.fill(np.nan)
        copies(1)
        return _filled_problems("copy kernel", target.get(), 1.0)

    _also_check(method, verified)
    gpu.cupy_keep = (x, device_buffer, pinned, source, target, stream, module)
    return [method]


def triton_own_methods(gpu: GPU) -> list[Method]:
    """Triton's own CudaLauncher and CUDA module loading, for the same compiled kernels."""
    import cupy
    from triton.backends.nvidia.driver import CudaLauncher, CudaUtils

    utils = CudaUtils()
    stream = cupy.cuda.Stream(non_blocking=True)
    sync = stream.synchronize
    method = Method("triton_own", "Triton's own launcher (CudaLauncher, same cubin)")

    def loaded(compiled):
        _, function, *_ = utils.load_binary(compiled.metadata.name, compiled.asm["cubin"],
                                            compiled.metadata.shared,
                                            cupy.cuda.Device().id)
        return CudaLauncher(compiled.src, compiled.metadata), function

    launcher, function = loaded(gpu.tiny)
    x = cupy.zeros(kernel.BLOCK, np.int32)
    meta = gpu.tiny.packed_metadata
    head = (1, 1, 1, stream.ptr, function, meta, None, None, None)
    tail = (x.data.ptr, kernel.N, kernel.BLOCK)
    method.ops["back_to_back"] = lambda c: ([launcher(*head, *tail) for _ in range(c)], sync())
    method.ops["launch_wait"] = lambda c: [(launcher(*head, *tail), sync()) for _ in range(c)]
    _launch_check(method, lambda: (x.fill(-1), cupy.cuda.Device().synchronize()), x.get)

    if getattr(gpu, "matmul_compiled", None) is None:
        gpu.own_keep = (x, stream)
        return [method]
    m_launcher, m_function = loaded(gpu.matmul_compiled)
    size = gpu.matmul_size
    a = cupy.random.standard_normal((size, size)).astype(np.float16)
    b = cupy.random.standard_normal((size, size)).astype(np.float16)
    c_out = cupy.empty((size, size), np.float16)
    grid = gpu.triton.cdiv(size, 128) * gpu.triton.cdiv(size, 256)
    m_head = (grid, 1, 1, stream.ptr, m_function, gpu.matmul_compiled.packed_metadata, None,
              None, None)
    m_tail = (a.data.ptr, b.data.ptr, c_out.data.ptr, size, size, size, size, size, size,
              128, 256, 64, 8)
    method.ops["matmul"] = lambda c: ([m_launcher(*m_head, *m_tail) for _ in range(c)], sync())
    def verified():
        c_out.fill(np.nan)
        cupy.cuda.Device().synchronize()
        method.ops["matmul"](1)
        return _matmul_problems(a.get(), b.get(), c_out.get())

    _also_check(method, verified)

    if getattr(gpu, "vector_add_compiled", None) is None:
        gpu.own_keep = (x, a, b, c_out, stream)
        return [method]
    v_launcher, v_function = loaded(gpu.vector_add_compiled)
    count = gpu.elements
    vx, vy = cupy.ones(count, np.float32), cupy.ones(count, np.float32)
    vo = cupy.empty(count, np.float32)
    v_head = (gpu.triton.cdiv(count, 4096), 1, 1, stream.ptr, v_function,
              gpu.vector_add_compiled.packed_metadata, None, None, None)
    v_tail = (vx.data.ptr, vy.data.ptr, vo.data.ptr, count, 4096)
    method.ops["stream"] = lambda c: ([v_launcher(*v_head, *v_tail) for _ in range(c)], sync())
    def verified():
        vo.fill(np.nan)
        cupy.cuda.Device().synchronize()
        method.ops["stream"](1)
        return _filled_problems("vector add", vo.get(), 2.0)

    _also_check(method, verified)
    gpu.own_keep = (x, a, b, c_out, vx, vy, vo, stream)
    return [method]


def torch_methods(gpu: GPU) -> list[Method]:
    """Triton's JIT on torch tensors with Triton's stock driver (swapped in per sample)."""
    import torch  # the benchmark's, never ur_cffi's
    import triton
    from triton.backends.nvidia.driver import CudaDriver

    config = triton.runtime.driver
    stock = CudaDriver()
    ours = config._active
    x = torch.zeros(kernel.BLOCK, dtype=torch.int32, device="cuda")
    sync = torch.cuda.synchronize
    tiny, grid = kernel.tiny, (1,)

    def swapped(run):
        def sample(count):
            config._active = stock
            try:
                run(count)
            finally:
                config._active = ours
        return sample

    def launches(count, each):
        for _ in range(count):
            tiny[grid](x, kernel.N, BLOCK=kernel.BLOCK, num_warps=kernel.NUM_WARPS)
            if each:
                sync()
        if not each:
            sync()

    method = Method("triton_torch", f"Triton JIT on torch {torch.__version__} tensors")
    method.ops["back_to_back"] = swapped(lambda c: launches(c, False))
    method.ops["launch_wait"] = swapped(lambda c: launches(c, True))
    _launch_check(method, lambda: (x.fill_(-1), sync()), lambda: x.tolist())
    gpu.torch_keep = (x, stock)
    return [method]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 rounds")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 20)
    started = time.perf_counter()
    try:  # before ur_cffi.triton: Triton's specializer then knows torch tensors (_no_torch)
        import torch  # noqa: F401 - for the Triton-on-torch method only
    except ImportError:
        pass
    gpu = GPU(args.quick)
    methods, skipped = [], {}
    for factory in (ur_methods, cupy_methods, triton_own_methods, torch_methods):
        try:
            methods += factory(gpu)
        except Exception as error:  # noqa: BLE001 - a method that cannot run says why
            skipped[factory.__name__] = f"{type(error).__name__}: {error}"
    workloads = _workloads(args.quick)
    times = harness.measure(methods, workloads, rounds)
    labels = {m.name: m.label for m in methods}
    figures = {}
    for workload in workloads:
        row = {}
        for name, values in times[workload.name].items():
            if values:
                figure = workload.figure(statistics.median(values))
                if workload.name == "stream" and name == "cupy":
                    figure *= 2 / 3  # its copy moves 2 of the add's 3 bytes per element
                row[name] = figure
        figures[workload.name] = row
    print(f"\n{gpu.device.name}, UR {gpu.device.backend.name}, Triton {gpu.triton.__version__}, "
          f"{datetime.date.today()}, {rounds} rounds, {time.perf_counter() - started:.0f} s")
    header = "| method | " + " | ".join(w.title for w in workloads) + " |"
    print(header + "\n" + "|---" * (len(workloads) + 1) + "|")
    for method in methods:
        cells = []
        for workload in workloads:
            value = figures[workload.name].get(method.name)
            cells.append("-" if value is None else f"{value:.2f}")
        print(f"| {method.label} | " + " | ".join(cells) + " |")
    for name, reason in {**skipped, **gpu.notes}.items():
        print(f"not measured: {name}: {reason}")
    wrong = {}
    for method in methods:
        if method.verify is not None:
            try:
                problems = method.verify()
            except Exception as error:  # noqa: BLE001 - reported as a wrong result
                problems = [f"{type(error).__name__}: {error}"]
            if problems:
                wrong[method.name] = problems
    for name, problems in wrong.items():
        print(f"WRONG RESULTS, figures void: {labels[name]}: {'; '.join(problems)}")
    checked = sorted(m.name for m in methods if m.verify is not None and m.name not in wrong)
    print(f"results checked after the measurement (poisoned, then run once): "
          f"{', '.join(checked)}")
    print(_verdicts(figures, times, wrong))
    path = args.json or RESULTS / f"gpu-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"device": gpu.device.name, "rounds": rounds, "labels": labels,
                                "figures": figures, "times": times, "skipped": skipped,
                                "wrong_results": wrong}, indent=1))
    print(f"json: {path}")
    return 1 if wrong else 0


def _verdicts(figures: dict, times: dict, wrong: dict) -> str:
    """Each target's verdict, on the median of the per-round ratios (both methods measured in
    the same round: drift between rounds cancels), with the figures beside it; void where a
    method gave wrong results."""
    lines = ["\ntargets (verdicts on the median per-round ratio):"]

    void = set()

    def ratio(workload, method, reference, scale=1.0):
        """Median over rounds of ``method``'s time / ``reference``'s, times ``scale``."""
        per_round = harness.ratios(times.get(workload, {}), method, reference)
        void.clear()
        void.update(name for name in (method, reference) if name in wrong)
        return statistics.median(per_round) * scale if per_round else None

    def check(text, value, ok):
        verdict = "VOID (wrong results)" if void else "pass" if ok(value) else "MISS"
        lines.append(f"- {text} (ratio {value:.3f}): {verdict}")

    for workload in ("back_to_back", "launch_wait"):
        row = figures.get(workload, {})
        for name in ("raw", "defaults", "launch", "prepared", "triton", "triton_prepared"):
            value = ratio(workload, name, "cupy")
            if value is not None:
                check(f"{workload} {name} {row[name]:.2f} us <= CuPy {row['cupy']:.2f} us",
                      value, lambda r: r <= 1)
        value = ratio(workload, "triton", "triton_torch")
        if value is not None:
            check(f"{workload} kernel[grid] {row['triton']:.2f} us < Triton-on-torch "
                  f"{row['triton_torch']:.2f} us", value, lambda r: r < 1)
    row = figures.get("back_to_back", {})
    if "triton" in row and "triton_dispatch_prepared" in row:
        lines.append(f"- (no target) kernel[grid]'s launcher costs "
                     f"{row['triton'] - row['triton_dispatch_prepared']:.2f} us more than a "
                     "prepared launch after the same dispatch")
    # Bandwidths: ur_cffi's GB/s over the reference's is the reference's time over ours.
    for workload in ("h2d_pinned", "d2h_pinned"):
        row, value = figures.get(workload, {}), ratio(workload, "cupy", "launch")
        if value is not None:
            check(f"{workload} {row['launch']:.1f} GB/s within 10% of CuPy {row['cupy']:.1f}",
                  value, lambda r: r >= 0.9)
    row, value = figures.get("stream", {}), ratio("stream", "cupy", "triton", 3 / 2)
    if value is not None:  # (CuPy's copy moves 2 of the add's 3 bytes: its figure is scaled)
        check(f"vector add {row['triton']:.0f} GB/s within 10% of CuPy's copy "
              f"{row['cupy']:.0f} GB/s", value, lambda r: r >= 0.9)
    row, value = figures.get("matmul", {}), ratio("matmul", "triton_own", "triton")
    if value is not None:
        check(f"matmul {row['triton']:.0f} TFLOP/s within 5% of Triton's own driver "
              f"{row['triton_own']:.0f}", value, lambda r: r >= 0.95)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
