"""ur_cffi.triton: Triton's JIT compiling for and launching on a ur_cffi queue, without torch.

In this process ``torch`` is blocked (``sys.modules["torch"] = None``: any import raises
ImportError) for the whole module, and Triton's cache is a per-session directory, so CI starts
cold and later tests reuse earlier compiles.  ``test_end_to_end_in_fresh_processes`` runs the
whole path in subprocesses that also block torch, and checks the second process reuses the
compiled kernels.  Every launch check uses fresh random inputs, NaN-poisoned outputs, float64
numpy references and sizes that are not multiples of the block.
"""

import contextlib
import ctypes
import json
import os
import re
import subprocess
import sys
import textwrap
from decimal import Decimal

import numpy as np
import pytest

import crash_probe
import ur_cffi
from ur_cffi import _compat
from ur_cffi.enums import ur_event_status_t

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
ur_triton = pytest.importorskip("ur_cffi.triton")

from ur_cffi.triton import programs  # noqa: E402
from concurrency import run_in_threads  # noqa: E402
from kernels import (  # noqa: E402
    add,
    add_2d,
    axpy_int64,
    layer_norm,
    lcg_reference,
    lcg_steps,
    matmul,
    mixed_scalars,
    program_ids,
    scale,
    scale_addresses,
    scale_with_default_block,
    softmax,
    tuple_add,
    tuple_axpy,
    twelve_args,
)

TRITON_3_3 = pytest.mark.skipif(
    not triton.__version__.startswith("3.3."),
    reason="Triton 3.3's internals (triton-xpu: triton.testing, triton.runtime.build, "
           "CompiledKernel hooks); test_gpu.py runs do_bench and autotune on Triton 3.6")


pytestmark = pytest.mark.usefixtures("torch_blocked")  # conftest.py
COMPLETE = ur_event_status_t.UR_EVENT_STATUS_COMPLETE


@pytest.fixture(scope="module")
def tq(context, device):
    """The in-order profiling queue ur_cffi.triton launches on in this module."""
    with ur_cffi.Queue(context, device, profiling=True) as queue:
        ur_triton.activate(queue)
        yield queue
        ur_triton.deactivate()


def poisoned(shape, queue, dtype=np.float32):
    out = ur_cffi.empty(shape, dtype, queue=queue)
    out.fill(np.nan)
    return out


def random32(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- end to end, in fresh processes ---------------------------------------------------------

END_TO_END = textwrap.dedent("""
    import importlib.abc, json, sys

    class BlockTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"{name} is blocked in this test")

    sys.meta_path.insert(0, BlockTorch())
    import numpy as np
    import triton
    import triton.language as tl
    import ur_cffi
    import ur_cffi.triton
    from ur_cffi.triton import programs

    @triton.jit
    def scale(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * a, mask=mask)

    from triton.backends import backends
    import triton.runtime.build

    intel_globals = backends["intel"].compiler.__init__.__globals__
    originals = (triton.runtime.driver.active, intel_globals["compile_module_from_src"],
                 triton.runtime.build.is_xpu, triton.testing.Event)
    queue = ur_cffi.triton.activate()
    rng = np.random.default_rng()
    n = int(sys.argv[1])
    host = rng.standard_normal(n).astype(np.float32)
    x = ur_cffi.asarray(host, queue=queue)
    y = ur_cffi.empty(n, np.float32, queue=queue)
    y.fill(np.nan)
    scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, 2.5, n, BLOCK=256)
    event = ur_cffi.triton.last_event()
    queue.finish()
    error = float(np.max(np.abs(y.to_numpy() - 2.5 * host.astype(np.float64))))
    deactivate = sys.argv[2:] != ["--exit-active"]
    if deactivate:  # else leave it active: interpreter exit must release everything cleanly
        ur_cffi.triton.deactivate()
    now = (triton.runtime.driver.active, intel_globals["compile_module_from_src"],
           triton.runtime.build.is_xpu, triton.testing.Event)
    print(json.dumps({
        "error": error,
        "event_complete": event.status.name,
        "stats": programs.stats,
        "restored": all(a is b for a, b in zip(now, originals)) if deactivate else None,
        "torch": "torch" in sys.modules,
    }))
""")


def run_end_to_end(script, cache_dir, *args, validation=False):
    # A file, not `python -c`: Triton reads the kernel's source from it.  With validation, UR
    # reports leaks at exit and ur_cffi then exits with a non-zero status.
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache_dir),
               UR_CFFI_VALIDATION="1" if validation else "0")
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.cpu_device("the SPIR-V and native-binary caches of the Intel backend, under UR's "
                        "leak checker")
def test_end_to_end_in_fresh_processes(tmp_path, rng, validation_layer_report):
    """Compile and launch with torch unimportable; the second process reuses both Triton's
    compiled SPIR-V and ur_cffi's native binary (no SPIR-V build), and exits with
    ur_cffi.triton still active under UR's leak checker.

    Both processes get the same random ``n``: Triton specializes an integer argument on its
    divisibility by 16, so two draws could compile two kernels and the cache would rightly
    miss."""
    script = tmp_path / "end_to_end.py"
    script.write_text(END_TO_END)
    cache = tmp_path / "cache"
    n = str(int(rng.integers(1000, 3000)))
    first = run_end_to_end(script, cache, n)
    assert first["error"] < 1e-5
    assert first["event_complete"] == "UR_EVENT_STATUS_COMPLETE"
    assert first["restored"] and not first["torch"]
    assert first["stats"]["from_il"] == 1 and first["stats"]["from_binary"] == 0
    # Where UR's leak checker misreports a correct raw program (oneAPI 2025.0's does), its
    # verdict on ur_cffi would mean nothing: the second process then runs without it.
    sound = not validation_layer_report
    if not sound:
        assert "nonexistent handle" in validation_layer_report, validation_layer_report
    second = run_end_to_end(script, cache, n, "--exit-active", validation=sound)
    assert second["error"] < 1e-5 and not second["torch"]
    assert second["stats"]["from_il"] == 0 and second["stats"]["from_binary"] == 1, second


# --- launches --------------------------------------------------------------------------------


def test_scale_with_raw_addresses(tq, rng):
    """The original demo: device addresses as int64, cast to pointers inside the kernel."""
    n = int(rng.integers(2000, 5000))
    host = random32(rng, n)
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    scale_addresses[(triton.cdiv(n, 1024),)](x.data_ptr(), y.data_ptr(), 10.0, n,
                                             BLOCK=1024)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 10.0 * host.astype(np.float64), rtol=1e-6)


def test_scale_with_typed_arrays(tq, rng):
    n = int(rng.integers(2000, 5000))
    host = random32(rng, n)
    a = float(rng.uniform(-4, 4))
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    scale[(triton.cdiv(n, 512),)](x, y, a, n, BLOCK=512)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), np.float32(a) * host.astype(np.float64),
                               rtol=1e-6)


def test_vector_add_event_and_device_synchronize(tq, device, rng):
    """The launch's Event and Device.synchronize() both order it."""
    n = int(rng.integers(3000, 9000))
    xh, yh = random32(rng, n), random32(rng, n)
    x, y = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq)
    out = poisoned(n, tq)
    add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    event = ur_triton.last_event()
    assert isinstance(event, ur_cffi.Event) and event is ur_triton.last_event()
    event.wait()
    assert event.status == ur_cffi.enums.ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert event.elapsed_ns >= 0  # a profiling queue: the launch has device timestamps
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + yh, rtol=1e-6)

    out.fill(np.nan)
    add[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    device.synchronize()
    assert ur_triton.last_event().status == \
        ur_cffi.enums.ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + yh, rtol=1e-6)


def test_fused_softmax(tq, rng):
    rows, cols = int(rng.integers(20, 60)), int(rng.integers(300, 1000))
    host = random32(rng, (rows, cols)) * 4
    x, y = ur_cffi.asarray(host, queue=tq), poisoned((rows, cols), tq)
    softmax[(rows,)](y, x, cols, cols, cols, BLOCK=triton.next_power_of_2(cols))
    tq.finish()
    reference = np.exp(host.astype(np.float64) - host.max(axis=1, keepdims=True))
    reference /= reference.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.to_numpy(), reference, rtol=1e-5, atol=1e-7)


@pytest.mark.cpu_device("Triton's Intel backend takes shared memory as an argument; "
                        "test_gpu.py runs a matmul on CUDA")
def test_matmul_with_dot_uses_shared_memory(tq, rng):
    """tl.dot needs work-group local memory: the launch appends it as a local argument."""
    m, n, k = (int(v) for v in rng.integers(33, 90, size=3))
    ah, bh = random32(rng, (m, k)), random32(rng, (k, n))
    a, b, c = ur_cffi.asarray(ah, queue=tq), ur_cffi.asarray(bh, queue=tq), poisoned((m, n), tq)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))  # noqa: E731
    compiled = matmul[grid](a, b, c, m, n, k, k, 1, n, 1, n, 1, BM=32, BN=32, BK=32)
    tq.finish()
    assert compiled.metadata.shared > 0
    passed = [t for t in compiled.src.signature.values() if t != "constexpr"]
    assert compiled.function.num_args == len(passed) + 1  # then the local memory
    np.testing.assert_allclose(c.to_numpy(), ah.astype(np.float64) @ bh, rtol=1e-4,
                               atol=1e-4)


def test_layer_norm_forward(tq, rng):
    rows, cols = int(rng.integers(10, 40)), int(rng.integers(200, 700))
    xh = random32(rng, (rows, cols)) * 3 + 1
    wh, bh = random32(rng, cols), random32(rng, cols)
    x, w, b = (ur_cffi.asarray(v, queue=tq) for v in (xh, wh, bh))
    y, mean, rstd = poisoned((rows, cols), tq), poisoned(rows, tq), poisoned(rows, tq)
    eps = 1e-5
    layer_norm[(rows,)](x, y, w, b, mean, rstd, cols, cols, eps,
                        BLOCK=triton.next_power_of_2(cols))
    tq.finish()
    x64 = xh.astype(np.float64)
    mean_ref = x64.mean(axis=1)
    rstd_ref = 1 / np.sqrt(x64.var(axis=1) + eps)
    y_ref = (x64 - mean_ref[:, None]) * rstd_ref[:, None] * wh + bh
    np.testing.assert_allclose(mean.to_numpy(), mean_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd.to_numpy(), rstd_ref, rtol=1e-4)
    np.testing.assert_allclose(y.to_numpy(), y_ref, rtol=1e-4, atol=1e-4)


