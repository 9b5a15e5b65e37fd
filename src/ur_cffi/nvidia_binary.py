"""The kernels of an NVIDIA binary (PTX text or a cubin) and the sizes of their parameters.

UR's CUDA adapter cannot say how many arguments a kernel takes, nor which kernels a program
has (``signatures.py`` says which adapters need this); the binary it was given says both:

- **PTX**: each ``.entry name(...)`` lists its ``.param`` declarations, e.g.
  ``.param .u64 .ptr .global .align 1 scale_param_0`` (8 bytes), ``.param .f32 a`` (4) or
  ``.param .align 2 .b8 h[2]`` (2: how LLVM declares an fp16 or bf16 scalar).
- **cubin** (an ELF file, machine ``EM_CUDA``): each kernel is a function symbol marked
  ``STO_CUDA_ENTRY``, and its ``.nv.info.<name>`` section holds one ``EIATTR_KPARAM_INFO``
  attribute per parameter (ordinal, offset, size), as ``cuobjdump -elf`` prints them, or,
  for a kernel of more than 4 KiB of parameters, one ``EIATTR_KPARAM_INFO_V2``.

:func:`entries` takes either and returns ``{kernel name: (parameter sizes in bytes, ...)}``,
or None for anything else (SPIR-V, another vendor's ELF, a fat binary), so a caller can tell
"no kernels" from "this format says nothing".
"""

from __future__ import annotations

import re
import struct

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
STO_CUDA_ENTRY = 0x10
STT_FUNC = 2

# EIATTR attribute formats (the first byte of each attribute) and the attributes read here.
_EIFMT_SVAL = 0x04  # a 16-bit size, then that many bytes; every other format is 4 bytes in all
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_KPARAM_INFO_V2 = 0x45

# PTX parameter types by the width they declare (.b128: PTX 8.3), and the opaque handles a
# kernel may take (64-bit in the unified texture mode, the only one sm_30 and later have).
_PTX_WIDTHS = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16,
               "texref": 8, "samplerref": 8, "surfref": 8}

