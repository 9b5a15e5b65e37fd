"""Tests for ur_cffi.spirv on hand-assembled SPIR-V word streams and on one real Triton module."""

import sys

import pytest
from hypothesis import given, settings, strategies as st

from ur_cffi import spirv

# Opcodes and enumerants used to assemble the modules below (SPIR-V specification 3.x).
OP_NAME = 5
OP_EXT_INST_IMPORT = 11
OP_MEMORY_MODEL = 14
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_CAPABILITY = 17
OP_EXTENSION = 10
OP_EXECUTION_MODE_ID = 331
OP_TYPE_VOID, OP_TYPE_FUNCTION, OP_FUNCTION, OP_LABEL, OP_RETURN, OP_FUNCTION_END = \
    19, 33, 54, 248, 253, 56
CAP_ADDRESSES, CAP_KERNEL, CAP_INT64 = 4, 6, 11
MODE_CONTRACTION_OFF, MODE_SUBGROUP_SIZE = 31, 35
EXEC_MODEL_KERNEL = 6


def string_words(text):
    """A literal string: UTF-8, nul-terminated, zero-padded, first octet in the low byte of a word."""
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return [int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4)]


def inst(opcode, *operands):
    return [(len(operands) + 1) << 16 | opcode, *operands]


def header(bound=20, version=0x00010100):
    return [spirv.MAGIC, version, 0x0006000E, bound, 0]


def to_bytes(words, byteorder="little"):
    return b"".join(w.to_bytes(4, byteorder) for w in words)


# A Triton-shaped kernel module, one instruction per list, so tests can name the ones expected to go.
CAPS = [inst(OP_CAPABILITY, CAP_ADDRESSES), inst(OP_CAPABILITY, CAP_KERNEL), inst(OP_CAPABILITY, CAP_INT64)]
CAP_KA = inst(OP_CAPABILITY, spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL)
EXT_KA = inst(OP_EXTENSION, *string_words("SPV_INTEL_kernel_attributes"))
EXT_VC = inst(OP_EXTENSION, *string_words("SPV_INTEL_vector_compute"))
IMPORT = inst(OP_EXT_INST_IMPORT, 1, *string_words("OpenCL.std"))
MEMORY_MODEL = inst(OP_MEMORY_MODEL, 2, 2)
ENTRY = inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7, *string_words("add_kernel"))
MODE_CONTRACTION = inst(OP_EXECUTION_MODE, 7, MODE_CONTRACTION_OFF)
MODE_SUBGROUP = inst(OP_EXECUTION_MODE, 7, MODE_SUBGROUP_SIZE, 32)
MODE_MAX_WG = inst(OP_EXECUTION_MODE, 7, spirv.EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL, 128, 1, 1)
NAME = inst(OP_NAME, 7, *string_words("add_kernel"))
# The entry point's function (id 7): void(), an empty body.
FUNCTION = [inst(OP_TYPE_VOID, 2), inst(OP_TYPE_FUNCTION, 3, 2), inst(OP_FUNCTION, 2, 7, 0, 3),
            inst(OP_LABEL, 8), inst(OP_RETURN), inst(OP_FUNCTION_END)]


FUNCTION_WORDS = [word for instruction in FUNCTION for word in instruction]


def kernel_module(with_kernel_attributes=True):
    parts = [*CAPS]
    if with_kernel_attributes:
        parts.append(CAP_KA)
        parts.append(EXT_KA)
    parts += [EXT_VC, IMPORT, MEMORY_MODEL, ENTRY, MODE_CONTRACTION, MODE_SUBGROUP]
    if with_kernel_attributes:
        parts.append(MODE_MAX_WG)
    parts += [NAME, *FUNCTION]
    return header() + [w for part in parts for w in part]


def test_string_words_layout():
    assert string_words("abc") == [0x00636261]
    assert string_words("abcd") == [0x64636261, 0]


def test_drop_removes_kernel_attributes_exactly():
    module = to_bytes(kernel_module())
    result = spirv.drop_capabilities(module)
    assert result == to_bytes(kernel_module(with_kernel_attributes=False))
    spirv.validate(result)


