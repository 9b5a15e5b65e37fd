"""The public API against hostile arguments: numpy scalars of every dtype at their extremes,
bools, NaN, None, strings and wrong objects, in every argument that takes a size, an offset, a
value, a type or an object.  Each call either does what it should or raises a ``TypeError`` or
``ValueError`` whose message names the argument; none crashes, hangs or silently changes a
value.  The property runs in a child process (``python test_hostile_inputs.py EXAMPLES``), so a
crash fails the test; the child names each call on stderr before making it.

Also here: the cases of issue 11 one by one (wrapping numpy bounds, list fill patterns, copies
of handle owners, pointers that are not USM, values that do not fit), and reads on an
out-of-order queue ordered after earlier kernels.
"""

from __future__ import annotations

import copy
import ctypes
import json
import pickle
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import crash_probe
import device_under_test
import ur_cffi
from ur_cffi import errors
from ur_cffi.enums import ur_event_status_t

BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE
NUMERIC = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64", "complex64", "complex128")


def extremes() -> list:
    """Numpy scalars of every numeric dtype at their extremes, and other hostile values."""
    values = []
    for name in NUMERIC:
        dtype = np.dtype(name)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            values += [dtype.type(info.min), dtype.type(info.max), dtype.type(1)]
        elif dtype.kind in "fc":
            info = np.finfo(dtype)
            values += [dtype.type(info.max), dtype.type(-info.max), dtype.type(np.nan),
                       dtype.type(np.inf), dtype.type(0.5)]
        else:
            values += [np.bool_(True), np.bool_(False)]
    return values + [True, False, None, -1, 2**64, 2**70, -(2**63) - 1, 1.5, float("nan"),
                     float("inf"), 1e300, "3", b"3", "", [1, 2], (1,), {}, object(),
                     ctypes.c_float(2.5), ctypes.c_int(3), np.array(3), np.array([1, 2]),
                     complex(1, 1)]


HOSTILE = extremes()


# --- one by one -------------------------------------------------------------------------------


def test_numpy_bounds_do_not_wrap(queue, context):
    array = ur_cffi.zeros(16, queue=queue)
    out = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"copy_from: 1 element\(s\) at offset 18446744073709551615 do not fit"):
        array.copy_from(np.ones(1, np.float32), offset=np.uint64(2**64 - 1))
    with pytest.raises(ValueError, match="copy_to: 4 element.* at offset 18446744073709551614"):
        array.copy_to(out, offset=np.uint64(2**64 - 2))
    with pytest.raises(ValueError, match="fill: 18446744073709551615 element"):
        array.fill(1.0, offset=2, count=np.uint64(2**64 - 1))
    buffer = ur_cffi.Buffer(context, 64)
    with pytest.raises(ValueError, match="write: 4 bytes at offset 18446744073709551615"):
        buffer.write(queue, np.ones(1, np.float32), offset=np.uint64(2**64 - 1))
    assert np.array_equal(array.to_numpy(), np.zeros(16, np.float32))  # nothing was written


def test_fill_takes_one_value_that_fits(queue):
    array = ur_cffi.zeros(16, queue=queue)
    with pytest.raises(TypeError, match=r"fill: value must be one number, not list \[1.0, 2.0\]"):
        array.fill([1.0, 2.0], offset=4, count=2)
    with pytest.raises(TypeError, match="fill: value must be one number, not NoneType"):
        array.fill(None)
    with pytest.raises(ValueError, match="fill: value 1e\\+300 does not fit in float32"):
        array.fill(1e300)
    with pytest.raises(TypeError, match="fill: value True is a bool"):
        array.fill(True)
    integers = ur_cffi.zeros(16, np.int32, queue=queue)
    with pytest.raises(ValueError, match="fill: value 3.7 is not an integer; the elements are "
                                         "int32"):
        integers.fill(3.7)
    with pytest.raises(ValueError, match="fill: value 2147483648 does not fit in int32"):
        integers.fill(2**31)
    integers.fill(np.float64(-7.0), offset=3, count=2)  # exact: accepted
    with pytest.raises(TypeError, match="fill: value must be a number, not datetime64"):
        integers.fill(np.datetime64("2026-12-05"))  # (int() failed, naming nothing)
    flags = ur_cffi.zeros(4, np.bool_, queue=queue)
    for value in (2, 2**70, -1):  # (stored as True)
        with pytest.raises(ValueError, match=f"fill: value {value} does not fit in bool"):
            flags.fill(value)
    flags.fill(1, offset=1, count=1)
    with pytest.raises(ValueError, match="fill: value 1e\\+39 does not fit in bfloat16"):
        ur_cffi.zeros(2, ur_cffi.bfloat16, queue=queue).fill(1e39)  # (it stored inf)
    assert flags.to_numpy().tolist() == [False, True, False, False]
    array.fill(np.nan, offset=15)  # NaN is a float32 value like any other
    expected = np.zeros(16, np.int32)
    expected[3:5] = -7
    assert np.array_equal(integers.to_numpy(), expected)
    assert np.isnan(array.to_numpy()[15]) and not np.isnan(array.to_numpy()[:15]).any()


@pytest.mark.parametrize("make", ["queue", "context", "array", "event", "program", "kernel",
                                  "buffer"])
def test_handle_owners_refuse_copies_and_pickling(queue, context, kernels, make):
    program, kernel = crash_probe.load(context, kernels, "axpy")
    array = ur_cffi.zeros(4, queue=queue)
    objects = {"queue": queue, "context": context, "array": array, "program": program,
               "kernel": kernel, "event": array.fill(1.0, blocking=False),
               "buffer": ur_cffi.Buffer(context, 16)}
    target = objects[make]
    for duplicate in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot be copied"):
            duplicate(target)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(target)
    queue.finish()
    assert np.array_equal(array.to_numpy(), np.ones(4, np.float32))  # all still usable


