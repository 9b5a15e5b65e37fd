"""What differs between the UR releases ur_cffi runs on, decided once, here, at import.

ur_cffi is built against the ``ur_api.h`` of the runtime it will load (oneAPI 2025.0 to 2026.2,
UR API 0.10 to 0.12).  Those headers differ; each difference is settled below from what the
compiled module declares (a function, an enum, a parameter list), and the rest of the package
calls the one API this module gives.  Only behaviours of old loaders that no declaration
shows are told by the header's API version (:data:`API_VERSION`):

=============================  ===========================================  ==================
difference                     releases                                     here
=============================  ===========================================  ==================
backend enum                   ``ur_platform_backend_t`` up to 2025.2,      :data:`Backend`,
                               ``ur_backend_t`` after; an adapter's is      :func:`backend`
                               ``ur_adapter_backend_t`` up to 2025.2 (the
                               same values)
platforms of an adapter        ``urPlatformGet(adapters[], n, ...)`` up to  :func:`platforms`
                               2025.2, ``urPlatformGet(adapter, ...)`` after
program from a binary          one device in UR 0.10, a device list after   :func:`program_
                                                                            from_binary`
kernel launch                  ``urEnqueueKernelLaunchWithArgsExp`` from    :data:`LAUNCH`,
                               2026.0 (only it in 2026.2);                  :func:`new_
                               ``urKernelSetArg*`` + ``urEnqueueKernelLaunch``   arguments`,
                               before, in three shapes (9 parameters up to  :data:`enqueue_
                               2025.2, a launch-property list in 2025.3, an launch`
                               ext-properties pointer in 2026.0/2026.1)
device-wide wait               ``urDeviceWaitExp`` from 2026.0              :data:`HAS_
                                                                            DEVICE_WAIT`
leak checker and events        unrecorded in UR 0.10 and 0.11 (2025.0,      :data:`LEAK_
                               2025.1): false reports of their release      CHECKER_RECORDS_
                                                                            EVENTS`
``native_cpu`` in a selector   refused in UR 0.10 and 0.11 (2025.0, 2025.1) :data:`SELECTOR_
                                                                            KNOWS_NATIVE_CPU`
a selector of ``!`` terms      selects nothing in UR 0.10 and 0.11 (2025.0, :data:`NEGATIVE_
alone                          2025.1), every device but those later        TERMS_ALONE_
                                                                            SELECT`
device types in capitals       read in UR 0.10 and 0.11, select nothing     :data:`CAPITAL_
                               later (unless the backend is in capitals     DEVICE_TYPES_
                               too, from 2025.3)                            READ`
info enumerators               e.g. ``UR_ADAPTER_INFO_VERSION`` (0.11+),    :func:`enumerator`
                               ``UR_KERNEL_INFO_SPILL_MEM_SIZE`` (0.12)
command buffers (``Graph``)    ``urEnqueueCommandBufferExp``, updates by    :data:`HAS_COMMAND_
                               command buffer, appends with event lists     BUFFERS`,
                               from 2025.2 (before: other shapes, not       :func:`append_
                               handled: a Graph replays command by          launch`
                               command); a launch appended with its
                               arguments in 2026.2, from arguments set on
                               the kernel before; the update capability    :data:`UPDATE_
                               flags (none in UR 0.10's header: a yes/no   CAPABILITIES`
                               property there)
USM pools (``allocator``)      ``UR_DEVICE_INFO_USM_POOL_SUPPORT`` from     :func:`usm_pool`
                               2025.1 (2025.0: no UR pool is used);
                               ``urUSMPoolCreate`` in every release
=============================  ===========================================  ==================

Backends differ too, in four things the rest of the package acts on: whether a copy from or
to pageable host memory blocks in its enqueue (:func:`pageable_copies_wait`), how large a
launch a device runs (:func:`launch_limits`), whether a graph's update takes one memory
argument per call (:func:`updates_one_memory_argument_per_call`), and whether a 2D copy is one
copy per row (:func:`copies_rows_one_by_one`).

Alike in every release: ``urDeviceGetSelected`` (``ur_cffi.devices()`` with
``ONEAPI_DEVICE_SELECTOR`` set).  What its releases do with a malformed selector differs
(ignore it, drop every adapter, ``INVALID_VALUE``, an abort in 2025.2, a crash in 2025.0), so
none is passed to UR: ``loader.device_selector()`` refuses it first, on every release.  Two
kinds of well-formed selector select nothing on some releases (:data:`NEGATIVE_TERMS_ALONE_
SELECT`, which ur_cffi works around, and :data:`CAPITAL_DEVICE_TYPES_READ`):
``default_device()``'s error says so (``loader.selector_hint()``).

Kernel arguments travel in one layout on every release: an entry of :data:`ARGUMENT_SIZE`
bytes per argument, laid out as UR 0.12's ``ur_exp_kernel_arg_properties_t`` (checked against
it where the header has it): structure type, next pointer, kind and index (32 bits each),
size, and the value word (a USM address, the address of a by-value argument's bytes, or a
memory handle).  Where the launch takes such an array it gets this memory as it is; elsewhere
:data:`enqueue_launch` sets each argument on the kernel with ``urKernelSetArg*`` first (under
the caller's enqueue lock: UR keeps those arguments on the kernel handle), skipping that when
the kernel last ran with the same unchanged argument block.
"""