def test_two_dimensional_grid(tq, rng):
    rows, cols = int(rng.integers(40, 100)), int(rng.integers(40, 100))
    xh, yh = random32(rng, (rows, cols)), random32(rng, (rows, cols))
    x, y = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq)
    out = poisoned((rows, cols), tq)
    add_2d[(triton.cdiv(rows, 16), triton.cdiv(cols, 32))](x, y, out, rows, cols, BR=16, BC=32)
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + 2 * yh.astype(np.float64),
                               rtol=1e-6)


@pytest.mark.parametrize("style", ["tuple", "callable"])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_grid_as_tuple_or_callable(tq, rng, style, dims):
    shape = tuple(int(v) for v in rng.integers(2, 7, size=dims)) + (1,) * (3 - dims)
    nx, ny, nz = shape
    out = ur_cffi.empty(nx * ny * nz, np.int32, queue=tq)
    out.fill(-1)
    grid = shape[:dims]
    if style == "callable":
        grid = lambda meta, grid=grid: grid  # noqa: E731
    program_ids[grid](out, nx, ny)
    tq.finish()
    z, y, x = np.meshgrid(range(nz), range(ny), range(nx), indexing="ij")
    np.testing.assert_array_equal(out.to_numpy().reshape(nz, ny, nx), x + 1000 * y + 1000000 * z)


def test_int32_int64_fp16_fp64_and_every_scalar_type(tq, rng):
    """Scalars of every width the ABI knows, through triton.compile with an explicit
    signature (the JIT itself only makes i32/i64/u64/i1/fp32 from Python values)."""
    from triton.compiler import ASTSource

    signature = {"out_ptr": "*fp64", "i": "i32", "j": "i64", "h": "fp16", "d": "fp64",
                 "flag": "i1", "small": "i8", "wide": "i16", "half": "u16", "bf": "bf16",
                 "f": "fp32", "big": "u64"}
    compiled = triton.compile(ASTSource(mixed_scalars, signature, {}, {}),
                              target=ur_triton.active_driver().get_current_target())
    values = [int(rng.integers(-2**31, 2**31)), int(rng.integers(-2**62, 2**62)),
              float(np.float16(rng.uniform(-100, 100))), float(rng.standard_normal()) * 1e200,
              bool(rng.integers(2)), int(rng.integers(-128, 128)),
              int(rng.integers(-2**15, 2**15)), int(rng.integers(0, 2**16)),
              1.5 + int(rng.integers(0, 64)) / 64, float(np.float32(rng.standard_normal())),
              int(rng.integers(2**63, 2**64 - 1, dtype=np.uint64))]
    out = poisoned(11, tq, np.float64)
    compiled[(1, 1, 1)](out, *values)
    tq.finish()
    expected = np.array([float(v) for v in values])
    np.testing.assert_array_equal(out.to_numpy(), expected)
    for name, position, bad in (("flag", 4, 2), ("bf", 8, 3.4e38)):
        wrong = list(values)
        wrong[position] = bad
        with pytest.raises(TypeError, match=f"argument '{name}' of kernel 'mixed_scalars'"):
            compiled[(1, 1, 1)](out, *wrong)
    values[8] = 1 + 2**-8 + 2**-30  # rounded once: 1 + 2**-7, not 1.0
    out.fill(np.nan)
    compiled[(1, 1, 1)](out, *values)
    tq.finish()
    assert out.to_numpy()[8] == 1 + 2**-7
    # Each type's extremes (the random u16 above is past 32767 in half the runs only).
    extremes = [-2**31, -2**63, 65504.0, -1.7e308, True, -128, -2**15, 2**16 - 1, 2.0**127,
                -3.4028234663852886e38, 2**64 - 1]
    out.fill(np.nan)
    compiled[(1, 1, 1)](out, *extremes)
    tq.finish()
    np.testing.assert_array_equal(out.to_numpy(), np.array([float(v) for v in extremes]))


def test_int64_annotation_and_large_ints(tq, rng):
    n = int(rng.integers(1000, 3000))
    xh = random32(rng, n)
    x, y = ur_cffi.asarray(xh, queue=tq), poisoned(n, tq)
    offset = int(rng.integers(2, 50))
    axpy_int64[(triton.cdiv(n, 256),)](x, y, 0.5, offset, n, BLOCK=256)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 0.5 * xh.astype(np.float64) + offset, rtol=1e-6)
    kernels = axpy_int64.device_caches[ur_triton.active_driver().get_current_device()][0]
    assert any(k.src.signature["offset"] == "i64" for k in kernels.values())


def test_a_dozen_arguments(tq, rng):
    n = int(rng.integers(1000, 3000))
    hosts = [random32(rng, n) for _ in range(4)]
    arrays = [ur_cffi.asarray(h, queue=tq) for h in hosts]
    shift = int(rng.integers(2, 9))
    out = poisoned(n + shift, tq)
    ka, kb, kc, kd, bias = (float(np.float32(v)) for v in rng.standard_normal(5))
    twelve_args[(triton.cdiv(n, 128),)](*arrays, out, ka, kb, kc, kd, bias, n, shift, BLOCK=128)
    tq.finish()
    expected = sum(k * h.astype(np.float64) for k, h in zip((ka, kb, kc, kd), hosts)) + bias
    result = out.to_numpy()
    assert np.isnan(result[:shift]).all()
    np.testing.assert_allclose(result[shift:], expected, rtol=1e-5, atol=1e-5)


def test_tuple_argument(tq, rng):
    n = int(rng.integers(1000, 3000))
    xh, yh = random32(rng, n), random32(rng, n)
    x, y, out = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq), poisoned(n, tq)
    tuple_add[(triton.cdiv(n, 256),)]((x, y, out), n, BLOCK=256)
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + yh, rtol=1e-6)


def test_a_constexpr_tuple_beside_a_tuple_of_pointers(tq, rng):
    """The launcher flattened every tuple among the arguments, constexpr ones too, where the
    signature keeps those whole: "takes 5 arguments (constexprs included), 6 given"."""
    n = int(rng.integers(1000, 3000))
    xh, yh = random32(rng, n), random32(rng, n)
    x, y = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq)
    expected = 2.5 * xh.astype(np.float64) + yh
    out = poisoned(n, tq)
    tuple_axpy[(triton.cdiv(n, 256),)]((x, y, out), n, 2.5, TAG=(3, 4), BLOCK=256)
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-5, atol=1e-5)
    out = poisoned(n, tq)
    prepared = ur_triton.prepare(tuple_axpy, (triton.cdiv(n, 256),), (x, y, out), n, 2.5,
                                 TAG=(3, 4), BLOCK=256)
    prepared()
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_bad_item_of_a_tuple_argument_is_named_by_its_index(tq):
    """Inside a tuple, a numpy array or a str met Triton's own AttributeError, and an address
    given as an int a bare CompilationError; a closed array, an unnamed ClosedError."""
    x, out = ur_cffi.zeros(300, np.float32, queue=tq), poisoned(300, tq)
    with pytest.raises(TypeError, match=r"argument 'pointers\[1\]' is a numpy.ndarray: it has "
                                        r"a dtype.*no data_ptr\(\)"):
        tuple_add[(2,)]((x, np.zeros(300, np.float32), out), 300, BLOCK=256)
    with pytest.raises(TypeError, match=r"argument 'pointers\[2\]' is a str 'out'.*needs its "
                                        "parameter annotated tl.constexpr"):
        tuple_add[(2,)]((x, x, "out"), 300, BLOCK=256)
    with pytest.raises(TypeError, match=r"kernel 'tuple_add': 'pointers\[0\]' got an int"):
        tuple_add[(2,)]((x.data_ptr(), x, out), 300, BLOCK=256)
    closed = ur_cffi.zeros(300, np.float32, queue=tq)
    closed.close()
    with pytest.raises(ur_cffi.ClosedError, match=r"argument 'pointers\[1\]'"):
        tuple_add[(2,)]((x, closed, out), 300, BLOCK=256)
    tuple_add[(2,)]((x, x, out), 300, BLOCK=256)
    tq.finish()
    assert np.array_equal(out.to_numpy(), np.zeros(300, np.float32))


def test_out_of_order_queue_ordered_by_events(context, device, rng):
    """On an out-of-order queue, using(queue, wait_for=...) chains copy -> kernel -> kernel
    -> copy through events only."""
    n, steps = int(rng.integers(5000, 20000)), int(rng.integers(50, 200))
    host = rng.integers(-2**31, 2**31, size=n, dtype=np.int64).astype(np.int32)
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        assert queue.out_of_order
        x = ur_cffi.empty(n, np.int32, queue=queue)
        y = ur_cffi.empty(n, np.int32, queue=queue)
        z = ur_cffi.empty(n, np.int32, queue=queue)
        result = np.full(n, -1, np.int32)
        copied = x.copy_from(host, blocking=False)
        grid = (triton.cdiv(n, 1024),)
        with ur_triton.using(queue, wait_for=[copied]):
            lcg_steps[grid](x, y, n, steps, BLOCK=1024)
            first = ur_triton.last_event()
        with ur_triton.using(queue, wait_for=first):
            lcg_steps[grid](y, z, n, steps, BLOCK=1024)
            second = ur_triton.last_event()
        z.copy_to(result, wait_for=[second])  # blocking: waits for its own event
        np.testing.assert_array_equal(result, lcg_reference(host, 2 * steps))


def test_a_grid_of_no_or_more_than_three_dimensions_is_refused(tq, rng):
    """Triton reads grid[0] to grid[2]: a fourth dimension used to be dropped silently."""
    n = 256
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    for grid in ((2, 1, 1, 2), (), lambda meta: (1, 1, 1, 2), lambda meta: ()):
        with pytest.raises(ValueError, match="a grid has 1 to 3 dimensions"):
            add[grid](x, x, y, n, BLOCK=128)
    with pytest.raises(TypeError, match=r"grid 2: a grid is a tuple of 1 to 3 sizes, e.g. \(2,\)"):
        add[2](x, x, y, n, BLOCK=128)
    assert np.isnan(y.to_numpy()).all()
    add[[2]](x, x, y, n, BLOCK=128)  # a list or an array is a grid too, as in Triton
    add[np.array([2])](x, x, y, n, BLOCK=128)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 2.0 * x.to_numpy().astype(np.float64), rtol=1e-6)


class Wrapper:
    """A tensor class of another library over a ur_cffi array: only data_ptr() and dtype."""

    def __init__(self, array):
        self.array, self.dtype = array, array.dtype

    def data_ptr(self):
        return self.array.data_ptr()


@pytest.mark.parametrize("wrap", [lambda array: array, Wrapper], ids=["array", "wrapper"])
def test_closed_memory_is_named(tq, rng, wrap):
    """(Under a wrapper, the argument went unnamed.)"""
    n = 256
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    closed = ur_cffi.empty(n, np.float32, queue=tq)
    closed.close()
    with pytest.raises(ur_cffi.ClosedError, match="kernel 'add': argument 'y_ptr': USMArray "
                                                  "is closed"):
        add[(2,)](x, wrap(closed), y, n, BLOCK=128)
    assert np.isnan(y.to_numpy()).all()


