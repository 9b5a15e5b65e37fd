"""ur_cffi.triton's state stays right: a closed context's programs and compiled kernels go with
it, ``using()`` is safe from many threads at once without ``activate()``, an event closed
inside ``using(wait_for=...)`` never reaches UR as a released handle, and a failed
``activate()`` changes nothing."""

import gc
import json
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import ur_cffi

triton = pytest.importorskip("triton")
import ur_cffi.triton as ur_triton  # noqa: E402
from concurrency import run_in_threads  # noqa: E402
from kernels import scale  # noqa: E402

TESTS = Path(__file__).parent


pytestmark = pytest.mark.usefixtures("torch_blocked")  # conftest.py


def triton_driver():
    """Triton's active driver as it is, without creating one: on Triton 3.4+ reading
    ``.active`` makes the stock driver, and NVIDIA's needs torch to say it is active."""
    config = triton.runtime.driver
    return vars(config)["_active"] if "_active" in vars(config) else config.active


@pytest.fixture
def inactive():
    """ur_cffi.triton is not active around the test, and Triton's driver is what it was."""
    assert not ur_triton.is_active(), "an earlier test left ur_cffi.triton active"
    before = triton_driver()
    yield before
    assert not ur_triton.is_active()
    assert triton_driver() is before


def run_child(script, *args, validation=False):
    env = dict(os.environ, UR_CFFI_VALIDATION="1" if validation else "0")
    done = subprocess.run([sys.executable, "-c", script, str(TESTS), *args], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


CHILD_PRELUDE = """
import gc, json, sys
sys.path.insert(0, sys.argv[1])
sys.modules["torch"] = None
import numpy as np
import triton
import ur_cffi
import device_under_test
import ur_cffi.triton as ur_triton
from kernels import scale
device = device_under_test.get()
rng = np.random.default_rng()
"""

# Each cycle: a new context and queue, fresh inputs, one launch in using(queue), then both
# closed.  n is 3 more than a multiple of 16, so every cycle compiles the same specialization.
CHURN = CHILD_PRELUDE + """
from ur_cffi import _handle
from ur_cffi.triton import programs

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))

ur_triton.activate()
if sys.argv[2] == "--control":  # what the driver did before: nothing cached is ever forgotten
    ur_triton.active_driver().forget_closed_contexts = lambda: None
    programs._forget_closed_contexts = lambda: None
live, sizes, worst = [], [], 0.0
for cycle in range(int(sys.argv[3])):
    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        n = 16 * int(rng.integers(64, 300)) + 3
        host = rng.standard_normal(n).astype(np.float32)
        a = float(np.float32(rng.uniform(-4, 4)))
        x = ur_cffi.asarray(host, queue=queue)
        y = ur_cffi.empty(n, np.float32, queue=queue)
        y.fill(np.nan)
        with ur_triton.using(queue):
            scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
        queue.finish()
        expected = a * host.astype(np.float64)
        worst = max(worst, float(np.max(np.abs(y.to_numpy() - expected) / np.abs(expected))))
        del x, y
    gc.collect()
    live.append(len(_handle._live) + len(_handle._events))
    sizes.append(rss())
print(json.dumps({"live": live, "rss": sizes, "worst": worst,
                  "cached": programs.cached_programs()}))
"""

CYCLES, WARMUP = 60, 10
RSS_BOUND = 8 * 2**20
"""Growth allowed over the measured cycles.  Measured here: about 1.5 MiB (before the fix:
about 26 MiB, and 2 more live UR objects per cycle: each context's program and kernel)."""


def test_context_churn_leaves_no_programs_behind():
    """60 contexts, each created, used by Triton and closed while ur_cffi.triton is active:
    the live UR objects (ur_cffi's handle registry) stay exactly flat and the process's RSS
    within RSS_BOUND, every result right."""
    found = run_child(CHURN, "--fixed", str(CYCLES))
    assert found["worst"] < 1e-6
    live, sizes = found["live"][WARMUP:], found["rss"][WARMUP:]
    assert max(live) == min(live), found["live"]
    assert found["cached"] <= 1  # the latest context's, until the next using() or activate()
    assert sizes[-1] - sizes[0] < RSS_BOUND, [round(s / 2**20, 1) for s in found["rss"]]


@pytest.mark.cpu_device("SPIR-V programs")
def test_programs_loaded_by_hand_go_with_their_closed_contexts(device, rng):
    """programs.load (the README's way to launch a compiled kernel by hand) kept every closed
    context's program, and with it the context's UR handle, for good: only ur_cffi.triton's
    own scopes forgot them.  Now a load drops those of contexts closed since."""
    from ur_cffi.triton import programs

    compiled = ur_triton.compile(scale, {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32",
                                         "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256},
                                 device=device)
    before = programs.cached_programs()
    for _ in range(4):
        with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
            program = programs.load(context, device, compiled.asm["spv"],
                                    compiled.metadata.build_flags)
            options = ur_triton.kernel_options(compiled)
            kernel = program.kernel(compiled.metadata.name, **options)
            local = options["required_local_size"][0]
            n = int(rng.integers(300, 1000))
            host = rng.standard_normal(n).astype(np.float32)
            x, y = ur_cffi.asarray(host, queue=queue), ur_cffi.empty(n, np.float32, queue=queue)
            y.fill(np.nan)
            kernel.launch(queue, triton.cdiv(n, 256) * local, None, x, y, np.float32(2.0),
                          np.int32(n))
            np.testing.assert_allclose(y.to_numpy(), 2.0 * host.astype(np.float64), rtol=1e-6)
            del program, kernel, x, y
    assert programs.cached_programs() <= before + 1  # the last one's, until the next load


def test_deactivate_drops_the_caches_of_kernels_only_warmed_up_or_refused(device, rng,
                                                                            inactive):
    """A JITFunction was noted only when a launch loaded its kernel: its cache entries made
    by warmup() or by a launch refused as it binds kept their Context (and its UR context,
    never closed) after deactivate()."""
    from kernels import add

    def dropped_after(use):
        context = device.create_context()
        queue = ur_cffi.Queue(context, device)
        ur_triton.activate(queue)
        n = int(rng.integers(300, 1000))
        x = ur_cffi.asarray(rng.standard_normal(n).astype(np.float32), queue=queue)
        use(x, ur_cffi.empty(n, np.float32, queue=queue), n)
        ur_triton.deactivate()
        dropped = weakref.ref(context)
        del context, queue, x
        gc.collect()
        return dropped() is None

    def refused(x, y, n):
        with pytest.raises(TypeError, match="argument 'out_ptr' is a numpy.ndarray"):
            add[(triton.cdiv(n, 256),)](x, y, np.zeros(n, np.float32), n, BLOCK=256)

    assert dropped_after(lambda x, y, n: scale.warmup(x, y, 2.0, n, BLOCK=256, grid=(1,)))
    assert dropped_after(refused)


def test_context_churn_control_measures_the_leak():
    """The measurement sees the leak it guards against: with forgetting switched off, every
    cycle leaves its program and kernel live."""
    found = run_child(CHURN, "--control", "20")
    live = found["live"][WARMUP:]
    assert live[-1] - live[0] >= 2 * (len(live) - 1), found["live"]
    assert found["cached"] == 20


def random_scale_case(rng, queue):
    """Fresh inputs for ``scale``: ``(x, y, a, n, expected)``, y poisoned with NaN."""
    n = int(rng.integers(1000, 6000))
    host = rng.standard_normal(n).astype(np.float32)
    a = float(np.float32(rng.uniform(-4, 4)))
    y = ur_cffi.empty(n, np.float32, queue=queue)
    y.fill(np.nan)
    return ur_cffi.asarray(host, queue=queue), y, a, n, a * host.astype(np.float64)


def test_using_from_many_threads_without_activate(context, device, inactive):
    """Four threads in using() blocks at once, none having called activate(): thread 0 enters
    first (so it is the one that activates) and leaves first, while the others still launch;
    every launch is exact, and Triton's driver is restored after the last block."""
    threads_count = 4
    seeds = np.random.SeedSequence().spawn(threads_count)
    print("seeds:", [s.entropy for s in seeds], [s.spawn_key for s in seeds])
    entered = [threading.Event() for _ in range(threads_count)]
    all_inside = threading.Barrier(threads_count, timeout=120)
    first_left = threading.Event()
    first_launch = threading.Lock()  # the first launches compile one at a time
    errors, launches = [], []

    def work(index):
        rng = np.random.default_rng(seeds[index])

        def launch_and_check(queue):
            x, y, a, n, expected = random_scale_case(rng, queue)
            scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
            assert ur_triton.current_queue() is queue
            np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
            launches.append(index)

        try:
            if index:
                assert entered[index - 1].wait(120)
            with ur_cffi.Queue(context, device) as queue, ur_triton.using(queue):
                entered[index].set()
                with first_launch:
                    launch_and_check(queue)
                all_inside.wait()
                if index:
                    assert first_left.wait(120)  # launch after the first block has ended
                for _ in range(2 + 3 * index):
                    launch_and_check(queue)
            if not index:
                first_left.set()
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            all_inside.abort()
            first_left.set()
            for event in entered:
                event.set()

    run_in_threads(work, threads_count)
    assert not errors, errors
    assert len(launches) == sum(3 + 3 * i for i in range(threads_count))


def test_sequential_using_blocks_without_activate(context, device, rng, inactive):
    """Each block activates and deactivates; a kernel compiled in the first launches right in
    the later ones (its launcher belonged to the first block's driver)."""
    with ur_cffi.Queue(context, device) as queue:
        for _ in range(3):
            x, y, a, n, expected = random_scale_case(rng, queue)
            with ur_triton.using(queue):
                scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
            assert not ur_triton.is_active()
            np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)


def test_using_blocks_without_activate_leave_no_context_variable_behind(context, device, rng,
                                                                       inactive):
    """Each block's driver set a context variable of its own in the caller's context, where a
    variable once set stays for good (a review's soak: 4,100 then 20,100 variables at two
    checkpoints of a loop of empty blocks, RSS 3.5 MB more).  One serves every driver now."""
    import contextvars

    with ur_cffi.Queue(context, device) as queue:
        with ur_triton.using(queue):  # (the first sets it)
            pass
        before = len(contextvars.copy_context())
        for _ in range(20):
            x, y, a, n, expected = random_scale_case(rng, queue)
            with ur_triton.using(queue):
                scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
            np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
        assert len(contextvars.copy_context()) == before


def test_a_compiled_kernel_kept_from_an_ended_session_says_so(context, device, rng, inactive):
    # Launched by hand in a later block, it said "has no queue: call activate()", even after
    # activate() had been called.
    with ur_cffi.Queue(context, device) as queue:
        x, y, a, n, expected = random_scale_case(rng, queue)
        with ur_triton.using(queue):
            compiled = scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
            compiled[(triton.cdiv(n, 256), 1, 1)](x, y, a, n, 256)  # by hand, in its session
        np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
        ended = "loaded while an earlier ur_cffi.triton session was active"
        with ur_triton.using(queue):
            with pytest.raises(RuntimeError, match=ended):
                compiled[(triton.cdiv(n, 256), 1, 1)](x, y, a, n, 256)
        ur_triton.activate(queue)
        try:
            with pytest.raises(RuntimeError, match=ended):
                compiled[(triton.cdiv(n, 256), 1, 1)](x, y, a, n, 256)
            y.fill(np.nan)
            scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)  # loaded for this session
        finally:
            ur_triton.deactivate()
        np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)