from __future__ import annotations

from . import enums
from ._ur import ffi, lib
from .errors import check

_NULL = ffi.NULL


def _parameters(function: str) -> list[str]:
    return [arg.cname for arg in ffi.typeof(getattr(lib, function)).args]


def has(function: str) -> bool:
    """Whether the header this module was built from declares UR function ``function``."""
    return hasattr(lib, function)


def enumerator(enum_name: str, member: str):
    """Member ``member`` of enum ``enum_name``, or None where this release has no such member."""
    return getattr(getattr(enums, enum_name, None), member, None)


def require(enum_name: str, member: str):
    """Member ``member`` of ``enum_name``; ``NotImplementedError`` naming it where this release
    has none."""
    found = enumerator(enum_name, member)
    if found is None:
        raise NotImplementedError(
            f"{member} is not in the UR API {lib.UR_API_VERSION_CURRENT >> 16}."
            f"{lib.UR_API_VERSION_CURRENT & 0xFFFF} header ur_cffi was built from")
    return found


# --------------------------------------------------------------------------------------------
# Backends and platforms

Backend = getattr(enums, "ur_backend_t", None) or enums.ur_platform_backend_t
"""The enum of UR backends: ``ur_backend_t``, or ``ur_platform_backend_t`` where the header has
no ``ur_backend_t`` (oneAPI up to 2025.2)."""



def backend(value):
    """``value``, a backend of any of the header's backend enums (an adapter's is
    ``ur_adapter_backend_t`` up to 2025.2), as a :data:`Backend`; an int where it is none of
    its members."""
    try:
        return Backend(int(value))
    except ValueError:
        return int(value)


BACKEND_PREFIX = "UR_BACKEND_" if Backend.__name__ == "ur_backend_t" else "UR_PLATFORM_BACKEND_"
"""The common prefix of :data:`Backend`'s members, before ``OPENCL``, ``LEVEL_ZERO``, ..."""


def backend_name(backend) -> str:
    """``"OPENCL"``, ``"CUDA"``, ``"LEVEL_ZERO"``...: a :data:`Backend` member's name without
    the prefix."""
    return backend.name.removeprefix(BACKEND_PREFIX)


_PLATFORM_GET_TAKES_ADAPTER_LIST = _parameters("urPlatformGet")[0].endswith("* *")