def test_an_array_of_a_dtype_triton_lacks_is_named(tq, rng):
    n = 256
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    for dtype in (np.complex64, np.dtype(">f4")):
        other = ur_cffi.zeros(n, dtype, queue=tq)
        with pytest.raises(TypeError, match=r"kernel 'add': argument 'y_ptr': an array of "
                                            r"dtype '(complex64|>f4)' .* no element type"):
            add[(2,)](x, other, y, n, BLOCK=128)
    assert np.isnan(y.to_numpy()).all()


def test_empty_grid_launches_nothing(tq, rng):
    n = int(rng.integers(10, 100))
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    add[(0,)](x, x, y, n, BLOCK=128)
    event = ur_triton.last_event()
    event.wait()
    assert np.isnan(y.to_numpy()).all()


def test_a_grid_of_anything_but_integers_or_too_large_is_refused(tq, rng):
    n = 256
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    for grid in ((None,), (0.0,), ("",), (2, None), lambda meta: (None,)):
        with pytest.raises(TypeError, match=r"grid .* must be an integer"):
            add[grid](x, x, y, n, BLOCK=128)  # (falsy: it used to launch nothing, silently)
    for grid in (b"\x02", bytearray(b"\x02"), "2", {2}, {0: 2}):  # bytes: a grid of their
        # byte values; a dict, of its values by key
        with pytest.raises(TypeError, match="a grid is a tuple of 1 to 3 sizes"):
            add[grid](x, x, y, n, BLOCK=128)
        with pytest.raises(TypeError, match="a grid is a tuple of 1 to 3 sizes"):
            ur_triton.prepare(add, grid, x, x, y, n, BLOCK=128)
    items, _, _ = tq.device.launch_limits
    too_many = [(2**40, 2**40)]  # more work-items than size_t counts: refused everywhere
    if items < 2**64 - 1:  # the CPU runtime's limit (it would crash the process)
        too_many.append((items // 128 + 1,))
    for grid in too_many:
        with pytest.raises(ValueError, match=r"grid .* work-items in one launch"):
            add[grid](x, x, y, n, BLOCK=128)
    with pytest.raises(ValueError, match=r"grid .* work-items in one launch"):
        ur_triton.prepare(add, too_many[-1], x, x, y, n, BLOCK=128)
    assert np.isnan(y.to_numpy()).all()


@pytest.mark.cpu_device("threads_per_warp is an option of Triton's Intel backend")
def test_threads_per_warp_and_num_warps(tq, rng):
    """num_warps and threads_per_warp (a device sub-group size) as Triton options."""
    n = int(rng.integers(3000, 6000))
    xh, yh = random32(rng, n), random32(rng, n)
    x, y = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq)
    for tpw, warps in ((16, 8), (32, 2)):
        assert tpw in tq.device.sub_group_sizes
        out = poisoned(n, tq)
        compiled = add[(triton.cdiv(n, 512),)](x, y, out, n, BLOCK=512, num_warps=warps,
                                               threads_per_warp=tpw, num_stages=1)
        tq.finish()
        assert (compiled.metadata.threads_per_warp, compiled.metadata.num_warps) == (tpw, warps)
        np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + yh, rtol=1e-6)
    with pytest.raises(ValueError, match="sub-group size"):
        ur_triton.active_driver().check_work_group(4, 3)
    with pytest.raises(ValueError, match="threads_per_warp='16' is not a sub-group size"):
        ur_triton.active_driver().check_work_group(4, "16")  # (a str read as the int 16)
    with pytest.raises(ValueError, match="threads_per_warp=3 is not a sub-group size"):
        ur_triton.compile(add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128},
                          device=tq.device, threads_per_warp=3)  # before Triton's compiler
    with pytest.raises(TypeError, match="device must be a ur_cffi Device, not int 0"):
        ur_triton.compile(add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}, device=0)
    with pytest.raises(ValueError, match="largest work-group"):
        ur_triton.active_driver().check_work_group(1024, 32)
    for options, error, match in (({"threads_per_warp": 7}, ValueError, "not a sub-group size"),
                                  ({"num_warps": 512}, ValueError, "largest work-group"),
                                  ({"num_ctas": 2}, NotImplementedError, "num_ctas=2")):
        out = poisoned(n, tq)
        with pytest.raises(error, match=match) as raised:  # before Triton's compiler
            add[(triton.cdiv(n, 512),)](x, y, out, n, BLOCK=512, **options)
        assert isinstance(raised.value, triton.runtime.errors.OutOfResources)  # autotune skips
        assert np.isnan(out.to_numpy()).all()


@pytest.mark.cpu_device("an option of Triton's Intel backend")
def test_grf_mode_is_dropped_on_the_cpu(tq, rng):
    """grf_mode='large' makes Triton ask for a GPU-only build option; the CPU refuses it, so
    ur_cffi leaves it out there."""
    n = int(rng.integers(500, 1500))
    host = random32(rng, n)
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    compiled = scale[(triton.cdiv(n, 128),)](x, y, 3.0, n, BLOCK=128, grf_mode="large")
    tq.finish()
    assert "GRF" in compiled.metadata.build_flags
    assert programs.build_options(compiled.metadata.build_flags, tq.device) == ""
    np.testing.assert_allclose(y.to_numpy(), 3.0 * host.astype(np.float64), rtol=1e-6)


@pytest.mark.cpu_device("SPIR-V")
def test_spirv_is_adapted_only_because_the_device_refuses_it(tq, rng):
    n = int(rng.integers(100, 1000))
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    compiled = scale[(triton.cdiv(n, 128),)](x, y, 1.0, n, BLOCK=128)
    tq.finish()
    assert ur_cffi.spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL in \
        ur_cffi.spirv.capabilities(compiled.asm["spv"])
    # The CPU OpenCL runtime refuses capability 5892: the first build told us so.
    assert programs.needs_adaptation(tq.device) is True
    with pytest.raises(ur_cffi.URError, match=r"(?s)build log:.*Intel's kernel attributes.*"
                                              r"ur_cffi.spirv.drop_capabilities\(il\)"):
        ur_cffi.Program.from_il(tq.context, compiled.asm["spv"])  # the build names the remedy


@pytest.mark.cpu_device("the Intel backend's target; test_gpu.py checks the CUDA one")
def test_target_comes_from_the_device(tq, device):
    target = ur_triton.active_driver().get_current_target()
    assert target.backend == "xpu"
    arch = target.arch
    assert arch["sub_group_sizes"] == sorted(device.sub_group_sizes)
    assert arch["max_work_group_size"] == device.max_work_group_size
    assert arch["has_fp64"] == device.has_fp64
    extensions = device.extensions
    assert arch["has_subgroup_2d_block_io"] == ("cl_intel_subgroup_2d_block_io" in extensions)
    assert arch["has_subgroup_matrix_multiply_accumulate"] == \
        ("cl_intel_subgroup_matrix_multiply_accumulate" in extensions)
    native = _compat.enumerator("ur_device_info_t", "UR_DEVICE_INFO_BFLOAT16_CONVERSIONS_NATIVE")
    assert arch["has_bfloat16_conversions"] is (
        "cl_intel_bfloat16_conversions" in extensions
        or (native is not None and bool(device.info(native))))  # a query new in oneAPI 2025.3
    utils = ur_triton.active_driver().utils
    props = utils.get_device_properties(ur_triton.active_driver().get_current_device())
    assert props["max_shared_mem"] == device.local_mem_size
    # Triton's tutorials pass a device index (DEVICE.index); a Device works too.
    assert utils.get_device_properties(ur_cffi.devices().index(device)) == props
    assert utils.get_device_properties(device) == props
    assert props["warpSize"] == ur_triton.active_driver().get_current_target().warp_size
    interface = ur_triton.active_driver().get_device_interface()
    assert interface.current_device() == ur_triton.active_driver().get_current_device()
    with pytest.raises(ValueError, match="device index 99 is not one of"):
        utils.get_device_properties(99)
    with pytest.raises(TypeError, match="get_device_properties takes"):
        utils.get_device_properties("xpu:0")


# --- errors before launch --------------------------------------------------------------------


def assert_nothing_launched(out, before):
    assert ur_triton.last_event() is before
    assert np.isnan(out.to_numpy()).all()


ADD = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@pytest.mark.parametrize("signature, constants, error, match", [
    (dict(ADD, x_ptr="*float"), {"BLOCK": 64}, ValueError,
     r"signature\['x_ptr'\]: '\*float' is not a Triton type"),
    (dict(ADD, n="int"), {"BLOCK": 64}, ValueError, r"signature\['n'\]: 'int' is not"),
    (dict(ADD, n=5), {"BLOCK": 64}, ValueError, r"signature\['n'\]: 5 is not a Triton type"),
    ({k: v for k, v in ADD.items() if k != "BLOCK"}, {"BLOCK": 64}, ValueError,
     r"signature lacks 'BLOCK' of add\('x_ptr', 'y_ptr', 'out_ptr', 'n', 'BLOCK'\)"),
    (ADD, {}, ValueError, r"signature\['BLOCK'\] is 'constexpr' but constants gives it no value"),
    (dict(ADD, m="i32"), {"BLOCK": 64}, ValueError, "signature names 'm', which is no parameter"),
    (ADD, {"BLOCK": 64, "blok": 3}, ValueError, "constants name 'blok', which is no parameter"),
    (["*fp32"] * 4, {"BLOCK": 64}, TypeError, "signature must be a dict"),
    (ADD, {"BLOCK": 64, (9,): 1}, ValueError, r"constants key \(9,\) is neither a parameter"),
    # (Triton's own errors: a CompilationError deep in the kernel, an AttributeError for a
    # constant "to_ir", a (True,) path taken as parameter 1)
    (dict(ADD, BLOCK="i32"), {}, ValueError, "'BLOCK' is a tl.constexpr of add.*: give it as "
                                             "'constexpr' in signature and its value in "
                                             "constants, not 'i32' without a value"),
    (ADD, {(4, 0, 7): 64}, ValueError, r"constants key \(4, 0, 7\) is neither a parameter"),
    (ADD, {(True,): 64, "BLOCK": 64}, ValueError, r"constants key \(True,\) is neither"),
    (ADD, [64], TypeError, "constants must be a dict of parameter name to value, not list"),
])
def test_compile_refuses_a_signature_it_cannot_compile(tq, signature, constants, error, match):
    """Each mistake is named before Triton's compiler, which fails on them with a bare
    KeyError, IndexError or AttributeError."""
    with pytest.raises(error, match=match):
        ur_triton.compile(add, signature, constants, device=tq.device)