def test_deactivate_inside_using_waits_for_the_block(context, device, rng, inactive):
    """deactivate() while a using() block is open ends activate()'s queue at once and
    ur_cffi.triton when the block ends."""
    with ur_cffi.Queue(context, device) as queue, ur_cffi.Queue(context, device) as other:
        ur_triton.activate(queue)
        with ur_triton.using(other):
            ur_triton.deactivate()
            assert ur_triton.is_active() and ur_triton.current_queue() is other
            x, y, a, n, expected = random_scale_case(rng, other)
            scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
            np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
        assert not ur_triton.is_active()


EVENT = CHILD_PRELUDE + """
with device.create_context() as context, \\
        ur_cffi.Queue(context, device, out_of_order=True) as queue:
    n = int(rng.integers(1000, 6000))
    host = rng.standard_normal(n).astype(np.float32)
    x = ur_cffi.zeros(n, np.float32, queue=queue)
    y = ur_cffi.empty(n, np.float32, queue=queue)
    y.fill(np.nan)
    queue.finish()
    copied = x.copy_from(host, blocking=False)
    with ur_triton.using(queue, wait_for=[copied]):
        copied.close()  # the block's launches still wait for the copy
        scale[(triton.cdiv(n, 256),)](x, y, 2.0, n, BLOCK=256)
        launched = ur_triton.last_event()
    launched.wait()
    error = float(np.max(np.abs(y.to_numpy() - 2.0 * host.astype(np.float64))))
    del x, y, launched
print(json.dumps({"error": error}))
"""