def pageable_copies_wait(backend) -> bool:
    """Whether ``backend``'s copy between a device and pageable host memory (a numpy array's)
    waits, inside its enqueue, until the queue's earlier work is done: CUDA's and HIP's
    runtimes copy pageable memory synchronously (on the H200, a non-blocking copy behind a
    1.3 s kernel returned after 1.3 s); Level Zero's and OpenCL's enqueue at once."""
    return backend_name(backend) in ("CUDA", "HIP")


def updates_one_memory_argument_per_call(backend) -> bool:
    """Whether ``backend``'s command-buffer update (``urCommandBufferUpdateKernelLaunchExp``)
    takes one memory-object argument per call: the OpenCL adapter (its
    ``updateKernelArgs``) points every ``cl_mutable_dispatch_arg_khr`` of a call at one
    variable of its loop, so each argument changed gets the last one's buffer (seen with
    oneAPI 2026.2: x and y swapped gave 3x, not 2y + x)."""
    return backend_name(backend) == "OPENCL"


def copies_rows_one_by_one(backend) -> bool:
    """Whether ``backend``'s 2D USM copy (``urEnqueueUSMMemcpy2D``) is one copy per row: the
    OpenCL adapter enqueues ``clEnqueueMemcpyINTEL`` for each (a few microseconds a row on
    the CPU device); the CUDA, HIP and Level Zero adapters give the whole rectangle to their
    runtime's own 2D copy."""
    return backend_name(backend) == "OPENCL"


def reports_kernel_arguments(backend) -> bool:
    """Whether ``backend``'s adapter reports a kernel's argument count and name
    (``UR_KERNEL_INFO_NUM_ARGS``, ``UR_PROGRAM_INFO_KERNEL_NAMES``): the CUDA and HIP adapters
    count the arguments set so far and list no names."""
    return backend_name(backend) not in ("CUDA", "HIP")


_SIZE_MAX = (1 << 64) - 1


def launch_limits(backend, is_cpu: bool, max_work_groups) -> tuple:
    """``(most work-items in one launch, most work-groups in each dimension, whether a launch
    without a local size may run groups of one)`` for a device of ``backend`` that reports
    ``max_work_groups`` (``UR_DEVICE_INFO_MAX_WORK_GROUPS_3D``).  Intel's CPU OpenCL runtime
    reports no limit, yet ends the process (SIGSEGV, seen with 2026.2) from 2**32 work-items
    or 2**31 work-groups in one launch, and picks groups of one for sizes such as 2**31 + 1.
    The CUDA and Level Zero adapters pick a launch's group size themselves."""
    groups = tuple(int(m) for m in max_work_groups) if max_work_groups else (_SIZE_MAX,) * 3
    if is_cpu and backend_name(backend) == "OPENCL":
        return (1 << 32) - 1, tuple(min(m, (1 << 31) - 1) for m in groups), True
    return _SIZE_MAX, groups, False


def platforms(adapter_handle) -> list:
    """The platform handles of one adapter (``urPlatformGet``)."""
    count = ffi.new("uint32_t *")
    if _PLATFORM_GET_TAKES_ADAPTER_LIST:
        adapters = ffi.new("ur_adapter_handle_t[1]", [adapter_handle])
        lead = (adapters, 1)
    else:
        lead = (adapter_handle,)
    check(lib.urPlatformGet(*lead, 0, _NULL, count), "urPlatformGet")
    if count[0] == 0:  # an adapter without platforms (Level Zero with no GPU)
        return []
    handles = ffi.new("ur_platform_handle_t[]", count[0])
    check(lib.urPlatformGet(*lead, count[0], handles, _NULL), "urPlatformGet")
    return [handles[i] for i in range(count[0])]


# --------------------------------------------------------------------------------------------
# Programs

_BINARY_FOR_ONE_DEVICE = _parameters("urProgramCreateWithBinary")[1] != "uint32_t"