def test_compile_takes_the_signature_by_name(tq):
    """Triton reads a signature's entries in order: a dict in another order than the
    parameters compiled the wrong types (here x as fp64, y as fp32) without an error."""
    signature = {"BLOCK": "constexpr", "n": "i32", "out_ptr": "*fp64", "y_ptr": "*fp32",
                 "x_ptr": "*fp64"}
    compiled = ur_triton.compile(add, signature, {"BLOCK": 64}, device=tq.device)
    header = next(line for line in compiled.asm["ttir"].splitlines() if "tt.func public" in line)
    types = re.findall(r"%\w+: ([^ ,)]+)", header)  # %arg0 (Triton 3.3) or %x_ptr (3.6)
    assert types == ["!tt.ptr<f64>", "!tt.ptr<f32>", "!tt.ptr<f64>", "i32"], header
    with pytest.raises(TypeError, match="compile takes a @triton.jit function, not function"):
        ur_triton.compile(lambda x: x, {"x": "*fp32"}, device=tq.device)


def test_compile_takes_what_triton_takes_beside_a_named_signature(tq):
    """Constants by position path, a constexpr left to its default, Triton's string form."""
    by_position = ur_triton.compile(add, ADD, {(4,): 64}, device=tq.device)
    assert by_position.metadata.name == "add"
    defaulted = ur_triton.compile(scale_with_default_block,
                                  {"x_ptr": "*fp32", "n": "i32"}, device=tq.device)
    assert "tt.make_range {end = 32 : i32" in defaulted.asm["ttir"]  # BLOCK's default, 32
    as_text = ur_triton.compile(add, "*fp32, *fp16, *fp32, i32, constexpr", {"BLOCK": 64},
                                device=tq.device)  # Triton 3.6 takes no string: converted
    assert as_text.metadata.name == "add" and "!tt.ptr<f16>" in as_text.asm["ttir"]
    with pytest.raises(ValueError, match=r"gives 4 types for the 5 parameters of add"):
        ur_triton.compile(add, "*fp32, *fp32, *fp32, i32", {"BLOCK": 64}, device=tq.device)


def test_wrong_argument_count(tq, rng):
    n = int(rng.integers(100, 1000))
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    scale[(1,)](x, y, 1.0, n, BLOCK=1024)  # compiled and loaded
    tq.finish()
    y.fill(np.nan)
    before = ur_triton.last_event()
    with pytest.raises(TypeError):  # Triton's own binding
        scale[(1,)](x, y, 1.0, BLOCK=1024)
    compiled = next(iter(scale.device_caches[
        ur_triton.active_driver().get_current_device()][0].values()))
    with pytest.raises(TypeError, match="takes 5 arguments"):  # the launcher's check
        compiled[(1, 1, 1)](x, y, 1.0, n)
    assert_nothing_launched(y, before)


@pytest.mark.parametrize("arch", [90, "sm10"])
def test_kernel_grid_refuses_an_arch_option(tq, arch):
    """On a CUDA device Triton's NVIDIA backend took arch for its target (arch=90 failed in
    its parser, "sm80" compiled for another GPU); a str option was blamed as a kernel
    argument ("argument 'arch' is a str").  (The device's own, "sm90" on an H100, passes.)"""
    x = ur_cffi.zeros(100, np.float32, queue=tq)
    with pytest.raises(TypeError, match=f"compile option arch={arch!r}: ur_cffi.triton "
                                        "compiles for the device's own target"):
        scale[(1,)](x, x, 1.0, 100, BLOCK=128, arch=arch)


def test_a_kernel_with_a_tuple_argument_launched_by_hand_checks_its_shape(tq, rng):
    """The launcher flattened arguments by the signature with zip(): extra arguments and
    items were dropped, and an array given for the tuple was iterated into 0-d views that
    became its pointers (heap corruption past a 3-element array)."""
    n = int(rng.integers(300, 1000))
    x, out = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    compiled = tuple_add[(1,)]((x, x, out), n, BLOCK=256)
    tq.finish()
    out.fill(np.nan)
    before = ur_triton.last_event()
    three = ur_cffi.zeros(3, np.float32, queue=tq)
    for args, message in ((((x, x, out), n, 256, 7), "takes 3 arguments"),
                          (((x, x, out, out), n, 256), "'pointers' must be a tuple of 3"),
                          ((three, n, 256), "'pointers' must be a tuple of 3, .* not USMArray"),
                          ((None, n, 256), "'pointers' must be a tuple of 3, .* not NoneType")):
        with pytest.raises(TypeError, match=f"kernel 'tuple_add': .*{message}"):
            compiled[(triton.cdiv(n, 256), 1, 1)](*args)
    assert_nothing_launched(out, before)
    compiled[(triton.cdiv(n, 256), 1, 1)]([x, x, out], n, 256)  # (a list, as Triton takes)
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), 2 * x.to_numpy().astype(np.float64), rtol=1e-6)


@triton.jit
def pad_with(x_ptr, y_ptr, n, PAD: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n, other=PAD))


@triton.jit
def as_type(x_ptr, y_ptr, n, TYPE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask).to(TYPE).to(tl.float32),
             mask=mask)


@triton.jit
def copy_with(x_ptr, y_ptr, n, UNUSED: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n))


@triton.jit
def apply(x_ptr, y_ptr, n, FUNCTION: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, FUNCTION(tl.load(x_ptr + offsets, mask=mask)), mask=mask)


def test_a_function_defined_again_under_its_name_is_named_as_such(tq, rng, tmp_path,
                                                                 monkeypatch):
    """Triton's cache keys on a constexpr's repr: a function defined again (a module reloaded,
    a notebook cell run again) got the old one's kernel, silently; ur_cffi refuses it, saying
    so and how to compile for the new one."""
    import importlib

    (tmp_path / "functions_here.py").write_text(
        "import triton\n@triton.jit\ndef shift(x):\n    return x + 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import functions_here

    n = 100
    x = ur_cffi.asarray(random32(rng, n), queue=tq)
    out = poisoned(n, tq)
    apply[(1,)](x, out, n, FUNCTION=functions_here.shift, BLOCK=128)
    tq.finish()
    assert np.array_equal(out.to_numpy(), x.to_numpy() + np.float32(1.0))
    (tmp_path / "functions_here.py").write_text(
        "import triton\n@triton.jit\ndef shift(x):\n    return x + 2.0\n")
    importlib.reload(functions_here)
    out.fill(np.nan)
    try:  # Triton 3.3's cache key is the repr; 3.6's (the GPU machine's) tells them apart
        apply[(1,)](x, out, n, FUNCTION=functions_here.shift, BLOCK=128)
    except ValueError as error:
        assert re.search(r"FUNCTION.* is another object than the one of that repr "
                         r".*apply.device_caches.clear\(\)", str(error)), error
    else:
        tq.finish()
        assert np.array_equal(out.to_numpy(), x.to_numpy() + np.float32(2.0))
    apply.device_caches.clear()
    out.fill(np.nan)
    apply[(1,)](x, out, n, FUNCTION=functions_here.shift, BLOCK=128)
    tq.finish()
    assert np.array_equal(out.to_numpy(), x.to_numpy() + np.float32(2.0))


def test_a_compiled_kernel_launched_by_hand_refuses_what_it_was_not_compiled_for(tq, rng):
    """A CompiledKernel called by hand skips Triton's specialization: an n not divisible by 16
    given to a kernel compiled for one wrote past n, an n compiled in as 1 copied one element
    of 200, and an unaligned view loaded as if aligned."""
    n = 16 * int(rng.integers(20, 60))
    x = ur_cffi.asarray(random32(rng, n + 16), queue=tq)
    out = poisoned(n + 16, tq)
    compiled = scale[(triton.cdiv(n, 256),)](x, out, 2.0, n, BLOCK=256)
    one = scale[(1,)](x, out, 2.0, 1, BLOCK=256)
    tq.finish()
    out.fill(np.nan)
    before = ur_triton.last_event()
    grid = (triton.cdiv(n, 256), 1, 1)
    for kernel, args, message in (
            (compiled, (x[1:], out, 2.0, n, 256), "argument 'x_ptr' of kernel 'scale': address "
             "0x[0-9a-f]+ is not 16-byte aligned, which Triton compiled the kernel for"),
            (compiled, (x[2:], out, 2.0, n, 256), "argument 'x_ptr' of kernel 'scale': address "
             "0x[0-9a-f]+ is not 16-byte aligned"),  # (8 bytes past: aligned to 8 only)
            (compiled, (x, out, 2.0, n - 1, 256), f"argument 'n' of kernel 'scale': {n - 1} is "
             "not divisible by 16, which Triton compiled the kernel for"),
            (compiled, (x, out, 2.0, np.int32(n - 1), 256), f"argument 'n' of kernel 'scale': "
             rf"(np.int32\()?{n - 1}\)? is not divisible by 16"),  # (numpy 1's repr: the number)
            (compiled, (x, out, 2.0, n, 128), "argument 'BLOCK' of kernel 'scale': 128, where "
             "Triton compiled the kernel with 256"),
            (one, (x, out, 2.0, 200, 256), "argument 'n' of kernel 'scale': 200, where Triton "
             r"compiled the kernel with 1: launch it with kernel\[grid\]")):
        with pytest.raises(ValueError, match=message):
            kernel[grid](*args)
    assert_nothing_launched(out, before)
    truncated = as_type[(1,)](x, out, n, TYPE=tl.int32, BLOCK=256)  # (dtypes were not checked:
    tq.finish()
    out.fill(np.nan)
    before = ur_triton.last_event()
    with pytest.raises(ValueError, match="argument 'TYPE' of kernel 'as_type': "  # it ran as
                       "triton.language.float32, where Triton compiled the kernel with "
                       "triton.language.int32"):  # int32 for float32)
        truncated[grid](x, out, n, tl.float32, 256)
    assert_nothing_launched(out, before)
    truncated[grid](x, out, n, tl.int32, 256)
    tq.finish()
    assert np.array_equal(out.to_numpy()[:n], np.trunc(x.to_numpy()[:n]))
    padded = pad_with[(1,)](x, out, n, PAD=float("nan"), BLOCK=256)  # (NaN != NaN: refused)
    padded[(1, 1, 1)](x, out, n, float("nan"), 256)
    for _ in range(2):  # NaN in a tuple: the second call (Triton's cached kernel) was refused
        copy_with[(1,)](x, out, n, UNUSED=(float("nan"), 1.0), BLOCK=256)
    tq.finish()
    compiled[grid](x, out, 2.0, n, 256)  # what it was compiled for
    tq.finish()
    np.testing.assert_allclose(out.to_numpy()[:n], 2 * x.to_numpy()[:n].astype(np.float64),
                               rtol=1e-6)
    assert np.isnan(out.to_numpy()[n:]).all()


@triton.jit
def add_bias_if_any(x_ptr, y_ptr, bias_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask)
    if bias_ptr is not None:
        value += tl.load(bias_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, value, mask=mask)


def test_a_compiled_kernel_launched_by_hand_refuses_memory_where_it_was_compiled_for_none(
        tq, rng):
    """Triton compiles an argument given as None in (as a constexpr): an array given by hand
    there was dropped (the bias was not added), and None or an array given where an integer
    was compiled in as 1 launched too."""
    n = int(rng.integers(100, 256))
    x = ur_cffi.asarray(random32(rng, n), queue=tq)
    bias = ur_cffi.asarray(random32(rng, n), queue=tq)
    out = poisoned(n, tq)
    without = add_bias_if_any[(1,)](x, out, None, n, BLOCK=256)
    one = add_bias_if_any[(1,)](x, out, bias, 1, BLOCK=256)
    tq.finish()
    out.fill(np.nan)
    before = ur_triton.last_event()
    for kernel, args, message in (
            (without, (x, out, bias, n, 256), "argument 'bias_ptr' of kernel 'add_bias_if_any'"
             ": <USMArray .*>, where Triton compiled the kernel with None"),
            (one, (x, out, bias, None, 256), "argument 'n' of kernel 'add_bias_if_any': None, "
             "where Triton compiled the kernel with 1"),
            (one, (x, out, bias, bias, 256), "argument 'n' of kernel 'add_bias_if_any': "
             "<USMArray .*>, where Triton compiled the kernel with 1")):
        with pytest.raises(ValueError, match=message):
            kernel[(1, 1, 1)](*args)
        with pytest.raises(ValueError, match=message):
            ur_triton.prepare(kernel, (1, 1, 1), *args)
    assert_nothing_launched(out, before)
    without[(1, 1, 1)](x, out, None, n, 256)  # what it was compiled for
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), x.to_numpy(), rtol=0)


