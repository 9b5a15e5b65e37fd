"""The launch ABI table (ur_cffi/triton/abi.py) checked against what the installed Triton emits.

The widths of scalar parameters come from the compiled SPIR-V itself (the entry point's
OpFunctionParameter types), so a Triton that changes them fails here, not on a device.  The
version key and the bf16 rounding are checked on their own.
"""

import array
import math
import struct
import sys

import numpy as np
import pytest

import ur_cffi

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
ur_triton = pytest.importorskip("ur_cffi.triton")

from ur_cffi.triton import abi  # noqa: E402

# SPIR-V opcodes (specification 3.52) needed to read a kernel's parameter types.
OP_ENTRY_POINT, OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT = 15, 20, 21, 22
OP_TYPE_POINTER, OP_FUNCTION, OP_FUNCTION_PARAMETER = 32, 54, 55


def entry_point_parameters(module: bytes) -> list[tuple[str, int]]:
    """``[(kind, bits)]`` of the entry point's parameters: kind is bool, int, float or ptr."""
    words = array.array("I", module)
    types, params, entry, function = {}, [], None, None
    offset = 5
    while offset < len(words):
        count, opcode = words[offset] >> 16, words[offset] & 0xFFFF
        operands = words[offset + 1:offset + count]
        if opcode == OP_TYPE_BOOL:
            types[operands[0]] = ("bool", 1)
        elif opcode == OP_TYPE_INT:
            types[operands[0]] = ("int", operands[1])
        elif opcode == OP_TYPE_FLOAT:
            types[operands[0]] = ("float", operands[1])
        elif opcode == OP_TYPE_POINTER:
            types[operands[0]] = ("ptr", 64)
        elif opcode == OP_ENTRY_POINT:
            entry = operands[1]
        elif opcode == OP_FUNCTION:
            function = operands[1]
        elif opcode == OP_FUNCTION_PARAMETER and function == entry:
            params.append(types[operands[0]])
        offset += count
    return params


@triton.jit
def every_scalar(out_ptr, b, i8, i16, i32, i64, u8, u16, u32, u64, h, bf, f, d):
    total = b.to(tl.float64) + i8 + i16 + i32 + i64 + u8 + u16 + u32 + u64
    tl.store(out_ptr, total + h.to(tl.float64) + bf.to(tl.float64) + f + d)


SCALAR_SIGNATURE = {"out_ptr": "*fp64", "b": "i1", "i8": "i8", "i16": "i16", "i32": "i32",
                    "i64": "i64", "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64",
                    "h": "fp16", "bf": "bf16", "f": "fp32", "d": "fp64"}


@pytest.fixture(scope="module")
def compiled_scalars(tmp_path_factory, device):
    from triton.compiler import ASTSource

    pytest.importorskip("triton.backends.intel", reason="reads the SPIR-V of Triton's Intel "
                        "backend (test_triton_cuda.py checks the NVIDIA one)")

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        cache = tmp_path_factory.getbasetemp() / "triton_cache"  # as in test_triton.py
        cache.mkdir(exist_ok=True)
        patch.setenv("TRITON_CACHE_DIR", str(cache))
        with device.create_context() as context, ur_cffi.Queue(context, device) as queue, \
                ur_triton.using(queue):
            target = ur_triton.active_driver().get_current_target()
            yield triton.compile(ASTSource(every_scalar, SCALAR_SIGNATURE, {}, {}),
                                 target=target)