def program_from_binary(context_handle, device_handle, binary: bytes):
    """A new program handle from ``binary`` for one device (``urProgramCreateWithBinary``)."""
    out = ffi.new("ur_program_handle_t *")
    data = ffi.new("uint8_t[]", binary)
    if _BINARY_FOR_ONE_DEVICE:
        result = lib.urProgramCreateWithBinary(context_handle, device_handle, len(binary), data,
                                               _NULL, out)
    else:
        devices = ffi.new("ur_device_handle_t[1]", [device_handle])
        lengths = ffi.new("size_t[1]", [len(binary)])
        pointers = ffi.new("uint8_t *[1]", [data])
        result = lib.urProgramCreateWithBinary(context_handle, 1, devices, lengths, pointers,
                                               _NULL, out)
    check(result, "urProgramCreateWithBinary")
    return out[0]


# --------------------------------------------------------------------------------------------
# Devices

HAS_DEVICE_WAIT = has("urDeviceWaitExp")
"""Whether ``urDeviceWaitExp`` exists; without it ``Device.synchronize`` finishes queues."""


# --------------------------------------------------------------------------------------------
# Validation mode

API_VERSION = divmod(lib.UR_API_VERSION_CURRENT, 1 << 16)
"""``(major, minor)`` of the header's ``UR_API_VERSION_CURRENT``, e.g. ``(0, 12)``."""

LEAK_CHECKER_RECORDS_EVENTS = API_VERSION >= (0, 12)
"""Whether UR's leak-checking layer records the events that enqueue calls return.  Those of
UR 0.10 and 0.11 (oneAPI 2025.0, 2025.1) do not, so every use and release of such an event
reads as a problem in a correct program (raw UR calls alone show it):
:func:`loader.parse_validation_log` drops reports of unknown handles and negative counts
there, and with them what they would say of other handles (a double release, a use after
release, a leak of a handle made where an event was)."""

NEGATIVE_TERMS_ALONE_SELECT = API_VERSION >= (0, 12)
"""Whether ``ONEAPI_DEVICE_SELECTOR`` of ``!`` terms alone selects every device but theirs
with the loader's own filter on; the loaders of UR 0.10 and 0.11 drop every adapter first, so
ur_cffi initialises them with ``UR_LOADER_PRELOAD_FILTER=0`` for such a selector (unless it
is set: then ``loader.selector_hint`` says so)."""

SELECTOR_KNOWS_NATIVE_CPU = API_VERSION >= (0, 12)
"""Whether ``urDeviceGetSelected`` takes a ``native_cpu`` term: the loaders of UR 0.10 and 0.11
(oneAPI 2025.0, 2025.1) refuse it, though their headers' backend enums have ``NATIVE_CPU``."""

CAPITAL_DEVICE_TYPES_READ = API_VERSION < (0, 12)
"""Whether the loader reads device types in capitals (``opencl:CPU``) as the grammar says.
From UR 0.12 it matches them in lower case, so they select nothing, unless the backend is in
capitals too (``OPENCL:CPU``, read from oneAPI 2025.3 on)."""


# --------------------------------------------------------------------------------------------
# Kernel launches

_WORDS = 6
ARGUMENT_SIZE = 8 * _WORDS
"""Bytes per kernel argument entry."""
VALUE_OFFSET = 32
"""Offset of an entry's value word (the address, value pointer or memory handle)."""

HAS_LAUNCH_WITH_ARGS = has("urEnqueueKernelLaunchWithArgsExp")
LAUNCH = ("urEnqueueKernelLaunchWithArgsExp" if HAS_LAUNCH_WITH_ARGS
          else "urEnqueueKernelLaunch")
"""The UR function a kernel launch's result is reported under."""

