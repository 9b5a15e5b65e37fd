"""ur_cffi.triton's launcher skipping the refill of its argument block when a launch passes the
very objects (and grid, context) the block was last filled from.  Every skip must see a change
of object, value, grid or memory, and a closed array must raise, never launch."""


import numpy as np
import pytest

import ur_cffi

triton = pytest.importorskip("triton")
ur_triton = pytest.importorskip("ur_cffi.triton")

from concurrency import run_in_threads  # noqa: E402
from kernels import scale  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_blocked")  # conftest.py
BLOCK = 256


@pytest.fixture(scope="module")
def rq(context, device):
    """An in-order queue without profiling: the launcher's leanest path."""
    with ur_cffi.Queue(context, device) as queue:
        ur_triton.activate(queue)
        yield queue
        ur_triton.deactivate()


def poisoned(n, queue):
    out = ur_cffi.empty(n, np.float32, queue=queue)
    out.fill(np.nan)
    return out


def launch_and_read(queue, x, y, a, n, grid=None):
    y.fill(np.nan)
    scale[grid or (triton.cdiv(n, BLOCK),)](x, y, a, n, BLOCK=BLOCK)
    queue.finish()
    return y.to_numpy()


def expected(host, a):
    return np.float32(a) * host.astype(np.float64)


def test_repeated_launches_with_the_same_objects_stay_exact(rq, rng):
    n = int(rng.integers(2000, 5000))
    host = rng.standard_normal(n).astype(np.float32)
    x, y, a = ur_cffi.asarray(host, queue=rq), poisoned(n, rq), float(rng.uniform(-4, 4))
    for _ in range(4):
        np.testing.assert_allclose(launch_and_read(rq, x, y, a, n), expected(host, a),
                                   rtol=1e-6)


def test_equal_scalars_that_are_other_objects_are_packed_again(rq, rng):
    # 0.0 == -0.0 (and 2 == 2.0): a launch that compared values instead of objects would
    # keep the previous launch's bits.
    n = int(rng.integers(2000, 5000))
    host = np.abs(rng.standard_normal(n)).astype(np.float32) + 1
    x, y = ur_cffi.asarray(host, queue=rq), poisoned(n, rq)
    for a in (0.0, -0.0, 0.0, float(rng.uniform(1, 2)), -0.0):
        out = launch_and_read(rq, x, y, a, n)
        np.testing.assert_allclose(out, expected(host, a), rtol=1e-6)
        assert (np.signbit(out) == np.signbit(a)).all()


def test_a_changed_grid_with_the_same_objects_is_packed_again(rq, rng):
    n = 4 * BLOCK + int(rng.integers(1, BLOCK))
    host = rng.standard_normal(n).astype(np.float32)
    x, y, a = ur_cffi.asarray(host, queue=rq), poisoned(n, rq), float(rng.uniform(-4, 4))
    for blocks in (1, triton.cdiv(n, BLOCK), 2, triton.cdiv(n, BLOCK)):
        out = launch_and_read(rq, x, y, a, n, grid=(blocks,))
        covered = min(n, blocks * BLOCK)
        np.testing.assert_allclose(out[:covered], expected(host, a)[:covered], rtol=1e-6)
        assert np.isnan(out[covered:]).all()


def test_a_grid_equal_to_the_reused_one_but_not_integers_is_refused(rq, rng):
    """16.0 == 16 and True == 1: a grid a first launch refuses is refused after a launch of
    the equal integer grid with the same objects too, not launched from its reused block."""
    n = 16 * BLOCK
    host = rng.standard_normal(n).astype(np.float32)
    x, y, a = ur_cffi.asarray(host, queue=rq), poisoned(n, rq), float(rng.uniform(-4, 4))
    for grid, respelled in (((16,), (16.0,)), ((1,), (True,)), ((2, 1), (2, 1.0))):
        launch_and_read(rq, x, y, a, n, grid=grid)
        with pytest.raises(TypeError, match="must be an integer"):
            scale[respelled](x, y, a, n, BLOCK=BLOCK)


def test_a_view_dropped_and_another_made_in_its_place_is_packed_again(rq, rng):
    # CPython gives a new object the id of one just freed: a view of other memory made right
    # after the previous launch's view was dropped must not launch on the old address.
    n = 1000
    host = rng.standard_normal(n + 64).astype(np.float32)
    base, y, a = ur_cffi.asarray(host, queue=rq), poisoned(n, rq), float(rng.uniform(-4, 4))
    view, same_id = base[:n], 0
    for start in range(4, 64, 4):  # 16-byte steps: one alignment specialization
        previous = id(view)
        del view
        view = base[start:start + n]
        same_id += id(view) == previous
        np.testing.assert_allclose(launch_and_read(rq, view, y, a, n),
                                   expected(host[start:start + n], a), rtol=1e-6)
    assert same_id  # the case above did come up