class Wrapped:
    """Memory behind another object, as libraries wrap it (dtype, data_ptr)."""

    def __init__(self, array):
        self.array, self.dtype = array, array.dtype

    def data_ptr(self):
        return self.array.data_ptr()


def test_wrong_pointer_dtype(tq, rng):
    from triton.compiler import ASTSource

    n = int(rng.integers(100, 1000))
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                 "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(scale, signature, {"BLOCK": 1024}, {}),
                              target=ur_triton.active_driver().get_current_target())
    x64 = ur_cffi.asarray(rng.standard_normal(n), queue=tq)
    y = poisoned(n, tq)
    before = ur_triton.last_event()
    with pytest.raises(TypeError, match=r"\*fp32 but the USMArray holds float64"):
        compiled[(1, 1, 1)](x64, y, 1.0, n, 1024)
    one = ur_cffi.zeros(1, np.float32, queue=tq)  # where a float goes: refused, not read (a
    with pytest.raises(TypeError, match="argument 'a'"):  # read under the launch lock hung)
        compiled[(1, 1, 1)](ur_cffi.zeros(n, np.float32, queue=tq), y, one, n, 1024)
    pairs = ur_cffi.zeros(n, np.complex64, queue=tq)  # a dtype Triton has no element type for:
    with pytest.raises(TypeError, match=r"\*fp32 but the argument holds complex64"):  # taken
        compiled[(1, 1, 1)](Wrapped(pairs), y, 1.0, n, 1024)  # as floats behind a wrapper
    assert_nothing_launched(y, before)


class HostMemory:
    """Looks like device memory to Triton (dtype, data_ptr) but is a numpy array's."""

    def __init__(self, array):
        self.array, self.dtype = array, array.dtype

    def data_ptr(self):
        return self.array.ctypes.data


def test_non_ur_pointers(tq, context, device, rng):
    n = int(rng.integers(100, 1000))
    host = random32(rng, n)
    y = poisoned(n, tq)
    before = ur_triton.last_event()
    with pytest.raises(TypeError, match="no data_ptr"):  # a numpy array
        scale[(1,)](host, y, 1.0, n, BLOCK=1024)
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 1024})], key=["n"])(scale)
    with pytest.raises(TypeError, match="'x_ptr' is a numpy.ndarray"):  # through an Autotuner
        tuned[(1,)](host, y, 1.0, n)
    with pytest.raises(ValueError, match="not USM memory"):  # host memory behind data_ptr()
        scale[(1,)](HostMemory(host), y, 1.0, n, BLOCK=1024)
    for value in ([1, 2], str(n), b"ab", 1 + 2j, object()):  # no kernel arguments at all
        with pytest.raises(TypeError, match=f"argument 'n' is a {type(value).__name__} "):
            scale[(1,)](y, y, 1.0, value, BLOCK=1024)
    with ur_cffi.Context([device]) as other, ur_cffi.Queue(other, device) as other_queue:
        foreign = ur_cffi.asarray(host, queue=other_queue)
        with pytest.raises(ValueError, match="another context"):
            scale[(1,)](foreign, y, 1.0, n, BLOCK=1024)
        foreign.close()
    assert_nothing_launched(y, before)

    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                 "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(scale, signature, {"BLOCK": 1024}, {}),
                              target=ur_triton.active_driver().get_current_target())
    with pytest.raises(ValueError, match="not USM memory"):  # an int in a pointer slot
        compiled[(1, 1, 1)](host.ctypes.data, y, 1.0, n, 1024)
    assert_nothing_launched(y, before)
    x = ur_cffi.asarray(host, queue=tq)  # a raw USM address is fine in a pointer slot
    compiled[(triton.cdiv(n, 1024), 1, 1)](x.data_ptr(), y, 1.0, n, 1024)
    tq.finish()
    np.testing.assert_array_equal(y.to_numpy(), host)


def test_scalar_that_does_not_fit(tq, rng):
    n = int(rng.integers(100, 1000))
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp16", "n": "i32",
                 "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(scale, signature, {"BLOCK": 1024}, {}),
                              target=ur_triton.active_driver().get_current_target())
    before = ur_triton.last_event()
    with pytest.raises(TypeError, match="'a' of kernel 'scale' is fp16"):
        compiled[(1, 1, 1)](x, y, 1e10, n, 1024)
    assert_nothing_launched(y, before)


# --- prepared launches -----------------------------------------------------------------------


def test_prepared_launch_repeats_exactly_without_dispatch(tq, rng):
    n = int(rng.integers(2000, 5000))
    host = random32(rng, n)
    a = float(rng.uniform(-4, 4))
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    before = ur_triton.last_event()
    launch = ur_triton.prepare(scale, (triton.cdiv(n, 512),), x, y, a, n, BLOCK=512)
    assert isinstance(launch, ur_cffi.PreparedLaunch) and launch.queue is tq
    tq.finish()
    assert np.isnan(y.to_numpy()).all() and ur_triton.last_event() is before  # not launched
    expected = np.float32(a) * host.astype(np.float64)
    for _ in range(3):
        y.fill(np.nan)
        assert launch(event=False) is None
        tq.finish()
        np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
    new_host = random32(rng, n)  # the same arrays, new contents: the launch reads them anew
    x.copy_from(new_host)
    y.fill(np.nan)
    launch().wait()
    np.testing.assert_allclose(y.to_numpy(), np.float32(a) * new_host.astype(np.float64),
                               rtol=1e-6)


def test_prepared_launch_with_a_two_dimensional_grid_and_local_memory(tq, rng):
    rows, cols = int(rng.integers(40, 100)), int(rng.integers(40, 100))
    xh, yh = random32(rng, (rows, cols)), random32(rng, (rows, cols))
    x, y = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq)
    out = poisoned((rows, cols), tq)
    ur_triton.prepare(add_2d, (triton.cdiv(rows, 16), triton.cdiv(cols, 32)), x, y, out, rows,
                      cols, BR=16, BC=32)(event=False)
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + 2 * yh.astype(np.float64),
                               rtol=1e-6)

    m, n, k = (int(v) for v in rng.integers(33, 90, size=3))  # tl.dot: local memory too
    ah, bh = random32(rng, (m, k)), random32(rng, (k, n))
    a, b, c = ur_cffi.asarray(ah, queue=tq), ur_cffi.asarray(bh, queue=tq), poisoned((m, n), tq)
    ur_triton.prepare(matmul, (triton.cdiv(m, 32), triton.cdiv(n, 32)), a, b, c, m, n, k, k, 1,
                      n, 1, n, 1, BM=32, BN=32, BK=32)()
    tq.finish()
    np.testing.assert_allclose(c.to_numpy(), ah.astype(np.float64) @ bh, rtol=1e-4,
                               atol=1e-4)


def test_prepare_checks_like_a_launch_and_refuses_closed_memory(tq, rng):
    n = int(rng.integers(100, 1000))
    x, y = ur_cffi.asarray(random32(rng, n), queue=tq), poisoned(n, tq)
    with pytest.raises(TypeError, match="has no data_ptr"):
        ur_triton.prepare(scale, (1,), np.zeros(n, np.float32), y, 2.0, n, BLOCK=1024)
    with pytest.raises(ValueError, match="is empty"):
        ur_triton.prepare(scale, (0,), x, y, 2.0, n, BLOCK=1024)
    launch = ur_triton.prepare(scale, (1,), x, y, 2.0, n, BLOCK=1024)
    x.close()
    with pytest.raises(ur_cffi.ClosedError, match="USMArray is closed"):
        launch()
    tq.finish()
    assert np.isnan(y.to_numpy()).all()
    # A later ordinary launch is not captured.
    x = ur_cffi.asarray(random32(rng, n), queue=tq)
    scale[(1,)](x, y, 2.0, n, BLOCK=1024)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 2.0 * x.to_numpy().astype(np.float64), rtol=1e-6)


def test_a_prepared_launch_refuses_an_array_closed_under_a_wrapper(tq, rng):
    """It launched on the closed array's address, which the caching allocator had given to
    the next array of its size: it computed from that array's data."""
    n = int(rng.integers(100, 1000))
    data = random32(rng, n)
    x, y = ur_cffi.asarray(data, queue=tq), poisoned(n, tq)
    launch = ur_triton.prepare(scale, (1,), Wrapper(x), y, 2.0, n, BLOCK=1024)
    launch(event=False)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 2.0 * data.astype(np.float64), rtol=1e-6)
    x.close()
    reusing = ur_cffi.asarray(random32(rng, n), queue=tq)  # (may take x's memory)
    y.fill(np.nan)
    with pytest.raises(ur_cffi.ClosedError, match="prepared launch of 'scale', argument "
                                                  "'x_ptr': USMArray is closed"):
        launch()  # (by name, as kernel[grid] names it: it said "argument 0", counted over
    tq.finish()   # Triton's flattened arguments, constexprs included)
    assert np.isnan(y.to_numpy()).all() and not reusing.closed


