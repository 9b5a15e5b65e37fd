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
OP_TYPE_BOOL = 20
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_POINTER = 32
OP_TYPE_FUNCTION = 33
OP_FUNCTION = 54
OP_FUNCTION_PARAMETER = 55
OP_FUNCTION_END = 56
OP_TYPE_UNTYPED_POINTER_KHR = 4417
OP_LINE = 8
OP_NO_LINE = 317

EXECUTION_MODEL_KERNEL = 6

# Storage classes (3.7) of a kernel's pointer parameters: OpenCL's __global, __constant and
# generic memory, and __local (work-group) memory.  Function storage is a by-value aggregate.
_GLOBAL_STORAGE = frozenset({5, 0, 8})  # CrossWorkgroup, UniformConstant, Generic
_WORKGROUP_STORAGE = 4

# Enumerants from SPV_INTEL_kernel_attributes. Triton's SPIR-V declares the capability for
# its MaxWorkgroupSizeINTEL execution mode; runtimes without the extension reject it.
CAPABILITY_KERNEL_ATTRIBUTES_INTEL = 5892
EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL = 5893
EXTENSION_KERNEL_ATTRIBUTES_INTEL = "SPV_INTEL_kernel_attributes"

# The fewest words of common instructions (3.52: their operands, without the optional ones):
# runtimes read a shorter one's operands past its end, and crash or spin.  Other opcodes are
# checked for their word count only.
_FEWEST_WORDS = {
    3: 3, 5: 3, 7: 3, OP_LINE: 4, OP_EXTENSION: 2, 11: 3, 12: 5, 14: 3,  # OpSource ...
    OP_ENTRY_POINT: 4, OP_EXECUTION_MODE: 3, OP_CAPABILITY: 2, OP_EXECUTION_MODE_ID: 3,
    19: 2, OP_TYPE_BOOL: 2, OP_TYPE_INT: 4, OP_TYPE_FLOAT: 3, 23: 4, 28: 4, 30: 2,  # OpTypeVoid ...
    OP_TYPE_POINTER: 4, OP_TYPE_FUNCTION: 3, OP_TYPE_UNTYPED_POINTER_KHR: 3,
    41: 3, 42: 3, 43: 4, 44: 3, 46: 3,  # OpConstantTrue ... OpConstantNull
    OP_FUNCTION: 5, OP_FUNCTION_PARAMETER: 3, OP_FUNCTION_END: 1, 57: 4,  # ... OpFunctionCall
    59: 4, 61: 4, 62: 3, 65: 4, 66: 4, 67: 5, 70: 5,  # OpVariable ... OpInBoundsPtrAccessChain
    71: 3, 72: 4, 77: 5, 78: 6, 79: 5, 80: 3, 81: 4, 82: 5, 83: 4,  # OpDecorate ... OpCopyObject
    **dict.fromkeys(range(109, 123), 4), 123: 5, 124: 4,  # conversions, OpBitcast
    126: 4, 127: 4, **dict.fromkeys(range(128, 142), 5),  # negations, arithmetic
    **dict.fromkeys(range(164, 168), 5), 168: 4, 169: 6,  # logical, OpSelect
    **dict.fromkeys(range(170, 192), 5),  # comparisons
    **dict.fromkeys(range(194, 200), 5), 200: 4,  # shifts, bitwise
    224: 4, 225: 3,  # barriers
    245: 3, 246: 4, 247: 3, 248: 2, 249: 2, 250: 4, 251: 3, 254: 2,  # OpPhi ... OpReturnValue
    330: 2,  # OpModuleProcessed
}
# Where the literal string of these opcodes starts (it must end inside the instruction), and
# the literal operands these execution modes take.
_STRING_AT = {4: 1, 5: 2, 6: 3, 7: 2, OP_EXTENSION: 1, 11: 2, OP_ENTRY_POINT: 3, 330: 1}
_MODE_OPERANDS = {17: 3, 18: 3, 35: 1, EXECUTION_MODE_MAX_WORKGROUP_SIZE_INTEL: 3}

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
        raise ValueError(f"SPIR-V module is {size} bytes, shorter than the {HEADER_WORDS}-word "
                         "header")
    words = array.array(_WORD, data)
    swapped = False
    if words[0] != MAGIC:
        words.byteswap()
        if words[0] != MAGIC:
            words.byteswap()
            raise ValueError(f"bad SPIR-V magic number 0x{words[0]:08x} at word 0 (expected "
                             f"0x{MAGIC:08x})")
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
    parameter_types = None  # its function type's, while its parameters are still to come
    given = 0  # how many of them came
    functions, entry_points = set(), {}  # result ids; function id -> OpEntryPoint's offset
    entry_names = {}  # name -> OpEntryPoint's offset
    function_types = {}  # result id -> parameter type ids
    while offset < count:
        length, opcode = words[offset] >> 16, words[offset] & 0xFFFF
        if length == 0:
            raise ValueError(f"SPIR-V instruction at word {offset} (opcode {opcode}) "
                             "has word count 0")
        if offset + length > count:
            raise ValueError(f"SPIR-V instruction at word {offset} (opcode {opcode}, "
                             f"{length} words) runs past the end of the module ({count} words)")
        if length < _FEWEST_WORDS.get(opcode, 1):
            raise ValueError(f"SPIR-V instruction at word {offset} (opcode {opcode}) has "
                             f"{length} word(s); that opcode has at least "
                             f"{_FEWEST_WORDS[opcode]}")
        if opcode in _STRING_AT:
            _string(words, offset + _STRING_AT[opcode], offset + length, offset)
        elif opcode == OP_EXECUTION_MODE and \
                length < 3 + _MODE_OPERANDS.get(words[offset + 2], 0):
            raise ValueError(f"SPIR-V OpExecutionMode at word {offset}: mode "
                             f"{words[offset + 2]} takes {_MODE_OPERANDS[words[offset + 2]]} "
                             f"operand(s), not {length - 3}")
        if parameter_types is not None:  # (runtimes build a kernel from its function's type)
            if opcode == OP_FUNCTION_PARAMETER and given < len(parameter_types):
                if words[offset + 1] != parameter_types[given]:
                    raise ValueError(f"SPIR-V OpFunctionParameter at word {offset} is of type "
                                     f"%{words[offset + 1]}, where the type of its function "
                                     f"(word {function}) has %{parameter_types[given]}")
                given += 1
                offset += length
                continue
            extra = opcode == OP_FUNCTION_PARAMETER
            if opcode in (OP_LINE, OP_NO_LINE) and given < len(parameter_types):
                raise ValueError(f"SPIR-V {'OpLine' if opcode == OP_LINE else 'OpNoLine'} at "
                                 f"word {offset} among the parameters of the OpFunction at word "
                                 f"{function} (the CPU runtime's build spins on it for good)")
            if given < len(parameter_types) or extra:
                raise ValueError(f"SPIR-V OpFunction at word {function} is followed by "
                                 f"{'more than ' if extra else ''}{given} "
                                 f"OpFunctionParameter(s) where its type takes "
                                 f"{len(parameter_types)}")
            parameter_types = None
        elif opcode == OP_FUNCTION_PARAMETER:
            raise ValueError(f"SPIR-V OpFunctionParameter at word {offset} does not follow "
                             "an OpFunction or its other parameters")
        if opcode == OP_FUNCTION or opcode == OP_FUNCTION_END:
            if (function is None) != (opcode == OP_FUNCTION):
                name = "OpFunction" if opcode == OP_FUNCTION else "OpFunctionEnd"
                raise ValueError(f"SPIR-V {name} at word {offset} " + (
                    f"inside the function of word {function}" if function is not None
                    else "outside a function"))
            if opcode == OP_FUNCTION:
                # (the CPU runtime's compiler crashes on a function type that is none)
                _check_ids(words, offset, "OpFunction", (1, 2), bound)
                if words[offset + 4] not in function_types:
                    raise ValueError(f"SPIR-V OpFunction at word {offset}: its function type "
                                     f"%{words[offset + 4]} is no OpTypeFunction declared "
                                     "before it")
                if words[offset + 2] in functions:
                    raise ValueError(f"SPIR-V OpFunction at word {offset} defines "
                                     f"%{words[offset + 2]} again")
                functions.add(words[offset + 2])
                parameter_types, given = function_types[words[offset + 4]], 0
            function = offset if opcode == OP_FUNCTION else None
        elif opcode == OP_ENTRY_POINT:
            if words[offset + 1] != EXECUTION_MODEL_KERNEL:
                raise ValueError(f"SPIR-V OpEntryPoint at word {offset} has execution model "
                                 f"{words[offset + 1]}; UR programs run Kernel "
                                 f"({EXECUTION_MODEL_KERNEL}) entry points")
            entry_points.setdefault(words[offset + 2], offset)
            # The specification forbids two alike: runtimes build one, signatures read another
            entry_name = _string(words, offset + 3, offset + length, offset)  # (again)
            if entry_name in entry_names:
                raise ValueError(f"SPIR-V OpEntryPoint at word {offset} repeats the name "
                                 f"{entry_name!r} of the entry point at word "
                                 f"{entry_names[entry_name]}")
            entry_names[entry_name] = offset
        elif opcode == OP_TYPE_FUNCTION:
            _check_ids(words, offset, "OpTypeFunction", (1,), bound)
            function_types[words[offset + 1]] = tuple(words[offset + 3:offset + length])
        elif opcode == OP_TYPE_FLOAT and words[offset + 2] not in _FLOAT_WIDTHS:
            raise ValueError(f"SPIR-V OpTypeFloat at word {offset} is {words[offset + 2]} bits "
                             f"wide (SPIR-V has {', '.join(map(str, sorted(_FLOAT_WIDTHS)))})")
        offset += length
    # A module cut between two instructions passes the checks above: the CPU runtime's
    # compiler crashes on it (a function without its end, an entry point with no function).
    if function is not None:
        raise ValueError(f"SPIR-V module ends inside the function of word {function} (no "
                         "OpFunctionEnd): truncated?")
    missing = [offset for function_id, offset in entry_points.items()
               if function_id not in functions]
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
    """Decode the nul-terminated literal string in words[start:end] of the instruction at
    `offset`."""
    raw = b"".join(w.to_bytes(4, "little") for w in words[start:end])
    nul = raw.find(b"\0")
    if nul < 0:
        raise ValueError(f"SPIR-V literal string of the instruction at word {offset} has no "
                         "terminating nul")
    try:
        return raw[:nul].decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"SPIR-V literal string of the instruction at word {offset} is not "
                         f"UTF-8: {error}") from None


