"""Programs from SPIR-V and from native binaries, build options and failures, kernels by name,
and launches with every kind of argument, on the CPU device with Triton-compiled kernels."""

import contextlib
import ctypes
import struct
import sys

import numpy as np
import pytest

import ur_cffi
from ur_cffi import _compat, errors, spirv
from ur_cffi.enums import ur_event_status_t, ur_result_t
from ur_cffi.info import query

BLOCK = 128
OP_CAPABILITY, OP_MEMORY_MODEL = 17, 14


def blocks(n, compiled, block=BLOCK):
    """The global size for ``n`` elements in blocks of ``block``, one work-group per block."""
    return -(-n // block) * compiled.local_size


@pytest.fixture
def add(build_triton):
    program, compiled = build_triton("add", BLOCK=BLOCK)
    return program.kernel(compiled.name, **compiled.options), compiled


@pytest.fixture
def scale(build_triton):
    program, compiled = build_triton("scale_addresses", BLOCK=BLOCK)
    return program.kernel(compiled.name, **compiled.options), compiled


def add_reference(x, y):
    return (x.astype(np.float64) + y).astype(np.float32)  # one rounding, as on the device


# --- programs -------------------------------------------------------------------------------

def test_program_from_il(context, compile_triton, device):
    compiled = compile_triton("add", BLOCK=BLOCK)
    with ur_cffi.Program.from_il(context, compiled.spirv) as program:
        assert program.context is context
        assert program.kernel_names == ["add"]
        log = program.build_log()
        assert isinstance(log, str) and log == program.build_log(device)
        binaries = program.binaries
        assert len(binaries) == 1 and isinstance(binaries[0], bytes)
        assert binaries[0][:4] == b"\x7fELF"
        # Bytes, not text (the header: "not null-terminated"): it read 4 characters once.
        il_info = _compat.enumerator("ur_program_info_t", "UR_PROGRAM_INFO_IL")
        with contextlib.suppress(errors.UnsupportedEnumerationError):  # (an optional query)
            if il_info is not None:  # (UR 0.11 on)
                assert query("urProgramGetInfo", program.handle, il_info) == \
                    bytes(compiled.spirv)
    assert program.closed


def test_a_program_handle_is_owned_once(build_triton, context, device):
    """Program(context, handle) took a handle another Program owned: both released it, and a
    kernel of the first then crashed the process (as Device and Event refuse it)."""
    program, _ = build_triton("add", BLOCK=BLOCK)
    with pytest.raises(ValueError, match="is owned already .*use that Program"):
        ur_cffi.Program(context, program.handle)
    for handle in (5, "not a handle", ur_cffi.ffi.NULL, context.handle):
        with pytest.raises(TypeError, match="Program takes a non-null ur_program_handle_t"):
            ur_cffi.Program(context, handle)
    with pytest.raises(TypeError, match="context"):
        ur_cffi.Program("not a context", program.handle)
    handle = _compat.program_from_binary(context.handle, device.handle, program.binaries[0])
    with ur_cffi.Program(context, handle) as taken:  # the caller's own reference: taken
        assert taken.context is context and taken.handle == handle
    assert program.kernel_names  # the first still owns its handle


@pytest.mark.parametrize("options", ["-cl-opt-disable", "-cl-mad-enable -cl-no-signed-zeros"])
def test_build_options_reach_the_compiler(context, compile_triton, queue, rng, options):
    compiled = compile_triton("add", BLOCK=BLOCK)
    program = ur_cffi.Program.from_il(context, compiled.spirv, options)
    assert f"Options used by backend compiler: {options}" in program.build_log()
    rebuilt = ur_cffi.Program.from_binary(context, program.binaries[0], options)
    assert f"Options used by backend compiler: {options}" in rebuilt.build_log()
    for built in (program, rebuilt):
        n = 5 * BLOCK + 3
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
        built.kernel("add").launch(queue, blocks(n, compiled), compiled.local_size,
                                   ur_cffi.asarray(x, queue=queue),
                                   ur_cffi.asarray(y, queue=queue), out, np.int32(n)).wait()
        assert np.array_equal(out.to_numpy(), add_reference(x, y))


def test_binaries_round_trip(context, device, compile_triton, queue, rng):
    compiled = compile_triton("scale_addresses", BLOCK=BLOCK)
    binary = ur_cffi.Program.from_il(context, compiled.spirv).binaries[0]
    program = ur_cffi.Program.from_binary(context, binary, device=device)
    assert program.kernel_names == ["scale_addresses"]
    assert program.binaries[0][:4] == b"\x7fELF"
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    source = ur_cffi.asarray(x, queue=queue)
    out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
    kernel = program.kernel("scale_addresses", ("int64", "int64", "float32", "int32"))
    kernel.launch(queue, blocks(n, compiled), compiled.local_size,
                  source.data_ptr(), out.data_ptr(), 0.75, n).wait()
    assert np.array_equal(out.to_numpy(), (x.astype(np.float64) * 0.75).astype(np.float32))


@pytest.mark.cpu_device("the OpenCL adapter's answer to a bad binary (the CUDA adapter "
                       "answered otherwise on the H200)")
def test_a_bad_binary_raises(context):
    with pytest.raises(errors.InvalidBinaryError) as raised:
        ur_cffi.Program.from_binary(context, b"\x7fELF" + b"junk" * 20)
    assert raised.value.function == "urProgramCreateWithBinary"


def test_unknown_build_options_raise_with_the_log(context, compile_triton):
    with pytest.raises(errors.URError) as raised:
        ur_cffi.Program.from_il(context, compile_triton("add", BLOCK=BLOCK).spirv, "-cl-bogus-flag")
    # Observed: the CPU runtime answers INVALID_VALUE (not PROGRAM_BUILD_FAILURE) and logs why.
    assert isinstance(raised.value, errors.InvalidValueError)
    assert raised.value.function == "urProgramBuild"
    assert "build log" in str(raised.value)
    assert "Unrecognized build options: -cl-bogus-flag" in str(raised.value)


@pytest.mark.cpu_device("SPIR-V programs, the CPU device's partitions and its build log")
def test_a_failed_build_for_one_device_of_two_gives_its_own_log(device, compile_triton):
    # The error path read the log of every device of the context: a program made from a
    # binary is one device's, the other's query failed, and its error replaced the build's.
    import device_under_test

    sub_devices = device_under_test.partition(device, "EQUALLY", 1, 2)
    if not sub_devices:
        pytest.skip(f"{device!r} is not partitioned into two equal sub-devices here")
    first, second = sub_devices
    with ur_cffi.Context([second]) as alone:
        binary = ur_cffi.Program.from_il(alone, compile_triton("add", BLOCK=BLOCK).spirv) \
            .binaries[0]
    with ur_cffi.Context([first, second]) as both:
        with pytest.raises(errors.InvalidValueError, match="(?s)urProgramBuild .*build log:.*"
                           "Unrecognized build options: -cl-bogus-flag"):
            ur_cffi.Program.from_binary(both, binary, "-cl-bogus-flag", device=second)


def spirv_header(bound=16):
    return struct.pack("<5I", spirv.MAGIC, 0x00010000, 0, bound, 0)


@pytest.mark.cpu_device("SPIR-V programs, and the build log of Intel's CPU runtime")
def test_a_header_with_junk_fails_at_build_with_the_log(context):
    # Well-formed instructions, nonsense content: accepted at create, refused at build.
    junk = struct.pack("<2I", 2 << 16 | OP_CAPABILITY, 0xBAD)
    with pytest.raises(errors.ProgramBuildFailureError) as raised:
        ur_cffi.Program.from_il(context, spirv_header() + junk)
    assert raised.value.function == "urProgramBuild"
    message = str(raised.value)
    assert "build log" in message and "Compilation failed" in message
    assert "unsupported capability" in message

    wrong_model = struct.pack("<3I", 3 << 16 | OP_MEMORY_MODEL, 0, 0)  # Logical GLSL450
    with pytest.raises(errors.ProgramBuildFailureError, match="memory model"):
        ur_cffi.Program.from_il(context, spirv_header() + wrong_model)


def test_malformed_spirv_is_refused_before_ur(context, compile_triton):
    module = compile_triton("add", BLOCK=BLOCK).spirv
    words = len(module) // 4
    for broken in (module[: 4 * (words // 2) + 2],          # not whole words
                   spirv_header() + struct.pack("<2I", 9 << 16 | OP_CAPABILITY, 1),  # overruns
                   spirv_header() + struct.pack("<I", 0 | OP_CAPABILITY)):          # 0 words
        with pytest.raises(ValueError, match="SPIR-V") as raised:
            ur_cffi.Program.from_il(context, broken)
        assert not isinstance(raised.value, errors.URError)


def test_random_bytes_are_an_invalid_binary(context, rng):
    from test_bindings import GARBAGE_IL_RESULT, INVALID_BINARY

    expected = GARBAGE_IL_RESULT.get(ur_cffi.info.HEADER_FACTS["version"], INVALID_BINARY)
    if "SPIR-V" not in context.devices[0].il_version:  # the CUDA adapter takes no IL at all
        expected = ur_result_t.UR_RESULT_ERROR_UNSUPPORTED_FEATURE
    with pytest.raises(errors.by_result[expected]) as raised:
        ur_cffi.Program.from_il(context, rng.bytes(64))
    assert raised.value.function == "urProgramCreateWithIL"


def test_kernel_by_name(build_triton):
    program, compiled = build_triton("add", BLOCK=BLOCK)
    kernel = program.kernel("add", **compiled.options)
    assert isinstance(kernel, ur_cffi.Kernel)
    assert kernel.name == "add" and kernel.program is program
    assert kernel.num_args == 4 + len(kernel.hidden_args)
    assert kernel.signature is None
    typed = ur_cffi.Kernel(program, "add", ("ptr", "ptr", "ptr", np.int32), **compiled.options)
    assert typed.signature == ("ptr", "ptr", "ptr", np.dtype(np.int32))
    with pytest.raises(errors.InvalidKernelNameError, match="'no_such_kernel'") as raised:
        program.kernel("no_such_kernel")
    assert isinstance(raised.value, ValueError) and raised.value.function == "urKernelCreate"
    with pytest.raises(ValueError, match=r"signature declares 3 arguments(;| and \d+ hidden_"
                                         r"args;) kernel 'add' takes \d+"):
        program.kernel("add", ("ptr", "ptr", "ptr"), **compiled.options)


# --- launches ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, BLOCK - 1, 10 * BLOCK + 37])
def test_launch_with_usm_arrays(add, queue, rng, n):
    kernel, compiled = add
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
    event = kernel.launch(queue, blocks(n, compiled), compiled.local_size,
                          ur_cffi.asarray(x, queue=queue),
                          ur_cffi.asarray(y, queue=queue, kind="shared"),
                          out, np.int32(n))
    assert isinstance(event, ur_cffi.Event)
    event.wait()
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert np.array_equal(out.to_numpy(), add_reference(x, y))


def test_launch_with_raw_addresses(add, scale, queue, rng):
    n = 3 * BLOCK + 5
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    dx, dy = ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)
    out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)

    # Declared pointers take integer addresses.
    kernel, compiled = add
    typed = ur_cffi.Kernel(kernel.program, "add", ("ptr", "ptr", "ptr", "int32"),
                           **compiled.options)
    typed.launch(queue, blocks(n, compiled), compiled.local_size,
                 dx.data_ptr(), np.uint64(dy.data_ptr()), out.data_ptr(), n).wait()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))

    # The original demo's kernel takes int64 addresses and casts them itself.
    kernel, compiled = scale
    expected = (x.astype(np.float64) * 2.5).astype(np.float32)
    for args in ((np.int64(dx.data_ptr()), np.int64(out.data_ptr()), np.float32(2.5), np.int32(n)),
                 (ctypes.c_int64(dx.data_ptr()), ctypes.c_int64(out.data_ptr()),
                  ctypes.c_float(2.5), ctypes.c_int32(n))):
        out.fill(np.nan)
        kernel.launch(queue, blocks(n, compiled), compiled.local_size, *args).wait()
        assert np.array_equal(out.to_numpy(), expected)