def test_drop_keeps_byte_order_of_big_endian_module():
    module = to_bytes(kernel_module(), "big")
    spirv.validate(module)
    assert spirv.drop_capabilities(module) == to_bytes(kernel_module(with_kernel_attributes=False), "big")


def test_drop_returns_same_object_when_nothing_matches():
    module = to_bytes(kernel_module(with_kernel_attributes=False))
    assert spirv.drop_capabilities(module) is module


def test_drop_execution_mode_id():
    body = [w for part in FUNCTION for w in part]
    words = header() + CAPS[1] + CAP_KA + MEMORY_MODEL + ENTRY + inst(
        OP_EXECUTION_MODE_ID, 7, spirv.EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL, 3, 4, 5) + body
    assert spirv.drop_capabilities(to_bytes(words)) == to_bytes(
        header() + CAPS[1] + MEMORY_MODEL + ENTRY + body)


def test_drop_with_custom_sets():
    module = to_bytes(kernel_module())
    result = spirv.drop_capabilities(module, capabilities={CAP_INT64}, extensions={"SPV_INTEL_vector_compute"},
                                     execution_modes={MODE_SUBGROUP_SIZE})
    assert spirv.capabilities(result) == [CAP_ADDRESSES, CAP_KERNEL, spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL]
    assert spirv.extensions(result) == ["SPV_INTEL_kernel_attributes"]
    assert MODE_SUBGROUP not in _instructions(result) and MODE_MAX_WG in _instructions(result)


def test_drop_accepts_bytearray_and_memoryview():
    expected = to_bytes(kernel_module(with_kernel_attributes=False))
    module = to_bytes(kernel_module())
    assert spirv.drop_capabilities(bytearray(module)) == expected
    assert spirv.drop_capabilities(memoryview(module)) == expected


def _instructions(module):
    words = [int.from_bytes(module[i:i + 4], "little") for i in range(0, len(module), 4)]
    out, offset = [], 5
    while offset < len(words):
        n = words[offset] >> 16
        out.append(list(words[offset:offset + n]))
        offset += n
    return out


def test_readers():
    module = to_bytes(kernel_module())
    assert spirv.capabilities(module) == [CAP_ADDRESSES, CAP_KERNEL, CAP_INT64,
                                          spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL]
    assert spirv.extensions(module) == ["SPV_INTEL_kernel_attributes", "SPV_INTEL_vector_compute"]
    assert spirv.entry_points(module) == ["add_kernel"]
    assert spirv.capabilities(to_bytes(kernel_module(), "big")) == spirv.capabilities(module)
    assert spirv.extensions(to_bytes(kernel_module(), "big")) == spirv.extensions(module)


OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_STRUCT, OP_TYPE_POINTER, OP_FUNCTION_PARAMETER = \
    21, 22, 30, 32, 55
OP_TYPE_UNTYPED_POINTER_KHR = 4417
STORAGE = {"UniformConstant": 0, "Workgroup": 4, "CrossWorkgroup": 5, "Function": 7, "Generic": 8}


def parameters_module():
    """Two entry points (one function under two names, and another) over every kind of
    parameter ``kernel_parameters`` tells apart, then a function that is no entry point."""
    types = [inst(OP_TYPE_VOID, 2), inst(OP_TYPE_INT, 10, 32, 0), inst(OP_TYPE_INT, 11, 8, 0),
             inst(OP_TYPE_INT, 12, 64, 0), inst(OP_TYPE_FLOAT, 13, 16),
             inst(OP_TYPE_FLOAT, 14, 64), inst(OP_TYPE_STRUCT, 15, 10, 10),
             inst(OP_TYPE_POINTER, 20, STORAGE["CrossWorkgroup"], 10),
             inst(OP_TYPE_POINTER, 21, STORAGE["Workgroup"], 10),
             inst(OP_TYPE_POINTER, 22, STORAGE["UniformConstant"], 13),
             inst(OP_TYPE_POINTER, 23, STORAGE["Generic"], 11),
             inst(OP_TYPE_POINTER, 24, STORAGE["Function"], 15),
             inst(OP_TYPE_UNTYPED_POINTER_KHR, 25, STORAGE["Workgroup"]),
             inst(OP_TYPE_INT, 26, 24, 0),  # a width no scalar argument has
             inst(OP_TYPE_FUNCTION, 37, 2, 20, 21, 10, 13, 24, 25),
             inst(OP_TYPE_FUNCTION, 38, 2, 22, 23, 11, 12, 14, 26),
             inst(OP_TYPE_FUNCTION, 39, 2, 10)]

    def function(result, parameter_types):
        instructions = [inst(OP_FUNCTION, 2, result, 0, 30 + result),
                        *(inst(OP_FUNCTION_PARAMETER, kind, 100 + result * 10 + index)
                          for index, kind in enumerate(parameter_types)),
                        inst(OP_LABEL, result + 50), inst(OP_RETURN), inst(OP_FUNCTION_END)]
        return [word for instruction in instructions for word in instruction]

    parts = [*CAPS, MEMORY_MODEL,
             inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7, *string_words("first")),
             inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 8, *string_words("second")),
             inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7, *string_words("first_again")),
             *types, function(7, [20, 21, 10, 13, 24, 25]), function(8, [22, 23, 11, 12, 14, 26]),
             function(9, [10])]
    return header(bound=200) + [w for part in parts for w in part]