def test_memory_freed_and_reallocated_is_packed_again_and_closed_memory_raises(rq, rng):
    n = int(rng.integers(2000, 5000))
    y, a = poisoned(n, rq), float(rng.uniform(-4, 4))
    for _ in range(4):
        host = rng.standard_normal(n).astype(np.float32)
        x = ur_cffi.asarray(host, queue=rq)
        np.testing.assert_allclose(launch_and_read(rq, x, y, a, n), expected(host, a),
                                   rtol=1e-6)
        x.close()  # its memory goes back to the cache, for the next x
    y.fill(np.nan)
    with pytest.raises(ur_cffi.ClosedError, match="closed"):
        scale[(triton.cdiv(n, BLOCK),)](x, y, a, n, BLOCK=BLOCK)
    rq.finish()
    assert np.isnan(y.to_numpy()).all()


def test_threads_alternating_arguments_on_one_kernel_stay_exact(context, device, rq, rng):
    # One launcher, one shared block: each thread's launches must carry its own arguments
    # even when the other thread refilled the block in between.
    n = int(rng.integers(2000, 5000))
    hosts = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    errors = []

    def work(index):
        try:
            with ur_cffi.Queue(context, device) as queue, ur_triton.using(queue):
                x, y = ur_cffi.asarray(hosts[index], queue=queue), poisoned(n, queue)
                a = float(index + 2)
                for _ in range(40):
                    np.testing.assert_allclose(launch_and_read(queue, x, y, a, n),
                                               expected(hosts[index], a), rtol=1e-6)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    launch_and_read(rq, ur_cffi.zeros(n, queue=rq), poisoned(n, rq), 1.0, n)  # compile
    run_in_threads(work, 2)
    assert not errors, errors


def test_a_refill_by_another_launch_just_before_the_lock_is_seen(rq, rng):
    # The race the launcher checks for under its lock, made to happen: between a launch's
    # finding the block already filled with its arguments and its taking the lock, another
    # launch refills the block with its own.
    driver = ur_triton.active_driver()
    n = int(rng.integers(2000, 5000))
    grid = (triton.cdiv(n, BLOCK),)
    hosts = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    (xa, xb), (ya, yb) = ([ur_cffi.asarray(h, queue=rq) for h in hosts],
                          [poisoned(n, rq) for _ in range(2)])
    a, b = float(rng.uniform(1, 2)), float(rng.uniform(-2, -1))
    for _ in range(2):  # (the first may take the slow path that learns the dtype's name)
        scale[grid](xa, ya, a, n, BLOCK=BLOCK)  # the block now holds a's arguments
    lock = driver.raw_launch_lock

    class Interloper:
        armed = True

        def acquire(self):
            if self.armed:
                self.armed = False
                scale[grid](xb, yb, b, n, BLOCK=BLOCK)
            return lock.acquire()

        def release(self):
            lock.release()

    ya.fill(np.nan)
    driver.raw_launch_lock = interloper = Interloper()
    try:
        scale[grid](xa, ya, a, n, BLOCK=BLOCK)
    finally:
        driver.raw_launch_lock = lock
    rq.finish()
    assert not interloper.armed  # the other launch did come in between
    np.testing.assert_allclose(ya.to_numpy(), expected(hosts[0], a), rtol=1e-6)
    np.testing.assert_allclose(yb.to_numpy(), expected(hosts[1], b), rtol=1e-6)


def test_a_scalar_that_can_change_in_place_is_packed_again(rq, rng):
    # Called compiled, without Triton's dispatch, a launch may take any object struct can
    # pack: a 0-d numpy array changed in place between launches must not reuse the block.
    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                 "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(scale, signature, {"BLOCK": BLOCK}, {}),
                              target=ur_triton.active_driver().get_current_target())
    n = int(rng.integers(2000, 5000))
    host = rng.standard_normal(n).astype(np.float32)
    x, y = ur_cffi.asarray(host, queue=rq), poisoned(n, rq)
    a = np.array(rng.uniform(1, 2), np.float32)  # 0-d: mutable, unlike a numpy scalar
    for _ in range(3):
        y.fill(np.nan)
        compiled[(triton.cdiv(n, BLOCK), 1, 1)](x, y, a, n, BLOCK)
        rq.finish()
        np.testing.assert_allclose(y.to_numpy(), expected(host, float(a)), rtol=1e-6)
        a[()] += 1


def test_the_block_kept_for_reuse_does_not_keep_its_arrays_alive(rq, rng):
    """The launcher held the last launch's arguments (the ids in its key had to stay theirs):
    two 64 MiB arrays dropped by the user stayed allocated until the kernel's next launch with
    other arguments.  An array that goes now forgets the block, so an object that takes its
    id later is packed again."""
    import gc
    import weakref

    n = 1 << 14
    for round_ in range(3):
        host = rng.standard_normal(n).astype(np.float32)
        x, y, a = ur_cffi.asarray(host, queue=rq), poisoned(n, rq), float(rng.uniform(-4, 4))
        for _ in range(2):  # the second launch keeps the block for reuse
            np.testing.assert_allclose(launch_and_read(rq, x, y, a, n), expected(host, a),
                                       rtol=1e-6)
        gone = weakref.ref(x), weakref.ref(y)
        del x, y
        gc.collect()
        assert gone[0]() is None and gone[1]() is None, f"round {round_}"