def test_an_event_closed_inside_using_is_held_by_the_block(validation_layer_report):
    """The block holds its own reference to each wait_for event, so an event closed inside it
    still orders the launch, and UR never sees a released handle: the run is exact and, where
    UR's validation layer is sound, clean under it (before, it crashed the CPU runtime)."""
    found = run_child(EVENT, validation=not validation_layer_report)
    assert found["error"] == 0.0


def test_using_refuses_an_event_closed_before_it(context, device, inactive):
    with ur_cffi.Queue(context, device) as queue:
        event = queue.barrier()
        event.close()
        with pytest.raises(ur_cffi.ClosedError):
            with ur_triton.using(queue, wait_for=[event]):
                pass


@pytest.mark.parametrize("bad", ["queue", 5, "closed"])
def test_a_failed_activate_changes_nothing(bad, context, device, inactive):
    """activate() of something that is not an open Queue raises and leaves Triton's active
    driver, ur_cffi.triton's queue and Triton's patched functions exactly as they were."""
    import triton.runtime.build
    import triton.testing

    def patched():
        return (triton_driver(), getattr(triton.runtime.build, "is_xpu", None),  # 3.3's
                getattr(triton.testing, "Event", None))

    expected = (ur_cffi.ClosedError, "is closed") if bad == "closed" else (TypeError, "Queue")
    with ur_cffi.Queue(context, device) as queue:
        if bad == "closed":
            bad = ur_cffi.Queue(context, device)
            bad.close()
        originals = patched()
        with pytest.raises(expected[0], match=expected[1]):
            ur_triton.activate(bad)
        assert not ur_triton.is_active() and patched() == originals
        with pytest.raises(expected[0], match=expected[1]):
            with ur_triton.using(bad):
                pass
        assert not ur_triton.is_active() and patched() == originals

        ur_triton.activate(queue)
        try:
            active = patched()
            with pytest.raises(expected[0], match=expected[1]):
                ur_triton.activate(bad)
            assert patched() == active and ur_triton.current_queue() is queue
        finally:
            ur_triton.deactivate()
        assert patched() == originals