if HAS_LAUNCH_WITH_ARGS:
    _kinds = enums.ur_exp_kernel_arg_type_t
    VALUE = int(_kinds.UR_EXP_KERNEL_ARG_TYPE_VALUE)
    POINTER = int(_kinds.UR_EXP_KERNEL_ARG_TYPE_POINTER)
    MEM_OBJ = int(_kinds.UR_EXP_KERNEL_ARG_TYPE_MEM_OBJ)
    LOCAL = int(_kinds.UR_EXP_KERNEL_ARG_TYPE_LOCAL)
    _STRUCTURE = int(enums.ur_structure_type_t.UR_STRUCTURE_TYPE_EXP_KERNEL_ARG_PROPERTIES)
    _entry = "ur_exp_kernel_arg_properties_t"
    assert (ffi.sizeof(_entry), ffi.offsetof(_entry, "type"), ffi.offsetof(_entry, "index"),
            ffi.offsetof(_entry, "size"), ffi.offsetof(_entry, "value")) == \
        (ARGUMENT_SIZE, 16, 20, 24, VALUE_OFFSET), "ur_exp_kernel_arg_properties_t changed"
    _ENTRY_POINTER = ffi.typeof(_entry + " *")
else:
    VALUE, POINTER, MEM_OBJ, LOCAL = 0, 1, 2, 3  # our own: no UR launch reads them
    _STRUCTURE = 0


def launch_sizes(sizes: tuple, unused: int):
    """``size_t[3]`` of a launch's ``sizes`` (1 to 3 of them) and ``unused`` (1 for work sizes,
    0 for offsets) in the dimensions after theirs: the validation layer of oneAPI 2026.0 and
    2026.1 reads all three entries of ``urEnqueueKernelLaunchWithArgsExp``'s sizes, whatever
    ``workDim`` says, and refuses a 0 (a 1-D launch was refused at random, past its array)."""
    return ffi.new("size_t[3]", (*sizes, *(unused,) * (3 - len(sizes))))