def test_launch_with_a_buffer(add, queue, context, rng):
    kernel, compiled = add
    n = 2 * BLOCK + 9
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    buffer = ur_cffi.Buffer(context, x.nbytes)
    buffer.write(queue, x)
    out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
    kernel.launch(queue, blocks(n, compiled), compiled.local_size,
                  buffer, ur_cffi.asarray(y, queue=queue), out, np.int32(n)).wait()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))
    typed = ur_cffi.Kernel(kernel.program, "add", ("mem", "ptr", "ptr", "int32"),
                           **compiled.options)
    out.copy_from(y)  # out = buffer + out
    typed.launch(queue, blocks(n, compiled), compiled.local_size, buffer, out, out, n).wait()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))


SCALAR_TYPES = (np.int8, np.int16, np.int32, np.int64, np.float32, np.float64)
CTYPES = (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64, ctypes.c_float,
          ctypes.c_double)


def random_scalars(rng):
    values = [int(rng.integers(np.iinfo(t).min, np.iinfo(t).max)) for t in SCALAR_TYPES[:4]]
    return values + [float(np.float32(rng.standard_normal())), float(rng.standard_normal())]


# ctypes types holding their bytes in the other byte order than this machine's.
SWAPPED_CTYPES = tuple(t.__ctype_be__ if sys.byteorder == "little" else t.__ctype_le__
                       for t in CTYPES)