def test_kernel_parameters():
    first = ("ptr", "local", "int32", "float16", None, "local")
    expected = {"first": first, "first_again": first,
                "second": ("ptr", "ptr", "int8", "int64", "float64", None)}
    for byteorder in ("little", "big"):
        assert spirv.kernel_parameters(to_bytes(parameters_module(), byteorder)) == expected
    assert spirv.kernel_parameters(to_bytes(kernel_module())) == {"add_kernel": ()}
    assert spirv.kernel_parameters(to_bytes(header())) == {}


def test_constants():
    assert spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL == 5892
    assert spirv.EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL == 5893
    assert spirv.EXTENSION_KERNEL_ATTRIBUTES_INTEL == "SPV_INTEL_kernel_attributes"


def test_header_only_module_is_valid():
    spirv.validate(to_bytes(header()))


@pytest.mark.parametrize("module, message", [
    (b"", "shorter than the 5-word header"),
    (to_bytes(header())[:-1], "not a multiple of 4"),
    (to_bytes(header())[:16], "shorter than the 5-word header"),
    (to_bytes([0xDEADBEEF] + header()[1:]), r"magic number 0xdeadbeef at word 0"),
    (to_bytes(header(version=0x00020000)), "version word 0x00020000 at word 1"),
    (to_bytes(header(version=0x00010001)), "version word 0x00010001 at word 1"),
    (to_bytes(header(bound=0)), "bound is 0 at word 3"),
    (to_bytes(header()[:4] + [1]), "schema word is 0x00000001 at word 4"),
])
def test_validate_rejects_bad_header(module, message):
    with pytest.raises(ValueError, match=message):
        spirv.validate(module)


def test_validate_rejects_zero_word_count():
    words = header() + CAPS[0] + [0 << 16 | OP_CAPABILITY, 6] + MEMORY_MODEL
    with pytest.raises(ValueError, match=r"instruction at word 7 \(opcode 17\) has word count 0"):
        spirv.validate(to_bytes(words))


def test_validate_rejects_instruction_past_end():
    words = header() + CAPS[0] + [5 << 16 | OP_MEMORY_MODEL, 2, 2]
    with pytest.raises(ValueError, match=r"instruction at word 7 \(opcode 14, 5 words\) runs past the end "
                                         r"of the module \(10 words\)"):
        spirv.validate(to_bytes(words))


def test_validate_rejects_truncated_module():
    words = kernel_module()
    # Cut inside the entry point's name: the last instruction standing then overruns.
    cut = len(header() + CAPS[0] + CAPS[1] + CAPS[2] + CAP_KA + EXT_KA + EXT_VC + IMPORT + MEMORY_MODEL) + 3
    with pytest.raises(ValueError, match=f"instruction at word {cut - 3} .*runs past the end"):
        spirv.validate(to_bytes(words[:cut]))