FREED_STILL_USM = ("this runtime still reports the freed address as USM memory of the context: "
                   "there is nothing to refuse")


def _compiled_scale():
    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                 "BLOCK": "constexpr"}
    return triton.compile(ASTSource(scale, signature, {"BLOCK": BLOCK}, {}),
                          target=ur_triton.active_driver().get_current_target())


def _into_doomed(rq, rng):
    """A compiled ``scale`` and what it reads, and an array ``doomed`` it writes, given by its
    integer address."""
    n = int(rng.integers(2000, 5000))
    host = rng.standard_normal(n).astype(np.float32)
    return _compiled_scale(), ur_cffi.asarray(host, queue=rq), poisoned(n, rq), host, n


def _free(doomed, queue) -> None:
    """Close ``doomed`` and give its memory back (not only to the cache); skip where the
    runtime still calls its address USM memory."""
    address = doomed.data_ptr()
    doomed.close()
    ur_cffi.empty_cache()
    if ur_cffi.memory.is_usm(queue.context, address):
        pytest.skip(FREED_STILL_USM)


def test_a_prepared_launch_checks_its_integer_addresses_after_a_release(rq, rng):
    # Kernel.prepare did; ur_cffi.triton.prepare launched into the freed memory (a crash).
    compiled, x, doomed, host, n = _into_doomed(rq, rng)
    a = float(rng.uniform(1, 2))
    launch = ur_triton.prepare(compiled, (triton.cdiv(n, BLOCK), 1, 1), x, doomed.data_ptr(),
                               a, n, BLOCK)
    launch(event=False)
    rq.finish()
    np.testing.assert_allclose(doomed.to_numpy(), expected(host, a), rtol=1e-6)
    _free(doomed, rq)
    with pytest.raises(ValueError, match=r"argument 'y_ptr' of kernel 'scale': address 0x"
                                         r"[0-9a-f]+ is no longer USM memory of the "
                                         r"context \(freed since the launch was prepared"):
        launch(event=False)


def test_a_graph_checks_its_launches_integer_addresses_after_a_release(context, device, rq,
                                                                      rng):
    # Its replay launched into the freed memory (a crash), by Triton's rules or Kernel's.
    compiled, x, doomed, host, n = _into_doomed(rq, rng)
    a = float(rng.uniform(1, 2))
    graph = ur_cffi.Graph(context, device)
    with graph.recording(rq):
        compiled[(triton.cdiv(n, BLOCK), 1, 1)](x, doomed.data_ptr(), a, n, BLOCK)
    graph.replay(rq).wait()
    np.testing.assert_allclose(doomed.to_numpy(), expected(host, a), rtol=1e-6)
    _free(doomed, rq)
    with pytest.raises(ValueError, match=r"replay: command 0 \(launch of kernel 'scale'\): "
                                         r"argument 'y_ptr' .* is no longer USM memory"):
        graph.replay(rq)
    graph.close()


def test_a_prepared_launch_added_to_a_graph_after_a_release_checks_its_addresses(
        context, device, rq, rng):
    # Graph.add took it as checked: a graph made after the release saw none to check for.
    compiled, x, doomed, host, n = _into_doomed(rq, rng)
    launch = ur_triton.prepare(compiled, (triton.cdiv(n, BLOCK), 1, 1), x, doomed.data_ptr(),
                               1.0, n, BLOCK)
    _free(doomed, rq)
    graph = ur_cffi.Graph(context, device)
    with pytest.raises(ValueError, match=r"argument 'y_ptr' of kernel 'scale': address 0x"
                                         r"[0-9a-f]+ is no longer USM memory"):
        graph.add(launch)
    assert not graph.commands
    graph.close()


@pytest.mark.parametrize("offset", [1 << 64, -(1 << 64), None])
def test_an_integer_address_past_64_bits_or_negative_is_named(rq, rng, offset):
    # An address plus 2**64 passed the USM check (cffi wraps it) and failed packing with
    # "memoryview: invalid value for format 'Q'"; a negative one was shown as 0x-5607...
    compiled, x, y, _, n = _into_doomed(rq, rng)
    address = -y.data_ptr() if offset is None else y.data_ptr() + offset
    with pytest.raises(ValueError, match=rf"argument 'y_ptr' of kernel 'scale': {address} is "
                                         r"no address \(negative or past 64 bits\)"):
        compiled[(triton.cdiv(n, BLOCK), 1, 1)](x, address, 1.0, n, BLOCK)
    with pytest.raises(ValueError, match="is no address"):
        ur_triton.prepare(compiled, (triton.cdiv(n, BLOCK), 1, 1), x, address, 1.0, n, BLOCK)