@pytest.mark.parametrize("form", ["numpy", "ctypes", "ctypes swapped",
                                  "ctypes swapped, signature", "signature"])
def test_launch_with_scalars_by_value(build_triton, queue, rng, form):
    program, compiled = build_triton("store_scalars")
    values = random_scalars(rng)
    out = ur_cffi.asarray(np.full(6, np.nan), queue=queue)
    if form == "numpy":
        kernel = program.kernel("store_scalars", **compiled.options)
        args = [t(v) for t, v in zip(SCALAR_TYPES, values)]
    elif form == "ctypes":
        kernel = program.kernel("store_scalars", **compiled.options)
        args = [t(v) for t, v in zip(CTYPES, values)]
    elif form.startswith("ctypes swapped"):  # their values, not their bytes as they lie
        kernel = program.kernel("store_scalars", ("ptr", "int8", "int16", "int32", "int64",
                                                  "float32", "float64") if "signature" in
                                form else None, **compiled.options)
        args = [t(v) for t, v in zip(SWAPPED_CTYPES, values)]
    else:
        kernel = program.kernel("store_scalars", ("ptr", "int8", "int16", "int32", "int64",
                                                  "float32", "float64"), **compiled.options)
        args = values
    kernel.launch(queue, compiled.local_size, compiled.local_size, out, *args).wait()
    # int64 values beyond 2**53 round in float64 on the device and in numpy alike.
    assert np.array_equal(out.to_numpy(), np.array(values, np.float64))


