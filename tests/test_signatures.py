"""Argument counts and kernel names where the adapter cannot report them (ur_cffi.signatures),
and the NVIDIA binary reader they come from (ur_cffi.nvidia_binary).

The PTX and cubins are what Triton 3.3's NVIDIA backend (bundled in triton-xpu) emits here,
with the ``ptxas`` it ships; the adapter-side behaviour (a CUDA kernel reporting 0 arguments)
runs in ``test_gpu.py`` on a real CUDA device.  On the CPU device the adapter's own count is
used, as before.
"""

import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ur_cffi
from ur_cffi import _compat, nvidia_binary, signatures

triton = pytest.importorskip("triton")

import kernels  # noqa: E402
from ur_cffi.triton import abi, cuda  # noqa: E402

MIXED = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "h": "fp16", "b": "bf16",
         "flag": "i1", "n": "i32"}


@triton.jit
def mixed(x_ptr, y_ptr, a, h, b, flag, n, BLOCK: triton.language.constexpr):
    offsets = triton.language.program_id(0) * BLOCK + triton.language.arange(0, BLOCK)
    mask = offsets < n
    v = triton.language.load(x_ptr + offsets, mask=mask) * a + h.to(triton.language.float32)
    v = triton.language.where(flag, v + b.to(triton.language.float32), -v)
    triton.language.store(y_ptr + offsets, v, mask=mask)


