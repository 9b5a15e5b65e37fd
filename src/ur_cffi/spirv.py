"""A small pass over SPIR-V modules: structural validation and removal of capabilities.

Works on the binary word stream (bytes in, bytes out) with the standard library only.
The layout follows the SPIR-V specification, section 2.3 "Physical Layout of a SPIR-V
Module and Instruction": a five-word header, then instructions whose first word holds the
word count in the high 16 bits and the opcode in the low 16 bits.
"""

import array
import sys

__all__ = [
    "MAGIC", "CAPABILITY_KERNEL_ATTRIBUTES_INTEL", "EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL",
    "EXTENSION_KERNEL_ATTRIBUTES_INTEL", "validate", "capabilities", "extensions",
    "entry_points", "kernel_parameters", "drop_capabilities", "in_native_order",
]

MAGIC = 0x07230203
_NATIVE_MAGIC = MAGIC.to_bytes(4, sys.byteorder)
HEADER_WORDS = 5

# Opcodes (SPIR-V specification, 3.52 "Instructions").
OP_EXTENSION = 10
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_CAPABILITY = 17
OP_EXECUTION_MODE_ID = 331
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_POINTER = 32
OP_TYPE_FUNCTION = 33
OP_FUNCTION = 54
OP_FUNCTION_PARAMETER = 55
OP_FUNCTION_END = 56
OP_TYPE_UNTYPED_POINTER_KHR = 4417

# Storage classes (3.7) of a kernel's pointer parameters: OpenCL's __global, __constant and
# generic memory, and __local (work-group) memory.  Function storage is a by-value aggregate.
_GLOBAL_STORAGE = frozenset({5, 0, 8})  # CrossWorkgroup, UniformConstant, Generic
_WORKGROUP_STORAGE = 4

# Enumerants from SPV_INTEL_kernel_attributes. Triton's SPIR-V declares the capability for
# its MaxWorkgroupSizeINTEL execution mode; runtimes without the extension reject it.
CAPABILITY_KERNEL_ATTRIBUTES_INTEL = 5892
EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL = 5893
EXTENSION_KERNEL_ATTRIBUTES_INTEL = "SPV_INTEL_kernel_attributes"

# The pass needs a 4-byte unsigned array type: "I" on every platform CPython supports.
_WORD = next(code for code in "IL" if array.array(code).itemsize == 4)