def test_the_queue_activate_makes_outlives_deactivate_and_comes_again(inactive, rng):
    """activate() without a queue makes one; activate() again gives the same one (and so its
    context) while it lives, and deactivate() leaves arrays made on it working.  It closed the
    queue before: every such array then raised ClosedError ('Queue is closed')."""
    queue = ur_triton.activate()
    try:
        host = rng.standard_normal(1000).astype(np.float32)
        x = ur_cffi.asarray(host, queue=queue)
        assert ur_triton.activate() is queue
    finally:
        ur_triton.deactivate()
    assert not queue.closed and np.array_equal(x.to_numpy(), host)
    try:
        assert ur_triton.activate() is queue  # x keeps it alive
        y = ur_cffi.empty_like(x)
        scale[(4,)](x, y, 2.0, 1000, BLOCK=256)
        queue.finish()
        np.testing.assert_allclose(y.to_numpy(), host.astype(np.float64) * 2, rtol=1e-6)
    finally:
        ur_triton.deactivate()
    made = weakref.ref(queue)
    del queue, x, y
    gc.collect()
    assert made() is None  # nothing of ur_cffi.triton holds it
    queue = ur_triton.activate()  # its context closed: a new one (every use raised
    try:                          # "Context is closed")
        queue.context.close()
        again = ur_triton.activate()
        assert again is not queue and not again.context.closed
        ur_cffi.zeros(4, queue=again).to_numpy()
    finally:
        ur_triton.deactivate()


@pytest.mark.cpu_device("threads_per_warp and the work-group limit are the CPU device's")
def test_compile_checks_options_without_activate(device, inactive):
    """Ahead-of-time ``compile`` checked its options only while ur_cffi.triton was active:
    inactive, ``num_ctas=2`` compiled, and a launch by hand left half the output unwritten."""
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                 "BLOCK": "constexpr"}
    for options, error, match in (({"num_ctas": 2}, NotImplementedError, "num_ctas=2"),
                                  ({"num_warps": 1024}, ValueError, "largest work-group"),
                                  ({"threads_per_warp": 7}, ValueError, "not a sub-group size")):
        with pytest.raises(error, match=match):
            ur_triton.compile(scale, signature, {"BLOCK": 64}, device=device, **options)
    compiled = ur_triton.compile(scale, signature, {"BLOCK": 64}, device=device)
    assert compiled.metadata.num_ctas == 1


def test_a_recording_block_inside_using_takes_triton_launches(context, device, rng, inactive):
    """The README's Graphs block, as its Example writes Triton code (``using()``, no
    ``activate()``): the recording block inside a ``using`` block, which makes ur_cffi.triton
    active for it (the README's block, without either, raised Triton's "0 active drivers")."""
    n = 1000
    host = rng.standard_normal(n).astype(np.float32)
    with ur_cffi.Queue(context, device) as queue, ur_cffi.Graph(context, device) as graph:
        x = ur_cffi.asarray(host, queue=queue)
        y = ur_cffi.full(n, np.nan, np.float32, queue=queue)
        with ur_triton.using(queue), graph.recording(queue):
            scale[(triton.cdiv(n, 256),)](x, y, 3.0, n, BLOCK=256)
        assert not ur_triton.is_active() and len(graph.commands) == 1
        assert np.isnan(y.to_numpy()).all()  # recorded, not run
        graph.replay(queue).wait()
        np.testing.assert_allclose(y.to_numpy(), host.astype(np.float64) * 3.0, rtol=1e-6)