def test_a_wrapper_of_memory_numpy_still_uses_after_its_close_launches(tq, rng):
    """The array behind a wrapper was looked up among the registry's entries, which hold a
    closed array whose memory numpy still uses: valid launches were refused as closed."""
    n = 256
    data = random32(rng, n)
    host = ur_cffi.asarray(data, queue=tq, kind="host")
    numpy_view = np.asarray(host)
    host.close()  # its memory stays for the numpy view

    class NumpyWrapper:  # device memory to Triton: the view's address and dtype
        dtype = numpy_view.dtype

        @staticmethod
        def data_ptr():
            return numpy_view.ctypes.data

    y = poisoned(n, tq)
    launch = ur_triton.prepare(scale, (1,), NumpyWrapper(), y, 3.0, n, BLOCK=1024)
    with ur_cffi.Queue(tq.context, tq.device) as other:  # (an array's release since)
        ur_cffi.empty(4, queue=other).close()
    launch()
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 3.0 * data.astype(np.float64), rtol=1e-6)


def test_another_contexts_array_under_a_wrapper_is_named_so(tq, device, rng):
    """Refused as a USMArray of another context is (it said: maybe host memory); an object
    with only data_ptr() where UR says its address is not USM of the launch's context (UR's
    CUDA adapter knows any address of the device: the launch runs, as CuPy's would)."""
    n = 256
    y = poisoned(n, tq)
    refused = "argument 'x_ptr' of kernel 'scale': its USMArray belongs to another context"
    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        data = random32(rng, n)
        elsewhere = ur_cffi.asarray(data, queue=queue)
        with pytest.raises(ValueError, match=refused):
            scale[(1,)](triton.reinterpret(elsewhere, tl.float32), y, 2.0, n, BLOCK=1024)
        assert np.isnan(y.to_numpy()).all()
        if ur_cffi.interop.usm_kind(tq.context, elsewhere.data_ptr()) is None:
            with pytest.raises(ValueError, match=refused):
                scale[(1,)](Wrapper(elsewhere), y, 2.0, n, BLOCK=1024)
            assert np.isnan(y.to_numpy()).all()
        else:
            scale[(1,)](Wrapper(elsewhere), y, 2.0, n, BLOCK=1024)
            tq.finish()
            np.testing.assert_allclose(y.to_numpy(), 2.0 * data.astype(np.float64), rtol=1e-6)


# --- benchmarking ----------------------------------------------------------------------------


@TRITON_3_3
def test_do_bench_times_on_ur_events(tq, rng):
    n = int(rng.integers(10000, 50000))
    x = ur_cffi.asarray(rng.integers(0, 1000, size=n, dtype=np.int32), queue=tq)
    y = ur_cffi.empty(n, np.int32, queue=tq)
    run = lambda: lcg_steps[(triton.cdiv(n, 1024),)](x, y, n, 20, BLOCK=1024)  # noqa: E731
    assert triton.testing._support_elapsed_time()  # the module's queue profiles
    assert isinstance(triton.testing.Event(enable_timing=True), ur_triton.bench.ProfilingEvent)
    mean = triton.testing.do_bench(run, warmup=2, rep=10)
    quantiles = triton.testing.do_bench(run, warmup=2, rep=10, quantiles=[0.5, 0.2, 0.8])
    assert mean > 0 and all(q > 0 for q in quantiles) and len(quantiles) == 3
    assert triton.testing.do_bench(run, warmup=1, rep=5, grad_to_none=[x, y]) > 0
    with pytest.raises(TypeError, match="no gradients"):
        x.grad = x
    np.testing.assert_array_equal(y.to_numpy(), lcg_reference(x.to_numpy(), 20))


@TRITON_3_3
def test_do_bench_on_a_queue_without_profiling(context, device, rng):
    with ur_cffi.Queue(context, device) as queue, ur_triton.using(queue):
        n = int(rng.integers(1000, 5000))
        x, y = ur_cffi.asarray(random32(rng, n), queue=queue), poisoned(n, queue)
        assert not triton.testing._support_elapsed_time()
        ms = triton.testing.do_bench(
            lambda: scale[(triton.cdiv(n, 512),)](x, y, 2.0, n, BLOCK=512), warmup=1, rep=5)
        assert ms > 0
        np.testing.assert_allclose(y.to_numpy(), 2.0 * x.to_numpy().astype(np.float64))


def launch_tuned_add(tuned_add, tq, rng):
    """An autotuned add over a random size (the first call tunes), checked exactly."""
    n = int(rng.integers(5000, 20000))
    xh, yh = random32(rng, n), random32(rng, n)
    x, y = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(yh, queue=tq)
    out = poisoned(n, tq)
    tuned_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    tq.finish()
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64) + yh, rtol=1e-6)


def test_autotune_picks_a_config(tq, rng):
    configs = [triton.Config({"BLOCK": 128}, num_warps=1),
               triton.Config({"BLOCK": 1024}, num_warps=4)]

    # Decorated after activate(): the autotuner takes its benchmarker from the active driver.
    tuned_add = triton.autotune(configs=configs, key=["n"])(add)
    launch_tuned_add(tuned_add, tq, rng)
    assert tuned_add.best_config in configs
    assert len(tuned_add.configs_timings) == 2
    assert all(t[0] > 0 for t in tuned_add.configs_timings.values())


@pytest.mark.cpu_device("threads_per_warp=7 and the work-group limit are the CPU device's")
def test_autotune_skips_configs_the_device_cannot_run(tq, rng):
    good = triton.Config({"BLOCK": 256}, num_warps=2)
    configs = [triton.Config({"BLOCK": 256}, num_warps=512),  # num_ctas=2 would run, wrongly
               triton.Config({"BLOCK": 256}, num_warps=2, num_ctas=2),
               triton.Config({"BLOCK": 256, "threads_per_warp": 7}, num_warps=2), good]

    tuned_add = triton.autotune(configs=configs, key=["n"])(add)
    launch_tuned_add(tuned_add, tq, rng)
    assert tuned_add.best_config is good


@pytest.mark.parametrize("launch_queue", ["own", "other"])
def test_autotune_resets_and_restores_arguments_as_asked(tq, rng, launch_queue):
    """``reset_to_zero`` and ``restore_value`` call PyTorch's ``zero_``, ``clone`` and
    ``copy_`` on the arguments: every config's run starts from the same values.  They run on
    the launches' queue (PyTorch's current stream), also where that is not the arrays' own:
    on the arrays' queue they overtook the kernels being timed (accumulated 136 to 220)."""
    configs = [triton.Config({"BLOCK": 64}, num_warps=1),
               triton.Config({"BLOCK": 256}, num_warps=2)]

    @triton.autotune(configs=configs, key=["n"], reset_to_zero=["total_ptr"],
                     restore_value=["acc_ptr"])
    @triton.jit
    def sum_and_double(x_ptr, acc_ptr, total_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.atomic_add(total_ptr, tl.sum(x))
        acc = tl.load(acc_ptr + offsets, mask=mask)
        tl.store(acc_ptr + offsets, acc * 2.0 + x, mask=mask)

    n = int(rng.integers(3000, 6000))
    xh, acch = random32(rng, n), random32(rng, n)
    x, acc = ur_cffi.asarray(xh, queue=tq), ur_cffi.asarray(acch, queue=tq)
    total = ur_cffi.full(1, np.nan, np.float32, queue=tq)
    tq.finish()  # (the arrays' own work before another queue's)
    with contextlib.ExitStack() as stack:
        if launch_queue == "other":
            queue = stack.enter_context(ur_cffi.Queue(tq.context, tq.device, profiling=True))
            stack.enter_context(ur_triton.using(queue))
        sum_and_double[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, acc, total, n)
        ur_triton.last_event().wait()
    assert len(sum_and_double.configs_timings) == 2  # both ran, each several times
    # float32 atomic adds of thousands of terms: an error of a few ulps of their magnitudes'
    # sum, which a relative tolerance of the (cancelling, near 0) total did not allow for
    np.testing.assert_allclose(total.to_numpy()[0], xh.astype(np.float64).sum(), rtol=1e-4,
                               atol=4 * np.finfo(np.float32).eps * np.abs(xh).sum())
    np.testing.assert_allclose(acc.to_numpy(), acch.astype(np.float64) * 2 + xh, rtol=1e-6)


def test_pytorch_style_copies_run_on_the_triton_queue_whatever_the_source(tq, rng):
    """``copy_`` of a numpy array, a number, a broadcast or a cast went to the array's own
    queue, unordered after kernels on the Triton queue (a kernel queued before it read the new
    values in 0.9 of a million elements).  Made on a queue closed since, the array can only
    be written on the Triton queue: there each form works, and exactly."""
    host = random32(rng, (3, 5))
    with ur_cffi.Queue(tq.context, tq.device) as own:
        array = ur_cffi.asarray(host, queue=own)
    with ur_triton.using(tq):
        for source, expected in ((host[::-1].copy(), host[::-1]), (2.5, np.full((3, 5), 2.5)),
                                 (host[0], np.broadcast_to(host[0], (3, 5))),
                                 (ur_cffi.asarray(host.astype(np.float64), queue=tq), host),
                                 (ur_cffi.asarray(host[1], queue=tq), host[[1, 1, 1]])):
            array.fill(np.nan, queue=tq)
            assert array.copy_(source) is array
            assert np.array_equal(array.to_numpy(queue=tq), expected.astype(np.float32))
        assert array.clone().to_numpy(queue=tq).tolist() == host[1][None].repeat(3, 0).tolist()
    with pytest.raises(ur_cffi.ClosedError, match="the queue this .* was made on is closed"):
        array[...] = 2.5  # assignment stays on the array's own queue


@pytest.mark.parametrize("timing", ["the driver's benchmarker", "warmup and rep", "do_bench"])
def test_prepare_of_an_autotuned_kernel_tunes_on_real_launches(tq, rng, timing):
    """Inside ``prepare`` nothing launches, except the autotuner's timed runs: it chooses from
    real timings, as a first ``kernel[grid]`` does (the kernel counts its programs).  Timed by
    the autotuner's own ``warmup=``/``rep=`` or ``do_bench=``, it timed launches that never
    ran until 2026-12-07."""
    configs = [triton.Config({"BLOCK": 64}, num_warps=1),
               triton.Config({"BLOCK": 512}, num_warps=4)]
    options = {"the driver's benchmarker": {}, "warmup and rep": {"warmup": 1, "rep": 2},
               "do_bench": {"do_bench": lambda call, quantiles: triton.testing.do_bench(
                   call, warmup=1, rep=2, quantiles=quantiles)}}[timing]

    @triton.autotune(configs=configs, key=["n"], **options)
    @triton.jit
    def counted_copy(x_ptr, y_ptr, count_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)
        tl.atomic_add(count_ptr, 1)

    n = int(rng.integers(3000, 6000))
    xh = random32(rng, n)
    x, y = ur_cffi.asarray(xh, queue=tq), poisoned(n, tq)
    count = ur_cffi.zeros(1, np.int32, queue=tq)
    prepared = ur_triton.prepare(counted_copy, lambda meta: (triton.cdiv(n, meta["BLOCK"]),),
                                 x, y, count, n)
    tq.finish()
    assert count.to_numpy()[0] > 0, "the autotuner timed launches that never ran"
    assert all(t[0] > 0 for t in counted_copy.configs_timings.values())
    y.fill(np.nan)
    before = int(count.to_numpy()[0])
    prepared(event=False)
    tq.finish()
    assert np.array_equal(y.to_numpy(), xh)
    blocks = triton.cdiv(n, counted_copy.best_config.kwargs["BLOCK"])
    assert int(count.to_numpy()[0]) - before == blocks


def test_prepare_refuses_an_autotuned_config_with_a_pre_hook(tq, rng):
    """Triton runs a config's ``pre_hook`` before each launch (its split-K matmul zeroes the
    accumulator so); a prepared launch ran it once, at ``prepare``, and each call then added
    onto the last result."""
    def zero_total(arguments):
        arguments["total_ptr"].zero_()

    @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=1, pre_hook=zero_total)],
                     key=["n"])
    @triton.jit
    def total(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(total_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0)))

    n = int(rng.integers(500, 2000))
    xh = rng.integers(0, 10, n).astype(np.float32)
    x, out = ur_cffi.asarray(xh, queue=tq), poisoned(1, tq)
    with pytest.raises(ValueError, match=r"prepare: the config autotuning chose for 'total' "
                                         r"\(.*\) has a pre_hook, which Triton runs before each "
                                         "launch and a prepared launch would not"):
        ur_triton.prepare(total, (triton.cdiv(n, 128),), x, out, n)
    for _ in range(2):  # kernel[grid] runs the hook each time
        total[(triton.cdiv(n, 128),)](x, out, n)
        assert out.to_numpy()[0] == xh.astype(np.float64).sum()