def test_validate_rejects_a_module_cut_between_instructions():
    # The CPU runtime's compiler crashed on these (SIGSEGV), which word counts do not catch.
    words = kernel_module()
    body_start = len(words) - sum(map(len, FUNCTION))
    function = body_start + len(FUNCTION[0]) + len(FUNCTION[1])
    with pytest.raises(ValueError, match=f"ends inside the function of word {function} "
                       r"\(no OpFunctionEnd\)"):
        spirv.validate(to_bytes(words[:-1]))
    with pytest.raises(ValueError, match="OpEntryPoint at word .* names a function the module "
                       "does not define"):
        spirv.validate(to_bytes(words[:body_start]))
    inside = words[:-1] + FUNCTION[2] + FUNCTION[-1]
    with pytest.raises(ValueError, match=f"OpFunction at word {len(words) - 1} inside the "
                       f"function of word {function}"):
        spirv.validate(to_bytes(inside))
    with pytest.raises(ValueError, match="OpFunctionEnd at word .* outside a function"):
        spirv.validate(to_bytes(words + FUNCTION[-1]))


def test_readers_and_drop_raise_on_malformed_module():
    bad = to_bytes(kernel_module()[:-len(FUNCTION[-1] + FUNCTION[-2] + FUNCTION[-3]) - 1])
    for call in (spirv.capabilities, spirv.extensions, spirv.entry_points, spirv.drop_capabilities,
                 spirv.kernel_parameters):
        with pytest.raises(ValueError, match="runs past the end"):
            call(bad)
        for wrong in (16, "abcd"):  # not taken as that many zero bytes
            with pytest.raises(TypeError, match="a SPIR-V module is bytes, not"):
                call(wrong)


def test_unterminated_extension_string():
    # (validate took it: the runtime read the string on past the instruction)
    words = header() + inst(OP_EXTENSION, int.from_bytes(b"SPV_", "little"))
    for read in (spirv.validate, spirv.extensions):
        with pytest.raises(ValueError, match="instruction at word 5 has no terminating nul"):
            read(to_bytes(words))


def test_execution_modes_take_their_operands():
    entry = inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7, *string_words("add_kernel"))
    for mode, operands in ((MODE_SUBGROUP_SIZE, 1), (17, 3),
                           (spirv.EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL, 3)):
        spirv.validate(to_bytes(header() + entry + inst(OP_EXECUTION_MODE, 7, mode,
                                                        *[1] * operands) + FUNCTION_WORDS))
        with pytest.raises(ValueError, match=f"OpExecutionMode at word 11: mode {mode} takes "
                                             f"{operands} operand\\(s\\), not {operands - 1}"):
            spirv.validate(to_bytes(header() + entry + inst(
                OP_EXECUTION_MODE, 7, mode, *[1] * (operands - 1)) + FUNCTION_WORDS))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(kernel_module())), st.sampled_from(["little", "big"]))
def test_every_truncation_either_validates_or_raises_value_error(cut, byteorder):
    words = kernel_module()
    boundaries = {5}
    offset = 5
    while offset < len(words):
        offset += words[offset] >> 16
        boundaries.add(offset)
    module = to_bytes(words[:cut], byteorder)
    ends = len(words) - len(FUNCTION[-1])  # (the instruction before the function's end)
    entry = len(header() + CAPS[0] + CAPS[1] + CAPS[2] + CAP_KA + EXT_KA + EXT_VC + IMPORT
                + MEMORY_MODEL)
    if cut in boundaries and (cut <= entry or cut == len(words)):  # a whole module
        spirv.validate(module)
    elif cut in boundaries:  # an entry point without its function, or a function cut short
        with pytest.raises(ValueError, match="OpEntryPoint at word .* names a function the module "
                           "does not define|ends inside the function of word .*: truncated"):
            spirv.validate(module)
        assert cut < ends + 1
    else:
        with pytest.raises(ValueError):
            spirv.validate(module)


def test_extension_string_not_utf8():
    words = header() + inst(OP_EXTENSION, int.from_bytes(b"\xff\xfe\0\0", "little"))
    with pytest.raises(ValueError, match="instruction at word 5 is not UTF-8"):
        spirv.drop_capabilities(to_bytes(words))