def test_scalar_widths_match_the_compiled_kernel(compiled_scalars):
    rules = abi.current()
    params = entry_point_parameters(compiled_scalars.asm["spv"])
    launched = rules.parameters(compiled_scalars.src.signature)
    assert len(params) == len(launched) + rules.scratch_pointers
    for (kind, bits), (_, name, ty) in zip(params, launched):
        if rules.is_pointer(ty):
            assert kind == "ptr", name
            continue
        size = struct.calcsize("<" + rules.scalar_format(ty))
        # OpTypeBool has no width; the CPU runtime takes it as one byte (measured).
        assert size == (1 if kind == "bool" else bits // 8), (name, ty, kind, bits)


def test_installed_version_is_known_and_tested(device):
    from ur_cffi.triton import backend

    assert triton.__version__ in abi.TESTED_VERSIONS
    rules = abi.current(backend.triton_backend(device))
    assert rules.series == abi.series(triton.__version__)


def test_unknown_series_is_refused():
    assert abi.rules_for("3.3.0").series == "3.3"
    with pytest.raises(NotImplementedError, match="3.9.1"):
        abi.rules_for("3.9.1")


def test_parameters_drop_constexprs_and_flatten_tuples():
    rules = abi.rules_for("3.3.0b1")
    signature = {"x": "*fp32", "pair": ("*fp16", "i32"), "n": "i32", "BLOCK": "constexpr",
                 "nested": (("i64", "constexpr"), "fp32")}
    assert rules.argument_count(signature) == 8
    assert rules.parameters(signature) == [
        (0, "x", "*fp32"), (1, "pair[0]", "*fp16"), (2, "pair[1]", "i32"), (3, "n", "i32"),
        (5, "nested[0][0]", "i64"), (7, "nested[1]", "fp32")]
    assert abi.flatten_arguments((1, (2, 3), 4, 5, ((6, 7), 8)), signature) == \
        [1, 2, 3, 4, 5, 6, 7, 8]
    # A constexpr tuple (BLOCK here, nested[0][1]) is one argument, as in the signature.
    assert abi.flatten_arguments((1, (2, 3), 4, (5, 5), ((6, (7, 7)), 8)), signature) == \
        [1, 2, 3, 4, (5, 5), 6, (7, 7), 8]
    # Arguments of another shape: zip() dropped extras, and iterated an array into views.
    for args, message in (((1, (2, 3), 4, 5, ((6, 7), 8), 9), "takes 5 arguments"),
                          ((1, (2, 3, 3), 4, 5, ((6, 7), 8)), "'pair' must be a tuple of 2"),
                          ((1, 2, 4, 5, ((6, 7), 8)), "'pair' must be a tuple of 2, .* not int"),
                          ((1, (2, 3), 4, 5, (6, 8)), r"'nested\[0\]' must be a tuple of 2")):
        with pytest.raises(TypeError, match=message):
            abi.flatten_arguments(args, signature)
    assert rules.pointer_element("*kfp16") == "fp16" and rules.pointer_element("*i8") == "i8"


def test_bfloat16_rounding(rng):
    """Nearest bf16, ties to even: compared with the two bf16 neighbours of each value."""
    values = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000),
                             [0.0, -0.0, 1.0, np.inf, -np.inf, 3.0e38]]).astype(np.float32)
    for value in values:
        bits = abi.bfloat16_bits(float(value))
        as_float = struct.unpack("<f", struct.pack("<I", bits << 16))[0]
        f32 = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        low, high = f32 >> 16, (f32 >> 16) + 1
        candidates = [struct.unpack("<f", struct.pack("<I", c << 16))[0] for c in (low, high)]
        errors = [abs(float(c) - float(value)) for c in candidates]
        if np.isfinite(value) and errors[0] != errors[1]:
            assert abs(as_float - float(value)) == min(errors)
        elif np.isfinite(value):
            assert bits % 2 == 0  # a tie goes to the even pattern
        else:
            assert as_float == value
    nan_bits = abi.bfloat16_bits(float("nan")) << 16
    assert np.isnan(struct.unpack("<f", struct.pack("<I", nan_bits))[0])


def bfloat16_reference(value: float) -> int:
    """The bit pattern of ``value`` rounded to the nearest bfloat16, ties to the even pattern,
    found among every positive bfloat16 (each exact in float64), with 2**128 standing for
    infinity as IEEE rounding has it: a reference that rounds once by construction (numpy
    casts to ml_dtypes.bfloat16 through float32 in some versions, which is the double rounding
    the test is about)."""
    patterns = np.arange(0x7F81, dtype=np.uint32)  # zero to infinity
    magnitudes = (patterns << 16).view(np.float32).astype(np.float64)
    magnitudes[-1] = 2.0**128
    size = abs(value)
    above = min(int(np.searchsorted(magnitudes, size)), len(magnitudes) - 1)
    if magnitudes[above] <= size:  # exact, or beyond infinity's place
        nearest = above
    else:
        below_gap, above_gap = size - magnitudes[above - 1], magnitudes[above] - size
        nearest = above - 1 if below_gap < above_gap or (
            below_gap == above_gap and (above - 1) % 2 == 0) else above
    return nearest | (0x8000 if math.copysign(1.0, value) < 0 else 0)


def test_bfloat16_rounds_float64_once(rng):
    """A Python float is rounded to bf16 directly, not through float32 first (1 + 2**-8 +
    2**-30 rounded through float32 is a tie that goes down to 1.0); a finite value beyond
    bf16's range raises, as struct does for fp16."""
    values = np.concatenate([rng.standard_normal(20000) * np.exp2(rng.integers(-140, 128,
                                                                                 20000)),
                             [1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8, 2**-133,
                              2**-134, 2**-134 * (1 + 2**-40), 1e-50, -1e-50, 3.38e38,
                              (2 - 2**-7) * 2**127, (2 - 2**-8) * 2**127,
                              (2 - 2**-8) * 2**127 * (1 - 2**-50)]])  # bf16's largest, ties
    for value in values:
        expected = bfloat16_reference(float(value))
        if expected & 0x7FFF == 0x7F80:  # infinity
            with pytest.raises(OverflowError, match="too large"):
                abi.bfloat16_bits(float(value))
        else:
            assert abi.bfloat16_bits(float(value)) == expected, value
    assert abi.bfloat16_bits(1 + 2**-8 + 2**-30) == 0x3F81
    assert abi.bfloat16_bits(1 + 2**-8) == 0x3F80


def test_i1_values_are_truth_values():
    assert abi.CONVERSIONS["i1"] is abi.CONVERSIONS["u1"] is abi.boolean_value  # 3.3, 3.6
    assert [abi.boolean_value(v) for v in (True, False, 1, 0, np.True_, np.int8(1))] == \
        [1, 0, 1, 0, 1, 1]
    for value in (2, -1, 255, np.int64(2)):  # the kernel reads one bit: 2 would be False
        with pytest.raises(OverflowError, match="not a truth value"):
            abi.boolean_value(value)
    for value in (1.0, "1", None):
        with pytest.raises(TypeError, match="not a truth value"):
            abi.boolean_value(value)