def test_the_rest_of_a_using_block_comes_after_its_wait_list(tq, rng):
    """``using(queue, wait_for=[event])`` ordered only its launches after ``event``: an
    autotuner's ``clone()`` for ``restore_value`` (and any other work of the block on the
    queue) read what ``event``'s kernel had not yet written."""
    n, steps = 1 << 14, 20000  # about a second on the CPU device
    host = rng.integers(-2**31, 2**31, size=n, dtype=np.int64).astype(np.int32)
    x = ur_cffi.asarray(host, queue=tq)
    out = ur_cffi.full(n, -1, np.int32, queue=tq)
    tq.finish()
    with ur_cffi.Queue(tq.context, tq.device) as writer, \
            ur_cffi.Queue(tq.context, tq.device) as reader:
        with ur_triton.using(writer):
            lcg_steps[(n // 256,)](x, out, n, steps, BLOCK=256)
            written = ur_triton.last_event()
        with ur_triton.using(reader, wait_for=[written]):
            copy = out.clone()  # (on the block's queue, as PyTorch's current stream)
        np.testing.assert_array_equal(copy.to_numpy(queue=reader), lcg_reference(host, steps))


def test_last_event_of_a_launch_on_an_in_order_queue_without_profiling(tq, context, device,
                                                                      kernels, rng):
    """There a launch takes no event of its own, and last_event() stands a marker in for it:
    the marker completes only once the launch has, here queued behind a kernel that spins
    until the test lets it go."""
    n = int(rng.integers(1000, 3000))
    host = random32(rng, n)
    program, spin = crash_probe.load(context, kernels, "spin")
    with program, spin, ur_cffi.Queue(context, device) as queue:
        x, y = ur_cffi.asarray(host, queue=queue), poisoned(n, queue)
        with ur_triton.using(queue):  # compiled and loaded before the spinning starts
            scale[(triton.cdiv(n, 256),)](x, y, 3.0, n, BLOCK=256)
        queue.finish()
        y.fill(np.nan)
        flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        spun = ur_cffi.empty(1, np.int32, queue=queue)
        spinning = spin.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag, spun,
                               crash_probe.SPIN_LIMIT, *crash_probe.spin_local())
        with ur_triton.using(queue):
            scale[(triton.cdiv(n, 256),)](x, y, 3.0, n, BLOCK=256)
            assert ur_triton.active_driver()._latest.handle_slot == [None]  # took no event
            event = ur_triton.last_event()
        assert event.queue is queue and ur_triton.last_event() is event
        assert spinning.status != COMPLETE and event.status != COMPLETE
        ctypes.c_int32.from_address(flag.data_ptr()).value = 1
        event.wait()
        assert spinning.status == COMPLETE
        np.testing.assert_allclose(y.to_numpy(), 3.0 * host.astype(np.float64), rtol=1e-6)
        event.close()  # a caller's close: the next caller gets an Event of the same launch
        again = ur_triton.last_event()
        assert again is not event and not again.closed and again.status == COMPLETE
        with again:
            again.wait()
        ur_triton.last_event().wait()


# --- activation ------------------------------------------------------------------------------


def test_using_switches_queues_and_contexts(tq, device, rng):
    """A queue of another context gets its own compiled kernel; leaving the block returns
    launches to the module's queue."""
    n = int(rng.integers(1000, 3000))
    host = random32(rng, n)
    with device.create_context() as other, ur_cffi.Queue(other, device) as queue:
        x, y = ur_cffi.asarray(host, queue=queue), poisoned(n, queue)
        with ur_triton.using(queue) as current:
            assert current is queue and ur_triton.current_queue() is queue
            scale[(triton.cdiv(n, 256),)](x, y, -1.5, n, BLOCK=256)
            assert ur_triton.last_event().queue is queue
        queue.finish()
        np.testing.assert_allclose(y.to_numpy(), -1.5 * host.astype(np.float64), rtol=1e-6)
    assert ur_triton.current_queue() is tq


@TRITON_3_3
def test_torch_paths_are_neutralized(tq):
    """What triton-xpu would import torch for answers without it while active."""
    from triton.backends import backends
    from triton.compiler import make_backend

    import triton.runtime.build

    driver = ur_triton.active_driver()
    assert triton.runtime.driver.active is driver
    assert triton.runtime.build.is_xpu() is True
    backend = make_backend(driver.get_current_target())  # would build arch_parser.c
    assert isinstance(backend, backends["intel"].compiler) and backend.device_arch == ""
    driver.get_device_interface().synchronize()
    cache = driver.get_empty_cache_for_benchmark()
    assert cache.nbytes >= ur_triton.bench.MIN_CACHE_BYTES
    driver.clear_cache(cache)
    tq.finish()
    assert not cache.to_numpy().any()
    with pytest.raises(RuntimeError, match="without PyTorch.*get_current_stream"):
        driver.get_active_torch_device()
    assert driver.get_benchmarker() is ur_triton.bench.benchmark


def test_triton_testing_assert_close_takes_arrays_without_torch(tq, rng):
    """``triton.testing.assert_close`` made torch tensors of its inputs (ModuleNotFoundError
    with torch blocked, a review's port of Triton's tutorials): it reads them as numpy."""
    import ml_dtypes

    host = random32(rng, int(rng.integers(100, 1000)))
    x = ur_cffi.asarray(host, queue=tq)
    triton.testing.assert_close(x, host.astype(np.float64) + 5e-3)
    triton.testing.assert_close(x.to_numpy().tolist(), x)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        triton.testing.assert_close(x, host + 0.1)
    seen = []
    triton.testing.assert_close(x, host + 0.1, atol=lambda dtype: seen.append(dtype) or 0.2)
    assert seen == [np.dtype(np.float32)]
    bf16 = ur_cffi.asarray(host.astype(ml_dtypes.bfloat16), queue=tq)
    triton.testing.assert_close(bf16, host, atol=0, rtol=2 ** -8)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        triton.testing.assert_close(bf16, host, atol=0, rtol=2 ** -12)
    triton.testing.assert_close(1.0, 1.005)
    with pytest.raises(AssertionError, match="^sum 1.0 is not close to 2.0 "
                                             r"\(atol=0.01, rtol=0.0\)$"):
        triton.testing.assert_close(1.0, 2.0, err_msg="sum")
    assert "torch" not in sys.modules or sys.modules["torch"] is None


def test_launch_hooks_see_the_queue(tq, rng):
    """Triton's launch hooks run around a launch with its metadata (3.3: CompiledKernel's
    hooks; 3.4+: the hook chains of triton.knobs, which the launcher passes over when empty)."""
    seen = []
    n = int(rng.integers(100, 1000))
    host = random32(rng, n)
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    with launch_hooks(lambda m: seen.append(("enter", m)), lambda m: seen.append(("exit", m))):
        scale[(triton.cdiv(n, 256),)](x, y, 4.0, n, BLOCK=256)
    scale[(triton.cdiv(n, 256),)](x, y, 4.0, n, BLOCK=256)  # no hooks now
    tq.finish()
    assert [what for what, _ in seen] == ["enter", "exit"]
    metadata = seen[0][1].get()
    assert metadata["stream"] is tq and metadata["name"] == "scale"
    np.testing.assert_allclose(y.to_numpy(), 4.0 * host.astype(np.float64), rtol=1e-6)
    seen.clear()  # prepare() runs no hook: it ran the enter hook, never the exit one
    with launch_hooks(lambda m: seen.append(("enter", m)), lambda m: seen.append(("exit", m))):
        ur_triton.prepare(scale, (triton.cdiv(n, 256),), x, y, 4.0, n, BLOCK=256)()
    assert seen == []


def test_a_launch_on_a_closed_queue_names_the_kernel_and_the_queue(context, device, rng):
    """A using() block's queue closed inside it: a bare "Queue is closed" named nothing."""
    host = random32(rng, 100)
    with ur_cffi.Queue(context, device) as queue:
        x, y = ur_cffi.asarray(host, queue=queue), poisoned(100, queue)
        with ur_triton.using(queue):
            scale[(1,)](x, y, 2.0, 100, BLOCK=128)
            queue.close()
            with pytest.raises(ur_cffi.ClosedError, match="kernel 'scale': Queue is closed "
                               r"\(the queue ur_cffi.triton launches on: a using\(\) block's"):
                scale[(1,)](x, y, 2.0, 100, BLOCK=128)


@contextlib.contextmanager
def launch_hooks(enter, exit):
    chains = getattr(getattr(triton, "knobs", None), "runtime", None)
    if chains is not None and hasattr(chains.launch_enter_hook, "add"):
        chains.launch_enter_hook.add(enter)
        chains.launch_exit_hook.add(exit)
        try:
            yield
        finally:
            chains.launch_enter_hook.remove(enter)
            chains.launch_exit_hook.remove(exit)
        return
    from triton.compiler import CompiledKernel

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CompiledKernel, "launch_enter_hook", enter)
        patch.setattr(CompiledKernel, "launch_exit_hook", exit)
        yield