def test_pointer_arguments_must_be_usm_of_the_queue_context(queue, context, device, kernels):
    _, kernel = crash_probe.load(context, kernels, "axpy")
    out = ur_cffi.empty(BLOCK, queue=queue)
    out.fill(np.nan)
    host = np.zeros(BLOCK, np.float32)
    with device.create_context() as other_context, ur_cffi.Queue(other_context) as other:
        foreign = ur_cffi.zeros(BLOCK, queue=other)
        cases = [(0xDEADBEEF, ValueError, "address 0xdeadbeef is not USM memory"),
                 (host.ctypes.data, ValueError, "is not USM memory"),
                 (True, TypeError, "must be an integer, not bool"),
                 (-1, ValueError, "out of range")]
        # Not on CUDA: every context of a device shares the device's primary CUDA context,
        # and UR reports another context's memory as USM of this one (usable there, too).
        if not device.backend.name.endswith("_CUDA"):
            cases.append((foreign.data_ptr(), ValueError, "is not USM memory"))
        for address, error, message in cases:
            with pytest.raises(error, match=message):
                kernel.launch(queue, LOCAL, LOCAL, address, out, out, 1.0, BLOCK)
    assert np.isnan(out.to_numpy()).all()  # nothing ran


@pytest.mark.cpu_device("the OpenCL adapter checks argument sizes at the launch; elsewhere "
                        "the binary's sizes are checked before it (test_signatures.py)")
def test_a_declared_width_the_kernel_does_not_take_is_named_at_the_launch(queue, context,
                                                                         kernels):
    # A native binary says nothing of its parameters here: the runtime refuses the launch,
    # and ur_cffi names the kernel and what to check.
    program, kernel = crash_probe.load(context, kernels, "axpy")
    native = ur_cffi.Program.from_binary(context, program.binaries[0])
    assert native.kernel_parameters is None
    x = ur_cffi.zeros(BLOCK, queue=queue)
    wide = native.kernel(kernel.name, ("ptr", "ptr", "ptr", "float32", "int64"),
                         hidden_args=kernel.hidden_args,
                         work_group_memory=kernel.work_group_memory)
    with pytest.raises(errors.InvalidKernelArgumentSizeError,
                       match="check the widths the signature declares"):
        wide.launch(queue, LOCAL, LOCAL, x, x, x, 1.0, BLOCK)
    undeclared = native.kernel(kernel.name, hidden_args=kernel.hidden_args,
                               work_group_memory=kernel.work_group_memory)
    with pytest.raises(errors.InvalidKernelArgumentSizeError,
                       match=r"pass numpy scalars of the parameter types \(np.float32\(x\)\) "
                             "or declare a signature"):
        undeclared.launch(queue, LOCAL, LOCAL, x, x, x, np.float32(1.0), np.int64(BLOCK))
    # Memory for a value, an address for a pointer: refused by UR naming only the kernel.
    for args in ((x, x, x, np.float32(1.0), x), (x, x, np.uint64(x.data_ptr()),
                                                  np.float32(1.0), np.int32(BLOCK))):
        with pytest.raises(ValueError, match=r"an argument is of another kind than its "
                                             r"parameter .* declare one \(Program.kernel"):
            undeclared.launch(queue, LOCAL, LOCAL, *args)


@pytest.mark.cpu_device("the CPU device's programs are SPIR-V; on CUDA they are cubins, whose "
                        "sizes test_signatures.py checks")
def test_arguments_unlike_the_spirv_parameters_are_named_before_the_launch(queue, context,
                                                                          kernels, rng):
    # From SPIR-V ur_cffi knows each parameter: a signature that contradicts the module is
    # refused where it is declared, and a launch without one checks each argument (the CPU
    # runtime crashed on a Local for a global pointer, and read a float32's bits as an int).
    axpy_program, axpy = crash_probe.load(context, kernels, "axpy")
    sums_program, sums = crash_probe.load(context, kernels, "block_sums")
    assert axpy_program.kernel_parameters[axpy.name] == ("ptr", "ptr", "ptr", "float32",
                                                         "int32")
    assert sums_program.kernel_parameters[sums.name] == ("ptr", "ptr", "int32", "local")
    for (program, kernel), entry, index, declares in (
            ((axpy_program, axpy), "int64", 4, "a 32-bit integer"),
            ((axpy_program, axpy), "float64", 3, "a 32-bit float"),
            ((axpy_program, axpy), "int32", 3, "a 32-bit float"),
            ((axpy_program, axpy), "local", 0, "a pointer to global memory"),
            ((axpy_program, axpy), "ptr", 4, "a 32-bit integer"),
            ((sums_program, sums), "ptr", 3, "a pointer to local memory"),
            ((sums_program, sums), "mem", 3, "a pointer to local memory")):
        signature = list(crash_probe.SIGNATURES["axpy" if kernel is axpy else "block_sums"][1])
        signature[index] = entry
        with pytest.raises(ValueError, match=f"signature of '{kernel.name}': entry {index} is "
                                             f"'{entry}'; the kernel's SPIR-V declares "
                                             f"{declares} there"):
            program.kernel(kernel.name, signature)
    x = ur_cffi.asarray(rng.standard_normal(LOCAL).astype(np.float32), queue=queue)
    out = ur_cffi.empty(LOCAL, queue=queue)
    undeclared_axpy, undeclared_sums = axpy_program.kernel(axpy.name), \
        sums_program.kernel(sums.name)
    axpy_args = (x, x, out, np.float32(2.0), np.int32(LOCAL))
    sums_args = (x, out, np.int32(LOCAL), ur_cffi.Local(4))
    for kernel, good, index, wrong, message in (
            (undeclared_axpy, axpy_args, 0, ur_cffi.Local(8),
             r"a pointer to global memory in the kernel's SPIR-V, got Local\(8\): pass a "
             "USMArray"),
            (undeclared_axpy, axpy_args, 2, np.uint64(x.data_ptr()),
             "a pointer to global memory in the kernel's SPIR-V, got uint64 .*an address needs "
             "a signature"),
            (undeclared_axpy, axpy_args, 3, np.int32(2),
             r"a 32-bit float in the kernel's SPIR-V, got int32 .*pass np.float32\(x\)"),
            (undeclared_axpy, axpy_args, 4, np.float32(LOCAL),
             r"a 32-bit integer in the kernel's SPIR-V, got float32 .*pass np.int32\(x\) or "
             r"np.uint32\(x\)"),
            (undeclared_axpy, axpy_args, 4, np.int64(LOCAL),
             "a 32-bit integer in the kernel's SPIR-V, got int64"),
            (undeclared_axpy, axpy_args, 4, x, "a 32-bit integer in the kernel's SPIR-V, got "
                                               "<USMArray"),
            (undeclared_sums, sums_args, 0, ur_cffi.Local(8),
             r"a pointer to global memory in the kernel's SPIR-V, got Local\(8\)"),
            (undeclared_sums, sums_args, 3, x,
             "a pointer to local memory in the kernel's SPIR-V, got <USMArray"),
            (undeclared_sums, sums_args, 3, np.int32(4),
             "a pointer to local memory in the kernel's SPIR-V, got int32 .*pass a "
             "ur_cffi.Local")):
        args = list(good)
        args[index] = wrong
        with pytest.raises(TypeError, match=f"argument {index} of '{kernel.name}' is {message}"):
            kernel.launch(queue, LOCAL, LOCAL, *args)
    # What fits launches, numpy scalars and ctypes values alike.
    expected = 2 * x.to_numpy().astype(np.float64) + x.to_numpy()
    for args in (axpy_args, (x, x, out, ctypes.c_float(2.0), ctypes.c_uint32(LOCAL))):
        out.fill(np.nan)
        undeclared_axpy.launch(queue, LOCAL, LOCAL, *args).wait()
        np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-6)