def _words(module):
    """Check `module` and return (words in native order, whether the module was byte-swapped)."""
    if isinstance(module, (int, str)):  # bytes(5) would be five zero bytes
        raise TypeError(f"a SPIR-V module is bytes, not {type(module).__name__} {module!r}")
    data = bytes(module) if not isinstance(module, bytes) else module
    size = len(data)
    if size % 4:
        raise ValueError(f"SPIR-V module length {size} is not a multiple of 4 bytes")
    if size < HEADER_WORDS * 4:
        raise ValueError(f"SPIR-V module is {size} bytes, shorter than the {HEADER_WORDS}-word header")
    words = array.array(_WORD, data)
    swapped = False
    if words[0] != MAGIC:
        words.byteswap()
        if words[0] != MAGIC:
            words.byteswap()
            raise ValueError(f"bad SPIR-V magic number 0x{words[0]:08x} at word 0 (expected 0x{MAGIC:08x})")
        swapped = True
    version = words[1]
    # 0x00MMmm00: reserved high and low bytes, major version 1 (1.0 to 1.6 exist so far).
    if version & 0xFFFF00FF != 0x00010000:
        raise ValueError(f"bad SPIR-V version word 0x{version:08x} at word 1 (expected 0x0001mm00)")
    if words[3] == 0:
        raise ValueError("SPIR-V id bound is 0 at word 3 (must be > 0)")
    if words[4] != 0:
        raise ValueError(f"SPIR-V reserved schema word is 0x{words[4]:08x} at word 4 (must be 0)")
    count = len(words)
    offset = HEADER_WORDS
    bound = words[3]
    function = None  # the offset of the OpFunction whose OpFunctionEnd is still to come
    functions, entry_points = set(), {}  # result ids; function id -> OpEntryPoint's offset
    entry_names = {}  # (execution model, name) -> OpEntryPoint's offset
    function_types = set()
    while offset < count:
        length, opcode = words[offset] >> 16, words[offset] & 0xFFFF
        if length == 0:
            raise ValueError(f"SPIR-V instruction at word {offset} (opcode {opcode}) "
                             "has word count 0")
        if offset + length > count:
            raise ValueError(f"SPIR-V instruction at word {offset} (opcode {opcode}, "
                             f"{length} words) runs past the end of the module ({count} words)")
        if opcode == OP_FUNCTION or opcode == OP_FUNCTION_END:
            if (function is None) != (opcode == OP_FUNCTION) or length < (5 if function is None else 1):
                raise ValueError(f"SPIR-V {'OpFunction' if opcode == OP_FUNCTION else 'OpFunctionEnd'} "
                                 f"at word {offset} " + ("inside the function of word "
                                 f"{function}" if function is not None else "outside a function"))
            if opcode == OP_FUNCTION:
                # (the CPU runtime's compiler crashes on a function type that is none)
                _check_ids(words, offset, "OpFunction", (1, 2), bound)
                if words[offset + 4] not in function_types:
                    raise ValueError(f"SPIR-V OpFunction at word {offset}: its function type "
                                     f"%{words[offset + 4]} is no OpTypeFunction declared "
                                     "before it")
                functions.add(words[offset + 2])
            function = offset if opcode == OP_FUNCTION else None
        elif opcode == OP_ENTRY_POINT and length >= 3:
            entry_points.setdefault(words[offset + 2], offset)
            # The specification forbids two alike: runtimes build one, signatures read another
            key = (words[offset + 1], _string(words, offset + 3, offset + length, offset))
            if key in entry_names:
                raise ValueError(f"SPIR-V OpEntryPoint at word {offset} repeats the name "
                                 f"{key[1]!r} of the entry point at word {entry_names[key]}")
            entry_names[key] = offset
        elif opcode == OP_TYPE_FUNCTION and length >= 3:
            _check_ids(words, offset, "OpTypeFunction", (1,), bound)
            function_types.add(words[offset + 1])
        elif opcode == OP_TYPE_FLOAT and length >= 3 and words[offset + 2] not in _FLOAT_WIDTHS:
            raise ValueError(f"SPIR-V OpTypeFloat at word {offset} is {words[offset + 2]} bits "
                             f"wide (SPIR-V has {', '.join(map(str, sorted(_FLOAT_WIDTHS)))})")
        offset += length
    # A module cut between two instructions passes the checks above: the CPU runtime's
    # compiler crashes on it (a function without its end, an entry point with no function).
    if function is not None:
        raise ValueError(f"SPIR-V module ends inside the function of word {function} (no "
                         "OpFunctionEnd): truncated?")
    missing = [offset for function_id, offset in entry_points.items() if function_id not in functions]
    if missing:
        raise ValueError(f"SPIR-V OpEntryPoint at word {missing[0]} names a function the module "
                         "does not define: truncated?")
    return words, swapped


_FLOAT_WIDTHS = frozenset({8, 16, 32, 64})  # (8: SPV_EXT_float8's, with an encoding)


def _check_ids(words, offset, name, positions, bound):
    """Raise if an id at ``positions`` in the instruction at ``offset`` is 0 or past the
    module's id bound."""
    for position in positions:
        if not 0 < words[offset + position] < bound:
            raise ValueError(f"SPIR-V {name} at word {offset}: id %{words[offset + position]} "
                             f"at its word {position} is 0 or not below the module's id bound "
                             f"{bound}")


def _instructions(words):
    """Yield (offset, opcode, word count) for each instruction of validated `words`."""
    offset = HEADER_WORDS
    count = len(words)
    while offset < count:
        first = words[offset]
        length = first >> 16
        yield offset, first & 0xFFFF, length
        offset += length


def _string(words, start, end, offset):
    """Decode the nul-terminated literal string in words[start:end] of the instruction at `offset`."""
    raw = b"".join(w.to_bytes(4, "little") for w in words[start:end])
    nul = raw.find(b"\0")
    if nul < 0:
        raise ValueError(f"SPIR-V literal string of the instruction at word {offset} has no terminating nul")
    try:
        return raw[:nul].decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"SPIR-V literal string of the instruction at word {offset} is not UTF-8: {error}") from None


def validate(module):
    """Check the structure of a SPIR-V module (bytes-like) before it is handed to UR.

    Checks length, magic number (either byte order), version, header, id bound, that every
    instruction has a non-zero word count and ends inside the module, that every function
    ends (OpFunctionEnd), that every entry point's function is defined and no two entry
    points of one execution model share a name, float widths, and that each function's type
    is a function type; does not check semantics. Raises ValueError naming the problem and its word offset.
    """
    _words(module)