# Words that are often plausible instruction heads of the opcodes the pass looks into.
heads = st.builds(lambda n, op: n << 16 | op, st.integers(0, 6), st.sampled_from([10, 15, 16, 17, 331]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(heads, st.integers(0, 2**32 - 1)), max_size=16), st.binary(max_size=3))
def test_random_instructions_raise_only_value_error(words, tail):
    module = to_bytes(header() + words) + tail
    for call in (spirv.capabilities, spirv.extensions, spirv.entry_points, spirv.drop_capabilities,
                 spirv.kernel_parameters):
        try:
            call(module)
        except ValueError:
            pass


# --- a real Triton module -------------------------------------------------------------------

# Triton resolves a kernel's names in its module's globals; the fixture sets this one.
tl = None

@pytest.fixture
def triton_no_torch(monkeypatch, tmp_path):
    """Import Triton with torch blocked and the arch-parser build (sycl, ze_loader) stubbed out."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    triton = pytest.importorskip("triton")
    pytest.importorskip("triton.backends.intel", reason="SPIR-V comes from Triton's Intel "
                        "backend (triton-xpu)")
    from triton.backends import backends

    class NoArch:
        # Stands in for triton-xpu 3.3's arch_parser.c: the name only selects `ocloc` queries.
        @staticmethod
        def parse_device_arch(arch):
            return ""

    namespace = backends["intel"].compiler.__init__.__globals__
    build = namespace["compile_module_from_src"]
    monkeypatch.setitem(namespace, "compile_module_from_src",
                        lambda src, name: NoArch() if name == "arch_utils" else build(src, name))
    import triton.language
    monkeypatch.setitem(globals(), "tl", triton.language)
    return triton


def test_real_triton_module(triton_no_torch):
    triton = triton_no_torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < n_elements
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    props = {"max_work_group_size": 8192, "sub_group_sizes": [4, 8, 16, 32, 64], "has_fp64": True,
             "has_subgroup_2d_block_io": False, "has_subgroup_matrix_multiply_accumulate": False,
             "has_bfloat16_conversions": False}
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"}
    kernel = triton.compile(ASTSource(add_kernel, signature, {"BLOCK_SIZE": 1024}),
                            target=GPUTarget("xpu", props, 32), options={"num_warps": 4})
    module = kernel.asm["spv"]

    assert spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL in spirv.capabilities(module)
    fixed = spirv.drop_capabilities(module)
    spirv.validate(fixed)
    assert spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL not in spirv.capabilities(fixed)
    assert spirv.EXTENSION_KERNEL_ATTRIBUTES_INTEL not in spirv.extensions(fixed)
    assert spirv.entry_points(fixed) == [kernel.metadata.name] == ["add_kernel"]
    assert spirv.drop_capabilities(fixed) is fixed
    assert spirv.kernel_parameters(fixed) == {"add_kernel": ("ptr", "ptr", "ptr", "int32")}
    # Only the three kernel-attribute instructions went: capability (2 words), extension
    # (1 + 7 words for the 27-character name) and MaxWorkgroupSizeINTEL mode (6 words).
    assert len(module) - len(fixed) == 4 * (2 + 8 + 6)
    assert "torch" not in sys.modules or sys.modules["torch"] is None


def test_validate_rejects_what_the_cpu_compiler_crashes_on():
    # Each of these segfaulted Intel's CPU OpenCL compiler in Program.from_il, or had two
    # readers disagree: the runtime built the first entry point named alike, signatures read
    # the last one's parameters.
    body = [inst(OP_TYPE_VOID, 2), inst(OP_TYPE_INT, 4, 32, 0), inst(OP_TYPE_FUNCTION, 3, 2),
            inst(OP_FUNCTION, 2, 7, 0, 3), inst(OP_LABEL, 8), inst(OP_RETURN),
            inst(OP_FUNCTION_END)]

    def module(*parts, byteorder="little"):
        return to_bytes(header() + [w for part in [*CAPS, MEMORY_MODEL, *parts] for w in part],
                        byteorder)

    entry = inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7, *string_words("k"))
    spirv.validate(module(entry, *body))
    spirv.validate(module(entry, inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7,
                                      *string_words("k2")), *body))
    for parts, message in (
            ((entry, entry, *body), "OpEntryPoint at word .* repeats the name 'k' of the entry "
                                    "point at word"),
            ((entry, *body[:1], inst(OP_TYPE_FLOAT, 5, 33), *body[1:]),
             "OpTypeFloat at word .* is 33 bits wide"),
            ((entry, *body[:3], inst(OP_FUNCTION, 2, 7, 0, 4), *body[4:]),
             "OpFunction at word .*: its function type %4 is no OpTypeFunction"),
            ((entry, *body[:3], inst(OP_FUNCTION, 2, 7, 0, 9), *body[4:]),
             "OpFunction at word .*: its function type %9 is no OpTypeFunction"),
            ((entry, *body[:3], inst(OP_FUNCTION, 25, 7, 0, 3), *body[4:]),
             "OpFunction at word .*: id %25 at its word 1 is 0 or not below the module's id "
             "bound 20"),
            ((inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 0, *string_words("k")), *body[:3],
              inst(OP_FUNCTION, 2, 0, 0, 3), *body[4:]), "id %0 at its word 2"),
            # Cut short (a runtime reads past the instruction: SIGSEGV, or spinning for good)
            ((entry, *body[:4], inst(OP_LABEL), *body[5:]),
             r"instruction at word .* \(opcode 248\) has 1 word\(s\); that opcode has at least 2"),
            ((inst(OP_ENTRY_POINT, EXEC_MODEL_KERNEL, 7), *body),
             r"instruction at word .* \(opcode 15\) has 3 word\(s\); that opcode has at least 4"),
            ((entry, *body[:3], inst(OP_FUNCTION, 2, 7, 0), *body[4:]),
             r"instruction at word .* \(opcode 54\) has 4 word\(s\); that opcode has at least 5"),
            # The runtime builds the first function and reads its type; signatures read the
            # parameters (a float's bits reached an int32 parameter; a Local a global one).
            ((entry, *body, *body[3:]), "OpFunction at word .* defines %7 again"),
            ((entry, *body[:2], inst(OP_TYPE_FUNCTION, 3, 2, 4), *body[3:]),
             "OpFunction at word .* is followed by 0 OpFunctionParameter\\(s\\) where its "
             "type takes 1"),
            ((entry, *body[:4], inst(OP_FUNCTION_PARAMETER, 4, 9), *body[4:]),
             "OpFunction at word .* is followed by more than 0 OpFunctionParameter"),
            ((entry, *body[:1], inst(OP_TYPE_FLOAT, 5, 32), inst(OP_TYPE_INT, 4, 32, 0),
              inst(OP_TYPE_FUNCTION, 3, 2, 4), inst(OP_FUNCTION, 2, 7, 0, 3),
              inst(OP_FUNCTION_PARAMETER, 5, 9), *body[4:]),
             "OpFunctionParameter at word .* is of type %5, where the type of its function "
             "\\(word .*\\) has %4"),
            ((entry, *body[:5], inst(OP_FUNCTION_PARAMETER, 4, 9), *body[5:]),
             "OpFunctionParameter at word .* does not follow an OpFunction"),
            ((entry, *body[:1], inst(OP_TYPE_INT, 4, 32, 0), inst(OP_TYPE_FUNCTION, 3, 2, 4),
              inst(OP_FUNCTION, 2, 7, 0, 3), inst(8, 5, 1, 1),  # OpLine
              inst(OP_FUNCTION_PARAMETER, 4, 9), *body[4:]),
             "OpLine at word .* among the parameters of the OpFunction at word"),
            # (a GLCompute entry point named alike: the runtime crashed; one of another name
            # was listed by ur_cffi, not by the runtime)
            ((inst(OP_ENTRY_POINT, 5, 7, *string_words("k")), *body),
             "OpEntryPoint at word .* has execution model 5; UR programs run Kernel \\(6\\)")):
        for byteorder in ("little", "big"):
            with pytest.raises(ValueError, match=message):
                spirv.validate(module(*parts, byteorder=byteorder))


def test_in_native_order():
    little, big = to_bytes(kernel_module(), sys.byteorder), \
        to_bytes(kernel_module(), "big" if sys.byteorder == "little" else "little")
    assert spirv.in_native_order(little) is little
    assert spirv.in_native_order(big) == little
    with pytest.raises(ValueError, match="ends inside the function"):
        spirv.in_native_order(big[:-4])