# Strings (``.file`` names), then comments, an unclosed one running to the end: each match
# ends where the next search starts, so stripping them takes one pass over the text.
_STRINGS_AND_COMMENTS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)
_ENTRY = re.compile(r"(\.extern\s+)?\.entry\s+([A-Za-z_$%][\w$%]*)\s*(\(([^()]*)\)|\()?")
_PARAM = re.compile(r"\.param\b([^,]*)")
_TYPE = re.compile(r"\.(?:[bsuf](8|16|32|64)|b(128)|(texref|samplerref|surfref))\b")
_VECTOR = re.compile(r"\.v(2|4)\b")
_ARRAY = re.compile(r"\[([^\]]*)\]")
# PTX's integer literals: hexadecimal, binary, octal (a leading 0) or decimal, U for unsigned.
_INTEGER = re.compile(r"\s*(?:0[xX]([0-9a-fA-F]+)|0[bB]([01]+)|(0[0-7]*)|([1-9][0-9]*))U?\s*")
_LEADING_COMMENTS = re.compile(rb"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)


def is_ptx(binary: bytes) -> bool:
    """Whether ``binary`` looks like PTX text (it declares ``.version`` and ``.target``)."""
    if bytes(binary[:4]) == ELF_MAGIC:
        return False
    start = _LEADING_COMMENTS.match(binary).end()  # a banner of any length
    head = bytes(binary[start:start + 4096])
    return b".version" in head and b".target" in head


def is_cubin(binary: bytes) -> bool:
    """Whether ``binary`` is a 64-bit little-endian ELF file for ``EM_CUDA``."""
    return (len(binary) >= 64 and bytes(binary[:4]) == ELF_MAGIC and binary[4] == 2
            and binary[5] == 1 and struct.unpack_from("<H", binary, 18)[0] == EM_CUDA)


def entries(binary: bytes) -> dict[str, tuple[int, ...]] | None:
    """``{kernel: parameter sizes}`` of PTX or a cubin; None if ``binary`` is neither.

    Raises ``ValueError`` for a cubin or PTX whose kernel table cannot be read.
    """
    if is_cubin(binary):
        return cubin_entries(bytes(binary))
    if is_ptx(binary):
        return ptx_entries(bytes(binary).rstrip(b"\0").decode("utf-8", "replace"))
    return None


def ptx_entries(text: str) -> dict[str, tuple[int, ...]]:
    """``{kernel: parameter sizes}`` of the ``.entry`` functions in PTX ``text``."""
    text = _STRINGS_AND_COMMENTS.sub(lambda m: '""' if m.group().startswith('"') else " ", text)
    found = {}
    for match in _ENTRY.finditer(text):
        extern, kernel, parenthesized, params = match.groups()
        if parenthesized == "(":
            raise ValueError(f"PTX entry {kernel!r}: its parameter list is not closed")
        if extern:  # a declaration of another module's kernel, not one of this module
            continue
        found[kernel] = tuple(_ptx_param_size(declaration.group(1), kernel)
                              for declaration in _PARAM.finditer(params or ""))
    return found


def _ptx_param_size(declaration: str, kernel: str) -> int:
    """The size of one ``.param`` declaration (its text after ``.param``)."""
    ty = _TYPE.search(declaration)
    if ty is None:
        raise ValueError(f"PTX entry {kernel!r}: cannot read the parameter type of "
                         f"'.param{declaration}'")
    size = _PTX_WIDTHS[ty.group(ty.lastindex)]
    vector = _VECTOR.search(declaration)
    if vector is not None:  # .v2 .f32: 8 bytes
        size *= int(vector.group(1))
    if declaration.count("[") != declaration.count("]"):  # (.b8 s[2,3]: cut at the comma)
        raise ValueError(f"PTX entry {kernel!r}: cannot read the array length of "
                         f"'.param{declaration}'")
    for length in _ARRAY.findall(declaration):  # .b8 s[2][4]: 8 bytes
        size *= _array_length(length, declaration, kernel)
    return size


def _array_length(text: str, declaration: str, kernel: str) -> int:
    """The value of ``text``, an array length (PTX integer literal) in ``declaration``."""
    literal = _INTEGER.fullmatch(text[:80])
    if literal is None:
        raise ValueError(f"PTX entry {kernel!r}: cannot read the array length [{text}] of "
                         f"'.param{declaration}'")
    hexadecimal, binary, octal, decimal = literal.groups()
    length = int(hexadecimal, 16) if hexadecimal else int(binary, 2) if binary else \
        int(octal, 8) if octal else int(decimal)
    if len(text) > 80 or length >= 1 << 32:  # (a kernel's parameters take 32 KiB at most)
        raise ValueError(f"PTX entry {kernel!r}: the array length of '.param{declaration}' "
                         "is too large")
    return length


def cubin_entries(binary: bytes) -> dict[str, tuple[int, ...]]:
    """``{kernel: parameter sizes}`` of the entry functions of a cubin (see the module doc)."""
    try:
        sections = _sections(binary)
        names = {name: (offset, size) for name, _, offset, size, _ in sections}
        found, read = {}, 0
        for kernel in dict.fromkeys(_entry_symbols(binary, sections)):
            info = names.get(f".nv.info.{kernel}")
            read += info[1] if info else 0
            if read > len(binary):  # each kernel's own bytes: a crafted file's sections
                raise ValueError("its .nv.info sections overlap")  # share them, quadratically
            found[kernel] = _parameter_sizes(binary, *info) if info else ()
        return found
    except (struct.error, IndexError, OverflowError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the kernel table of this cubin: {error}") from None
    except ValueError as error:  # a name without its terminating NUL (bytes.index), ordinals
        raise ValueError(f"cannot read the kernel table of this cubin: {error}") from None


def _sections(binary: bytes) -> list[tuple[str, int, int, int, int]]:
    """``[(name, type, offset, size, link)]`` of every ELF section."""
    shoff, = struct.unpack_from("<Q", binary, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", binary, 0x3A)
    headers = [struct.unpack_from("<IIQQQQII", binary, shoff + i * shentsize)
               for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    string = _Strings(binary)
    return [(string(names_offset + name), kind, offset, size, link)
            for name, kind, _, _, offset, size, link, _ in headers]


def _entry_symbols(binary: bytes, sections) -> list[str]:
    """Names of the ``STO_CUDA_ENTRY`` function symbols, in symbol-table order."""
    for _, kind, offset, size, link in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings, string = sections[link][2], _Strings(binary)
        names = []
        for entry in range(offset, offset + size, 24):
            name, info, other = struct.unpack_from("<IBB", binary, entry)
            if info & 0xF == STT_FUNC and other & STO_CUDA_ENTRY:
                names.append(string(strings + name))
        return names
    return []


def _parameter_sizes(binary: bytes, offset: int, size: int) -> tuple[int, ...]:
    """Parameter sizes by ordinal from the ``EIATTR_KPARAM_INFO`` (or ``_V2``) attributes of
    one ``.nv.info.<kernel>`` section."""
    by_ordinal = {}
    position, end = offset, offset + size
    while position + 4 <= end:
        fmt, attribute = binary[position], binary[position + 1]
        if fmt != _EIFMT_SVAL:
            position += 4
            continue
        length, = struct.unpack_from("<H", binary, position + 2)
        if attribute == _EIATTR_KPARAM_INFO:
            # index (32 bits), ordinal (16), offset (16), then flags with the size in bits 18+.
            _, ordinal, _, flags = struct.unpack_from("<IHHI", binary, position + 4)
            by_ordinal[ordinal] = (flags >> 18) & 0x3FFF
        elif attribute == _EIATTR_KPARAM_INFO_V2:
            # index (32 bits), ordinal (16), offset (16), size (16), flags (16: a pointer's
            # are not 0).
            _, ordinal, _, by_ordinal[ordinal] = struct.unpack_from("<IHHH", binary,
                                                                    position + 4)
        position += 4 + length
    if sorted(by_ordinal) != list(range(len(by_ordinal))):
        raise ValueError(f"parameter ordinals {sorted(by_ordinal)} are not 0 to n-1")
    return tuple(by_ordinal[i] for i in range(len(by_ordinal)))


class _Strings:
    """Reads the NUL-terminated names of ``binary``, each offset once, and no more of them in
    all than a few times the file's size: names of a crafted file may overlap (every symbol
    naming one long string, or its suffixes), which would take time and memory quadratic in
    the file's size."""

    def __init__(self, binary: bytes):
        self.binary, self.names, self.budget = binary, {}, 2 * len(binary) + 4096

    def __call__(self, offset: int) -> str:
        name = self.names.get(offset)
        if name is None:
            end = self.binary.index(b"\0", offset)
            self.budget -= end - offset
            if self.budget < 0:
                raise ValueError("its names overlap far beyond the file's size")
            name = self.names[offset] = self.binary[offset:end].decode("utf-8")
        return name