@pytest.mark.cpu_device("Triton's Intel backend takes shared memory as an argument")
def test_launch_with_local_memory(build_triton, queue, rng):
    program, compiled = build_triton("block_sums", BLOCK=256)
    assert compiled.shared > 0  # Triton needs work-group memory for the cross-warp sum
    kernel = program.kernel("block_sums")
    assert kernel.num_args == 4  # x, out, n and the local-memory argument
    n = 7 * 256 + 100
    # Integers in float32: every partial sum is exact, whatever the summation order.
    x = rng.integers(-1000, 1000, n).astype(np.float32)
    groups = -(-n // 256)
    out = ur_cffi.asarray(np.full(groups, np.nan, np.float32), queue=queue)
    kernel.launch(queue, groups * compiled.local_size, compiled.local_size,
                  ur_cffi.asarray(x, queue=queue), out, np.int32(n),
                  ur_cffi.Local(compiled.shared)).wait()
    padded = np.zeros(groups * 256)
    padded[:n] = x
    assert np.array_equal(out.to_numpy(), padded.reshape(groups, 256).sum(axis=1))
    typed = program.kernel("block_sums", ("ptr", "ptr", "int32", "local"))
    out.fill(np.nan)
    typed.launch(queue, groups * compiled.local_size, compiled.local_size,
                 ur_cffi.asarray(x, queue=queue), out, n, ur_cffi.Local(compiled.shared)).wait()
    assert np.array_equal(out.to_numpy(), padded.reshape(groups, 256).sum(axis=1))
    for size in (0, -1):
        with pytest.raises(ValueError, match=f"Local memory size {size} is out of range"):
            ur_cffi.Local(size)
    for size in (1.5, True, None):
        with pytest.raises(TypeError, match="Local memory size must be an integer"):
            ur_cffi.Local(size)


def test_launch_with_a_zero_global_offset(add, queue, rng):
    kernel, compiled = add
    n = BLOCK + 1
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
    kernel.launch(queue, blocks(n, compiled), compiled.local_size, ur_cffi.asarray(x, queue=queue),
                  ur_cffi.asarray(y, queue=queue), out, np.int32(n), global_offset=0).wait()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))