def validate(module):
    """Check the structure of a SPIR-V module (bytes-like) before it is handed to UR.

    Checks length, magic number (either byte order), version, header, id bound, that every
    instruction has a non-zero word count and ends inside the module, and at least the words
    of its opcode's operands for common opcodes; that every function ends (OpFunctionEnd) and
    is defined once, with parameters right after it as its type lists them; that every entry
    point is a kernel whose function is defined and no two share a name, float widths, and
    that each function's type is a function type; does not check semantics. Raises
    ValueError naming the problem and its word offset.
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
    return [_string(words, off + 1, off + n, off) for off, op, n in _instructions(words)
            if op == OP_EXTENSION]


def entry_points(module):
    """Return the names of the module's entry points (OpEntryPoint), in module order.

    For a Triton kernel this is the kernel name Triton reports as `metadata.name`.
    Raises ValueError if the module is malformed.
    """
    words, _ = _words(module)
    # OpEntryPoint: execution model, function id, then the name.
    return [_string(words, off + 3, off + n, off) for off, op, n in _instructions(words)
            if op == OP_ENTRY_POINT]


def kernel_parameters(module):
    """Return ``{entry point name: (parameter, ...)}``: what each kernel's parameters are.

    A parameter is ``"ptr"`` (a pointer to global, constant or generic memory), ``"local"``
    (a pointer to work-group memory), ``"bool"`` (Triton's i1: one byte at a launch),
    ``"int8"`` to ``"int64"`` (an integer of that width: SPIR-V for OpenCL does not say
    whether it is signed), ``"float16"`` to ``"float64"``, or None (anything else: a by-value
    struct, a vector, an image, a sampler).
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
        elif op == OP_TYPE_BOOL and n >= 2:
            types[words[off + 1]] = "bool"
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
    """Remove OpCapability, OpExtension and OpExecutionMode(Id) instructions naming the given
    values.

    By default drops what SPV_INTEL_kernel_attributes adds to Triton's kernels. Returns
    `module` itself when nothing matches, else new bytes in the module's byte order.
    Raises ValueError if the module is malformed.
    """
    words, swapped = _words(module)
    drop = []
    for off, op, n in _instructions(words):
        if op == OP_CAPABILITY and n >= 2 and words[off + 1] in capabilities:
            drop.append((off, n))
        elif op == OP_EXTENSION and extensions and \
                _string(words, off + 1, off + n, off) in extensions:
            drop.append((off, n))
        elif op in (OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID) and n >= 3 and \
                words[off + 2] in execution_modes:
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
