"""The GPU suite: ur_cffi and ur_cffi.triton on a non-CPU UR device (UR's CUDA adapter on an
NVIDIA H200 where it was run; ``scripts/gpu_check.sh`` builds and runs it there).

Skipped, with the reason, where UR lists no GPU.  Real asynchrony, with no sleeps: a kernel
that runs ~0.1 s followed at once by a read, an event wait, a queue finish and
``device.synchronize()``, each exact; chains of launches in flight on in-order and
out-of-order queues with wait lists; dependencies across queues; arrays freed while work that
uses them is queued; several threads.  Kernels from cubin and PTX whose adapter reports no
argument count (``ur_cffi.signatures``); Triton's JIT, ``prepare``, ``do_bench`` and
``@triton.autotune`` through the NVIDIA backend, including more than 48 KiB of dynamic shared
memory and global scratch memory.  torch is installed there and is not blocked: nothing here
may import it (checked at the end, and in a fresh process).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ur_cffi
from ur_cffi.enums import ur_event_status_t, ur_kernel_info_t

GPUS = ur_cffi.devices("gpu")
pytestmark = pytest.mark.skipif(
    not GPUS, reason="UR lists no GPU device here; this suite needs a GPU "
                     "adapter, e.g. UR's CUDA adapter: scripts/gpu_check.sh")

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
ur_triton = pytest.importorskip("ur_cffi.triton")

from concurrency import run_in_threads  # noqa: E402
from kernels import add, lcg_reference, lcg_steps, scale  # noqa: E402
from ur_cffi.info import query  # noqa: E402
from ur_cffi.triton import abi, backend, cuda  # noqa: E402

TORCH_BEFORE = "torch" in sys.modules
COMPLETE = ur_event_status_t.UR_EVENT_STATUS_COMPLETE
SCALE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32", "BLOCK": "constexpr"}


@triton.jit
def matmul_fp16(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP * num_n
    first_m = (pid // group) * GROUP
    size_m = min(num_m - first_m, GROUP)
    pid_m = first_m + ((pid % group) % size_m)
    pid_n = (pid % group) // size_m
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(tl.float16),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def descriptor_scale(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # Tensor descriptors made on the device: Triton 3.6 gives this kernel global scratch.
    x = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    y = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    y.store([m, n], x.load([m, n]) * 2.0)


@triton.jit
def small_scalars(out_ptr, h, b, flag, i):
    tl.store(out_ptr + 0, h.to(tl.float32))
    tl.store(out_ptr + 1, b.to(tl.float32))
    tl.store(out_ptr + 2, flag.to(tl.float32))
    tl.store(out_ptr + 3, i.to(tl.float32))


@pytest.fixture(scope="module")
def gpu():
    return GPUS[0]


@pytest.fixture(scope="module")
def gctx(gpu):
    with gpu.create_context() as context:
        yield context


@pytest.fixture(scope="module")
def gq(gctx, gpu):
    """The in-order profiling queue ur_cffi.triton launches on in this module."""
    with ur_cffi.Queue(gctx, gpu, profiling=True) as queue:
        ur_triton.activate(queue)
        yield queue
        ur_triton.deactivate()
    assert "torch" not in sys.modules or TORCH_BEFORE, "ur_cffi or Triton imported torch"


@pytest.fixture
def q2(gctx, gpu):
    with ur_cffi.Queue(gctx, gpu) as queue:
        yield queue


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture(scope="module")
def long_steps(gq):
    """LCG steps for a kernel of about 0.1 s on this GPU (measured with profiling events)."""
    x = ur_cffi.asarray(np.arange(4096, dtype=np.int32), queue=gq)
    y = ur_cffi.empty(4096, np.int32, queue=gq)
    steps = 1 << 20
    lcg_steps[(4,)](x, y, 4096, steps, BLOCK=1024)  # compile first
    gq.finish()
    lcg_steps[(4,)](x, y, 4096, steps + 2, BLOCK=1024)
    event = ur_triton.last_event()
    event.wait()
    seconds = max(event.end_ns - event.start_ns, 1) / 1e9
    return min(int((steps + 2) * 0.1 / seconds), 2**31 - 1) | 2  # even, never 1 (constexpr)


def launch_long(queue, steps, n=4096):
    """A long LCG kernel on ``queue``: ``(x on host, y, its Event)``."""
    host = np.random.default_rng().integers(-2**31, 2**31, n, dtype=np.int32)
    x = ur_cffi.asarray(host, queue=queue)
    y = ur_cffi.empty(n, np.int32, queue=queue)
    y.fill(0)
    with ur_triton.using(queue):
        lcg_steps[(triton.cdiv(n, 1024),)](x, y, n, steps, BLOCK=1024)
        event = ur_triton.last_event()
    return host, x, y, event


# --- the device, the target, kernels whose adapter cannot count their arguments -------------

def test_device_and_target(gpu):
    assert ur_cffi.signatures.backend_name(gpu) == "CUDA"
    assert backend.triton_backend(gpu) == "nvidia"
    target = backend.gpu_target(gpu)
    assert target.backend == "cuda" and target.arch >= 70 and target.warp_size == 32
    assert gpu.synchronize_uses_device_wait in (True, None)
    print(f"{gpu.name}: sm_{target.arch}, Triton {triton.__version__}")


@pytest.mark.parametrize("form", ["cubin", "ptx"])
def test_kernel_from_binary_counts_from_the_binary(gq, gctx, gpu, rng, form):
    compiled = ur_triton.compile(scale, SCALE, {"BLOCK": 1024}, device=gpu)
    binary = compiled.asm["cubin"] if form == "cubin" else compiled.asm["ptx"].encode()
    program = ur_cffi.Program.from_binary(gctx, binary)
    assert program.kernel_names == ["scale"]
    kernel = program.kernel("scale")
    scratch = abi.current("nvidia").scratch_pointers
    # The adapter itself says 0 (it counts arguments set so far); the binary says 4 + scratch.
    assert query("urKernelGetInfo", kernel.handle, ur_kernel_info_t.UR_KERNEL_INFO_NUM_ARGS) == 0
    assert (kernel.num_args, kernel.argument_source) == (4 + scratch, "binary")
    n = 10_000
    x = rng.standard_normal(n).astype(np.float32)
    dx, dy = ur_cffi.asarray(x, queue=gq), ur_cffi.empty(n, np.float32, queue=gq)
    nulls = [np.uint64(0)] * scratch
    blocks = triton.cdiv(n, 1024)
    local = compiled.metadata.num_warps * 32
    kernel.launch(gq, blocks * local, local, dx, dy, np.float32(3.0), np.int32(n), *nulls)
    np.testing.assert_array_equal(dy.to_numpy(), x * np.float32(3.0))
    with pytest.raises(TypeError, match="4 bytes in the binary, got 8"):
        kernel.launch(gq, blocks * local, local, dx, dy, np.float64(3.0), np.int32(n), *nulls)
    with pytest.raises(TypeError, match=f"takes {4 + scratch} arguments, 4 given"):
        kernel.launch(gq, blocks * local, local, dx, dy, np.float32(3.0), np.int32(n))
    declared = program.kernel("scale", signature=("ptr", "ptr", "float32", "int32")
                              + ("ptr",) * scratch)
    declared.launch(gq, blocks * local, local, dx, dy, 2.0, n, *[0] * scratch)
    np.testing.assert_array_equal(dy.to_numpy(), x * np.float32(2.0))
    with pytest.raises(ValueError, match="signature declares 4 arguments"):
        program.kernel("scale", signature=("ptr", "ptr", "float32", "int32"))


def test_small_scalars_take_the_kernels_widths(gq, gctx, gpu):
    signature = {"out_ptr": "*fp32", "h": "fp16", "b": "bf16", "flag": "i1", "i": "i32"}
    compiled = ur_triton.compile(small_scalars, signature, device=gpu)
    kernel = ur_cffi.Program.from_binary(gctx, compiled.asm["cubin"]).kernel("small_scalars")
    assert kernel.argument_sizes[1:4] == (2, 2, 1)
    out = ur_cffi.empty(4, np.float32, queue=gq)
    scratch = [np.uint64(0)] * abi.current("nvidia").scratch_pointers
    local = compiled.metadata.num_warps * 32
    kernel.launch(gq, local, local, out, np.float16(1.5), np.uint16(abi.bfloat16_bits(-2.5)),
                  np.int8(1), np.int32(-7), *scratch)
    np.testing.assert_array_equal(out.to_numpy(), [1.5, -2.5, 1.0, -7.0])
    # The same through Triton's JIT, which passes them by the launch rules.
    small_scalars[(1,)](out, 0.75, 3.0, False, 12)  # Python floats: fp32 (JIT's choice)
    np.testing.assert_array_equal(out.to_numpy(), [0.75, 3.0, 0.0, 12.0])


# --- asynchrony ------------------------------------------------------------------------------

def test_read_right_after_a_long_kernel(gq, long_steps):
    host, _, y, event = launch_long(gq, long_steps)
    assert event.status != COMPLETE  # the launch returned while the kernel runs
    np.testing.assert_array_equal(y.to_numpy(), lcg_reference(host, long_steps))


def test_event_wait_then_read_elsewhere(gq, q2, long_steps):
    host, _, y, event = launch_long(gq, long_steps)
    assert event.status != COMPLETE
    event.wait()
    np.testing.assert_array_equal(y.to_numpy(queue=q2), lcg_reference(host, long_steps))


def test_queue_finish_then_read_elsewhere(gq, q2, long_steps):
    host, _, y, event = launch_long(gq, long_steps)
    assert event.status != COMPLETE
    gq.finish()
    assert event.status == COMPLETE
    np.testing.assert_array_equal(y.to_numpy(queue=q2), lcg_reference(host, long_steps))


def test_device_synchronize_then_read_elsewhere(gq, q2, gpu, long_steps):
    host, _, y, event = launch_long(gq, long_steps)
    assert event.status != COMPLETE
    gpu.synchronize()
    assert event.status == COMPLETE
    np.testing.assert_array_equal(y.to_numpy(queue=q2), lcg_reference(host, long_steps))


CHAIN, CHAIN_STEPS = 64, 1001


def chain(queue, host, ordered_by_events):
    """``CHAIN`` LCG launches ping-ponging between two arrays, none waited for on the host."""
    a = ur_cffi.asarray(host, queue=queue)
    b = ur_cffi.empty(host.size, np.int32, queue=queue)
    events = []
    for index in range(CHAIN):
        src, dst = (a, b) if index % 2 == 0 else (b, a)
        wait = events[-1:] if ordered_by_events else ()
        with ur_triton.using(queue, wait_for=wait):
            lcg_steps[(triton.cdiv(host.size, 1024),)](src, dst, host.size, CHAIN_STEPS,
                                                       BLOCK=1024)
            events.append(ur_triton.last_event())
    return a, events


def test_many_kernels_in_flight_in_order(gq, rng):
    host = rng.integers(-2**31, 2**31, 100_000, dtype=np.int32)
    a, events = chain(gq, host, ordered_by_events=False)
    np.testing.assert_array_equal(a.to_numpy(), lcg_reference(host, CHAIN * CHAIN_STEPS))


def test_many_kernels_in_flight_out_of_order_with_wait_lists(gctx, gpu, rng):
    host = rng.integers(-2**31, 2**31, 100_000, dtype=np.int32)
    with ur_cffi.Queue(gctx, gpu, out_of_order=True) as queue:
        a, events = chain(queue, host, ordered_by_events=True)
        events[-1].wait()
        np.testing.assert_array_equal(a.to_numpy(wait_for=[events[-1]]),
                                      lcg_reference(host, CHAIN * CHAIN_STEPS))


def test_dependency_across_queues(gq, q2, long_steps, rng):
    host, _, y, event = launch_long(gq, long_steps)
    out = ur_cffi.empty(host.size, np.int32, queue=q2)
    with ur_triton.using(q2, wait_for=[event]):
        lcg_steps[(4,)](y, out, host.size, 2, BLOCK=1024)
    assert event.status != COMPLETE
    np.testing.assert_array_equal(out.to_numpy(), lcg_reference(host, long_steps + 2))


def test_arrays_freed_while_work_is_queued(gq, long_steps, rng):
    host, x, y, event = launch_long(gq, long_steps)
    temporary = ur_cffi.empty(host.size, np.int32, queue=gq)
    with ur_triton.using(gq):
        lcg_steps[(4,)](y, temporary, host.size, 2, BLOCK=1024)
        lcg_steps[(4,)](temporary, y, host.size, 2, BLOCK=1024)
    assert event.status != COMPLETE
    x.close()  # its kernel is still running: the free waits for the queue
    temporary.close()
    del x, temporary
    np.testing.assert_array_equal(y.to_numpy(), lcg_reference(host, long_steps + 4))


def test_several_threads(gctx, gpu, gq, rng):
    n, rounds, failures = 50_000, 40, []
    warm = [ur_cffi.zeros(n, np.float32, queue=gq) for _ in range(3)]
    add[(triton.cdiv(n, 1024),)](*warm, n, BLOCK=1024)  # compiled once, before the threads
    gq.finish()

    def work(seed):
        local_rng = np.random.default_rng(seed)
        try:
            with ur_cffi.Queue(gctx, gpu) as queue, ur_triton.using(queue):
                x = local_rng.standard_normal(n).astype(np.float32)
                y = local_rng.standard_normal(n).astype(np.float32)
                dx, dy = ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)
                out = ur_cffi.empty(n, np.float32, queue=queue)
                launch = ur_triton.prepare(add, (triton.cdiv(n, 1024),), dx, dy, out, n,
                                           BLOCK=1024)
                for index in range(rounds):
                    if index % 2:
                        launch(event=False)
                    else:
                        add[(triton.cdiv(n, 1024),)](dx, dy, out, n, BLOCK=1024)
                    dx.copy_from(out, blocking=False)
                    x = x + y
                np.testing.assert_array_equal(dx.to_numpy(), x)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    run_in_threads(work, 8)
    assert not failures, failures


# --- Triton on the GPU -----------------------------------------------------------------------

def test_jit_prepare_do_bench_autotune(gq, rng):
    n = 1_000_003
    x = rng.standard_normal(n).astype(np.float32)
    dx, dy = ur_cffi.asarray(x, queue=gq), ur_cffi.empty(n, np.float32, queue=gq)
    scale[(triton.cdiv(n, 1024),)](dx, dy, 4.0, n, BLOCK=1024)
    np.testing.assert_array_equal(dy.to_numpy(), x * np.float32(4.0))
    launch = ur_triton.prepare(scale, (triton.cdiv(n, 1024),), dx, dy, 5.0, n, BLOCK=1024)
    launch(event=False)
    np.testing.assert_array_equal(dy.to_numpy(), x * np.float32(5.0))
    ms = triton.testing.do_bench(lambda: scale[(triton.cdiv(n, 1024),)](dx, dy, 4.0, n,
                                                                        BLOCK=1024))
    assert ms > 0 and np.isfinite(ms)  # a time, measured on UR events (not asserted)
    dy.fill(np.nan)
    scale[(triton.cdiv(n, 1024),)](dx, dy, 4.0, n, BLOCK=1024)
    np.testing.assert_array_equal(dy.to_numpy(), x * np.float32(4.0))

    @triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2),
                              triton.Config({"BLOCK": 1024}, num_warps=4)], key=["n"])
    @triton.jit
    def tuned_scale(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)

    tuned_scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](dx, dy, 6.0, n)
    assert tuned_scale.best_config.kwargs["BLOCK"] in (256, 1024)
    np.testing.assert_array_equal(dy.to_numpy(), x * np.float32(6.0))


def test_matmul_with_more_than_48_kib_of_shared_memory(gq, rng):
    M = N = K = 1024
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    da, db = ur_cffi.asarray(a, queue=gq), ur_cffi.asarray(b, queue=gq)
    dc = ur_cffi.empty((M, N), np.float16, queue=gq)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 256),)
    compiled = matmul_fp16[grid](da, db, dc, M, N, K, K, N, N, BM=128, BN=256, BK=64, GROUP=8,
                                 num_warps=8, num_stages=3)
    assert compiled.metadata.shared > 48 * 1024
    reference = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(dc.to_numpy().astype(np.float32), reference, rtol=2e-2,
                               atol=0.15)


def test_global_scratch_is_device_memory(gq, gctx, gpu, rng):
    M, N = 256, 512
    x = rng.standard_normal((M, N)).astype(np.float32)
    dx, dy = ur_cffi.asarray(x, queue=gq), ur_cffi.empty((M, N), np.float32, queue=gq)
    compiled = descriptor_scale[(M // 64, N // 64)](dx, dy, M, N, BM=64, BN=64)
    if compiled.metadata.global_scratch_size == 0:
        pytest.skip(f"Triton {triton.__version__} gave this kernel no global scratch")
    np.testing.assert_array_equal(dy.to_numpy(), x * 2)
    with ur_cffi.Queue(gctx, gpu, out_of_order=True) as queue, ur_triton.using(queue):
        dy.fill(np.nan, queue=queue)
        descriptor_scale[(M // 64, N // 64)](dx, dy, M, N, BM=64, BN=64)
        ur_triton.last_event().wait()
    np.testing.assert_array_equal(dy.to_numpy(), x * 2)
    launch = ur_triton.prepare(descriptor_scale, (M // 64, N // 64), dx, dy, M, N, BM=64, BN=64)
    dy.fill(np.nan)
    launch()
    np.testing.assert_array_equal(dy.to_numpy(), x * 2)


def test_a_graph_keeps_scratch_memory_of_its_own(gq, gctx, rng):
    """A recorded launch used the queue's shared global scratch, which a larger launch then
    replaced and freed: replays wrote into memory the allocator had given to other arrays.
    An update to a larger grid kept the recorded launch's scratch size as well."""
    M, N, BM, BN = 256, 512, 64, 64
    x = rng.standard_normal((M, N)).astype(np.float32)
    dx, dy = ur_cffi.asarray(x, queue=gq), ur_cffi.empty((M, N), np.float32, queue=gq)
    graph = ur_cffi.Graph(gctx)
    with graph.recording(gq):
        compiled = descriptor_scale[(1, 2)](dx, dy, BM, 2 * BN, BM=BM, BN=BN)
    size = compiled.metadata.global_scratch_size
    if size == 0:
        graph.close()
        pytest.skip(f"Triton {triton.__version__} gave this kernel no global scratch")
    align = compiled.metadata.global_scratch_align
    descriptor_scale[(M // BM, N // BN)](dx, dy, M, N, BM=BM, BN=BN)  # (a larger scratch)
    gq.finish()
    # The size the queue's shared scratch had for the recorded grid: its memory, given back.
    others = [ur_cffi.full(2 * (2 * size + align), 7, np.uint8, queue=gq) for _ in range(4)]
    launch = graph.commands[0]
    for grid, rows, columns in (((1, 2), BM, 2 * BN), ((M // BM, N // BN), M, N)):
        launch.update(M=rows, N=columns, grid=grid)
        dy.fill(np.nan)
        graph.replay(gq).wait()
        count = rows * columns  # (a rows x columns matrix at the arrays' start)
        np.testing.assert_array_equal(dy.to_numpy().ravel()[:count], x.ravel()[:count] * 2)
        assert all((other.to_numpy() == 7).all() for other in others)
    graph.close()


def test_clusters_are_refused_clearly(gq):
    x = ur_cffi.empty(1024, np.float32, queue=gq)
    with pytest.raises(NotImplementedError, match="num_ctas=2"):
        scale[(1,)](x, x, 1.0, 1024, BLOCK=1024, num_ctas=2)


def test_an_adapter_specific_error_says_what_the_adapter_said(gq, gctx, gpu):
    """UR_RESULT_ERROR_ADAPTER_SPECIFIC's reason is the adapter's, read with
    urAdapterGetLastError: the error said only the code.  A local argument past the device's
    local memory gets one from the CUDA adapter (Kernel.launch refuses it before UR does)."""
    from ur_cffi import _compat, errors, ffi
    from ur_cffi.queue import enqueue_lock

    compiled = ur_triton.compile(scale, SCALE, {"BLOCK": 1024}, device=gpu)
    kernel = ur_cffi.Program.from_binary(gctx, compiled.asm["cubin"]).kernel("scale")
    count = 4 + abi.current("nvidia").scratch_pointers
    y = ur_cffi.empty(1024, np.float32, queue=gq)
    a, n = ffi.new("float *", 2.0), ffi.new("int32_t *", 1024)
    _, arguments, words = _compat.new_arguments(count)
    _compat.write_argument(words, 0, _compat.LOCAL, gpu.local_mem_size + 1)
    _compat.write_argument(words, 1, _compat.POINTER, 8, y.data_ptr())
    _compat.write_argument(words, 2, _compat.VALUE, 4, int(ffi.cast("uintptr_t", a)))
    _compat.write_argument(words, 3, _compat.VALUE, 4, int(ffi.cast("uintptr_t", n)))
    for index in range(4, count):
        _compat.write_argument(words, index, _compat.POINTER, 8, 0)
    local = compiled.metadata.num_warps * 32
    with enqueue_lock:
        result = _compat.enqueue_launch(
            gq.handle, kernel.handle, 1, ffi.NULL, _compat.launch_sizes((local,), 1),
            _compat.launch_sizes((local,), 1), count, arguments, _compat.launch_properties(),
            0, ffi.NULL, ffi.NULL)
    with pytest.raises(errors.AdapterSpecificError,
                       match="adapter's last message .*: 'Excessive allocation of local "
                             "memory"):
        errors.check(result, _compat.LAUNCH)


def test_torch_is_never_imported(tmp_path):
    """A fresh process runs the Triton path (JIT, prepare, do_bench) with torch importable."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import triton, triton.language as tl
        import ur_cffi, ur_cffi.triton

        @triton.jit
        def double(x_ptr, n, BLOCK: tl.constexpr):
            o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) * 2, mask=o < n)

        queue = ur_cffi.triton.activate()
        x = ur_cffi.asarray(np.arange(1000, dtype=np.float32), queue=queue)
        double[(1,)](x, 1000, BLOCK=1024)
        ur_cffi.triton.prepare(double, (1,), x, 1000, BLOCK=1024)(event=False)
        assert (x.to_numpy() == np.arange(1000) * 4).all()
        x.fill(0.0)
        triton.testing.do_bench(lambda: double[(1,)](x, 1000, BLOCK=1024), warmup=1, rep=5)
        print("torch" in sys.modules)
    """)
    path = tmp_path / "torch_check.py"  # Triton reads @jit sources from their file
    path.write_text(script)
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                            env=dict(os.environ), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "False"
    import importlib.util

    print(f"torch installed: {importlib.util.find_spec('torch') is not None}")


def test_a_context_closed_before_its_memory_pool_is_released():
    """Where the adapter has UR USM pools (CUDA does), the caching allocator's pool holds its
    own reference on the context: the CUDA adapter destroys a context's pools with the context,
    and a pool released after that is freed twice (glibc aborts the process)."""
    script = textwrap.dedent("""
        import numpy as np
        import ur_cffi
        device = ur_cffi.default_device()
        context = device.create_context()
        queue = ur_cffi.Queue(context, device)
        x = np.random.default_rng().standard_normal(4096).astype(np.float32)
        array = ur_cffi.asarray(x, queue=queue)
        assert np.array_equal(array.to_numpy(), x)
        array.close()
        queue.close()
        context.close()
        ur_cffi.empty_cache()
        print("done")  # the pool is released at exit, after its context
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "done"