def test_every_launch_gives_ur_three_sizes_of_each_kind(add, queue, context, device):
    """The validation layer of oneAPI 2026.0 and 2026.1 reads all three global and local
    sizes whatever the launch's dimensions: 1-D launches passed one (it read past the array
    and refused them at random), and graphs' one-by-one replays padded with 0 (refused every
    time).  Unused dimensions now hold 1 (offsets 0), as every adapter reads them."""
    kernel, compiled = add
    a = ur_cffi.zeros(4, queue=queue)
    launch = kernel.prepare(queue, compiled.local_size, compiled.local_size, a, a, a,
                            np.int32(4), global_offset=(0,))
    dims, offsets, global_sizes, local_sizes = launch._call_args[0][:4]
    assert dims == 1
    assert [list(ur_cffi.ffi.unpack(array, 3)) for array in (offsets, global_sizes, local_sizes)] \
        == [[0, 0, 0], [compiled.local_size, 1, 1], [compiled.local_size, 1, 1]]
    with ur_cffi.Graph(context, device, native=False) as graph:
        with graph.recording(queue):
            kernel.launch(queue, compiled.local_size, compiled.local_size, a, a, a, np.int32(4))
        recorded = graph.commands[0]._command
        assert list(ur_cffi.ffi.unpack(recorded.global_sizes, 3)) == [compiled.local_size, 1, 1]
        assert list(ur_cffi.ffi.unpack(recorded.local_sizes, 3)) == [compiled.local_size, 1, 1]