def new_arguments(count: int, extra_bytes: int = 0, volatile: bool = False) -> tuple:
    """Memory for ``count`` argument entries followed by ``extra_bytes`` of the caller's:
    ``(block, arguments, words)``: the ``char[]`` block, what :data:`enqueue_launch` takes as
    its argument list, and the block as 64-bit words (``memoryview``).

    ``volatile``: the caller rewrites the entries between launches (else they are fixed once
    written, which lets a release without argument lists skip setting them again)."""
    size = ARGUMENT_SIZE * count + extra_bytes
    block = ffi.new("char[]", (size + 7) // 8 * 8 or 8)
    words = memoryview(ffi.buffer(block)).cast("B").cast("Q")
    if HAS_LAUNCH_WITH_ARGS:
        arguments = ffi.cast(_ENTRY_POINTER, block)
    else:
        arguments = _ArgumentList(words, volatile)
    return block, arguments, words


def write_argument(words, index: int, kind: int, size: int, value: int = 0) -> None:
    """Fill entry ``index``: argument ``index`` of ``kind`` (:data:`VALUE`, :data:`POINTER`,
    :data:`MEM_OBJ`, :data:`LOCAL`) and ``size`` bytes; ``value`` is the value word."""
    base = index * _WORDS
    words[base] = _STRUCTURE
    words[base + 1] = 0
    words[base + 2] = kind | index << 32
    words[base + 3] = size
    words[base + 4] = value
    words[base + 5] = 0


def read_argument(words, index: int) -> tuple[int, int, int]:
    """``(kind, size, value word)`` of entry ``index`` (as :func:`write_argument` wrote it)."""
    base = index * _WORDS
    return words[base + 2] & 0xFFFFFFFF, words[base + 3], words[base + 4]


def value_word(index: int) -> int:
    """The position among an argument block's words of entry ``index``'s value word (which
    a launch on other arrays rewrites with their addresses)."""
    return index * _WORDS + VALUE_OFFSET // 8


class _ArgumentList:
    """An argument block where the launch takes no argument list."""

    __slots__ = ("words", "volatile")

    def __init__(self, words, volatile: bool):
        self.words, self.volatile = words, volatile


def _set_arguments(kernel, count: int, words) -> int:
    """``urKernelSetArg*`` for each of the ``count`` entries in ``words``; the first failure's
    ``ur_result_t`` (0: all set), for the caller to report as the launch's."""
    for base in range(0, count * _WORDS, _WORDS):
        kind_index, size, value = words[base + 2], words[base + 3], words[base + 4]
        kind, index = kind_index & 0xFFFFFFFF, kind_index >> 32
        if kind == POINTER:
            result = lib.urKernelSetArgPointer(kernel, index, _NULL, ffi.cast("void *", value))
        elif kind == VALUE:
            result = lib.urKernelSetArgValue(kernel, index, size, _NULL,
                                             ffi.cast("void *", value))
        elif kind == LOCAL:
            result = lib.urKernelSetArgLocal(kernel, index, size, _NULL)
        else:
            result = lib.urKernelSetArgMemObj(kernel, index, _NULL,
                                              ffi.cast("ur_mem_handle_t", value))
        if result:
            return result
    return 0


_applied: dict = {}  # kernel handle -> the fixed argument list its arguments were set from


def _launcher_for_set_arguments():
    """``enqueue_launch`` for releases whose launch takes no argument list."""
    extra = len(_parameters("urEnqueueKernelLaunch")) - 9
    # No launch properties: none (9 parameters), a count and a list (11), a pointer (10).
    launch_properties = {0: (), 1: (_NULL,), 2: (0, _NULL)}[extra]
    launch = lib.urEnqueueKernelLaunch
    # UR 0.12 of oneAPI 2025.2 still requires the offsets (its validation layer refuses NULL).
    no_offsets = ffi.new("size_t[3]")

    def enqueue_launch(queue, kernel, dims, offsets, global_sizes, local_sizes, count,
                       arguments, _properties, wait_count, wait_events, event_out):
        if offsets == _NULL:
            offsets = no_offsets
        if arguments.volatile or _applied.get(kernel) is not arguments:
            _applied.pop(kernel, None)
            result = _set_arguments(kernel, count, arguments.words)
            if result:
                return result
            if not arguments.volatile:
                if len(_applied) > 4096:  # handles of released kernels; cheap to forget
                    _applied.clear()
                _applied[kernel] = arguments
        return launch(queue, kernel, dims, offsets, global_sizes, local_sizes,
                      *launch_properties, wait_count, wait_events, event_out)

    return enqueue_launch


enqueue_launch = (lib.urEnqueueKernelLaunchWithArgsExp if HAS_LAUNCH_WITH_ARGS
                  else _launcher_for_set_arguments())
"""Enqueue a kernel launch: ``(queue, kernel, work_dim, offsets, global_sizes, local_sizes,
argument_count, arguments, launch properties (:func:`launch_properties`), wait_count,
wait_events, event_out)`` as ``urEnqueueKernelLaunchWithArgsExp`` takes them, with
``arguments`` from :func:`new_arguments`; returns the ``ur_result_t``.  Call it under
``queue.enqueue_lock``."""


def launch_properties(flags: int = 0, work_group_memory: int = 0):
    """The launch-property list of ``enqueue_launch`` for launch ``flags`` and
    ``work_group_memory`` bytes of dynamic work-group (shared) memory (``cdata`` to keep alive
    while launches use it), or ``_NULL`` where neither is asked.  ``NotImplementedError``
    where the release's launch takes no properties."""
    if not flags and not work_group_memory:
        return _NULL
    if not HAS_LAUNCH_WITH_ARGS:
        raise NotImplementedError("launch properties (launch flags, work-group memory) need "
                                  "urEnqueueKernelLaunchWithArgsExp, which UR has from oneAPI "
                                  "2026.0 on; this ur_cffi was built against an older ur_api.h")
    structures = require("ur_structure_type_t", "UR_STRUCTURE_TYPE_KERNEL_LAUNCH_EXT_PROPERTIES")
    # Both structures in one owned array (they have the same size and alignment), so the
    # pointer the launch takes keeps the work-group memory entry alive too.
    assert ffi.sizeof("ur_kernel_launch_ext_properties_t") == \
        ffi.sizeof("ur_kernel_launch_workgroup_property_t")
    entries = ffi.new("ur_kernel_launch_ext_properties_t[2]")
    entries[0].stype, entries[0].flags = int(structures), flags
    if work_group_memory:
        memory = ffi.cast("ur_kernel_launch_workgroup_property_t *", entries + 1)
        memory.stype = int(require("ur_structure_type_t",
                                   "UR_STRUCTURE_TYPE_KERNEL_LAUNCH_WORKGROUP_PROPERTY"))
        memory.workgroup_mem_size = work_group_memory
        entries[0].pNext = memory
    return entries


# --------------------------------------------------------------------------------------------
# Command buffers (ur_cffi.Graph)

def _command_buffers_handled() -> bool:
    # The shapes of UR 0.12 from oneAPI 2025.2 on: appends take an event wait list besides the
    # sync points (11 parameters for a USM copy, 15 for a launch), updates name their command
    # in the descriptor, a command buffer is submitted with urEnqueueCommandBufferExp, and its
    # command handles are its own (there is no urCommandBufferReleaseCommandExp).
    return (has("urEnqueueCommandBufferExp") and has("urCommandBufferFinalizeExp")
            and not has("urCommandBufferReleaseCommandExp")
            and len(_parameters("urCommandBufferAppendUSMMemcpyExp")) == 11
            and len(_parameters("urCommandBufferAppendUSMFillExp")) == 12
            and len(_parameters("urCommandBufferAppendKernelLaunchExp")) == 15
            and _parameters("urCommandBufferUpdateKernelLaunchExp")[1] == "uint32_t")


HAS_COMMAND_BUFFERS = _command_buffers_handled()
"""Whether a ``ur_cffi.Graph`` can be a UR command buffer with this header's functions (oneAPI
2025.2 on); where not, a graph replays its commands one by one."""

def update_capabilities(flags) -> dict:
    """The bits of ``flags`` (the header's ``ur_device_command_buffer_update_capability_flag_t``)
    a graph's updates use, by name without the prefix; UR's values where ``flags`` is None (UR
    0.10's header has no such enum: its graphs replay one by one and update everything, and
    read as 0 they said they updated nothing)."""
    return {name: int(getattr(flags, "UR_DEVICE_COMMAND_BUFFER_UPDATE_CAPABILITY_FLAG_" + name,
                              None) or 1 << bit)
            for bit, name in enumerate(("KERNEL_ARGUMENTS", "LOCAL_WORK_SIZE", "GLOBAL_WORK_SIZE",
                                        "GLOBAL_WORK_OFFSET"))}


UPDATE_CAPABILITIES = update_capabilities(
    getattr(enums, "ur_device_command_buffer_update_capability_flag_t", None))
"""This header's :func:`update_capabilities`."""

HAS_APPEND_WITH_ARGS = has("urCommandBufferAppendKernelLaunchWithArgsExp")
"""Whether a launch is appended with its argument list (oneAPI 2026.2), not from arguments
set on the kernel handle first."""


def argument_words(arguments, count: int):
    """The ``count`` entries of an argument list from :func:`new_arguments` as 64-bit words."""
    if isinstance(arguments, _ArgumentList):
        return arguments.words
    return memoryview(ffi.buffer(arguments, count * ARGUMENT_SIZE)).cast("B").cast("Q")


def refilled_arguments(block, pointers) -> tuple:
    """``(block, arguments)`` as :func:`new_arguments` gives the first two: a copy of ``block``
    (:func:`new_arguments`') with the value words of the pointer entries
    ``pointers`` (``(index, address)`` pairs) rewritten."""
    copied = ffi.new("char[]", ffi.sizeof(block))
    ffi.memmove(copied, block, ffi.sizeof(block))
    words = ffi.cast("uint64_t *", copied)
    for index, address in pointers:
        words[index * _WORDS + 4] = address
    if HAS_LAUNCH_WITH_ARGS:
        return copied, ffi.cast(_ENTRY_POINTER, copied)
    return copied, _ArgumentList(memoryview(ffi.buffer(copied)).cast("B").cast("Q"), False)


def copy_arguments(arguments, count: int) -> tuple:
    """``(block, arguments, words)`` as :func:`new_arguments` gives them, holding the ``count``
    entries of ``arguments`` with the bytes of every by-value argument copied into the new
    block: it depends on no memory of the original's."""
    words = argument_words(arguments, count)
    values = [(index, words[index * _WORDS + 3]) for index in range(count)
              if words[index * _WORDS + 2] & 0xFFFFFFFF == VALUE]
    extra = sum((size + 7) // 8 * 8 for _, size in values)
    block, copied, copied_words = new_arguments(count, extra)
    copied_words[:count * _WORDS] = words[:count * _WORDS]
    offset = ARGUMENT_SIZE * count
    start = int(ffi.cast("uintptr_t", block))
    for index, size in values:
        ffi.memmove(block + offset, ffi.cast("void *", words[index * _WORDS + 4]), size)
        copied_words[index * _WORDS + 4] = start + offset
        offset += (size + 7) // 8 * 8
    return block, copied, copied_words


def append_launch(buffer, kernel, dims, offsets, global_sizes, local_sizes, count, arguments,
                  point_count, points, point_out, command_out) -> int:
    """Append a kernel launch to command buffer ``buffer`` after ``point_count`` sync
    ``points``, with ``arguments`` from :func:`new_arguments`; returns the ``ur_result_t``.
    Call it under ``queue.enqueue_lock``: without
    ``urCommandBufferAppendKernelLaunchWithArgsExp`` the arguments are set on the kernel
    handle first, as for a launch."""
    if HAS_APPEND_WITH_ARGS:
        return lib.urCommandBufferAppendKernelLaunchWithArgsExp(
            buffer, kernel, dims, offsets, global_sizes, local_sizes, count, arguments, 0, _NULL,
            point_count, points, 0, _NULL, point_out, _NULL, command_out)
    _applied.pop(kernel, None)  # the kernel's arguments are no longer those of a launch
    result = _set_arguments(kernel, count, argument_words(arguments, count))
    if result:
        return result
    return lib.urCommandBufferAppendKernelLaunchExp(
        buffer, kernel, dims, offsets, global_sizes, local_sizes, 0, _NULL, point_count, points,
        0, _NULL, point_out, _NULL, command_out)


# --------------------------------------------------------------------------------------------
# USM pools (ur_cffi.allocator)

_POOL_SUPPORT = enumerator("ur_device_info_t", "UR_DEVICE_INFO_USM_POOL_SUPPORT")


def usm_pool(context_handle, device_handle):
    """A new UR USM pool (``urUSMPoolCreate``) for allocations of one context, or None where
    the device does not report ``UR_DEVICE_INFO_USM_POOL_SUPPORT`` (oneAPI 2025.0's header has
    no such query, and there the pool is not created: the caching allocator alone serves).
    Every supported release declares ``urUSMPoolCreate`` in one shape; the ``...Exp`` pool
    functions of 2025.2 on (``urUSMPoolTrimToExp``, per-device pools) are not used."""
    if _POOL_SUPPORT is None:
        return None
    supported = ffi.new("ur_bool_t *")
    if lib.urDeviceGetInfo(device_handle, _POOL_SUPPORT, ffi.sizeof("ur_bool_t"), supported,
                           _NULL) or not supported[0]:
        return None
    description = ffi.new("ur_usm_pool_desc_t *", {
        "stype": enums.ur_structure_type_t.UR_STRUCTURE_TYPE_USM_POOL_DESC})
    out = ffi.new("ur_usm_pool_handle_t *")
    if lib.urUSMPoolCreate(context_handle, description, out):
        return None  # the adapter declined after all: allocate without a UR pool
    return out[0]
