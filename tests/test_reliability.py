"""Reliability: bad input is refused in Python with a message naming the value at fault, an
allocation the device cannot satisfy raises ``MemoryError`` and loses nothing, and thousands
of allocate/copy/free and program/kernel cycles leak nothing.

Everything that could crash runs in a child process (see ``crash_probe.py``).
"""

from __future__ import annotations

import json
import secrets
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

import crash_probe
import device_under_test
import ur_cffi
from ur_cffi import ClosedError, URError

N = 1000  # elements of the arrays the bad calls aim at: not a multiple of the block


class Objects(SimpleNamespace):
    @property
    def spirv(self) -> bytes:
        """axpy's SPIR-V; skips the test where the device takes another binary."""
        if self.spirv_or_none is None:
            pytest.skip(f"needs SPIR-V; the test device ({device_under_test.TYPE}) takes "
                        "another binary")
        return self.spirv_or_none

    @property
    def block_sums(self):
        """block_sums, whose shared memory is an argument; skips the test where it is not."""
        if isinstance(self.block_sums_or_why_not, str):
            pytest.skip(self.block_sums_or_why_not)
        return self.block_sums_or_why_not


@pytest.fixture
def rng():
    seed = secrets.randbits(64)
    print(f"numpy seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def built(device, context, kernels):
    """Programs, kernels and closed objects shared by the bad-input tests (built once)."""
    other_context = device.create_context()
    axpy_program, axpy = crash_probe.load(context, kernels, "axpy")
    if crash_probe.spirv(kernels, "block_sums") is not None:
        _, block_sums = crash_probe.load(context, kernels, "block_sums")
    else:  # NVIDIA: its shared memory is the launch's, not a "local" argument
        block_sums = (f"block_sums takes its shared memory as an argument on the CPU device "
                      f"only, not on {device_under_test.TYPE}")
    _, foreign_axpy = crash_probe.load(other_context, kernels, "axpy")
    closed_program, closed_kernel = crash_probe.load(context, kernels, "axpy")
    closed_kernel.close()
    closed_program.close()
    closed_context = device.create_context()
    closed_context.close()
    yield Objects(device=device, context=context, other_context=other_context,
                  axpy=axpy, block_sums_or_why_not=block_sums, foreign_axpy=foreign_axpy,
                  closed_program=closed_program, closed_kernel=closed_kernel,
                  closed_context=closed_context, spirv_or_none=crash_probe.spirv(kernels, "axpy"))
    for resource in (foreign_axpy, axpy, block_sums, axpy_program):
        if not isinstance(resource, str):
            resource.close()
    other_context.close()


@pytest.fixture
def o(built, rng):
    """The objects a bad call is aimed at; afterwards, checks that none of them changed."""
    context, device = built.context, built.device
    with ur_cffi.Queue(context, device) as queue, \
            ur_cffi.Queue(built.other_context, device) as other_queue:
        host = rng.standard_normal(N).astype(np.float32)
        x = ur_cffi.asarray(host, queue=queue)
        closed_queue = ur_cffi.Queue(context, device)
        closed_queue.close()
        closed_array = ur_cffi.zeros(N, queue=queue)
        closed_array.close()
        closed_event = x.fill(1.0, count=0)
        closed_event.close()
        closed_buffer = ur_cffi.Buffer(context, 64)
        closed_buffer.close()
        read_only = np.zeros(10, np.float32)
        read_only.flags.writeable = False
        objects = Objects(
            **vars(built), queue=queue, other_queue=other_queue, x=x, host=host,
            y=ur_cffi.zeros(N, queue=queue), out=ur_cffi.zeros(N, queue=queue),
            foreign=ur_cffi.zeros(N, queue=other_queue),
            foreign_event=ur_cffi.zeros(4, queue=other_queue).fill(2.0),
            buffer=ur_cffi.Buffer(context, 16), closed_queue=closed_queue,
            closed_array=closed_array, closed_event=closed_event, closed_buffer=closed_buffer,
            read_only=read_only, global_size=-(-N // crash_probe.BLOCK) * crash_probe.LOCAL_SIZE)
        yield objects
        # Nothing the refused call touched has changed, and the queue still works.
        assert np.array_equal(x.to_numpy(), host)
        assert not np.any(objects.out.to_numpy())


def launch(o, *args, kernel=None, global_size=None, local_size=crash_probe.LOCAL_SIZE, **kw):
    """Launch axpy (or ``kernel``) on ``o.queue``; arguments default to a valid call."""
    kernel = kernel or o.axpy
    args = args or (o.x, o.y, o.out, 2.0, N)
    return kernel.launch(o.queue, o.global_size if global_size is None else global_size,
                         local_size, *args, **kw)


def _xfail(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


# (id, exception, substrings the message must contain, the call, raised before any UR call?)
BAD_INPUTS = [
    # --- sizes and shapes -------------------------------------------------------------------
    ("shape-negative", ValueError, ["-1"], lambda o: ur_cffi.empty(-1, queue=o.queue)),
    ("shape-negative-2d", ValueError, ["-2"], lambda o: ur_cffi.empty((3, -2), queue=o.queue)),
    ("shape-not-integer", (TypeError, ValueError), ["2.5"],
     lambda o: ur_cffi.empty(2.5, queue=o.queue)),
    ("size-beyond-size_t", (ValueError, MemoryError), [str(2**64)],
     lambda o: ur_cffi.empty(2**64, np.uint8, queue=o.queue)),
    ("shape-product-beyond-size_t", (ValueError, MemoryError), [str(2**40)],
     lambda o: ur_cffi.empty((2**40, 2**40), queue=o.queue)),
    ("dtype-object", TypeError, ["object"], lambda o: ur_cffi.empty(3, object, queue=o.queue)),
    ("kind-unknown", ValueError, ["'texture'"],
     lambda o: ur_cffi.empty(3, queue=o.queue, kind="texture")),
    ("buffer-size-zero", ValueError, ["0"], lambda o: ur_cffi.Buffer(o.context, 0)),
    ("buffer-size-negative", ValueError, ["-8"], lambda o: ur_cffi.Buffer(o.context, -8)),
    # --- copies and fills that do not fit ---------------------------------------------------
    ("copy_from-negative-offset", ValueError, ["-1"],
     lambda o: o.x.copy_from(np.ones(10, np.float32), offset=-1)),
    ("copy_from-past-the-end", ValueError, ["10", str(N - 5), str(N)],
     lambda o: o.x.copy_from(np.ones(10, np.float32), offset=N - 5)),
    ("copy_from-too-large", ValueError, [str(N + 1), str(N)],
     lambda o: o.x.copy_from(np.ones(N + 1, np.float32))),
    ("copy_from-offset-not-integer", (TypeError, ValueError), ["1.5"],
     lambda o: o.x.copy_from(np.ones(3, np.float32), offset=1.5)),
    ("copy_from-dtype", TypeError, ["float64", "float32"],
     lambda o: o.x.copy_from(np.ones(10))),
    ("copy_from-not-an-array", TypeError, ["list"], lambda o: o.x.copy_from([1.0, 2.0])),
    ("copy_from-usm-dtype", TypeError, ["int32", "float32"],
     lambda o: o.x.copy_from(ur_cffi.zeros(10, np.int32, queue=o.queue))),
    ("copy_from-usm-too-large", ValueError, [str(N + 1), str(N)],
     lambda o: o.x.copy_from(ur_cffi.zeros(N + 1, queue=o.queue))),
    ("copy_from-usm-of-another-context", ValueError, ["context"],
     lambda o: o.x.copy_from(o.foreign)),
    ("copy_from-queue-of-another-context", ValueError, ["context"],
     lambda o: o.x.copy_from(np.ones(10, np.float32), queue=o.other_queue)),
    ("copy_to-too-large", ValueError, [str(N + 1), str(N)],
     lambda o: o.x.copy_to(np.empty(N + 1, np.float32))),
    ("copy_to-offset-past-the-end", ValueError, [str(N - 9)],
     lambda o: o.x.copy_to(np.empty(10, np.float32), offset=N - 9)),
    ("copy_to-offset-not-integer", (TypeError, ValueError), ["1.5"],
     lambda o: o.x.copy_to(np.empty(3, np.float32), offset=1.5)),
    ("copy_to-not-contiguous", ValueError, ["contiguous"],
     lambda o: o.x.copy_to(np.empty(20, np.float32)[::2])),
    ("copy_to-read-only", ValueError, ["writeable"], lambda o: o.x.copy_to(o.read_only)),
    ("copy_to-dtype", TypeError, ["float64", "float32"],
     lambda o: o.x.copy_to(np.empty(10))),
    ("copy_to-usm-of-another-context", ValueError, ["context"],
     lambda o: o.x.copy_to(o.foreign)),
    ("fill-count-too-large", ValueError, [str(N), "10"],
     lambda o: o.x.fill(0.0, offset=10, count=N)),
    ("fill-negative-count", ValueError, ["-3"], lambda o: o.x.fill(0.0, count=-3)),
    ("fill-offset-not-integer", (TypeError, ValueError), ["1.5"],
     lambda o: o.x.fill(0.0, offset=1.5)),
    ("fill-value-does-not-fit", (ValueError, OverflowError), [str(2**40)],
     lambda o: ur_cffi.zeros(4, np.int32, queue=o.queue).fill(2**40)),
    ("buffer-write-past-the-end", ValueError, ["20", "16"],
     lambda o: o.buffer.write(o.queue, np.ones(5, np.float32))),
    ("buffer-read-negative-offset", ValueError, ["-4"],
     lambda o: o.buffer.read(o.queue, np.empty(2, np.float32), offset=-4)),
    ("buffer-queue-of-another-context", ValueError, ["context"],
     lambda o: o.buffer.write(o.other_queue, np.ones(2, np.float32))),
    ("wait_for-not-an-event", TypeError, ["int"], lambda o: o.x.fill(0.0, wait_for=[3])),
    ("wait_for-event-of-another-context", ValueError, ["context"],
     lambda o: o.out.fill(0.0, wait_for=[o.foreign_event])),
    # --- closed objects -----------------------------------------------------------------------
    ("closed-array-copy_from", ClosedError, ["USMArray", "closed"],
     lambda o: o.closed_array.copy_from(o.host)),
    ("closed-array-to_numpy", ClosedError, ["USMArray", "closed"],
     lambda o: o.closed_array.to_numpy()),
    ("closed-array-as-source", ClosedError, ["USMArray", "closed"],
     lambda o: o.x.copy_from(o.closed_array)),
    ("closed-array-as-kernel-argument", ClosedError, ["USMArray", "closed"],
     lambda o: launch(o, o.x, o.closed_array, o.out, 2.0, N)),
    ("closed-queue-finish", ClosedError, ["Queue", "closed"], lambda o: o.closed_queue.finish()),
    ("closed-queue-allocate", ClosedError, ["Queue", "closed"],
     lambda o: ur_cffi.empty(3, queue=o.closed_queue)),
    ("closed-queue-copy", ClosedError, ["Queue", "closed"],
     lambda o: o.x.copy_from(o.host, queue=o.closed_queue)),
    ("closed-queue-launch", ClosedError, ["Queue", "closed"],
     lambda o: o.axpy.launch(o.closed_queue, o.global_size, crash_probe.LOCAL_SIZE, o.x, o.y,
                             o.out, 2.0, N)),
    ("closed-context-queue", ClosedError, ["Context", "closed"],
     lambda o: ur_cffi.Queue(o.closed_context, o.device)),
    ("closed-context-program", ClosedError, ["Context", "closed"],
     lambda o: ur_cffi.Program.from_il(o.closed_context, o.spirv)),
    ("closed-program-kernel", ClosedError, ["Program", "closed"],
     lambda o: o.closed_program.kernel("axpy")),
    ("closed-kernel-launch", ClosedError, ["Kernel", "closed"],
     lambda o: launch(o, kernel=o.closed_kernel)),
    ("closed-event-wait", ClosedError, ["Event", "closed"], lambda o: o.closed_event.wait()),
    ("closed-event-in-wait_for", ClosedError, ["Event", "closed"],
     lambda o: o.x.fill(0.0, count=0, wait_for=[o.closed_event])),
    ("closed-buffer-write", ClosedError, ["Buffer", "closed"],
     lambda o: o.closed_buffer.write(o.queue, np.ones(2, np.float32))),
    # --- kernel arguments ---------------------------------------------------------------------
    ("kernel-too-few-arguments", TypeError, ["5", "4"],
     lambda o: launch(o, o.x, o.y, o.out, 2.0)),
    ("kernel-too-many-arguments", TypeError, ["5", "6"],
     lambda o: launch(o, o.x, o.y, o.out, 2.0, N, N)),
    ("kernel-missing-local-argument", TypeError, ["4", "3"],
     lambda o: launch(o, o.x, o.out, N, kernel=o.block_sums)),
    ("kernel-usm-for-int32", TypeError, ["argument 4", "int32"],
     lambda o: launch(o, o.x, o.y, o.out, 2.0, o.x)),
    ("kernel-float-for-int32", TypeError, ["argument 4", "2.5"],
     lambda o: launch(o, o.x, o.y, o.out, 2.0, 2.5)),
    ("kernel-None-for-float32", TypeError, ["argument 3", "None"],
     lambda o: launch(o, o.x, o.y, o.out, None, N)),
    ("kernel-str-for-float32", TypeError, ["argument 3", "'abc'"],
     lambda o: launch(o, o.x, o.y, o.out, "abc", N)),
    ("kernel-float64-for-float32", TypeError, ["argument 3", "float64"],
     lambda o: launch(o, o.x, o.y, o.out, np.float64(2.0), N)),
    ("kernel-int32-overflow", ValueError, ["argument 4", str(2**40)],
     lambda o: launch(o, o.x, o.y, o.out, 2.0, 2**40)),
    ("kernel-local-for-ptr", TypeError, ["argument 0", "Local"],
     lambda o: launch(o, ur_cffi.Local(8), o.y, o.out, 2.0, N)),
    ("kernel-ndarray-for-ptr", TypeError, ["argument 0", "ndarray"],
     lambda o: launch(o, o.host, o.y, o.out, 2.0, N)),
    ("kernel-buffer-for-ptr", TypeError, ["argument 0", "Buffer"],
     lambda o: launch(o, o.buffer, o.y, o.out, 2.0, N)),
    ("kernel-usm-of-another-context", ValueError, ["argument 1", "context"],
     lambda o: launch(o, o.x, o.foreign, o.out, 2.0, N)),
    ("kernel-of-another-context", ValueError, ["axpy", "context"],
     lambda o: launch(o, kernel=o.foreign_axpy)),
    ("kernel-signature-length", ValueError, ["declares 1 arguments", "'axpy' takes"],
     lambda o: o.axpy.program.kernel("axpy", signature=("ptr",))),
    ("kernel-signature-unknown-type", TypeError, ["float33"],
     lambda o: o.axpy.program.kernel("axpy", signature=("ptr", "ptr", "ptr", "float33", "int32"))),
    ("local-memory-zero", ValueError, ["0"], lambda o: ur_cffi.Local(0)),
    ("local-memory-beyond-device", ValueError, [str(2**40)],
     lambda o: launch(o, o.x, o.out, N, ur_cffi.Local(2**40), kernel=o.block_sums)),
    # --- launch geometry ----------------------------------------------------------------------
    ("local-size-does-not-divide", ValueError, ["(48,)", "(1024,)"],
     lambda o: launch(o, global_size=1024, local_size=48)),
    ("local-size-beyond-device", ValueError, ["(16384,)", "maximum work-group size"],
     lambda o: launch(o, global_size=16384, local_size=16384)),
    ("local-size-2d-beyond-device", ValueError, ["(8192, 2)", "maximum work-group size"],
     lambda o: launch(o, global_size=(8192, 2), local_size=(8192, 2))),
    ("local-size-zero", ValueError, ["local_size", "0"], lambda o: launch(o, local_size=0)),
    ("local-and-global-dimensions-differ", ValueError, ["(64, 1)", "(1024,)"],
     lambda o: launch(o, global_size=1024, local_size=(64, 1))),
    ("global-size-zero", ValueError, ["global_size", "0"], lambda o: launch(o, global_size=0)),
    ("global-size-negative", ValueError, ["-64"], lambda o: launch(o, global_size=-64)),
    ("global-size-four-dimensions", ValueError, ["(64, 1, 1, 1)"],
     lambda o: launch(o, global_size=(64, 1, 1, 1), local_size=(64, 1, 1, 1))),
    ("global-size-not-integer", (TypeError, ValueError), ["64.0"],
     lambda o: launch(o, global_size=64.0)),
    ("global-size-beyond-size_t", ValueError, [str(2**64)],
     lambda o: launch(o, global_size=2**64, local_size=None)),
    ("global-offset-negative", ValueError, ["-1"], lambda o: launch(o, global_offset=-1)),
    ("global-offset-dimensions-differ", ValueError, ["(0, 0)"],
     lambda o: launch(o, global_offset=(0, 0))),
    # --- programs -----------------------------------------------------------------------------
    ("spirv-truncated", ValueError, ["SPIR-V", "past the end"],
     lambda o: ur_cffi.Program.from_il(o.context, o.spirv[:len(o.spirv) // 8 * 4])),
    ("spirv-not-whole-words", ValueError, ["SPIR-V", "101"],
     lambda o: ur_cffi.Program.from_il(o.context, o.spirv[:101])),
]

XFAIL: dict[str, str] = {}  # case -> reason, for a known gap (none open)


@pytest.mark.parametrize(
    "error, names, call",
    [pytest.param(error, names, call, id=case,
                  marks=[_xfail(XFAIL[case])] if case in XFAIL else [])
     for case, error, names, call in BAD_INPUTS])
def test_bad_input_raises_in_python_naming_the_value(o, error, names, call):
    with pytest.raises(error) as caught:
        call(o)
    assert not isinstance(caught.value, URError), "UR, not ur_cffi, caught this"
    message = str(caught.value)
    for name in names:
        assert name in message, f"{name!r} not in {message!r}"


def test_bad_inputs_cover_every_kind_the_issue_names():
    ids = " ".join(case for case, *_ in BAD_INPUTS)
    for kind in ("negative", "beyond", "too-large", "past-the-end", "dtype", "another-context",
                 "closed", "arguments", "for-", "does-not-divide", "local-size-beyond"):
        assert kind in ids
    assert len(BAD_INPUTS) >= 70


@pytest.mark.parametrize("kind", ["device", "host", "shared"])
def test_a_size_beyond_the_devices_largest_allocation_is_a_memory_error(o, kind):
    # The CPU device's largest allocation is half its memory; UR refuses more at once.
    if kind != "device" and device_under_test.TYPE != "cpu":
        pytest.skip("CUDA's managed (shared) and pinned host memory may exceed the largest "
                    "device allocation (an H100's 80 GiB + 1 byte of host USM was allocated)")
    limit = o.device.max_mem_alloc_size
    with pytest.raises(MemoryError) as caught:
        ur_cffi.empty(limit + 1, np.uint8, queue=o.queue, kind=kind)
    assert str(limit + 1) in str(caught.value) and str(limit) in str(caught.value)


def test_unknown_kernel_name_is_reported_by_ur_with_the_name(o):
    with pytest.raises(ur_cffi.errors.InvalidKernelNameError, match="'no_such_kernel'"):
        o.axpy.program.kernel("no_such_kernel")


def test_a_spirv_header_alone_fails_the_build_with_a_log(o):
    with pytest.raises(ur_cffi.errors.ProgramBuildFailureError, match="build log"):
        ur_cffi.Program.from_il(o.context, o.spirv[:20])


# --- out of memory: an address-space limit in a child process makes the CPU device run out ---

OUT_OF_MEMORY = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    import ur_cffi
    import device_under_test
    import crash_probe

    kind = sys.argv[1]
    rng = np.random.default_rng()
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    program, axpy = crash_probe.load(context, crash_probe.Path(sys.argv[2]), "axpy")
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    before = ur_cffi.asarray(x, queue=queue, kind=kind)

    # The address space the process has now, plus 3 GiB: the 4th 1-GiB block cannot fit.
    # Only allocations happen under the limit (thread stacks, say, would not fit either).
    used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + 3 * 2**30, resource.RLIM_INFINITY))
    blocks, error = [], None
    try:
        for i in range(16):
            blocks.append(ur_cffi.empty(2**30, np.uint8, queue=queue, kind=kind))
    except MemoryError as caught:
        error = caught
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    # Everything allocated before is intact and usable.
    heads = []
    for i, block in enumerate(blocks):
        block.fill(i + 1, count=4096)
        head = np.zeros(4096, np.uint8)
        block.copy_to(head, offset=0)  # its first 4096 bytes
        heads.append(bool(np.all(head == i + 1)))
    out = ur_cffi.empty(n, queue=queue, kind=kind)
    out.fill(np.nan)
    axpy.launch(queue, -(-n // crash_probe.BLOCK) * crash_probe.LOCAL_SIZE,
                crash_probe.LOCAL_SIZE, before, before, out, 2.0, n)
    queue.finish()
    for block in blocks:
        block.close()
    again = ur_cffi.empty(2**30, np.uint8, queue=queue, kind=kind)  # the process carries on
    again.fill(7, count=16)
    tail = np.zeros(16, np.uint8)
    again.copy_to(tail, offset=0)
    print(json.dumps({
        "error": type(error).__name__ if error else None,
        "is_ur_error": isinstance(error, ur_cffi.URError),
        "result": error.result.name if isinstance(error, ur_cffi.URError) else None,
        "message": str(error), "blocks_before": len(blocks), "heads": heads,
        "before_intact": bool(np.array_equal(before.to_numpy(), x)),
        "kernel_after": bool(np.allclose(out.to_numpy(), 3.0 * x.astype(np.float64),
                                         rtol=2**-21, atol=0)),
        "again": bool(np.all(tail == 7)),
    }))
""")


@pytest.mark.parametrize("kind", ["device", "host", "shared"])
def test_out_of_memory_raises_memory_error_and_loses_nothing(tmp_path, kernels, kind):
    script = tmp_path / "oom.py"
    script.write_text(OUT_OF_MEMORY)
    done = crash_probe.run_child([kind, kernels], script=script, timeout=50)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] is not None, "no allocation failed under the address-space limit"
    assert result["is_ur_error"] and result["result"] in (
        "UR_RESULT_ERROR_OUT_OF_HOST_MEMORY", "UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
        "UR_RESULT_ERROR_OUT_OF_RESOURCES")
    assert str(2**30) in result["message"]
    assert 1 <= result["blocks_before"] <= 3
    assert all(result["heads"])
    assert result["before_intact"] and result["kernel_after"] and result["again"]


# --- soak: memory and handles come back --------------------------------------------------------

USM_CYCLES, PROGRAM_CYCLES = 10_000, 1_000
RSS_LIMIT = 4 * 2**20  # "a few MB"


@pytest.mark.parametrize("validation", ["0", "1"], ids=["plain", "leak-checked"])
def test_soak_cycles_leak_neither_memory_nor_handles(kernels, validation):
    # Plain blocking waits: the soak is about memory and handles coming back; interruptible
    # waits are leak-checked in test_interrupt, and on a loaded machine each costs ~1.6 ms
    # (against ~50 us), which would stretch 10,000 cycles past a minute.
    done = crash_probe.run_child(
        ["soak", str(kernels), str(USM_CYCLES), str(PROGRAM_CYCLES)], timeout=600,
        env=crash_probe.child_env(UR_CFFI_VALIDATION=validation, UR_CFFI_INTERRUPTIBLE_WAITS=0))
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(figures)
    assert figures["usm_cycles"] == USM_CYCLES and figures["program_cycles"] == PROGRAM_CYCLES
    assert figures["errors"] == 0  # every copy read back exactly, every kernel had 5 arguments
    assert figures["usm_rss_growth"] < RSS_LIMIT
    assert figures["program_rss_growth"] < RSS_LIMIT
    # Left: the device, the loader's adapters (one, unless a release loads Level Zero's too:
    # 2025.2 does here), the context and the queue of the with-block, and the caching
    # allocator's pool for each kind of USM of that context (issue 12).
    assert figures["live_objects"] == 3 + figures["adapters"] + 3
    assert figures["validation"] is (validation == "1")
    assert figures["validation_problems"] == []


# --- what only a child process can show -------------------------------------------------------

def test_object_arrays_are_refused_before_they_can_crash(kernels):
    # Device memory holding PyObject pointers would be read back as objects: a crash, so the
    # dtype is refused at allocation (asarray of an object array included).
    done = crash_probe.run_child(timeout=50, code=textwrap.dedent("""
        import numpy as np, ur_cffi
        import device_under_test
        device = device_under_test.get()
        context = device.create_context()
        queue = ur_cffi.Queue(context, device)
        for make in (lambda: ur_cffi.empty(3, object, queue=queue),
                     lambda: ur_cffi.asarray(np.array([object(), 1], dtype=object), queue=queue)):
            try:
                array = make()
            except TypeError as error:
                print("refused:", error)
                continue
            print(array.to_numpy())
    """))
    assert done.stdout.count("refused:") == 2