def test_argument_count_and_types_are_checked(add, build_triton, queue, device):
    kernel, compiled = add
    a = ur_cffi.zeros(4, queue=queue)
    g, l = compiled.local_size, compiled.local_size
    with pytest.raises(TypeError, match=r"kernel 'add' takes 4 arguments( \(and \d hidden_"
                                        r"args\))?, 3 given"):
        kernel.launch(queue, g, l, a, a, a)
    with pytest.raises(TypeError, match=r"kernel 'add' takes 4 arguments( \(and \d hidden_"
                                        r"args\))?, 5 given"):
        kernel.launch(queue, g, l, a, a, a, np.int32(4), np.int32(4))
    with pytest.raises(TypeError, match=r"argument 3 of 'add': int 4 has no C type"):
        kernel.launch(queue, g, l, a, a, a, 4)
    with pytest.raises(TypeError, match=r"argument 1 of 'add': float 1.0 has no C type"):
        kernel.launch(queue, g, l, a, 1.0, a, np.int32(4))

    typed = ur_cffi.Kernel(kernel.program, "add", ("ptr", "ptr", "ptr", "int32"),
                           **compiled.options)
    with pytest.raises(TypeError, match="argument 3 of 'add' is declared int32, got a USMArray"):
        typed.launch(queue, g, l, a, a, a, a)
    with pytest.raises(TypeError, match="argument 3 of 'add' is declared int32, got float"):
        typed.launch(queue, g, l, a, a, a, 2.5)
    with pytest.raises(TypeError, match="argument 3 of 'add' is declared int32, got float64"):
        typed.launch(queue, g, l, a, a, a, np.float64(4))
    with pytest.raises(ValueError, match=r"argument 3 of 'add': 1099511627776 does not fit"):
        typed.launch(queue, g, l, a, a, a, 2**40)
    with pytest.raises(TypeError, match="argument 1 of 'add' is declared ptr, got Local"):
        typed.launch(queue, g, l, a, ur_cffi.Local(16), a, 4)
    with pytest.raises(TypeError, match="argument 0 of 'add' is declared ptr, got float"):
        typed.launch(queue, g, l, 1.5, a, a, 4)

    program, compiled = build_triton("store_scalars")
    scalars = program.kernel("store_scalars", ("ptr", "int8", "int16", "int32", "int64",
                                               "float32", "float64"), **compiled.options)
    # float64 especially: numpy's dtype("float64") == None is true, which once let these through.
    declared = "argument 6 of 'store_scalars' is declared float64"
    with pytest.raises(TypeError, match=f"{declared}, got a USMArray"):
        scalars.launch(queue, g, l, a, 1, 2, 3, 4, 5.0, a)
    with pytest.raises(TypeError, match=f"{declared}, got Local"):
        scalars.launch(queue, g, l, a, 1, 2, 3, 4, 5.0, ur_cffi.Local(8))
    with pytest.raises(ValueError, match="argument 1 of 'store_scalars': 128 does not fit in int8"):
        scalars.launch(queue, g, l, a, 128, 2, 3, 4, 5.0, 6.0)

    with device.create_context() as other_context, ur_cffi.Queue(other_context) as other:
        foreign = ur_cffi.zeros(4, queue=other)
        with pytest.raises(ValueError, match="argument 2 of 'add': the USMArray belongs to an"):
            kernel.launch(queue, g, l, a, a, foreign, np.int32(4))
        foreign.close()
        buffered = ur_cffi.Kernel(kernel.program, "add", ("mem", "ptr", "ptr", "int32"),
                                  **compiled.options)
        with ur_cffi.Buffer(other_context, 64) as buffer, pytest.raises(
                ValueError, match="argument 0 of 'add': the Buffer belongs to another context"):
            buffered.launch(queue, g, l, buffer, a, a, 4)
    closed = ur_cffi.zeros(4, queue=queue)
    closed.close()
    with pytest.raises(ur_cffi.ClosedError):
        kernel.launch(queue, g, l, a, closed, a, np.int32(4))


def test_launch_limits_leave_group_sizes_to_adapters_that_pick_them(device):
    """The CUDA adapter reports its grid limits (2**31 - 1, 65535, 65535) but picks a launch's
    block size itself: a launch without a local size is not counted as groups of one there."""
    cuda = next(b for b in _compat.Backend if b.name.endswith("_CUDA"))
    items, groups, groups_of_one = _compat.launch_limits(cuda, False, (2**31 - 1, 65535, 65535))
    assert (items, groups, groups_of_one) == (2**64 - 1, (2**31 - 1, 65535, 65535), False)
    assert device.launch_limits[2] == (device.backend.name.endswith("_OPENCL")
                                       and device.type.name.endswith("_CPU"))