def test_using_refuses_a_wait_for_event_of_another_context(queue, device, rng):
    """It reached the launch, which failed with UR_RESULT_ERROR_UNKNOWN; wait_for=5 gave
    "'int' object is not iterable"."""
    with ur_cffi.Context([device]) as other, ur_cffi.Queue(other, device) as elsewhere:
        event = ur_cffi.zeros(4, np.float32, queue=elsewhere).fill(1.0, blocking=False)
        with pytest.raises(ValueError, match="wait_for: <Event .*> belongs to another context"):
            with ur_triton.using(queue, wait_for=[event]):
                pass
        event.wait()
    with pytest.raises(TypeError, match="wait_for takes an Event or a list or tuple of Events, "
                                        "not int 5"):
        with ur_triton.using(queue, wait_for=5):
            pass


def test_a_task_made_inside_a_using_block_outlives_its_wait_list(context, device, rng,
                                                                  inactive):
    """A task made inside using(queue, wait_for=...) keeps the block's scope (a ContextVar):
    after the block ended, its launches handed UR the wait events the block had released."""
    import asyncio

    default, other = (ur_cffi.Queue(context, device) for _ in range(2))
    ur_triton.activate(default)
    x, y, a, n, expected = random_scale_case(rng, other)
    results = []

    async def later(block_ended):
        await block_ended.wait()
        for _ in range(50):
            for _ in range(5):  # events made and freed meanwhile (reusing the freed memory)
                default.barrier().close()
            y.fill(np.nan)
            scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
        results.append((ur_triton.current_queue(), y.to_numpy()))

    async def main():
        event, block_ended = default.barrier(), asyncio.Event()
        with ur_triton.using(other, wait_for=[event]):
            task = asyncio.create_task(later(block_ended))
            event.close()
        block_ended.set()
        await task

    try:
        asyncio.run(main())
        queue, result = results[0]
        assert queue is other  # (the task's copy of the context)
        np.testing.assert_allclose(result, expected, rtol=1e-6)
    finally:
        ur_triton.deactivate()
        default.close()
        other.close()


def test_using_blocks_of_asyncio_tasks_on_one_thread_are_each_tasks_own(context, device, rng,
                                                                           inactive):
    """Blocks of two asyncio tasks on one thread, both open: a launch in A's block went to B's
    queue (the stack was the thread's), and A's finish of its own queue returned before it ran.
    Then A leaves while B is inside its block (leaving raised, once)."""
    import asyncio

    queues = {name: ur_cffi.Queue(context, device) for name in "AB"}
    default = ur_cffi.Queue(context, device)
    ur_triton.activate(default)
    seen = {}

    async def task(name, entered, other_entered, leave):
        with ur_triton.using(queues[name]):
            entered.set()
            await other_entered.wait()
            x, y, a, n, expected = random_scale_case(rng, queues[name])
            scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
            seen[name] = ur_triton.last_event().queue, ur_triton.current_queue()
            queues[name].finish()
            np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
            await leave.wait()

    async def main():
        a_in, b_in, a_out, b_out = (asyncio.Event() for _ in range(4))
        a = asyncio.create_task(task("A", a_in, b_in, a_out))
        await a_in.wait()
        b = asyncio.create_task(task("B", b_in, a_in, b_out))
        await b_in.wait()
        seen["main, both open"] = ur_triton.current_queue()
        a_out.set()
        await a  # A leaves while B is inside its block
        b_out.set()
        await b
        seen["both left"] = ur_triton.current_queue()

    try:
        asyncio.run(main())
        assert seen["A"] == (queues["A"], queues["A"]) and \
            seen["B"] == (queues["B"], queues["B"])
        assert seen["main, both open"] is default and seen["both left"] is default
        x, y, a, n, expected = random_scale_case(rng, default)
        scale[(triton.cdiv(n, 256),)](x, y, a, n, BLOCK=256)
        assert ur_triton.last_event().queue is default
        np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)
    finally:
        ur_triton.deactivate()
        for queue in (*queues.values(), default):
            queue.close()