@pytest.fixture(scope="module")
def nvidia(tmp_path_factory):
    """``{name: CompiledKernel}`` from Triton's NVIDIA backend for sm_90, torch blocked."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("nvidia_cache")))
        yield {
            "scale": cuda.compile(kernels.scale, {"x_ptr": "*fp32", "y_ptr": "*fp32",
                                                  "a": "fp32", "n": "i32",
                                                  "BLOCK": "constexpr"}, {"BLOCK": 1024}),
            "mixed": cuda.compile(mixed, dict(MIXED, BLOCK="constexpr"), {"BLOCK": 256}),
        }


def test_ptx_entries_of_triton_kernels(nvidia):
    scale = nvidia["scale"]
    assert scale.metadata.target.backend == "cuda"
    # x, y, a, n, then Triton's scratch pointers (global; profile too from 3.6 on).
    scratch = (8,) * abi.rules_for(triton.__version__, "cuda").scratch_pointers
    assert nvidia_binary.entries(scale.asm["ptx"].encode()) == {"scale": (8, 8, 4, 4) + scratch}
    # fp16 and bf16 are two bytes, i1 one, in the kernel itself.
    assert nvidia_binary.ptx_entries(nvidia["mixed"].asm["ptx"]) == {
        "mixed": (8, 8, 4, 2, 2, 1, 4) + scratch}


def test_cubin_entries_agree_with_ptx(nvidia):
    for compiled in nvidia.values():
        cubin = compiled.asm["cubin"]
        assert nvidia_binary.is_cubin(cubin) and not nvidia_binary.is_ptx(cubin)
        assert nvidia_binary.entries(cubin) == nvidia_binary.ptx_entries(compiled.asm["ptx"])


def test_ptx_forms():
    ptx = """
    //
    // .entry commented_out(.param .u32 x)
    .version 8.4
    .target sm_90a
    .address_size 64
    .func helper(.param .b32 x) { ret; }
    /* .entry also_commented(
       .param .u64 y) */
    .visible .entry two(
        .param .u64 .ptr .global .align 16 two_param_0,   // a pointer
        .param .align 4 .b8 two_param_1[12],
        .param .s16 two_param_2
    )
    .maxntid 128, 1, 1
    { ret; }
    .weak .entry none()
    { ret; }
    .entry bare
    { ret; }
    """
    assert nvidia_binary.ptx_entries(ptx) == {"two": (8, 12, 2), "none": (), "bare": ()}
    assert nvidia_binary.is_ptx(ptx.encode() + b"\0")
    assert nvidia_binary.entries(ptx.encode() + b"\0") == {"two": (8, 12, 2), "none": (),
                                                           "bare": ()}
    with pytest.raises(ValueError, match="parameter type"):
        nvidia_binary.ptx_entries(".version 8.4\n.target sm_90\n.entry bad(.param x)\n{}")
    # Strings are not code (nor are comment marks inside them); arrays may be n-dimensional.
    head = ".version 8.4\n.target sm_90\n"
    assert nvidia_binary.ptx_entries(
        head + '.file 1 "a.entry b(.param .u8 z)"\n.file 2 "/src/*.cu"\n'
        '.entry k(.param .b8 s[2][4], .param .u32 n)\n{ ret; }\n.file 3 "x*/y"\n') == \
        {"k": (8, 4)}


def test_ptx_forms_beyond_the_usual():
    head = ".version 8.4\n.target sm_90\n"
    banner = "// generated\n" * 1000  # .version past the first 4 KiB
    assert nvidia_binary.entries((banner + "/* a\n block */\n" + head +
                                  ".entry k(.param .u32 a)\n{ ret; }\n").encode()) == {"k": (4,)}
    assert nvidia_binary.ptx_entries(head + ".entry v(.param .v2 .f32 a, .param .v4 .u16 b)"
                                     "\n{ ret; }") == {"v": (8, 8)}
    # PTX 8.3's .b128, and the opaque handles PTX allows a kernel (64-bit, unified mode)
    assert nvidia_binary.ptx_entries(head + ".entry o(.param .b128 a, .param .texref t, .param "
                                     ".samplerref s, .param .surfref u)\n{ ret; }") == \
        {"o": (16, 8, 8, 8)}
    for length in ("9" * 19, "9" * 5000):
        with pytest.raises(ValueError, match=f"'v': the array length of .* is too large"):
            nvidia_binary.ptx_entries(head + f".entry v(.param .b8 a[{length}])\n{{ ret; }}")


def test_ptx_array_lengths_are_ptx_integers():
    """Lengths were read as decimal digits only: [0x10] and [16U] as 1, [010] (octal) as 10,
    and [] or [2,3] as 1, where ptxas reads 16, 16 and 8, or refuses."""
    head = ".version 8.4\n.target sm_90\n"
    forms = {"a": "0x10", "b": "0X1f", "c": "010", "d": "16U", "e": "0b10000", "f": " 7 ",
             "g": "0"}
    text = head + "".join(f".entry {name}(.param .b8 p[{length}][2])\n{{ ret; }}\n"
                          for name, length in forms.items())
    assert nvidia_binary.ptx_entries(text) == {"a": (32,), "b": (62,), "c": (16,),
                                               "d": (32,), "e": (32,), "f": (14,), "g": (0,)}
    for length in ("", "x", "0x", "08", "1.5", "2,3", "-4"):
        with pytest.raises(ValueError, match="'k': cannot read the array length"):
            nvidia_binary.ptx_entries(head + f".entry k(.param .b8 a[{length}])\n{{ ret; }}")


def test_cubin_entries_of_kernels_past_4_kib_of_parameters(tmp_path):
    """ptxas describes the parameters of a kernel of more than 4 KiB of them with
    EIATTR_KPARAM_INFO_V2, which was not read: such a kernel took no parameters."""
    import triton.backends.nvidia

    ptxas = Path(triton.backends.nvidia.__file__).parent / "bin" / "ptxas"
    if not ptxas.is_file():  # (triton-xpu ships it, and Triton's CUDA wheels)
        pytest.skip(f"this Triton has no ptxas at {ptxas}")
    ptx = (".version 8.4\n.target sm_90\n.address_size 64\n"
           ".visible .entry two4k(.param .u64 .ptr .global .align 8 x, .param .b8 a[4096], "
           ".param .b8 b[4096], .param .u32 n)\n"
           "{ ret; }\n.visible .entry small(.param .u64 x, .param .b8 s[0x10])\n{ ret; }\n")
    (tmp_path / "k.ptx").write_text(ptx)
    subprocess.run([str(ptxas), "-arch=sm_90", str(tmp_path / "k.ptx"), "-o",
                    str(tmp_path / "k.cubin")], check=True, capture_output=True)
    expected = {"two4k": (8, 4096, 4096, 4), "small": (8, 16)}  # (the pointer's flags were
    # read as part of its size: 67,305,480 bytes)
    assert nvidia_binary.ptx_entries(ptx) == expected
    assert nvidia_binary.entries((tmp_path / "k.cubin").read_bytes()) == expected


def _cubin_of_symbols(name_offsets, strings: bytes, info_of=(), info=b"") -> bytes:
    """An EM_CUDA ELF file with one entry-function symbol per offset into ``strings``, and a
    ``.nv.info.<kernel>`` section for each kernel of ``info_of``, all over the bytes ``info``."""
    section_names = b"\0.shstrtab\0.symtab\0.strtab\0" + b"".join(
        b".nv.info." + kernel.encode() + b"\0" for kernel in info_of)
    symbols = b"".join(struct.pack("<IBBHQQ", offset, 0x12, nvidia_binary.STO_CUDA_ENTRY, 0,
                                   0, 0) for offset in name_offsets)
    body = bytearray(64)
    places = []
    for data in (section_names, symbols, strings, info):
        places.append(len(body))
        body += data
    body += bytes(-len(body) % 8)
    headers = len(body)
    sections = [(0, 0, 0, b"", 0), (1, 3, places[0], section_names, 0),
                (11, 2, places[1], symbols, 3), (19, 3, places[2], strings, 0)]
    name = 27
    for kernel in info_of:
        sections.append((name, 0x70000000, places[3], info, 0))  # SHT_CUDA_INFO
        name += len(kernel) + 10
    for name, kind, place, data, link in sections:
        body += struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, place, len(data), link, 0, 1,
                            24 if kind == 2 else 0)
    body[:64] = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack(
        "<HHIQQQIHHHHHH", 2, nvidia_binary.EM_CUDA, 1, 0, 0, headers, 0, 64, 0, 0, 64,
        len(sections), 1)
    return bytes(body)


def test_crafted_cubins_raise_or_read_in_linear_time():
    """Symbols naming one long string, or its suffixes, once made the reader decode that
    string for each (1 MB of cubin took 1.5 GB); offsets past 2**63 raised OverflowError."""
    name = b"k" * 40000 + b"\0"
    assert nvidia_binary.entries(_cubin_of_symbols([0] * 40000, name)) == {"k" * 40000: ()}
    with pytest.raises(ValueError, match="names overlap far beyond the file's size"):
        nvidia_binary.entries(_cubin_of_symbols(range(40000), name))
    cubin = bytearray(_cubin_of_symbols([0], b"k\0"))
    assert nvidia_binary.entries(bytes(cubin)) == {"k": ()}
    struct.pack_into("<Q", cubin, 0x28, 2**63)  # the section headers' offset
    with pytest.raises(ValueError, match="kernel table"):
        nvidia_binary.entries(bytes(cubin))


def test_crafted_cubins_read_each_kernels_parameter_table_once():
    """Symbols repeating one kernel, or kernels whose .nv.info sections share their bytes,
    made the reader walk those bytes again for each: 4 s for 0.15 MB, hours for 4 MB."""
    info = bytes(100_000)  # attributes of format 0, 4 bytes each: no parameters
    names = [f"k{n}" for n in range(400)]
    strings = b"\0" + b"".join(name.encode() + b"\0" for name in names)
    offsets = [strings.index(b"\0" + name.encode() + b"\0") + 1 for name in names]
    started = time.process_time()
    assert nvidia_binary.entries(_cubin_of_symbols([1] * 20000, b"\0k\0", ["k"], info)) == \
        {"k": ()}
    with pytest.raises(ValueError, match="kernel table of this cubin: its .nv.info sections "
                       "overlap"):
        nvidia_binary.entries(_cubin_of_symbols(offsets, strings, names, info))
    assert time.process_time() - started < 60  # a hang guard: milliseconds once each


def test_ptx_parsing_does_not_hang():
    """Unclosed comments and parameter lists used to be rescanned to the end from each one:
    quadratic, about 8 minutes for each text here (16,000 took 47 s).  A hang guard, not a
    speed measurement: one pass takes milliseconds."""
    head = ".version 8.4\n.target sm_90\n.entry k(.param .u32 a)\n{ ret; }\n"
    started = time.process_time()
    assert nvidia_binary.ptx_entries(head + "/* x\n" * 50000)["k"] == (4,)
    with pytest.raises(ValueError, match="PTX entry 'j': its parameter list is not closed"):
        nvidia_binary.ptx_entries(head + ".entry j(\n" * 50000)  # (it was read as none)
    assert time.process_time() - started < 60


def test_ptx_declarations_of_other_modules_kernels_are_not_its_own():
    # An .extern .entry (a kernel another module defines) was listed as one of this module's.
    text = (".version 8.4\n.target sm_90\n.extern .entry other(.param .u64 a)\n"
            ".visible .entry k(.param .u64 p, .param .u32 n)\n{ ret; }\n")
    assert nvidia_binary.ptx_entries(text) == {"k": (8, 4)}


def test_other_binaries_say_nothing(context, compile_triton):
    compiled = compile_triton("add", BLOCK=128)
    cpu_binary = ur_cffi.Program.from_il(context, compiled.spirv).binaries[0]
    assert cpu_binary[:4] == b"\x7fELF" and not nvidia_binary.is_cubin(cpu_binary)
    for binary in (compiled.spirv, cpu_binary, b"", b"\x7fELF"):
        assert nvidia_binary.entries(binary) is None


def test_damaged_cubin_raises(nvidia):
    cubin = bytearray(nvidia["scale"].asm["cubin"])
    struct.pack_into("<Q", cubin, 0x28, len(cubin) + 4096)  # section headers past the end
    with pytest.raises(ValueError, match="kernel table"):
        nvidia_binary.entries(bytes(cubin))


def test_where_the_count_comes_from():
    entries = {"scale": (8, 8, 4, 4, 8)}
    sig = ("ptr", "ptr", "float32", "int32", "ptr")
    # Adapters that report: theirs, whatever the binary or a signature says.
    assert signatures.argument_count(4, True, entries, "scale", sig) == (4, None, "adapter")
    # CUDA: the binary first, then the declared signature, else unknown.
    assert signatures.argument_count(0, False, entries, "scale", None) == (
        5, (8, 8, 4, 4, 8), "binary")
    assert signatures.argument_count(0, False, entries, "other", sig) == (5, None, "signature")
    assert signatures.argument_count(0, False, None, "scale", sig) == (5, None, "signature")
    assert signatures.argument_count(0, False, None, "scale", None) == (None, None, "unknown")
    assert {_compat.backend_name(backend) for backend in _compat.Backend
            if not _compat.reports_kernel_arguments(backend)} == {"CUDA", "HIP"}


@pytest.mark.cpu_device("the OpenCL adapter reports argument counts itself")
def test_cpu_adapter_reports_as_before(context, device, compile_triton):
    assert signatures.backend_name(device) == "OPENCL"
    assert signatures.adapter_reports_arguments(device)
    compiled = compile_triton("add", BLOCK=128)
    program = ur_cffi.Program.from_il(context, compiled.spirv)
    kernel = program.kernel("add")
    assert (kernel.num_args, kernel.argument_sizes, kernel.argument_source) == (4, None,
                                                                               "adapter")
    rebuilt = ur_cffi.Program.from_binary(context, program.binaries[0])
    assert rebuilt.binary_entries is None and rebuilt.kernel_names == ["add"]
    assert signatures.binary_entries(device, program.binaries[0]) is None


class _Kernel:
    """What check_sizes and count_error read of a kernel."""

    def __init__(self, num_args, sizes, program=None):
        self.name, self.num_args, self.argument_sizes, self.program = "k", num_args, sizes, \
            program
        self.hidden_args = ()


def test_sizes_declared_by_the_binary_are_checked():
    block, _, words = _compat.new_arguments(3)
    value = np.float64(1.0)
    _compat.write_argument(words, 0, _compat.POINTER, 8, 4096)
    _compat.write_argument(words, 1, _compat.VALUE, 4, 0)
    _compat.write_argument(words, 2, _compat.VALUE, value.nbytes, 0)
    signatures.check_sizes(_Kernel(3, (8, 4, 8)), words, 3)
    with pytest.raises(TypeError, match="argument 2 of 'k' is 4 bytes in the binary, got 8"):
        signatures.check_sizes(_Kernel(3, (8, 4, 4)), words, 3)
    with pytest.raises(TypeError, match="argument 0 of 'k' is 4 bytes"):
        signatures.check_sizes(_Kernel(3, (4, 4, 8)), words, 3)


def test_unknown_count_names_the_adapter_and_the_remedy(context, device):
    program = type("P", (), {"context": context})()
    error = signatures.count_error(_Kernel(None, None, program), 2)
    assert f"{signatures.backend_name(device)} adapter cannot report" in str(error)
    assert "signature=" in str(error)
    assert str(signatures.count_error(_Kernel(3, None, program), 2)) == \
        "kernel 'k' takes 3 arguments, 2 given"
    hidden = _Kernel(3, None, program)
    hidden.hidden_args = (0,)
    assert str(signatures.count_error(hidden, 1)) == \
        "kernel 'k' takes 2 arguments (and 1 hidden_args), 1 given"