@pytest.mark.cpu_device("SPIR-V programs")
def test_one_program_per_context_and_binary(tq, rng):
    """Two compiled kernels with the same SPIR-V share one UR program (each has its own
    UR kernel); the program is the one the cache hands out."""
    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                 "BLOCK": "constexpr"}
    target = ur_triton.active_driver().get_current_target()
    first, second = (triton.compile(ASTSource(scale, signature, {"BLOCK": 256}, {}),
                                    target=target) for _ in range(2))
    assert first is not second and first.asm["spv"] == second.asm["spv"]
    n = int(rng.integers(300, 1000))
    host = random32(rng, n)
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    first[(triton.cdiv(n, 256), 1, 1)](x, y, 2.0, n, 256)
    second[(triton.cdiv(n, 256), 1, 1)](y, y, 2.0, n, 256)
    tq.finish()
    assert first.module is second.module and first.function is not second.function
    assert first.module is programs.load(tq.context, tq.device, first.asm["spv"],
                                         first.metadata.build_flags)
    np.testing.assert_allclose(y.to_numpy(), 4.0 * host.astype(np.float64), rtol=1e-6)


def test_threads_launch_on_their_own_queues(context, device, tq, rng):
    """using() is per thread: two threads launch concurrently, each on its own queue."""
    n = int(rng.integers(2000, 5000))
    hosts = [random32(rng, n) for _ in range(2)]
    results, errors = {}, []

    def work(index):
        try:
            with ur_cffi.Queue(context, device) as queue, ur_triton.using(queue):
                x, y = ur_cffi.asarray(hosts[index], queue=queue), poisoned(n, queue)
                for _ in range(20):
                    scale[(triton.cdiv(n, 512),)](x, y, float(index + 2), n, BLOCK=512)
                    assert ur_triton.current_queue() is queue
                queue.finish()
                results[index] = y.to_numpy()
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    scale[(1,)](ur_cffi.zeros(1, queue=tq), poisoned(1, tq), 1.0, 1, BLOCK=512)  # compile
    run_in_threads(work, 2)
    assert not errors, errors
    assert ur_triton.current_queue() is tq
    for index, host in enumerate(hosts):
        np.testing.assert_allclose(results[index], (index + 2) * host.astype(np.float64),
                                   rtol=1e-6)


def test_a_numpy_grid_is_checked_as_python_ints_are(tq):
    """``(2**57 + 1) * 128`` work-items wrapped to 128 in numpy's int64 and uint64: the size
    check passed and one program ran (128 of 1000 elements written)."""
    n = 1000
    x = ur_cffi.asarray(np.ones(n, np.float32), queue=tq)
    y = poisoned(n, tq)
    for grid in ((2**57 + 1,), (np.int64(2**57 + 1),), (np.uint64(2**57 + 1),)):
        with pytest.raises(ValueError, match="global_size"):
            scale[grid](x, y, 2.0, n, BLOCK=128)
    scale[(np.int64(8),)](x, y, 2.0, n, BLOCK=128)
    tq.finish()
    assert np.array_equal(y.to_numpy(), np.full(n, 2.0, np.float32))


def test_odd_grids_queues_and_addresses_are_named(tq, context):
    """A Decimal grid after a numpy one raised "argument must be an integer" (the comparison
    with the block's key); activate(42) named neither the queue nor 42; a reinterpreted byte
    view at an odd address launched float32 loads from it (GPUs fault on them)."""
    n = 64
    x = ur_cffi.asarray(np.ones(n, np.float32), queue=tq)
    y = poisoned(n, tq)
    scale[(np.int64(1),)](x, y, 2.0, n, BLOCK=64)
    scale[(np.int64(1),)](x, y, 2.0, n, BLOCK=64)
    with pytest.raises(TypeError, match=r"grid \(Decimal\('1'\), 1, 1\): cell must be an "
                                        "integer, not Decimal"):
        scale[(Decimal(1),)](x, y, 2.0, n, BLOCK=64)
    for call in (lambda: ur_triton.activate(42), lambda: ur_triton.using("q").__enter__()):
        with pytest.raises(TypeError, match="queue must be a ur_cffi Queue .*, not (int 42|"
                                            "str 'q')"):
            call()
    raw = ur_cffi.zeros(4 * n + 4, np.int8, queue=tq)
    with pytest.raises(ValueError, match="argument 'x_ptr' of kernel 'scale': address "
                                         "0x[0-9a-f]*[13579bdf] is not aligned to the 4-byte "
                                         r"elements of \*fp32"):
        scale[(1,)](triton.reinterpret(raw[1:], tl.float32), y, 2.0, n, BLOCK=64)
    scale[(1,)](triton.reinterpret(raw[4:], tl.float32), y, 2.0, n, BLOCK=64)  # aligned: runs
    tq.finish()
    assert np.array_equal(y.to_numpy(), np.zeros(n, np.float32))


def test_a_launch_error_names_its_own_argument_beside_a_numpy_float(tq):
    """Every TypeError of a launch with a numpy.float64 argument was blamed on that argument
    ("it has a dtype, so Triton takes it for device memory")."""
    x = ur_cffi.asarray(np.ones(100, np.float32), queue=tq)
    y = poisoned(100, tq)
    with pytest.raises((TypeError, OverflowError)) as raised:  # (Triton 3.6's specializer:
        scale[(1,)](x, y, np.float64(2.5), 2**70, BLOCK=128)  # OverflowError)
    assert "argument 'a'" not in str(raised.value)
    if raised.type is TypeError:
        assert re.search(r"'n'.*1180591620717411303424", str(raised.value))
    scale[(1,)](x, y, np.float64(2.5), 100, BLOCK=128)
    tq.finish()
    assert np.array_equal(y.to_numpy(), np.full(100, 2.5, np.float32))


class _Address:
    """An object with ``data_ptr()`` and ``dtype``, as the README says a kernel takes."""

    def __init__(self, address):
        self.address, self.dtype = address, np.dtype(np.float32)

    def data_ptr(self):
        return self.address


@pytest.mark.parametrize("address", [1.5, None, "0x10"], ids=["float", "None", "str"])
def test_a_data_ptr_that_returns_no_integer_is_named(tq, address):
    y = poisoned(100, tq)
    with pytest.raises(TypeError, match=rf"argument 'x_ptr' of kernel 'scale': data_ptr\(\) "
                                        rf"returned {type(address).__name__}"):
        scale[(1,)](_Address(address), y, 2.0, 100, BLOCK=128)


@pytest.mark.parametrize("address, message", [
    (0, "returned 0, a null pointer, for memory that does not say it is empty"),
    (-1, "returned -1, which is no address"), (1 << 64, f"returned {1 << 64}, which is no")])
def test_a_data_ptr_that_is_null_or_no_address_is_refused(tq, address, message):
    # A null data_ptr() of memory with elements passed unchecked: the kernel's loads through
    # it crashed the process (the CPU runtime's SIGSEGV).
    y = poisoned(100, tq)
    with pytest.raises(ValueError, match=rf"argument 'x_ptr' of kernel 'scale': data_ptr\(\) "
                                         rf"{re.escape(message)}"):
        scale[(1,)](_Address(address), y, 2.0, 100, BLOCK=128)
    compiled = scale[(1,)](ur_cffi.zeros(100, np.float32, queue=tq), y, 2.0, 100, BLOCK=128)
    with pytest.raises(ValueError, match=re.escape(message)):  # the compiled kernel by hand
        compiled[(1, 1, 1)](_Address(address), y, 2.0, 100, 128)
    tq.finish()
    for says, empty in (("size", 0), ("shape", (4, 0))):  # (triton.reinterpret's: a shape)
        address = _Address(0)
        setattr(address, says, empty)  # an empty tensor's data_ptr() is 0: nothing reads it
        scale[(1,)](address, y, 2.0, 0, BLOCK=128)
    tq.finish()
    assert np.array_equal(y.to_numpy(), np.zeros(100, np.float32))


def test_a_queue_of_a_subclass_of_queue_takes_launches(tq, context, device, rng):
    # using() took it, then every launch refused it: "the stream must be a ur_cffi Queue".
    class LoggingQueue(ur_cffi.Queue):
        __slots__ = ()

    n = int(rng.integers(100, 2000))
    host = random32(rng, n)
    with LoggingQueue(context, device) as queue:
        x, y = ur_cffi.asarray(host, queue=queue), poisoned(n, queue)
        with ur_triton.using(queue):
            scale[(triton.cdiv(n, 256),)](x, y, 2.0, n, BLOCK=256)
        np.testing.assert_allclose(y.to_numpy(), 2.0 * host.astype(np.float64), rtol=1e-6)


def test_register_and_spill_counts_read_as_numbers_in_either_shape_ur_answers(tq, rng):
    # UR_KERNEL_INFO_SPILL_MEM_SIZE is a uint32_t[] of one count per device (the Level Zero
    # adapter answers it so; int() of that list raised in every load_binary); the OpenCL and
    # CUDA adapters answer neither query, which reads 0.
    import struct

    from ur_cffi.info import VALUE_TYPES, decode
    from ur_cffi.triton import driver

    if "UR_KERNEL_INFO_SPILL_MEM_SIZE" in VALUE_TYPES:  # (UR 0.12 on)
        per_device = decode("UR_KERNEL_INFO_SPILL_MEM_SIZE", struct.pack("<2I", 64, 256))
        assert per_device == [64, 256] and driver._largest(per_device) == 256
    assert driver._largest([]) == 0 and driver._largest(7) == 7
    n = int(rng.integers(100, 2000))
    host = random32(rng, n)
    x, y = ur_cffi.asarray(host, queue=tq), poisoned(n, tq)
    compiled = scale[(triton.cdiv(n, 512),)](x, y, 2.0, n, BLOCK=512)
    tq.finish()
    np.testing.assert_allclose(y.to_numpy(), 2.0 * host.astype(np.float64), rtol=1e-6)
    assert type(compiled.n_regs) is int and type(compiled.n_spills) is int