@pytest.mark.cpu_device("SPIR-V programs: the CPU device's")
def test_spirv_read_as_the_runtime_reads_it(queue, context, kernels, rng):
    from test_spirv import (CAPS, EXEC_MODEL_KERNEL, MEMORY_MODEL, OP_ENTRY_POINT,
                            OP_FUNCTION, OP_FUNCTION_END, OP_FUNCTION_PARAMETER, OP_LABEL,
                            OP_RETURN, OP_TYPE_FLOAT, OP_TYPE_FUNCTION, OP_TYPE_POINTER,
                            OP_TYPE_VOID, STORAGE, header, inst, string_words, to_bytes)

    # Kernel names are the module's own (the runtime's list is one string split at ";"), and
    # Locals that fit one by one but not together are refused naming them (the runtime said
    # OUT_OF_RESOURCES naming nothing), in either byte order (the runtime reads little-endian).
    parts = [*CAPS, MEMORY_MODEL,
             inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7, *string_words("a;b")),
             inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 9, *string_words("c")),
             inst(OP_TYPE_VOID, 2), inst(OP_TYPE_FLOAT, 4, 32),
             inst(OP_TYPE_POINTER, 5, STORAGE["Workgroup"], 4), inst(OP_TYPE_FUNCTION, 3, 2, 5, 5),
             inst(OP_TYPE_FUNCTION, 6, 2),
             inst(OP_FUNCTION, 2, 7, 0, 3), inst(OP_FUNCTION_PARAMETER, 5, 10),
             inst(OP_FUNCTION_PARAMETER, 5, 11), inst(OP_LABEL, 8), inst(OP_RETURN),
             inst(OP_FUNCTION_END),
             inst(OP_FUNCTION, 2, 9, 0, 6), inst(OP_LABEL, 12), inst(OP_RETURN),
             inst(OP_FUNCTION_END)]
    words = header() + [word for part in parts for word in part]
    local_mem_size = queue.device.local_mem_size
    for byteorder in ("little", "big"):
        program = ur_cffi.Program.from_il(context, to_bytes(words, byteorder))
        assert program.kernel_names == ["a;b", "c"]
        kernel = program.kernel("a;b")
        kernel.launch(queue, 1, 1, ur_cffi.Local(16), ur_cffi.Local(local_mem_size // 2)).wait()
        half = local_mem_size // 2 + 1
        with pytest.raises(ValueError, match=f"kernel 'a;b': local memory of {2 * half} bytes "
                                             rf"\(argument 0: Local\({half}\), argument 1: "
                                             rf"Local\({half}\)\) exceeds the device's "
                                             f"{local_mem_size} bytes"):
            kernel.launch(queue, 1, 1, ur_cffi.Local(half), ur_cffi.Local(half))
    # A real kernel's module in the other byte order computes as it does in its own.
    index = json.loads((Path(kernels) / "kernels.json").read_text())["axpy"]
    module = (Path(kernels) / "axpy.bin").read_bytes()
    other_order = np.frombuffer(module, dtype=np.uint32).byteswap().tobytes()
    program = ur_cffi.Program.from_il(context, other_order)
    kernel = program.kernel(index["entry"])
    x = ur_cffi.asarray(rng.standard_normal(LOCAL).astype(np.float32), queue=queue)
    y = ur_cffi.asarray(rng.standard_normal(LOCAL).astype(np.float32), queue=queue)
    out = ur_cffi.full(LOCAL, np.nan, np.float32, queue=queue)
    kernel.launch(queue, LOCAL, LOCAL, x, y, out, np.float32(3.0), np.int32(LOCAL)).wait()
    np.testing.assert_allclose(out.to_numpy(), 3.0 * x.to_numpy().astype(np.float64)
                               + y.to_numpy(), rtol=1e-6, atol=1e-6)
    for call, name in ((ur_cffi.Program.from_il, "il"), (ur_cffi.Program.from_binary, "binary")):
        with pytest.raises(ValueError, match=rf"{name} is empty \(0 bytes\)"):
            call(context, b"")


def test_values_that_do_not_fit_their_parameter_raise(queue, context, kernels):
    program, kernel = crash_probe.load(context, kernels, "axpy")
    x = ur_cffi.zeros(BLOCK, queue=queue)
    for value, error, message in (
            (1e300, ValueError, "1e\\+300 does not fit in float32"),
            (2**128, ValueError, "does not fit in float32"),  # an int: cffi made it inf
            (np.float64(2.0), TypeError, "declared float32, got float64"),
            (True, TypeError, "declared float32, got bool"),
            (ctypes.c_double(2.5), TypeError, "declared float32, got c_double"),
            (None, TypeError, "declared float32, got NoneType")):
        with pytest.raises(error, match=message):
            kernel.launch(queue, LOCAL, LOCAL, x, x, x, value, BLOCK)
    for value, error, message in (
            (ctypes.c_float(2.5), TypeError, "declared int32, got c_float"),
            (2**31, ValueError, "does not fit in int32"),
            (2.0, TypeError, "declared int32, got float"),
            (np.int64(4), TypeError, "declared int32, got int64")):
        with pytest.raises(error, match=message):
            kernel.launch(queue, LOCAL, LOCAL, x, x, x, 1.0, value)
    for signature, message in (((None,) * 5, "entry 0 is None"),
                               (("ptr", "ptr", "ptr", object, "int32"), "entry 3 is <class"),
                               (("ptr", "ptr", "ptr", "pi", "int32"), "entry 3 is 'pi'"),
                               ("ptrs", "must be a sequence of entries"),
                               (("ptr", "ptr", "ptr", "float", "int32"), "entry 3 is 'float', "
                                "which numpy reads as float64 and C as float32"),
                               (("ptr", "ptr", "ptr", "float32", "int"), "entry 4 is 'int', "
                                "which numpy reads as int64 and C as int32"),
                               (("ptr", "ptr", "ptr", float, "int32"), "entry 3 is <class "
                                "'float'>, which numpy reads as float64 and C as float32"),
                               (("ptr", "ptr", "ptr", "float32", int), "entry 4 is <class "
                                "'int'>, which numpy reads as int64 and C as int32"),
                               # in their hashes' order, types would go to other parameters
                               ({"ptr", "int32"}, "a set or dict has no parameter order"),
                               (frozenset({"ptr"}), "a set or dict has no parameter order"),
                               (dict.fromkeys(("ptr",) * 3 + ("float32", "int32")),
                                "a set or dict has no parameter order")):
        with pytest.raises(TypeError, match=message):
            program.kernel(kernel.name, signature=signature)
    declared = program.kernel(kernel.name, ("ptr", "ptr", "ptr", np.dtype("float32"),
                                            np.dtype("int32")), hidden_args=kernel.hidden_args)
    for entries in (declared.signature, ("ptr",) * 3 + (np.float32, np.dtype(np.int32))):
        assert program.kernel(kernel.name, entries, hidden_args=kernel.hidden_args,
                              work_group_memory=kernel.work_group_memory).signature == tuple(
            entry if isinstance(entry, str) else np.dtype(entry) for entry in entries)  # (== int)
    with pytest.raises(TypeError, match=r"hidden_args of .* \(a set or dict has no param"):
        program.kernel(kernel.name, hidden_args={np.int32(1), np.float32(2)})
    for value in (ctypes.c_char_p(b"a"), ctypes.c_wchar("a"), ctypes.c_wchar_p("a")):
        with pytest.raises(TypeError, match=f"argument 4 of .* is declared int32, got "
                                            f"{type(value).__name__}, which is no number"):
            kernel.launch(queue, LOCAL, LOCAL, x, x, x, 1.0, value)
    undeclared = program.kernel(kernel.name, hidden_args=kernel.hidden_args,  # no signature
                                work_group_memory=kernel.work_group_memory)
    for value in (np.str_("a"), np.bytes_(b"\0\4\0\0"), np.void(b"\0\4\0\0"),
                  ctypes.c_wchar("a"), ctypes.c_void_p(0)):  # not numbers
        with pytest.raises(TypeError, match="has no C type; pass a numeric numpy scalar"):
            undeclared.launch(queue, LOCAL, LOCAL, x, x, x, np.float32(1.0), value)
    from ur_cffi.program import _value_bytes

    for value in (ur_cffi.bfloat16(1.5), ur_cffi.float8_e5m2(-2.0)):  # numbers too (kind "V")
        assert _value_bytes("k", 0, value, None) == np.array(value).tobytes()
    for wrong in (None, context, "q"):
        with pytest.raises(TypeError, match="queue must be a ur_cffi Queue"):
            kernel.launch(wrong, LOCAL, LOCAL, x, x, x, 1.0, BLOCK)
    with pytest.raises(ValueError, match="exceeds size_t: the work-item ids would wrap"):
        kernel.launch(queue, LOCAL, LOCAL, x, x, x, 1.0, BLOCK, global_offset=2**64 - LOCAL)
    for device in (0, "", "cpu"):  # not "no device"
        with pytest.raises(ValueError, match="is not a device of"):
            program.build_log(device)
        with pytest.raises(ValueError, match="is not a device of"):
            ur_cffi.Program.from_binary(context, program.binaries[0], device=device)
        with pytest.raises(ValueError, match="is not a device of"):
            ur_cffi.Graph(context, device)
        with ur_cffi.Buffer(context, 64) as buffer, \
                pytest.raises(ValueError, match="is not a device of"):
            buffer.native_handle(device)
    with pytest.raises(ValueError, match="contains a NUL character"):
        program.kernel(kernel.name + "\0junk")
    with pytest.raises(ValueError, match="options .* contains a NUL character"):
        program.build("-g\0junk")
    # a lone surrogate (os.fsdecode's of undecodable bytes) raised a bare UnicodeEncodeError
    with pytest.raises(ValueError, match=r"kernel name '.*\\udc80' is not valid Unicode text"):
        program.kernel(kernel.name + "\udc80")
    with pytest.raises(ValueError, match=r"options '-O\\udcff' is not valid Unicode text"):
        program.build("-O\udcff")
    with pytest.raises(TypeError, match="kernel name must be a str, not NoneType"):
        program.kernel(None)
    with pytest.raises(TypeError, match="options must be a str, not NoneType"):
        program.build(None)


def test_wrong_objects_get_clear_type_errors(queue, context):
    array = ur_cffi.zeros(4, queue=queue)
    for call, message in ((lambda: ur_cffi.Queue(None), "context must be a ur_cffi Context"),
                          (lambda: ur_cffi.Context("cpu"), "devices must be a list"),
                          (lambda: ur_cffi.Context([None]), "devices must be ur_cffi Devices"),
                          (lambda: array.fill(1.0, wait_for=5), "wait_for takes an Event"),
                          (lambda: array.fill(1.0, queue="q"), "queue must be a ur_cffi Queue"),
                          (lambda: ur_cffi.empty(3, None, queue=queue), "dtype None"),
                          (lambda: ur_cffi.Program.from_il("ctx", b""), "context must be"),
                          (lambda: ur_cffi.Program.from_il(context, "text"), "il must be bytes"),
                          # (asarray said "'NoneType' object has no attribute 'out_of_order'")
                          (lambda: ur_cffi.asarray([1, 2], queue=None),
                           "queue must be a ur_cffi Queue, not NoneType"),
                          (lambda: ur_cffi.asarray(array, queue=context),
                           "queue must be a ur_cffi Queue, not Context"),
                          (lambda: ur_cffi.asarray(np.zeros((2, 2))[:, ::2], queue=None),
                           "queue must be a ur_cffi Queue, not NoneType")):
        with pytest.raises(TypeError, match=message):
            call()
    # Assignment: a ctypes number as fill takes it (numpy read c_double(2.5) as text), and a
    # value that does not broadcast is named as assignment's (numpy's "remapped shapes")
    array[1] = ctypes.c_double(2.5)
    array[2] = ctypes.c_int(-3)
    assert array.to_numpy().tolist() == [0.0, 2.5, -3.0, 0.0]
    with pytest.raises(ValueError, match=r"a\[key\] = value: a value of shape \(3,\) does not "
                                         r"broadcast to the target's shape \(2,\)"):
        array[:2] = np.ones(3)


def test_overlapping_copies_onto_itself_are_refused(queue):
    array = ur_cffi.asarray(np.arange(8, dtype=np.float32), queue=queue)
    with pytest.raises(ValueError, match="the source at offset 0 overlaps"):
        array.copy_from(array)
    interleave = "the source's bytes and the destination's overlap or interleave"
    for call in (lambda: array.copy_to(array),
                 lambda: array[::2].copy_from(array[1::2]),  # (interleaved: said "overlaps")
                 lambda: array[1::2].copy_to(array[::2])):
        with pytest.raises(ValueError, match=f"{interleave} .*assignment, a\\[...\\] = b"):
            call()
    assert np.array_equal(array.to_numpy(), np.arange(8, dtype=np.float32))
    array[::2] = array[1::2]
    assert np.array_equal(array.to_numpy(), np.repeat(np.arange(1, 8, 2, dtype=np.float32), 2))


@pytest.mark.parametrize("read", ["to_numpy", "copy_to", "copy_from", "setitem", "copy",
                                  "copy_", "fill_after_read", "buffer_write", "buffer_read",
                                  "strided_setitem"])
def test_copies_on_an_out_of_order_queue_follow_earlier_kernels(context, device, kernels, rng,
                                                                read):
    """A long kernel, then at once a copy (or fill) without wait_for: it waits for the kernel,
    whether it reads what the kernel writes or overwrites what the kernel reads.  (All but
    the reads back to the host used to overtake it.)"""
    from kernels import lcg_reference

    _, lcg = crash_probe.load(context, kernels, "lcg")
    n, steps = 4 * BLOCK, 20_000
    x = rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int32)
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        source = ur_cffi.asarray(x, queue=queue)
        out = ur_cffi.empty(n, np.int32, queue=queue)
        out.fill(0)
        copied = ur_cffi.zeros(n, np.int32, queue=queue)
        launched = lcg.launch(queue, n // BLOCK * LOCAL, LOCAL, source, out, n, steps)
        if read == "strided_setitem":  # row copies and their barrier, read with no finish
            shared = ur_cffi.zeros((n // 2, 2), np.int32, queue=queue, kind="shared")
            shared[:, 0] = out[::2]
            result = np.asarray(shared)[:, 0].copy()
            assert np.array_equal(result, lcg_reference(x, steps)[::2])
            assert not np.asarray(shared)[:, 1].any()
            return
        if read.startswith("buffer"):  # a blocking Buffer copy: ordered after the kernel too
            with ur_cffi.Buffer(context, 64) as buffer:
                if read == "buffer_write":
                    buffer.write(queue, np.zeros(16, np.float32))
                else:
                    buffer.read(queue, np.empty(16, np.float32))
                assert launched.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
            result = out.to_numpy()
        elif read == "to_numpy":
            result = out.to_numpy()
        elif read == "copy_to":
            result = np.full(n, -1, np.int32)
            out.copy_to(result)
        elif read == "fill_after_read":  # the kernel reads source: the fill must wait
            source.fill(7)
            queue.finish()
            result = out.to_numpy()
        else:
            if read == "copy_from":
                copied.copy_from(out)
            elif read == "setitem":
                copied[...] = out
            elif read == "copy":
                copied = out.copy()
            else:
                copied.copy_(out)
            queue.finish()
            result = copied.to_numpy()
        assert np.array_equal(result, lcg_reference(x, steps))


def test_triton_refuses_dtypes_it_has_no_element_type_for(queue):
    triton = pytest.importorskip("triton", reason=device_under_test.NO_TRITON)
    import triton.language as tl

    import ur_cffi.triton as ur_triton

    @triton.jit
    def copy_kernel(x, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x + offsets, tl.load(x + offsets, mask=offsets < n), mask=offsets < n)

    with ur_triton.using(queue):
        for dtype in (">f4", [("a", "<f4")]):
            array = ur_cffi.zeros(4, np.dtype(dtype), queue=queue)
            with pytest.raises(TypeError, match="Triton has no element type for it"):
                copy_kernel[(1,)](array, 4, BLOCK=16)


# --- the property, in a child -----------------------------------------------------------------

def _calls(env: dict, value) -> list:
    """``(name, what an error message must name (a regular expression), call)`` for each
    argument given ``value``."""
    queue, context, array, kernel = env["queue"], env["context"], env["array"], env["kernel"]
    host, buffer = np.zeros(4, np.float32), env["buffer"]
    return [
        ("empty shape", "shape", lambda: ur_cffi.empty(value, queue=queue).close()),
        ("empty dtype", "dtype", lambda: ur_cffi.empty(3, value, queue=queue).close()),
        ("empty kind", "kind", lambda: ur_cffi.empty(3, queue=queue, kind=value).close()),
        ("copy_from offset", "offset", lambda: array.copy_from(host, offset=value)),
        ("copy_to offset", "offset", lambda: array.copy_to(host, offset=value)),
        ("copy_from source", "copy_from", lambda: array.copy_from(value)),
        ("fill value", "value", lambda: array.fill(value)),
        ("fill offset", "offset", lambda: array.fill(1.0, offset=value)),
        ("fill count", "count|element", lambda: array.fill(1.0, count=value)),
        ("fill queue", "queue", lambda: array.fill(1.0, queue=value)),
        ("fill wait_for", "wait_for", lambda: array.fill(1.0, wait_for=value)),
        ("Buffer size", "Buffer size", lambda: ur_cffi.Buffer(context, value).close()),
        ("Buffer write offset", "offset", lambda: buffer.write(queue, host, offset=value)),
        ("Local size", "Local memory size", lambda: ur_cffi.Local(value)),
        ("global_size", "global_size",
         lambda: kernel.launch(queue, value, None, array, array, array, 1.0, 0)),
        ("local_size", "local_size",
         lambda: kernel.launch(queue, LOCAL, value, array, array, array, 1.0, 0)),
        ("global_offset", "global_offset",
         lambda: kernel.launch(queue, LOCAL, LOCAL, array, array, array, 1.0, 0,
                               global_offset=value)),
        ("pointer argument", "argument 0",
         lambda: kernel.launch(queue, LOCAL, LOCAL, value, array, array, 1.0, 0)),
        ("float32 argument", "argument 3",
         lambda: kernel.launch(queue, LOCAL, LOCAL, array, array, array, value, 0)),
        ("kernel name", "kernel name", lambda: env["program"].kernel(value)),
        ("required_local_size", "required_local_size",
         lambda: env["program"].kernel(kernel.name, required_local_size=value).close()),
        ("build options", "options", lambda: env["program"].build(value)),
        ("Queue context", "context", lambda: ur_cffi.Queue(value)),
    ]


def _legitimate_but_slow(name: str, value) -> bool:
    """Values a call rightly accepts but that would take long here: a launch of billions of
    work-items, a build with other options (the compiler decides what they mean)."""
    if name in ("global_size", "local_size", "global_offset"):
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
            and value > 2**16
    return name == "build options" and isinstance(value, str)


def run_property(count: int, kernels: Path) -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    program, kernel = crash_probe.load(context, kernels, "axpy")
    env = {"queue": queue, "context": context, "program": program, "kernel": kernel,
           "array": ur_cffi.zeros(16, queue=queue), "buffer": ur_cffi.Buffer(context, 64)}
    outcomes: Counter = Counter()
    names = [name for name, _, _ in _calls(env, None)]

    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(range(len(HOSTILE))), st.sampled_from(names))
    def hostile(value_index, name):
        value = HOSTILE[value_index]
        words, call = next((w, c) for n, w, c in _calls(env, value) if n == name)
        if _legitimate_but_slow(name, value):
            outcomes["skipped"] += 1
            return
        print(json.dumps({"call": name, "value": repr(value)}), file=sys.stderr, flush=True)
        try:
            call()
        except (TypeError, ValueError) as error:
            assert re.search(words, str(error)), f"{name} with {value!r}: {error!r} names none " \
                f"of {words!r}"
            outcomes[type(error).__name__] += 1
        except errors.URError as error:
            raise AssertionError(f"{name} with {value!r} reached UR: {error!r}") from error
        else:
            outcomes["ok"] += 1
        queue.finish()
        data = env["array"].to_numpy()  # the array is still there and readable
        assert data.shape == (16,)

    hostile()
    return dict(outcomes)


def test_hostile_values_in_every_argument_never_crash(kernels, tmp_path):
    done = crash_probe.run_child([3000, kernels], script=Path(__file__), check=False,
                                 timeout=900, cwd=tmp_path)
    if done.returncode != 0:
        last = "\n".join(done.stderr.strip().splitlines()[-30:])
        pytest.fail(f"exited with {done.returncode} (negative: killed by that signal)\n{last}")
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    print(outcomes)
    assert outcomes.get("TypeError", 0) > 0 and outcomes.get("ValueError", 0) > 0


if __name__ == "__main__":
    print(json.dumps(run_property(int(sys.argv[1]), Path(sys.argv[2]))))


@pytest.mark.parametrize("step", [0, 0.0, np.int64(0), np.float32(-0.0)])
def test_arange_names_a_zero_step(queue, step):
    with pytest.raises(ValueError, match="arange: step must not be zero"):
        ur_cffi.arange(0, 5, step, queue=queue)


@pytest.mark.parametrize("dtype", [None, np.int32, np.float32])
def test_arange_reads_a_step_of_none_as_one(queue, dtype):
    # (with an integer dtype it failed in int(None), naming neither arange nor step)
    expected = np.arange(5, None, None, dtype=dtype)
    result = ur_cffi.arange(5, None, None, dtype, queue=queue).to_numpy()
    assert result.dtype == expected.dtype and np.array_equal(result, expected)


@pytest.mark.parametrize("value", ["false", None, 0, np.float64(1.0)])
def test_copies_and_fills_take_blocking_as_a_bool_only(queue, value):
    # Its truth value was used: blocking=None returned before the host array was written.
    array = ur_cffi.asarray(np.arange(4.0), queue=queue)
    buffer = ur_cffi.Buffer(queue.context, 32)
    host = np.zeros(4)
    calls = {"copy_from": lambda: array.copy_from(host, blocking=value),
             "copy_to": lambda: array.copy_to(host, blocking=value),
             "fill": lambda: array.fill(1.0, blocking=value),
             "Buffer.write": lambda: buffer.write(queue, host, blocking=value),
             "Buffer.read": lambda: buffer.read(queue, host, blocking=value)}
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"{re.escape(name)}: blocking must be True or "
                                            rf"False, not {type(value).__name__}"):
            call()
    queue.finish()
    assert np.array_equal(array.to_numpy(), np.arange(4.0)) and not host.any()
    array.copy_to(host, blocking=np.True_)
    assert np.array_equal(host, np.arange(4.0))


@pytest.mark.parametrize("value", ["false", "0", [0], 1])
def test_init_takes_validation_as_a_bool_only(value):
    # "false" turned UR's validation layers on, and validation_enabled() returned it.
    with pytest.raises(TypeError, match=re.escape(
            f"init: validation must be True or False, not {type(value).__name__} {value!r}")):
        ur_cffi.init(validation=value)
    assert ur_cffi.loader.validation_enabled() in (True, False)


def test_info_queries_refuse_another_enum_a_null_handle_and_binaries(device, context,
                                                                     kernels):
    from ur_cffi.enums import ur_device_info_t, ur_platform_info_t, ur_program_info_t
    from ur_cffi.info import query

    # Another enum's member was sent by its number (a platform's NAME read the device's vendor
    # id as text), and a NULL handle crashed the adapter.
    with pytest.raises(TypeError, match="urDeviceGetInfo takes a ur_device_info_t, not "
                                        "ur_platform_info_t"):
        query("urDeviceGetInfo", device.handle, ur_platform_info_t.UR_PLATFORM_INFO_NAME)
    with pytest.raises(TypeError, match="not int 1"):
        query("urDeviceGetInfo", device.handle, 1)
    with pytest.raises(TypeError, match=r"urDeviceGetInfo takes 1 argument\(s\) before the "
                                        "property, not 2"):
        query("urDeviceGetInfo", device.handle, device.handle,
              ur_device_info_t.UR_DEVICE_INFO_NAME)
    with pytest.raises(TypeError, match="urQueueFinish is no info query"):  # ("takes -3")
        query("urQueueFinish", device.handle)
    done = crash_probe.run_child(code=(
        "import ur_cffi\n"
        "from ur_cffi.enums import ur_device_info_t\n"
        "try:\n"
        "    ur_cffi.info.query('urDeviceGetInfo', ur_cffi.ffi.NULL,\n"
        "                       ur_device_info_t.UR_DEVICE_INFO_NAME)\n"
        "except ValueError as error:\n"
        "    print(error)\n"), check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "urDeviceGetInfo: its struct ur_device_handle_t_ * is NULL" in done.stdout
    program, _ = crash_probe.load(context, kernels, "axpy")
    with pytest.raises(ValueError, match="read Program.binaries"):
        query("urProgramGetInfo", program.handle, ur_program_info_t.UR_PROGRAM_INFO_BINARIES)
    assert query("urDeviceGetInfo", device.handle,
                 ur_device_info_t.UR_DEVICE_INFO_NAME) == device.name


@pytest.mark.cpu_device("the CPU device's programs are SPIR-V, whose parameters are checked")
def test_the_spirv_check_takes_bit_carriers_and_leaves_hidden_args_alone(context, queue, rng):
    """Checked against the SPIR-V, a launch refused what worked: a bfloat16 passed as its
    uint16 bits (Triton types a bf16 parameter as a 16-bit float), a signature that declares
    those bits, and a hidden null pointer (the caller's arguments only are checked)."""
    import ml_dtypes

    import kernels
    import ur_cffi.triton
    from ur_cffi import spirv
    from ur_cffi.triton import abi

    def load(function, signature):
        compiled = ur_cffi.triton.compile(function, signature, {}, device=queue.device)
        program = ur_cffi.Program.from_il(context, spirv.drop_capabilities(compiled.asm["spv"]))
        local = compiled.metadata.num_warps * abi.current("intel").threads_per_warp(
            compiled.metadata)
        return program, compiled.metadata.name, local

    signature = {"out_ptr": "*fp64", "i": "i32", "j": "i64", "h": "fp16", "d": "fp64",
                 "flag": "i1", "small": "i8", "wide": "i16", "half": "u16", "bf": "bf16",
                 "f": "fp32", "big": "u64"}
    program, name, local = load(kernels.mixed_scalars, signature)
    bf = ml_dtypes.bfloat16(1.5 + int(rng.integers(0, 64)) / 64)
    values = [np.int32(rng.integers(-2**31, 2**31)), np.int64(rng.integers(-2**62, 2**62)),
              np.float16(rng.uniform(-100, 100)), np.float64(rng.standard_normal()),
              np.int8(1), np.int8(rng.integers(-128, 128)), np.int16(rng.integers(-2**15, 2**15)),
              np.uint16(rng.integers(0, 2**16)), bf, np.float32(rng.standard_normal()),
              np.uint64(rng.integers(2**63, 2**64 - 1, dtype=np.uint64))]
    expected = np.array([float(value) for value in values])
    out = ur_cffi.empty(11, np.float64, queue=queue)
    declared = ["ptr", "int32", "int64", "float16", "float64", "int8", "int8", "int16",
                "uint16", "uint16", "float32", "uint64"]
    for kernel, bf_as in ((program.kernel(name), bf), (program.kernel(name), bf.view(np.uint16)),
                          (program.kernel(name, declared), bf.view(np.uint16))):
        given = list(values)
        given[8] = bf_as
        out.fill(np.nan)
        kernel.launch(queue, local, local, out, *given).wait()
        np.testing.assert_array_equal(out.to_numpy(), expected)
    # Bits of a bfloat16 for a 16-bit integer (OpenCL C's ushort for one); but not a number
    # of the other kind that is no bit carrier (the kernel read float16 3.0 as 16896).
    given = list(values)
    given[7] = ml_dtypes.bfloat16(-2.0)  # `half`, uint16
    program.kernel(name).launch(queue, local, local, out, *given).wait()
    assert out.to_numpy()[7] == int(ml_dtypes.bfloat16(-2.0).view(np.uint16))
    for index, wrong, message in ((6, np.float16(3.0), "a 16-bit integer in the kernel's "
                                                       "SPIR-V, got float16"),
                                  (2, np.int16(3), "a 16-bit float in the kernel's SPIR-V, "
                                                   "got int16"),
                                  (5, np.float32(1), "an 8-bit integer")):
        given = list(values)
        given[index] = wrong
        with pytest.raises(TypeError, match=f"argument {index + 1} of '{name}' is "
                                            f"({message})"):
            program.kernel(name).launch(queue, local, local, out, *given)
    program, name, local = load(kernels.fill_beside_unused_pointer,
                                {"out_ptr": "*fp32", "n": "i32", "unused_ptr": "*fp32"})
    kernel = program.kernel(name, hidden_args=(np.uint64(0),))  # a null pointer
    with pytest.raises(TypeError, match=rf"hidden_args\[0\] \(argument 2\) of '{name}' is a "
                                        "pointer to global memory in the kernel's SPIR-V, got "
                                        r"Local\(8\)"):  # (the runtime crashed on it)
        program.kernel(name, hidden_args=(ur_cffi.Local(8),)).launch(
            queue, local, local, ur_cffi.empty(64, np.float32, queue=queue), np.int32(1))
    # With a signature for the others, the hidden ones were checked by nothing: an int32 for
    # the pointer launched, a 4-byte value where the kernel reads 8.
    hidden = program.kernel(name, ("ptr", "int32"), hidden_args=(np.int32(5),))
    with pytest.raises(TypeError, match=rf"hidden_args\[0\] \(argument 2\) of '{name}' is a "
                                        "pointer to global memory in the kernel's SPIR-V, got "
                                        r"int32 (np.int32\(5\)|5):"):
        hidden.launch(queue, local, local, ur_cffi.empty(64, np.float32, queue=queue), 1)
    program.kernel(name, ("ptr", "int32"), hidden_args=(np.uint64(0),)).launch(
        queue, local, local, ur_cffi.empty(64, np.float32, queue=queue), 1).wait()
    # An address for a hidden pointer is checked as a "ptr" argument's is (UR's refusal at the
    # launch named no argument; a shared context would have launched on it).
    with ur_cffi.Context([queue.device]) as other_context:
        other = ur_cffi.empty(64, np.float32, queue=ur_cffi.Queue(other_context, queue.device))
        for address in (0xDEADBEEF000, other.data_ptr()):
            with pytest.raises(ValueError, match=rf"hidden_args\[0\] of '{name}' \(argument "
                                                 rf"2, a pointer\): address 0x{address:x} is "
                                                 "not USM memory of the kernel's context"):
                program.kernel(name, ("ptr", "int32"), hidden_args=(np.uint64(address),))
        other.close()
    scratch = ur_cffi.empty(64, np.float32, queue=queue)
    program.kernel(name, ("ptr", "int32"), hidden_args=(np.uint64(scratch.data_ptr()),)).launch(
        queue, local, local, ur_cffi.empty(64, np.float32, queue=queue), 1).wait()
    n = int(rng.integers(1, 64))
    out = ur_cffi.full(64, np.nan, np.float32, queue=queue)
    kernel.launch(queue, local, local, out, np.int32(n)).wait()
    got = out.to_numpy()
    np.testing.assert_array_equal(got[:n], np.arange(n, dtype=np.float64) + n)
    assert np.isnan(got[n:]).all()


@pytest.mark.cpu_device("the CPU device's programs are SPIR-V, whose parameters are checked")
def test_a_signature_declares_bfloat16_and_float8_for_python_numbers(context, queue, rng):
    """A bf16 parameter is a 16-bit float in Triton's SPIR-V: a signature could say "float16"
    (a Python float then went as float16's bits, which the kernel read as a bfloat16's: 1.5 as
    0.125) but not "bfloat16" or "float8_e4m3fn", which it called no numeric dtype."""
    import ml_dtypes

    import kernels
    import ur_cffi.triton
    from ur_cffi import spirv
    from ur_cffi.triton import abi

    compiled = ur_cffi.triton.compile(
        kernels.store_scalars, {"out_ptr": "*fp64", "a": "bf16", "b": "fp16", "c": "i8",
                                "d": "fp32", "e": "i32", "f": "i64"}, {}, device=queue.device)
    program = ur_cffi.Program.from_il(context, spirv.drop_capabilities(compiled.asm["spv"]))
    local = compiled.metadata.num_warps * abi.current("intel").threads_per_warp(compiled.metadata)
    kernel = program.kernel(compiled.metadata.name, ("ptr", "bfloat16", "float16",
                                                     "float8_e4m3fn", "float32", "int32",
                                                     "int64"))
    assert kernel.signature[1:4] == (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16),
                                     np.dtype(ml_dtypes.float8_e4m3fn))
    a, b = (1 + int(n) / 64 for n in rng.integers(0, 64, 2))
    c = float(ml_dtypes.float8_e4m3fn(rng.uniform(-400, 400)))
    out = ur_cffi.empty(6, np.float64, queue=queue)
    out.fill(np.nan)
    kernel.launch(queue, local, local, out, a, b, c, 0.5, 7, 9).wait()
    read = out.to_numpy()
    np.testing.assert_array_equal(read[[0, 1, 3, 4, 5]], [a, b, 0.5, 7, 9])
    assert read[2] == ml_dtypes.float8_e4m3fn(c).view(np.int8)  # (the i8 parameter: c's bits)
    with pytest.raises(TypeError, match="entry 1 is 'bfloat17'; use 'ptr', 'local', 'mem', a "
                                        "numeric numpy dtype or one of"):
        program.kernel(compiled.metadata.name, ("ptr", "bfloat17"))


@pytest.mark.cpu_device("the CPU device's programs are SPIR-V, whose parameters are checked")
def test_a_bool_parameter_takes_0_or_1_only(context, queue, rng):
    """Triton's i1 is an OpTypeBool parameter, one byte at the launch: it was checked by
    nothing, and the kernel read np.int8(2) as False, np.uint8(255) as True (the low bit)."""
    import kernels
    import ur_cffi.triton
    from ur_cffi import spirv
    from ur_cffi.triton import abi

    compiled = ur_cffi.triton.compile(
        kernels.store_flag, {"out_ptr": "*fp64", "flag": "i1", "n": "i32"}, {},
        device=queue.device)
    program = ur_cffi.Program.from_il(context, spirv.drop_capabilities(compiled.asm["spv"]))
    name = compiled.metadata.name
    local = compiled.metadata.num_warps * abi.current("intel").threads_per_warp(compiled.metadata)
    assert program.kernel_parameters[name][:3] == ("ptr", "bool", "int32")
    n = int(rng.integers(1, 1000))
    out = ur_cffi.empty(2, np.float64, queue=queue)
    undeclared, declared = program.kernel(name), program.kernel(name, ("ptr", "int8", "int32"))
    for kernel, flag in ((undeclared, np.True_), (undeclared, np.False_),
                         (undeclared, np.uint8(1)), (undeclared, ctypes.c_bool(True)),
                         (undeclared, ctypes.c_int8(0)), (declared, 1), (declared, 0)):
        value = flag.value if isinstance(flag, ctypes._SimpleCData) else flag
        out.fill(np.nan)
        kernel.launch(queue, local, local, out, flag, np.int32(n)).wait()
        np.testing.assert_array_equal(out.to_numpy(), [float(bool(value)), n])
    for kernel, flag, given in ((undeclared, np.int8(2), r"int8 (np.int8\(2\)|2)"),
                                (undeclared, np.uint8(255), r"uint8 (np.uint8\(255\)|255)"),
                                (undeclared, ctypes.c_int8(-1), r"c_byte\(-1\)"),
                                (undeclared, np.int32(1), r"int32 (np.int32\(1\)|1)"),
                                (undeclared, np.float16(1), r"float16 (np.float16\(1.0\)|1.0)"),
                                (declared, 2, "int 2"), (declared, -1, "int -1")):
        with pytest.raises(TypeError, match=f"argument 1 of '{name}' is a bool in the "
                                            f"kernel's SPIR-V, got {given}: pass np.bool_"):
            kernel.launch(queue, local, local, out, flag, np.int32(n))
    for entry in ("int16", "float16", "ptr"):
        with pytest.raises(ValueError, match=f"entry 1 is '{entry}'; the kernel's SPIR-V "
                                             "declares a bool there"):
            program.kernel(name, ("ptr", entry, "int32"))
    program.kernel(name, ("ptr", "bool", "int32")).launch(queue, local, local, out, True,
                                                          n).wait()
    np.testing.assert_array_equal(out.to_numpy(), [1.0, n])