def test_sizes_are_checked(add, queue, device):
    kernel, compiled = add
    local = compiled.local_size  # (the only one a cubin's kernel takes)
    a = ur_cffi.zeros(4, queue=queue)
    args = (a, a, a, np.int32(4))
    with pytest.raises(ValueError, match="does not divide"):
        kernel.launch(queue, 100, local, *args)
    with pytest.raises(ValueError, match="differ in dimensions"):
        kernel.launch(queue, (128, 2), 128, *args)
    too_large = "exceeds the device's maximum work-group size" \
        if kernel.required_local_size is None else "required_local_size"  # (a cubin's)
    with pytest.raises(ValueError, match=too_large):
        kernel.launch(queue, 2 * device.max_work_group_size, 2 * device.max_work_group_size, *args)
    with pytest.raises(ValueError, match=r"global_size 0 is out of range \[1, "):
        kernel.launch(queue, 0, None, *args)
    for size in (True, 128.0, (128, np.bool_(True)), "128", {128, 1}, {128: 1},
                 (n for n in (128, 1))):  # a set launched in its hashes' order: (128, 1)
        with pytest.raises(TypeError, match="global_size"):
            kernel.launch(queue, size, None, *args)
    with pytest.raises(TypeError, match="local_size must be an integer, not bool"):
        kernel.launch(queue, 128, True, *args)
    with pytest.raises(ValueError, match="global_size"):
        kernel.launch(queue, (1, 1, 1, 1), None, *args)
    with pytest.raises(ValueError, match="global_offset .* differ in dimensions"):
        kernel.launch(queue, (128, 1), None, *args, global_offset=0)
    with pytest.raises(ValueError, match=r"global_offset -1 is out of range \[0, "):
        kernel.launch(queue, 128, None, *args, global_offset=-1)
    with pytest.raises(ValueError, match="work-items in one launch"):  # past size_t: anywhere
        kernel.launch(queue, (2**40, 2**40), (local, 1), *args)
    items, groups, groups_of_one = device.launch_limits
    if items < 2**64 - 1:  # the CPU runtime: more would end the process (SIGSEGV)
        with pytest.raises(ValueError, match=f"runs at most {items}"):
            kernel.launch(queue, (items // 64 + 1) * 64, 64, *args)
        assert groups_of_one
        with pytest.raises(ValueError, match="no local_size, so possibly groups of one"):
            kernel.launch(queue, groups[0] + 1, None, *args)


def test_a_property_the_adapter_lacks_raises_not_implemented(add):
    """UR's OpenCL adapter answers INVALID_SIZE to a one-call query of a property it lacks
    (the number of registers, here); the two calls say UNSUPPORTED_ENUMERATION."""
    from ur_cffi.enums import ur_kernel_info_t
    from ur_cffi.info import query

    kernel, _ = add
    try:
        registers = query("urKernelGetInfo", kernel.handle,
                          ur_kernel_info_t.UR_KERNEL_INFO_NUM_REGS)
    except NotImplementedError:
        return
    assert type(registers) is int and registers > 0  # an adapter that has it (CUDA)


def test_flags_take_true_or_false_only(add, queue):
    """``event="no"`` made an Event and ``set_interruptible_waits("false")`` turned the
    interruptible waits on: both were read by truthiness."""
    kernel, compiled = add
    a = ur_cffi.zeros(4, queue=queue)
    args = (a, a, a, np.int32(4))
    for value in ("no", [], None, 0):
        with pytest.raises(TypeError, match=f"event must be True or False, not "
                                            f"{type(value).__name__}"):
            kernel.launch(queue, compiled.local_size, compiled.local_size, *args, event=value)
        with pytest.raises(TypeError, match="event must be True or False"):
            kernel.prepare(queue, compiled.local_size, compiled.local_size, *args)(event=value)
        with pytest.raises(TypeError, match="set_interruptible_waits must be True or False"):
            ur_cffi.set_interruptible_waits(value)
    assert ur_cffi.interruptible_waits()
    assert kernel.launch(queue, compiled.local_size, compiled.local_size, *args,
                         event=np.False_) is None
    queue.finish()


def test_building_a_built_program_says_so(add, device):
    """OpenCL refuses a second build once kernels exist: the error carried the first build's
    (successful) log.  (The CUDA adapter builds again.)"""
    kernel, _ = add
    if device.backend.name.endswith("_OPENCL"):
        with pytest.raises(ur_cffi.URError, match="the program is built already"):
            kernel.program.build()
    else:
        try:
            kernel.program.build()
        except ur_cffi.URError as error:
            assert "the program is built already" in str(error)


@pytest.mark.cpu_device("the CPU device's Triton kernels take any work-group size")
def test_a_work_group_of_the_devices_maximum_size_is_taken(add, queue, device, rng):
    kernel, compiled = add
    assert kernel.required_local_size is None
    limit = device.max_work_group_size
    x, y = (rng.standard_normal(BLOCK).astype(np.float32) for _ in range(2))
    out = ur_cffi.asarray(np.full(BLOCK, np.nan, np.float32), queue=queue)
    args = (ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue), out,
            np.int32(BLOCK))
    kernel.launch(queue, limit, limit, *args).wait()
    np.testing.assert_array_equal(out.to_numpy(), add_reference(x, y))
    with pytest.raises(ValueError, match="exceeds the device's maximum work-group size"):
        kernel.launch(queue, 2 * limit, 2 * limit, *args)


def test_a_global_offset_is_checked_after_the_same_launch_without_one(add, queue, rng):
    # The launch after it reused its argument block, which has no offset, unchecked.
    kernel, compiled = add
    x, y = (ur_cffi.asarray(rng.standard_normal(BLOCK).astype(np.float32), queue=queue)
            for _ in range(2))
    out, size = ur_cffi.zeros(BLOCK, np.float32, queue=queue), compiled.local_size
    n = np.int32(BLOCK)  # (the same objects: what a reuse needs)
    for _ in range(2):  # the second reuses the first's block
        kernel.launch(queue, size, size, x, y, out, n).wait()
    with pytest.raises(ValueError, match="differ in dimensions"):
        kernel.launch(queue, size, size, x, y, out, n, global_offset=(0, 0))
    with pytest.raises(ValueError, match="exceeds size_t"):
        kernel.launch(queue, size, size, x, y, out, n, global_offset=2**64 - size)
    queue.finish()


def test_launches_refuse_a_view_closed_or_whose_base_was_closed(add, queue, rng):
    # The memory goes back to the caching allocator, which hands it out again.
    kernel, compiled = add
    size = compiled.local_size
    x, y = (rng.standard_normal(BLOCK).astype(np.float32) for _ in range(2))
    base = ur_cffi.asarray(np.concatenate([x, x]), queue=queue)
    out = ur_cffi.asarray(np.full(BLOCK, np.nan, np.float32), queue=queue)
    launch = kernel.prepare(queue, size, size, base[BLOCK:], ur_cffi.asarray(y, queue=queue),
                            out, np.int32(BLOCK))
    launch().wait()
    np.testing.assert_array_equal(out.to_numpy(), add_reference(x, y))
    base.close()
    with pytest.raises(ur_cffi.ClosedError, match="argument 0: USMArray is closed"):
        launch()
    base = ur_cffi.zeros(2 * BLOCK, np.float32, queue=queue)
    view, rest, n = base[:BLOCK], base[BLOCK:], np.int32(BLOCK)
    launch = kernel.prepare(queue, size, size, view, view, rest, n)
    for _ in range(2):  # the second Kernel.launch reuses the first's block
        kernel.launch(queue, size, size, view, view, rest, n).wait()
    view.close()
    with pytest.raises(ur_cffi.ClosedError, match="argument 0: USMArray is closed"):
        launch()
    with pytest.raises(ur_cffi.ClosedError, match="USMArray view is closed"):
        kernel.launch(queue, size, size, view, view, rest, n)
    queue.finish()