def in_native_order(module: bytes) -> bytes:
    """``module`` with its words in this machine's byte order (runtimes read no other):
    itself where it is, else a byte-swapped copy, validated (ValueError if malformed)."""
    if bytes(module[:4]) == _NATIVE_MAGIC:
        return module
    words, swapped = _words(module)
    return words.tobytes() if swapped else module


def capabilities(module):
    """Return the capabilities the module declares (OpCapability operands), in module order.

    Raises ValueError if the module is malformed.
    """
    words, _ = _words(module)
    return [words[off + 1] for off, op, n in _instructions(words) if op == OP_CAPABILITY and n >= 2]


def extensions(module):
    """Return the extension names the module declares (OpExtension), in module order.

    Raises ValueError if the module is malformed.
    """
    words, _ = _words(module)
    return [_string(words, off + 1, off + n, off) for off, op, n in _instructions(words) if op == OP_EXTENSION]


def entry_points(module):
    """Return the names of the module's entry points (OpEntryPoint), in module order.

    For a Triton kernel this is the kernel name Triton reports as `metadata.name`.
    Raises ValueError if the module is malformed.
    """
    words, _ = _words(module)
    # OpEntryPoint: execution model, function id, then the name.
    return [_string(words, off + 3, off + n, off) for off, op, n in _instructions(words) if op == OP_ENTRY_POINT]


def kernel_parameters(module):
    """Return ``{entry point name: (parameter, ...)}``: what each kernel's parameters are.

    A parameter is ``"ptr"`` (a pointer to global, constant or generic memory), ``"local"``
    (a pointer to work-group memory), ``"int8"`` to ``"int64"`` (an integer of that width:
    SPIR-V for OpenCL does not say whether it is signed), ``"float16"`` to ``"float64"``, or
    None (anything else: a by-value struct, a vector, an image, a sampler).
    Raises ValueError if the module is malformed.
    """
    words, _ = _words(module)
    types, names, parameters = {}, {}, {}
    function = None  # the entry point function whose parameters come next
    for off, op, n in _instructions(words):
        if function is not None:
            if op == OP_FUNCTION_PARAMETER and n >= 3:
                parameters[function].append(types.get(words[off + 1]))
                continue
            function = None
        if op == OP_ENTRY_POINT and n >= 4:
            names.setdefault(words[off + 2], []).append(_string(words, off + 3, off + n, off))
        elif op == OP_TYPE_INT and n >= 3 and words[off + 2] in (8, 16, 32, 64):
            types[words[off + 1]] = f"int{words[off + 2]}"
        elif op == OP_TYPE_FLOAT and n >= 3 and words[off + 2] in (16, 32, 64):
            types[words[off + 1]] = f"float{words[off + 2]}"
        elif op in (OP_TYPE_POINTER, OP_TYPE_UNTYPED_POINTER_KHR) and n >= 3:
            storage = words[off + 2]
            types[words[off + 1]] = "ptr" if storage in _GLOBAL_STORAGE else \
                "local" if storage == _WORKGROUP_STORAGE else None
        elif op == OP_FUNCTION and n >= 5 and words[off + 2] in names:
            function = words[off + 2]
            parameters[function] = []
    return {name: tuple(parameters.get(function, ())) for function, entries in names.items()
            for name in entries}


def drop_capabilities(module, capabilities=frozenset({CAPABILITY_KERNEL_ATTRIBUTES_INTEL}),
                      extensions=frozenset({EXTENSION_KERNEL_ATTRIBUTES_INTEL}),
                      execution_modes=frozenset({EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL})):
    """Remove OpCapability, OpExtension and OpExecutionMode(Id) instructions naming the given values.

    By default drops what SPV_INTEL_kernel_attributes adds to Triton's kernels. Returns
    `module` itself when nothing matches, else new bytes in the module's byte order.
    Raises ValueError if the module is malformed.
    """
    words, swapped = _words(module)
    drop = []
    for off, op, n in _instructions(words):
        if op == OP_CAPABILITY and n >= 2 and words[off + 1] in capabilities:
            drop.append((off, n))
        elif op == OP_EXTENSION and extensions and _string(words, off + 1, off + n, off) in extensions:
            drop.append((off, n))
        elif op in (OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID) and n >= 3 and words[off + 2] in execution_modes:
            # Operands: entry point id, mode, mode operands.
            drop.append((off, n))
    if not drop:
        return module
    kept = array.array(_WORD)
    start = 0
    for off, n in drop:
        kept.extend(words[start:off])
        start = off + n
    kept.extend(words[start:])
    if swapped:
        kept.byteswap()
    return kept.tobytes()
