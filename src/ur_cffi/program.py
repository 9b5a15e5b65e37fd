"""Programs (from SPIR-V IL or a native binary) and kernels, with checked launches."""

from __future__ import annotations

import collections.abc
import contextlib
import ctypes
import functools
import math
import weakref
from time import perf_counter

import numpy as np

from . import (_checks, _compat, _durations, _forking, _handle, _interrupts, dtypes, signatures,
               spirv)
from ._handle import _events, _serials
from ._interrupts import hold_back_in, section
from ._compat import LOCAL, MEM_OBJ, POINTER, VALUE, write_argument
from ._ur import ffi, lib
from .enums import (ur_kernel_group_info_t, ur_kernel_info_t, ur_kernel_sub_group_info_t,
                    ur_program_build_info_t, ur_program_info_t, ur_result_t)
from .errors import UNSUPPORTED, URError, check
from .info import query
from .memory import Buffer, USMArray, is_usm, memory_of
from .queue import (Event, Queue, _new_event, _orphans, adopt, raw_enqueue_lock, recording,
                    release_orphans, wait_list)

_POINTER_SIZE = ffi.sizeof("void *")

# Declared dtypes a Python int or float converts to through cffi (which range-checks ints).
_C_SCALARS = {np.dtype(name): f"{ctype} *" for name, ctype in (
    ("int8", "int8_t"), ("int16", "int16_t"), ("int32", "int32_t"), ("int64", "int64_t"),
    ("uint8", "uint8_t"), ("uint16", "uint16_t"), ("uint32", "uint32_t"),
    ("uint64", "uint64_t"), ("float32", "float"), ("float64", "double"))}


_PROGRAM_HANDLE = ffi.typeof("ur_program_handle_t")


_build_gate = _forking.condition()
_builds = {"running": 0, "stopped": False}


@contextlib.contextmanager
def _building():
    """Around UR's calls that build programs: counted, so that the loader's teardown waits
    for them (Intel's CPU runtime crashed at the process's exit with a daemon thread's build
    still running, 14 of 15 runs with three such threads), and refused while it runs."""
    with _build_gate:
        if _builds["stopped"]:
            raise _handle.ClosedError("the UR loader is being torn down (loader.teardown(), or "
                                      "the interpreter's exit): no program is built now")
        _builds["running"] += 1
    try:
        yield
    finally:
        with _build_gate:
            _builds["running"] -= 1
            _build_gate.notify_all()


def _stop_builds() -> bool:
    """Refuse new builds and wait for those in progress; return whether they were refused
    already."""
    with _build_gate:
        stopped, _builds["stopped"] = _builds["stopped"], True
        _build_gate.wait_for(lambda: not _builds["running"])
    return stopped


@contextlib.contextmanager
def builds_stopped():
    """A block (the loader's teardown) that program builds in progress have ended before, and
    in which new ones raise ``ClosedError``."""
    stopped = _stop_builds()
    try:
        yield
    finally:
        with _build_gate:
            _builds["stopped"] = stopped


def stop_builds_for_good() -> None:
    """Wait for the builds in progress and refuse every later one (the interpreter's exit: a
    daemon thread that read its context's handle before the teardown released it built on
    the released handle after it, and Intel's CPU runtime crashed)."""
    _stop_builds()


class Program(_handle.Resource):
    """A built UR program.  Make one with :meth:`from_il` or :meth:`from_binary`."""

    __slots__ = ("context", "binary_entries", "kernel_parameters", "_built")
    _release_function = "urProgramRelease"

    def __init__(self, context, handle):
        """Take ownership of ``handle``, the caller's reference to a ``ur_program_handle_t`` of
        ``context`` (use the factories instead)."""
        _check_context(context)
        if not isinstance(handle, ffi.CData) or ffi.typeof(handle) is not _PROGRAM_HANDLE or \
                handle == ffi.NULL:
            raise TypeError(f"Program takes a non-null ur_program_handle_t, not {handle!r}")
        if _handle.owns(handle):  # (each would release it: a crash)
            raise ValueError(f"Program: handle {handle!r} is owned already (by a Program, which "
                             "releases it): use that Program")
        self._take(context, handle)

    @classmethod
    def _of(cls, context, handle) -> Program:
        """The Program of ``handle``, a program ur_cffi has just made in ``context``."""
        program = cls.__new__(cls)
        program._take(context, handle)
        return program

    def _take(self, context, handle) -> None:
        self.context = context
        self._built = False
        # {kernel: parameter sizes} from the binary, where the adapter cannot say (signatures)
        self.binary_entries = None
        # {kernel: its parameters} from SPIR-V (signatures.il_parameters), else None
        self.kernel_parameters = None
        self._own(handle, parents=(context,))

    @classmethod
    def from_il(cls, context, il: bytes, options: str = "") -> Program:
        """Create from SPIR-V and build.  A malformed SPIR-V module raises ``ValueError``
        before UR sees it; a failed build raises with the build log in the message."""
        _check_context(context)
        _checks.no_nul("options", options)
        il = _bytes("il", il)
        # (Validates SPIR-V too: the CPU runtime crashes on truncated modules.)
        parameters = signatures.il_parameters(il)
        if parameters is not None:
            il = spirv.in_native_order(il)
        out = ffi.new("ur_program_handle_t *")
        with _building(), section:
            check(lib.urProgramCreateWithIL(context.handle, il, len(il), ffi.NULL, out),
                  "urProgramCreateWithIL")
            program = cls._of(context, out[0])
        program.kernel_parameters = parameters
        try:
            program.build(options)
        except URError as error:
            if il[:4] == spirv.MAGIC.to_bytes(4, "little") and \
                    spirv.CAPABILITY_KERNEL_ATTRIBUTES_INTEL in spirv.capabilities(il):
                # Triton's SPIR-V: CPU runtimes refuse the capability ("unsupported
                # capability 5892", or "KernelAttributes is only supported on FPGA emulator")
                raise type(error)(error.result, error.function, f"{error.detail}\n(the module "
                                  "declares Intel's kernel attributes, which this device may "
                                  "refuse: ur_cffi.spirv.drop_capabilities(il) removes them, "
                                  "as ur_cffi.triton does for its own programs)") from None
            raise
        return program

    @classmethod
    def from_binary(cls, context, binary: bytes, options: str = "", device=None) -> Program:
        """Create from a native binary (e.g. :attr:`binaries` of an earlier build) and build."""
        _check_context(context)
        _checks.no_nul("options", options)
        device = context.devices[0] if device is None else device
        if device not in context.devices:
            raise ValueError(f"device {device!r} is not a device of {context!r}")
        binary = _bytes("binary", binary)
        entries = signatures.binary_entries(device, binary)
        with _building(), section:
            program = cls._of(context, _compat.program_from_binary(context.handle,
                                                                   device.handle, binary))
        program.binary_entries = entries
        program.build(options)
        return program

    def build(self, options: str = "") -> None:
        """``urProgramBuild``; on failure the raised error's message carries the build log."""
        options = _checks.no_nul("options", options)
        try:
            with _building():
                result = lib.urProgramBuild(self.context.handle, self.handle, options)
            check(result, "urProgramBuild")
            self._built = True
        except URError as error:
            if self._built and error.result == ur_result_t.UR_RESULT_ERROR_INVALID_OPERATION:
                # (OpenCL's refusal; its adapter reads the build status as NONE, so kept here)
                raise type(error)(error.result, error.function,
                                  "the program is built already (OpenCL refuses a second "
                                  "build once kernels exist): make a new Program to build it "
                                  "with other options") from None
            logs = []
            for device in self.context.devices:  # (a program from a binary is one device's:
                try:                              # the others' log queries fail)
                    logs.append(self.build_log(device))
                except URError:
                    pass
            logs = "\n".join(logs)
            raise type(error)(error.result, error.function, f"build log:\n{logs.strip()}") \
                from None

    def build_log(self, device=None) -> str:
        """The compiler's log for ``device`` (default: the context's first device)."""
        device = self.context.devices[0] if device is None else device
        if device not in self.context.devices:
            raise ValueError(f"device {device!r} is not a device of {self.context!r}")
        return query("urProgramGetBuildInfo", self.handle, device.handle,
                     ur_program_build_info_t.UR_PROGRAM_BUILD_INFO_LOG)

    @property
    def kernel_names(self) -> list[str]:
        """The names of the program's kernels: from its SPIR-V where it was made from one
        (its names are exact: the runtime's list is one string, split at ``;``), else from
        the runtime, or from its binary where the adapter cannot say (``ur_cffi.signatures``)."""
        if self.kernel_parameters is not None:
            self.handle  # noqa: B018 - raises ClosedError
            return list(self.kernel_parameters)
        try:
            names = query("urProgramGetInfo", self.handle,
                          ur_program_info_t.UR_PROGRAM_INFO_KERNEL_NAMES)
        except URError as error:
            if self.binary_entries is None or error.result not in UNSUPPORTED:
                raise
            return list(self.binary_entries)
        return [name for name in names.split(";") if name]

    @property
    def binaries(self) -> list[bytes]:
        """The native binary for each device, reusable with :meth:`from_binary`."""
        sizes = query("urProgramGetInfo", self.handle,
                      ur_program_info_t.UR_PROGRAM_INFO_BINARY_SIZES)
        buffers = [ffi.new("uint8_t[]", size) for size in sizes]
        pointers = ffi.new("uint8_t *[]", buffers)
        check(lib.urProgramGetInfo(self.handle, ur_program_info_t.UR_PROGRAM_INFO_BINARIES,
                                   ffi.sizeof(pointers), pointers, ffi.NULL), "urProgramGetInfo")
        return [ffi.buffer(buffer, size)[:] for buffer, size in zip(buffers, sizes)]

    def kernel(self, name: str, signature=None, *, hidden_args=(),
               work_group_memory: int = 0, required_local_size=None) -> Kernel:
        """The kernel called ``name``; see :class:`Kernel` for the others."""
        return Kernel(self, name, signature, hidden_args=hidden_args,
                      work_group_memory=work_group_memory,
                      required_local_size=required_local_size)


class Local:
    """A kernel argument of ``nbytes`` of work-group local memory."""

    __slots__ = ("_nbytes",)

    def __init__(self, nbytes: int):
        self._nbytes = _checks.integer("Local memory size", nbytes, minimum=1)

    @property
    def nbytes(self) -> int:
        """The size in bytes (fixed: a launch may reuse the argument block it went into)."""
        return self._nbytes

    def __repr__(self) -> str:
        return f"Local({self._nbytes})"


_SIZE_MAX = 2 ** (8 * ffi.sizeof("size_t")) - 1


def _sizes(name: str, value, smallest: int = 1) -> tuple[int, ...]:
    if type(value) is int and smallest <= value <= _SIZE_MAX:  # the common case, first
        return (value,)
    try:
        sizes = (value,) if isinstance(value, (int, np.integer, bool, np.bool_)) \
            else tuple(value) if isinstance(value, (tuple, list, np.ndarray)) \
            else None  # (a set's order is its hashes', a generator is read once)
    except TypeError:
        sizes = None
    if sizes is None:
        raise TypeError(f"{name} {value!r} must be an integer or a tuple or list of 1 to 3 "
                        "integers")
    if not 1 <= len(sizes) <= 3:
        raise ValueError(f"{name} {value!r} must be 1 to 3 integers")
    return tuple(_checks.integer(name, s, smallest, _SIZE_MAX) for s in sizes)


def _check_context(context, name: str = "context") -> None:
    from .context import Context

    if not isinstance(context, Context):
        raise TypeError(f"{name} must be a ur_cffi Context, not {type(context).__name__} "
                        f"{context!r}")


def _bytes(name: str, data) -> bytes:
    if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise ValueError(f"{name} is empty (0 bytes)")
    return data


_SIGNATURE_WORDS = ("ptr", "local", "mem")


# Type names C and OpenCL C give 4 bytes, numpy 8.
_C_NAMES_NUMPY_WIDENS = {"float": "float32", "int": "int32", "uint": "uint32"}


def _signature_entry(kernel: str, index: int, entry):
    """A signature entry: one of :data:`_SIGNATURE_WORDS`, a numeric numpy dtype or one of
    :data:`dtypes.NAMES`."""
    if isinstance(entry, str) and entry in _SIGNATURE_WORDS:
        return entry
    if entry is int or entry is float or (isinstance(entry, str)  # (np.dtype("int64") == int)
                                          and entry in _C_NAMES_NUMPY_WIDENS):
        name = entry if isinstance(entry, str) else entry.__name__
        raise TypeError(f"signature of {kernel!r}: entry {index} is {entry!r}, which numpy "
                        f"reads as {np.dtype(entry)} and C as {_C_NAMES_NUMPY_WIDENS[name]}; "
                        "write the width, e.g. 'float32' or 'int32'")
    dtype = None
    if isinstance(entry, (str, type, np.dtype)):
        try:
            dtype = dtypes.dtype(entry)
        except TypeError:
            pass
    if dtype is None or not (dtype.kind in "biuf" or dtype.name in dtypes.NAMES) or \
            dtype.byteorder == ">":
        raise TypeError(f"signature of {kernel!r}: entry {index} is {entry!r}; use 'ptr', "
                        f"'local', 'mem', a numeric numpy dtype or one of {dtypes.NAMES}")
    return dtype


def _accepts(declared, kind: str) -> bool:
    """Whether signature entry ``declared`` admits an argument of ``kind`` (no signature: yes).

    Not ``declared in (None, kind)``: numpy reads ``np.dtype("float64") == None`` as true.
    """
    return declared is None or (isinstance(declared, str) and declared == kind)


def _hidden_note(hidden_args) -> str:
    return f" and {len(hidden_args)} hidden_args" if hidden_args else ""


class Kernel(_handle.Resource):
    """A kernel of a built program.

    ``signature``, if given, declares each argument: ``"ptr"`` (a USMArray or an integer
    device address), ``"local"`` (a :class:`Local`), ``"mem"`` (a :class:`Buffer`), or a
    numpy dtype name (``"float32"``, ``"int64"``, ...) for a value.  Without it, values must
    carry their own type: numpy scalars or ctypes values.  ``parameters``: what the program's
    SPIR-V says each parameter is (:func:`ur_cffi.spirv.kernel_parameters`; None for a native
    binary); ``signature`` is checked against it here (``ValueError``), and without a
    signature each launch's arguments are (``TypeError``).

    ``hidden_args`` are values every launch passes after the caller's arguments: parameters
    that a compiler's ABI adds to the kernel, such as the scratch pointers of Triton's NVIDIA
    backend (``ur_cffi.triton.kernel_options(compiled)`` gives them).  ``signature`` then declares
    the caller's arguments only, and launches take ``num_args - len(hidden_args)`` arguments.

    ``hidden_args`` entries are numpy scalars or :class:`Local` (fixed values: their types
    are checked once, here; against the kernel's SPIR-V parameters, as the caller's arguments
    are, by each launch that packs its arguments: ``TypeError`` naming ``hidden_args[i]``).

    ``work_group_memory`` bytes of dynamic work-group (shared) memory are given to every launch
    as a launch property, for kernels that take it that way rather than as a ``"local"``
    argument (Triton's NVIDIA backend; ``ur_cffi.triton.kernel_options(compiled)`` says).
    Launch properties need ``urEnqueueKernelLaunchWithArgsExp`` (oneAPI 2026.0 on): on older
    releases a non-zero ``work_group_memory`` raises ``NotImplementedError`` here.

    ``required_local_size`` (1 to 3 integers) is the only work-group size the kernel computes
    right in (a Triton kernel's: ``num_warps`` times its threads per warp;
    ``ur_cffi.triton.kernel_options(compiled)`` gives it).  Launches with
    ``local_size=None`` use it, and another local size raises ``ValueError``.  None takes the
    size the runtime reports the kernel was compiled for (``reqd_work_group_size``), if any.
    """

    __slots__ = ("program", "name", "num_args", "argument_sizes", "argument_source",
                 "parameters", "signature", "hidden_args", "work_group_memory",
                 "_argument_checks", "_required_local_size", "timing", "_declared",
                 "_properties", "_reusable")
    _release_function = "urKernelRelease"

    def __init__(self, program: Program, name: str, signature=None, *, hidden_args=(),
                 work_group_memory: int = 0, required_local_size=None):
        if not isinstance(program, Program):
            raise TypeError(f"program must be a ur_cffi Program, not {type(program).__name__}")
        encoded = _checks.no_nul("kernel name", name)
        if signature is not None:
            if not _ordered_entries(signature):
                raise TypeError(f"signature of {name!r} must be a sequence of entries (a set "
                                "or dict has no parameter order), not "
                                f"{type(signature).__name__} {signature!r}")
            signature = tuple(_signature_entry(name, index, entry)
                              for index, entry in enumerate(signature))
        if not _ordered_entries(hidden_args):
            raise TypeError(f"hidden_args of {name!r} must be a sequence of values (a set or "
                            f"dict has no parameter order), not {type(hidden_args).__name__} "
                            f"{hidden_args!r}")
        hidden_args = tuple(hidden_args)
        for index, value in enumerate(hidden_args):
            if not (isinstance(value, Local) or dtypes.is_number(value)):
                raise TypeError(f"hidden_args[{index}] of {name!r} must be a numpy scalar or a "
                                f"ur_cffi.Local, not {type(value).__name__} {value!r}")
        work_group_memory = _checks.integer("work_group_memory", work_group_memory, minimum=0)
        largest = max(device.local_mem_size for device in program.context.devices) \
            if work_group_memory else 0
        if work_group_memory > largest:
            raise ValueError(f"work_group_memory {work_group_memory} of {name!r} is more than "
                             f"the context's devices have ({largest} bytes of local memory)")
        if required_local_size is not None:
            required_local_size = _trimmed(_sizes("required_local_size", required_local_size))
            most = min(device.max_work_group_size for device in program.context.devices)
            if math.prod(required_local_size) > most:
                raise ValueError(f"required_local_size {required_local_size} of {name!r} "
                                 f"exceeds the context's maximum work-group size {most}")
        properties = _compat.launch_properties(work_group_memory=work_group_memory)
        # What _pack checks each argument against: the hidden ones are typed by their values.
        declared = signature + (None,) * len(hidden_args) \
            if signature is not None and hidden_args else signature
        out = ffi.new("ur_kernel_handle_t *")
        with section:
            check(lib.urKernelCreate(program.handle, encoded, out), "urKernelCreate",
                  f"kernel name {name!r}")
            self._own(out[0], parents=(program,))
        self.program, self.name = program, name
        reported = query("urKernelGetInfo", out[0], ur_kernel_info_t.UR_KERNEL_INFO_NUM_ARGS)
        # Where the count comes from (adapter, binary or signature) is decided in signatures.py.
        self.num_args, self.argument_sizes, self.argument_source = signatures.argument_count(
            reported, signatures.adapter_reports_arguments(program.context.devices[0]),
            program.binary_entries, name, declared)
        if declared is not None:
            if len(declared) != self.num_args:
                raise ValueError(f"signature declares {len(signature)} "
                                 f"arguments{_hidden_note(hidden_args)}; kernel {name!r} "
                                 f"takes {self.num_args}")
        elif self.num_args is not None and len(hidden_args) > self.num_args:
            raise ValueError(f"{len(hidden_args)} hidden_args given; kernel {name!r} takes "
                             f"{self.num_args} arguments")
        parameters = program.kernel_parameters.get(name) if program.kernel_parameters else None
        if parameters is not None and len(parameters) != self.num_args:
            parameters = None  # the adapter counts otherwise: check nothing
        if parameters is not None and declared is not None:
            signatures.check_declared(name, declared, parameters)
        self.parameters = parameters
        if parameters is not None and hidden_args:
            declared = _hidden_pointers_declared(name, declared, hidden_args, parameters,
                                                 program.context)
        # (With a signature, the hidden arguments and bools only: check_declared did the rest.)
        self._argument_checks = signatures.argument_checks(
            parameters, len(signature) if signature is not None else 0) if parameters else ()
        self.signature, self._declared = signature, declared
        self.hidden_args = hidden_args
        self.work_group_memory, self._properties = work_group_memory, properties
        compiled_for = self._compiled_local_size()
        if required_local_size is not None and compiled_for not in (None, required_local_size):
            raise ValueError(f"required_local_size {required_local_size} of {name!r}: the "
                             f"runtime says it was compiled for work-groups of {compiled_for}")
        self._required_local_size = required_local_size or compiled_for
        self.timing = _durations.Timing()  # how long its launches take, measured by waits
        _interrupts.install()  # its launches hold Ctrl-C back without a section
        # (key, its identities function, launch arguments, the same for a launch without
        # an Event or a wait list, (held values, weak references to the views among its
        # arguments), held buffers, the positions of its USMArrays, a weak reference to its
        # queue, whether another argument was checked against memory a release can free:
        # see _refill)
        self._reusable: tuple = ((), None)

    def launch(self, queue: Queue, global_size, local_size, *args, wait_for=(),
               global_offset=None, event: bool = True) -> Event | None:
        """Enqueue the kernel on ``queue`` over ``global_size`` work-items in groups of
        ``local_size`` (None lets the runtime choose) and return its Event, or None with
        ``event=False`` (which saves making one).

        Raises ``TypeError`` or ``ValueError`` naming the argument or size at fault before
        anything is launched.  A launch like the previous one (same queue and sizes, the very
        same argument objects, no memory or queue released since) reuses its checked argument
        block; :meth:`prepare` launches one set of arguments repeatedly at the least cost.
        """
        if event is not True and event is not False:
            event = _checks.flag("event", event)
        reused = self._reusable
        try:
            reuse = global_offset is None and reused[0] == (
                id(queue), global_size, local_size, _handle.release_count, reused[1](args))
        except (TypeError, ValueError):  # nothing to reuse yet; sizes that do not compare;
            reuse = False               # another number of arguments
        if reuse and not (type(global_size) is int and type(local_size) in _INT_OR_NONE):
            reuse = _integer_sizes(global_size, local_size)  # 32.0 == 32
        if reuse:
            if wait_for is _NO_EVENTS and not event and not recording:
                launch_args, items = reused[3]  # (a call with * would not be inlined)
                _launch_without_event(self, queue, launch_args, items)
                if _interrupts.resend is not None:  # Ctrl-C during it: raised here (a loop
                    _interrupts.deliver_held()  # of launches would take each re-send in one)
                return None
            head, items = reused[2]
        elif global_offset is None and len(reused) > 2 and \
                (refilled := self._refill(queue, global_size, local_size, args, reused)):
            self._reusable = refilled  # (refilled holds its block until the launch is made)
            head, items = refilled[2]
        else:
            call_args, held = self._check_and_pack(queue, global_size, local_size, args,
                                                   global_offset)
            if (global_offset is None and type(global_size) in _IMMUTABLE_SIZES
                    and type(local_size) in _IMMUTABLE_SIZES
                    and all(isinstance(arg, _IMMUTABLE) for arg in args)):
                # Ids of released memory or queues are caught by the release count; values are
                # held so that their ids stay theirs, and a view that goes (uncounted: it could
                # give its id to a view elsewhere) drops the block first, not kept alive by it.
                identities = _identities(len(args))
                key = (id(queue), global_size, local_size, held[0], identities(args))
                kept, arrays, release_checked = [], [], False
                for index, arg in enumerate(args):
                    if type(arg) is USMArray:
                        arrays.append(index)
                    elif isinstance(arg, _handle.Resource):
                        release_checked = True  # (a Buffer: its id guarded by releases only)
                    else:
                        kept.append(arg)
                        if self._declared and isinstance(self._declared[index], str) and \
                                self._declared[index] == "ptr":
                            release_checked = True  # (an address, checked as USM)
                self._reusable = (key, identities, call_args, _without_event(call_args),
                                  (tuple(kept), self._held_views(args, arrays)), held[1],
                                  tuple(arrays), weakref.ref(queue), release_checked)
            head, items = call_args
        launched = _launch(self, queue, head, items, wait_for, event, args)
        if _interrupts.resend is not None:  # Ctrl-C during it: raised here
            _interrupts.deliver_held()
        return launched

    def prepare(self, queue: Queue, global_size, local_size, *args,
                global_offset=None) -> PreparedLaunch:
        """Check a launch once and return a :class:`PreparedLaunch` that enqueues it each
        time it is called.  It holds the queue and the arguments (and so their memory); their
        values are packed now (a ctypes value changed later is not seen)."""
        call_args, held = self._check_and_pack(queue, global_size, local_size, args,
                                               global_offset)
        return PreparedLaunch(self, queue, args, call_args, held)

    @property
    def required_local_size(self) -> tuple | None:
        """The only work-group size the kernel computes right in (trailing 1s left out), or
        None: given at creation, or reported by the runtime."""
        return self._required_local_size

    def group_info(self, prop: ur_kernel_group_info_t, device=None):
        """Any ``ur_kernel_group_info_t`` property of the kernel on ``device`` (None: the
        context's device, where it has one), decoded to its documented Python type."""
        if not isinstance(prop, ur_kernel_group_info_t):
            raise TypeError(f"group_info takes a ur_kernel_group_info_t, not "
                            f"{type(prop).__name__} {prop!r}")
        return query("urKernelGetGroupInfo", self.handle, self._device(device).handle, prop)

    def sub_group_info(self, prop: ur_kernel_sub_group_info_t, device=None):
        """Any ``ur_kernel_sub_group_info_t`` property of the kernel on ``device`` (None: the
        context's device, where it has one)."""
        if not isinstance(prop, ur_kernel_sub_group_info_t):
            raise TypeError(f"sub_group_info takes a ur_kernel_sub_group_info_t, not "
                            f"{type(prop).__name__} {prop!r}")
        return query("urKernelGetSubGroupInfo", self.handle, self._device(device).handle, prop)

    def _device(self, device):
        devices = self.program.context.devices
        if device is None:
            if len(devices) > 1:
                raise ValueError(f"kernel {self.name!r}: its context has {len(devices)} "
                                 "devices; say which with device=")
            return devices[0]
        if not any(device is known for known in devices):
            raise ValueError(f"kernel {self.name!r}: device {device!r} is not one of its "
                             "context's")
        return device

    def _compiled_local_size(self) -> tuple | None:
        """The work-group size the runtime says the kernel was compiled for, or None."""
        sizes = set()
        for device in self.program.context.devices:
            try:
                size = self.group_info(
                    ur_kernel_group_info_t.UR_KERNEL_GROUP_INFO_COMPILE_WORK_GROUP_SIZE, device)
            except URError:  # an adapter that does not say
                continue
            if any(size):
                sizes.add(_trimmed(tuple(size)))
        return sizes.pop() if len(sizes) == 1 else None

    def _local_sizes(self, local_size, global_sizes: tuple, device) -> tuple | None:
        """The local sizes of a launch over ``global_sizes`` on ``device`` for ``local_size``,
        checked: the kernel's ``required_local_size`` where it has one (None takes it), in as
        many dimensions, dividing the global sizes, within the device's work-group size."""
        dims, required = len(global_sizes), self._required_local_size
        name = "local_size"
        if local_size is None:
            if required is None:
                return None
            if len(required) > dims:
                raise ValueError(f"kernel {self.name!r} runs in work-groups of {required} "
                                 f"(its required_local_size), which a launch in {dims} "
                                 "dimension(s) cannot give")
            local_sizes, name = required + (1,) * (dims - len(required)), "required_local_size"
        else:
            local_sizes = _sizes("local_size", local_size)
            if required is not None and _trimmed(local_sizes) != required:
                raise ValueError(f"local_size {local_sizes} of kernel {self.name!r}: it was "
                                 f"compiled for work-groups of {required} (its "
                                 "required_local_size) and computes wrong results in others")
        if len(local_sizes) != dims:
            raise ValueError(f"{name} {local_sizes} and global_size {global_sizes} differ in "
                             "dimensions")
        if any(g % s for g, s in zip(global_sizes, local_sizes)):
            raise ValueError(f"{name} {local_sizes} does not divide global_size {global_sizes}")
        limit = device.max_work_group_size
        if math.prod(local_sizes) > limit:
            raise ValueError(f"{name} {local_sizes} exceeds the device's maximum work-group "
                             f"size {limit}")
        return local_sizes

    def _refill(self, queue: Queue, global_size, local_size, args, reused: tuple):
        """The reusable entry of a launch like the one of ``reused`` (``self._reusable``) but
        with other USMArrays of the queue's context where that one had USMArrays, the rest
        the very same objects: its checked block copied with their addresses written in.
        None where the launch differs otherwise."""
        key, identities, (head, items), _, kept, (block, values), arrays, queue_ref, \
            release_checked = reused
        released = _handle.release_count
        try:
            if queue_ref() is not queue or queue._handle is None or \
                    (key[1], key[2]) != (global_size, local_size) or \
                    (release_checked and key[3] != released):
                return None
            given = identities(args)
        except (TypeError, ValueError):  # sizes that do not compare; another number of arguments
            return None
        if not _integer_sizes(global_size, local_size):
            return None
        for index, (now, then) in enumerate(zip(given, key[4])):
            if now != then and index not in arrays:
                return None
        context, pointers = queue.context, []
        for index in arrays:
            arg = args[index]
            if type(arg) is not USMArray or arg.context is not context:
                return None
            pointers.append((index, arg.data_ptr()))
        copied, arguments = _compat.refilled_arguments(block, pointers)
        call_args = ((*head[:5], arguments, head[6]), items)
        return ((*key[:3], released, given), identities, call_args, _without_event(call_args),
                (kept[0], self._held_views(args, arrays)), (copied, values), arrays, queue_ref,
                release_checked)

    def _held_views(self, args, arrays) -> tuple:
        """Weak references to the views among ``args`` (at positions ``arrays``) whose going
        drops the reusable block: a view is not counted as released, and another could take
        its id."""
        views, forget = [], None
        for index in arrays:
            if args[index]._base is not None:
                forget = forget or _forgetting(self)
                views.append(weakref.ref(args[index], forget))
        return tuple(views)

    def _checked_sizes(self, device, global_size, local_size, global_offset,
                       dims: int | None = None) -> tuple:
        """``(global sizes, local sizes or None, offsets or None)`` of a launch of this kernel
        on ``device``, checked (``dims``: the dimensions it must have, a recorded launch's)."""
        global_sizes = _sizes("global_size", global_size)
        if dims is not None and len(global_sizes) != dims:
            raise ValueError(f"global_size {global_sizes}: the launch was recorded in {dims} "
                             "dimension(s)")
        local_sizes = self._local_sizes(local_size, global_sizes, device)
        device.check_launch_size("global_size", global_sizes, local_sizes)
        if global_offset is None:
            return global_sizes, local_sizes, None
        offsets = _sizes("global_offset", global_offset, smallest=0)
        if len(offsets) != len(global_sizes):  # UR reads one offset per dimension
            raise ValueError(f"global_offset {offsets} and global_size {global_sizes} differ "
                             "in dimensions")
        if any(o + g > _SIZE_MAX for o, g in zip(offsets, global_sizes)):
            raise ValueError(f"global_offset {offsets} + global_size {global_sizes} exceeds "
                             "size_t: the work-item ids would wrap around")
        return global_sizes, local_sizes, offsets

    def _check_and_pack(self, queue: Queue, global_size, local_size, args,
                        global_offset) -> tuple:
        """``((the launch's arguments after the kernel (``_compat.enqueue_launch``) up to its
        wait list, its work-items), (release count when checked, memory they point into))``."""
        self.handle  # noqa: B018 - raises if closed
        if not isinstance(queue, Queue):
            raise TypeError(f"kernel {self.name!r}: queue must be a ur_cffi Queue, not "
                            f"{type(queue).__name__} {queue!r}")
        queue.handle  # noqa: B018
        if self.hidden_args:
            args = (*args, *self.hidden_args)
        if len(args) != self.num_args:
            raise signatures.count_error(self, len(args) - len(self.hidden_args))
        if queue.context is not self.program.context:
            raise ValueError(f"kernel {self.name!r} belongs to another context than {queue!r}")
        global_sizes, local_sizes, offsets = self._checked_sizes(queue.device, global_size,
                                                                 local_size, global_offset)
        local_array = ffi.NULL if local_sizes is None else _compat.launch_sizes(local_sizes, 1)
        offset_array = ffi.NULL if offsets is None else _compat.launch_sizes(offsets, 0)
        released = _handle.release_count
        block, arguments, value_buffers = self._pack(queue, args)
        call_args = (len(global_sizes), offset_array, _compat.launch_sizes(global_sizes, 1),
                     local_array, len(args), arguments, self._properties)
        return (call_args, math.prod(global_sizes)), (released, (block, value_buffers))

    def _pack(self, queue: Queue, args) -> tuple:
        """``(argument block, its argument list for the launch, the by-value buffers it points
        into)`` (see ``_compat.new_arguments``)."""
        block, arguments, words = _compat.new_arguments(len(args))
        value_buffers, locals_given = [], []
        for index, arg in enumerate(args):
            declared = self._declared[index] if self._declared else None
            if isinstance(arg, USMArray):
                if not _accepts(declared, "ptr"):
                    raise TypeError(f"argument {index} of {self.name!r} is declared {declared}, "
                                    "got a USMArray")
                if arg.context is not queue.context:
                    raise ValueError(f"argument {index} of {self.name!r}: the USMArray belongs "
                                     "to another context than the queue")
                write_argument(words, index, POINTER, _POINTER_SIZE, arg.data_ptr())
            elif isinstance(arg, Local):
                if not _accepts(declared, "local"):
                    raise TypeError(f"argument {index} of {self.name!r} is declared {declared}, "
                                    "got Local")
                if arg.nbytes > queue.device.local_mem_size:
                    raise ValueError(f"argument {index} of {self.name!r}: Local({arg.nbytes}) "
                                     "exceeds the device's local memory of "
                                     f"{queue.device.local_mem_size} bytes")
                locals_given.append((index, arg.nbytes))
                write_argument(words, index, LOCAL, arg.nbytes)
            elif isinstance(arg, Buffer):
                if not _accepts(declared, "mem"):
                    raise TypeError(f"argument {index} of {self.name!r} is declared {declared}, "
                                    "got a Buffer")
                if arg.context is not queue.context:
                    raise ValueError(f"argument {index} of {self.name!r}: the Buffer belongs "
                                     "to another context than the queue")
                write_argument(words, index, MEM_OBJ, _POINTER_SIZE, _address(arg.handle))
            elif declared == "ptr" and isinstance(arg, (int, np.integer)):
                write_argument(words, index, POINTER, _POINTER_SIZE,
                               self._address_argument(index, arg, queue))
            else:
                buffer, size = _value_buffer(self.name, index, arg, declared)
                value_buffers.append(buffer)
                write_argument(words, index, VALUE, size, _address(buffer))
        if locals_given:
            self._check_local_total(locals_given, queue.device.local_mem_size)
        if self.argument_sizes is not None:
            signatures.check_sizes(self, words, len(args))
        if self._argument_checks:
            signatures.check_arguments(self, args, words)
        return block, arguments, tuple(value_buffers)


    def _check_local_total(self, locals_given: list, local_mem_size: int) -> None:
        """Raise if the ``(index, bytes)`` of the Local arguments and ``work_group_memory``
        together exceed the device's local memory (the runtime's refusal names nothing)."""
        total = sum(nbytes for _, nbytes in locals_given) + self.work_group_memory
        if total > local_mem_size:
            parts = [f"argument {index}: Local({nbytes})" for index, nbytes in locals_given]
            if self.work_group_memory:
                parts.append(f"work_group_memory={self.work_group_memory}")
            raise ValueError(f"kernel {self.name!r}: local memory of {total} bytes ("
                             f"{', '.join(parts)}) exceeds the device's {local_mem_size} bytes")

    def _address_argument(self, index: int, arg, queue: Queue) -> int:
        """An integer given for a ``"ptr"`` argument: 0 (a null pointer) or an address UR
        knows as USM memory of the queue's context."""
        address = _checks.integer(f"argument {index} of {self.name!r} (a pointer)", arg)
        if address and not is_usm(queue.context, address):
            raise ValueError(f"argument {index} of {self.name!r}: address 0x{address:x} is not "
                             "USM memory of the launch queue's context")
        return address


def _hidden_pointers_declared(name: str, declared, hidden_args: tuple, parameters: tuple,
                              context):
    """``declared`` with ``"ptr"`` for each of ``hidden_args`` that is an integer of a
    pointer's size given for a pointer parameter (a USM pointer argument, as a ``"ptr"``
    argument's: as a value, OpenCL took a non-zero one for a memory object and refused the
    launch); raises ``ValueError`` naming ``hidden_args[i]`` where it is neither 0 (a null
    scratch pointer) nor USM memory of ``context``."""
    first = len(parameters) - len(hidden_args)
    hidden = []
    for index, value in enumerate(hidden_args):
        pointer = parameters[first + index] == "ptr" and isinstance(value, np.integer) and \
            value.itemsize == _POINTER_SIZE
        if pointer and value and not is_usm(context, int(value)):
            raise ValueError(f"hidden_args[{index}] of {name!r} (argument {first + index}, a "
                             f"pointer): address 0x{int(value):x} is not USM memory of the "
                             "kernel's context")
        hidden.append("ptr" if pointer else None)
    if "ptr" not in hidden:
        return declared
    return (declared[:first] if declared is not None else (None,) * first) + tuple(hidden)


def integer_addresses(kernel: Kernel, args: tuple, launcher=None) -> tuple:
    """``(argument name, address)`` of each pointer argument of ``args`` given as an integer
    (checked when the launch was): a launch kept to run later (prepared, or recorded into a
    Graph) checks them again after a release (:func:`check_integer_addresses`), as their
    memory may be freed by then.  ``launcher``: the ``ur_cffi.triton`` launcher whose rules
    ``args`` follow."""
    if launcher is not None:
        return launcher.integer_addresses(args)
    declared = kernel._declared
    return tuple((str(index), int(arg)) for index, arg in enumerate(args)
                 if declared and declared[index] == "ptr" and isinstance(arg, (int, np.integer)))


def check_integer_addresses(kernel: Kernel, context, addresses: tuple) -> None:
    """Raise ``ValueError`` naming the argument where one of ``addresses``
    (:func:`integer_addresses`) is no longer USM memory of ``context``."""
    for name, address in addresses:
        if address and not is_usm(context, address):
            raise ValueError(f"argument {name} of kernel {kernel.name!r}: address 0x{address:x} "
                             "is no longer USM memory of the context (freed since the launch "
                             "was prepared or recorded)")


def _trimmed(sizes: tuple) -> tuple:
    """``sizes`` without trailing 1s (at least one left): ``(128, 1, 1)`` -> ``(128,)``."""
    while len(sizes) > 1 and sizes[-1] == 1:
        sizes = sizes[:-1]
    return sizes


def _address(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata))


class PreparedLaunch:
    """One kernel launch on one queue, checked once (:meth:`Kernel.prepare`); each call
    enqueues it.  It holds its kernel, queue and arguments."""

    __slots__ = ("kernel", "queue", "args", "launcher", "_call_args", "_buffers", "_released",
                 "_launch_args", "_memories", "_addresses")

    def __init__(self, kernel: Kernel, queue: Queue, args: tuple, call_args: tuple,
                 held: tuple, launcher=None):
        """``call_args``: ``(the arguments of the launch after the kernel up to its wait list,
        its work-items)``; ``launcher``: the ``ur_cffi.triton`` launcher that prepared it (a
        Graph updates its launch by Triton's rules)."""
        self.kernel, self.queue, self.args, self.launcher = kernel, queue, args, launcher
        self._call_args = call_args
        self._launch_args = _without_event(call_args)
        self._released, self._buffers = held
        self._memories = tuple(map(memory_of, args))  # (an array, or one under a wrapper)
        self._addresses = integer_addresses(kernel, args, launcher)

    def __call__(self, *, wait_for=(), event: bool = True) -> Event | None:
        """Enqueue the launch; returns its Event, or None with ``event=False``.  Raises
        ``ClosedError`` if an argument was closed since :meth:`Kernel.prepare`."""
        if event is not True and event is not False:
            event = _checks.flag("event", event)
        released = _handle.release_count  # (read before the checks: a close during them counts)
        if self._released != released:
            for index, memory in enumerate(self._memories):
                if memory is not None and memory.closed:
                    raise _handle.ClosedError(
                        f"prepared launch of {self.kernel.name!r}, argument "
                        f"{self._argument_name(index)}: {type(memory).__name__} is closed")
            check_integer_addresses(self.kernel, self.queue.context, self._addresses)
            self._released = released
        if wait_for is _NO_EVENTS and not event and not recording:
            launch_args, items = self._launch_args  # (a call with * would not be inlined)
            _launch_without_event(self.kernel, self.queue, launch_args, items)
            if _interrupts.resend is not None:  # Ctrl-C during it: raised here
                _interrupts.deliver_held()
            return None
        head, items = self._call_args
        launched = _launch(self.kernel, self.queue, head, items, wait_for, event, self.args,
                           self.launcher, self._buffers)
        if _interrupts.resend is not None:  # Ctrl-C during it: raised here
            _interrupts.deliver_held()
        return launched

    def _argument_name(self, index: int) -> str:
        """Argument ``index`` as an error names it: by its parameter's name for a Triton
        launch (its arguments are Triton's, tuples flattened, constexprs included)."""
        if self.launcher is not None:
            for _, position, name, _ in self.launcher.entries:
                if position == index:
                    return repr(name)
        return str(index)

    def __repr__(self) -> str:
        return f"<PreparedLaunch of {self.kernel.name!r} on {self.queue!r}>"


@hold_back_in  # Ctrl-C waits until the Event owns the launch's event (_interrupts)
def _launch(kernel: Kernel, queue: Queue, call_args: tuple, items: int, wait_for, event: bool,
            args: tuple = (), launcher=None, keep=None):
    """Enqueue with ``call_args``, the launch arguments after the kernel up to its wait list
    (``_compat.enqueue_launch``), after ``wait_for``, with an Event if ``event``.  ``items``:
    its work-items; ``args``: the objects ``call_args`` were packed from (a graph recording
    the launch keeps them, and ``keep``: what a prepared launch's block points into)."""
    if recording and queue in recording:  # a ur_cffi.Graph records it instead (graph.py)
        return recording[queue].record_launch(kernel, queue, call_args, args, wait_for, event,
                                              launcher, keep)
    if wait_for is _NO_EVENTS:
        count, events, timing = 0, _NULL, kernel.timing
    else:
        count, events = wait_list(wait_for, queue.context)
        timing = kernel.timing if not count else None  # waits on other work: not predictable
    handle = None
    try:
        with raw_enqueue_lock:  # also guards _event_out
            result = _compat.enqueue_launch(queue._handle, kernel._handle, *call_args, count,
                                            events, _event_out if event else _NULL)
            if not result:
                window = queue._window  # queue._note_work, inlined: a hot path
                if not window:
                    queue._window_start = perf_counter()
                window[timing] = window.get(timing, 0) + items
                if event:
                    handle = _event_out[0]
        if result:
            _refused(kernel, result, call_args)
        if not event:
            queue._last_event = None  # Queue.finish has no event of the latest command
            return None
        # UR copied the argument values at enqueue.  Event.__init__, inlined: a hot path.
        if _orphans:
            release_orphans()
        made = _new_event(Event)
        made._handle = handle
        made._serial = serial = next(_serials)
        _events[serial] = handle
        made.queue = queue
        queue._last_event = serial
        return made
    except BaseException as error:
        if handle is not None:  # interrupted (Ctrl-C) before the Event owned the launch's event
            adopt(handle)
        if isinstance(error, TypeError):
            _raise_if_closed(kernel, queue)
        raise


@hold_back_in  # Ctrl-C waits until the queue's window has the launch (_interrupts)
def _launch_without_event(kernel: Kernel, queue: Queue, launch_args: tuple, items: int):
    """:func:`_launch` with no wait list and no Event, not recorded: the fast paths' own.
    ``launch_args``: :func:`_without_event` of the launch's arguments."""
    try:
        with raw_enqueue_lock:
            result = _compat.enqueue_launch(queue._handle, kernel._handle, *launch_args)
            if not result:
                window = queue._window  # queue._note_work, inlined: a hot path
                if not window:
                    queue._window_start = perf_counter()
                timing = kernel.timing
                window[timing] = window.get(timing, 0) + items
    except TypeError:
        _raise_if_closed(kernel, queue)
        raise
    if result:
        _refused(kernel, result, launch_args)
    queue._last_event = None  # Queue.finish has no event of the latest command


def _without_event(call_args: tuple) -> tuple:
    """``(call_args, items)`` of a launch -> ``(the arguments of _launch_without_event)``."""
    head, items = call_args
    return (*head, 0, _NULL, _NULL), items


def _refused(kernel: Kernel, result: int, call_args: tuple) -> None:
    """Raise for the launch ``call_args`` (its arguments after the kernel) UR refused."""
    detail = f"kernel {kernel.name!r}"
    if result in _SHAPE_REFUSED:
        detail += _launch_shape(call_args)
    elif result == _ARGUMENT_SIZE_MISMATCH and kernel.signature is not None:
        detail += (": an argument's size differs from its parameter's; check the widths the "
                   "signature declares (int32 or int64, float32 or float64)")
    elif result == _ARGUMENT_SIZE_MISMATCH:
        detail += (": an argument's size differs from its parameter's; pass numpy scalars of "
                   "the parameter types (np.float32(x)) or declare a signature")
    elif result in _ARGUMENT_REFUSED and kernel.signature is None:
        detail += (": an argument is of another kind than its parameter (memory for a value, "
                   "a value or Local for a pointer...); without a signature ur_cffi cannot "
                   "tell which: declare one (Program.kernel(name, signature=[...])) to have "
                   "each argument checked by name")
    if kernel.work_group_memory:
        detail += (f" (with work_group_memory={kernel.work_group_memory} bytes, which some "
                   "adapters refuse, as the OpenCL one does: a Local argument works everywhere)")
    check(result, _compat.LAUNCH, detail)


def _raise_if_closed(kernel: Kernel, queue: Queue) -> None:
    """Raise ``ClosedError`` if the queue or the kernel has no handle (closed, or inherited
    across fork()): why an enqueue was given None."""
    if queue._handle is None or kernel._handle is None:
        queue.handle, kernel.handle  # noqa: B018


_event_out = ffi.new("ur_event_handle_t *")  # every launch's, under the enqueue lock
_NO_EVENTS = ()  # every launch's default wait_for
_ARGUMENT_SIZE_MISMATCH = int(ur_result_t.UR_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE)
_ARGUMENT_REFUSED = {int(ur_result_t.UR_RESULT_ERROR_INVALID_ARGUMENT),
                     int(ur_result_t.UR_RESULT_ERROR_INVALID_MEM_OBJECT)}
_SHAPE_REFUSED = {int(ur_result_t.UR_RESULT_ERROR_INVALID_VALUE),
                  int(ur_result_t.UR_RESULT_ERROR_INVALID_WORK_GROUP_SIZE),
                  int(ur_result_t.UR_RESULT_ERROR_INVALID_WORK_ITEM_SIZE)}


def _forgetting(kernel: Kernel):
    """A weak reference's callback that drops ``kernel``'s reusable argument block."""
    kernel_ref = weakref.ref(kernel)

    def forget(_reference) -> None:
        kernel = kernel_ref()
        if kernel is not None:
            kernel._reusable = ((), None)

    return forget


@functools.cache
def _identities(count: int):
    """``args -> (id(args[0]), ..., id(args[count - 1]))``, raising ``ValueError`` for
    another number of arguments: written out, as it costs half of ``(*map(id, args),)`` on
    the path of every launch that reuses its argument block."""
    names = [f"a{index}" for index in range(count)]
    source = (f"def identities(args):\n    ({''.join(n + ', ' for n in names)}) = args\n"
              f"    return ({''.join(f'id({n}), ' for n in names)})\n")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - source made above from integers only
    return namespace["identities"]


def _launch_shape(call_args) -> str:
    """What a refused launch asked for: its global_size and local_size (the CUDA adapter, for
    one, answers INVALID_VALUE to a work-group shape the kernel was not compiled for)."""
    dims, _, global_sizes, local_sizes = call_args[:4]
    local = tuple(local_sizes[0:dims]) if local_sizes != ffi.NULL else "None (the adapter's " \
        "choice)"
    return (f"; this launch: global_size {tuple(global_sizes[0:dims])}, local_size {local} "
            "(a kernel compiled for one work-group size, as Triton's are, takes no other)")


_NULL = ffi.NULL
# ctypes values that are numbers (``_type_``: struct's codes), not characters or addresses.
_NUMERIC_CTYPES = frozenset("?bBhHiIlLqQfd")

# Arguments and sizes whose value cannot change while they are the same object (a ctypes
# value or a list can).
_IMMUTABLE = (USMArray, Buffer, int, float, np.generic, Local)
_IMMUTABLE_SIZES = (int, tuple, type(None))
_INT_OR_NONE = frozenset((int, type(None)))


def _integer_sizes(global_size, local_size) -> bool:
    """Whether both sizes hold integers only (32.0 == 32, but a float is refused)."""
    return type(global_size) is int and type(local_size) in _INT_OR_NONE or (
        _exact_sizes(global_size) and _exact_sizes(local_size))


def _exact_sizes(sizes) -> bool:
    """Whether ``sizes`` (int, tuple or None) holds integers only, as the checks made when
    the reused block was packed required: an equal float or bool must meet them again."""
    return type(sizes) in _INT_OR_NONE or type(sizes) is tuple and all(
        type(size) is int or isinstance(size, np.integer)
        and not isinstance(size, np.timedelta64) for size in sizes)


def _ordered_entries(entries) -> bool:
    """Whether ``entries`` (a signature, hidden arguments) is an iterable with an order that
    is the parameters' own: not text, a set or a mapping."""
    return hasattr(entries, "__iter__") and not isinstance(
        entries, (str, bytes, collections.abc.Set, collections.abc.Mapping))


def _value_buffer(kernel: str, index: int, arg, declared) -> tuple:
    """``(cdata, size)`` holding a by-value argument in its declared or its own type."""
    if isinstance(declared, np.dtype) and not isinstance(arg, (int, float, np.generic,
                                                                ctypes._SimpleCData)):
        raise TypeError(f"argument {index} of {kernel!r} is declared {declared}, got "
                        f"{type(arg).__name__} {arg!r}")
    ctype = _C_SCALARS.get(declared) if type(arg) in (int, float) else None
    if ctype is not None and not (type(arg) is float and declared.kind in "biu"):
        try:
            buffer = ffi.new(ctype, arg)
        except OverflowError:
            buffer = None
        if buffer is None or (declared.kind == "f" and math.isinf(buffer[0])
                              and not (type(arg) is float and math.isinf(arg))):
            raise ValueError(f"argument {index} of {kernel!r}: {arg!r} does not fit in "
                             f"{declared}")
        return buffer, declared.itemsize
    data = _value_bytes(kernel, index, arg, declared)
    return ffi.new("char[]", data), len(data)


def _ctypes_number(value: ctypes._SimpleCData) -> np.generic | None:
    """A numeric ctypes value as a numpy scalar of its type in this machine's byte order (a
    ``__ctype_be__`` value holds its bytes swapped); None for characters and addresses."""
    if value._type_ not in _NUMERIC_CTYPES:
        return None
    return np.dtype(type(value)).newbyteorder("=").type(value.value)


def _value_bytes(kernel: str, index: int, arg, declared) -> bytes:
    """The bytes of a by-value argument, in its declared or its own type."""
    where = f"argument {index} of {kernel!r}"
    if isinstance(declared, np.dtype):
        if isinstance(arg, (bool, np.bool_)) and declared.kind != "b":
            raise TypeError(f"{where} is declared {declared}, got bool {arg!r}")
        if type(arg) is float and declared.kind in "biu":  # numpy would truncate it
            raise TypeError(f"{where} is declared {declared}, got float {arg!r}")
        given = type(arg).__name__
        if isinstance(arg, ctypes._SimpleCData):
            arg = _ctypes_number(arg)
            if arg is None:
                raise TypeError(f"{where} is declared {declared}, got {given}, which is no "
                                "number")
        if isinstance(arg, np.generic):
            if arg.dtype != declared:
                raise TypeError(f"{where} is declared {declared}, got {given} ({arg.dtype})")
            return arg.tobytes()
        return _checks.scalar(where, arg, declared).tobytes()
    if declared is not None:
        raise TypeError(f"{where} is declared {declared}, got {type(arg).__name__}")
    if dtypes.is_number(arg):
        return arg.tobytes()
    number = _ctypes_number(arg) if isinstance(arg, ctypes._SimpleCData) else None
    if number is not None:
        return number.tobytes()
    raise TypeError(f"{where}: {type(arg).__name__} {arg!r} has no C type; pass a numeric "
                    "numpy scalar (np.float32(x)), a numeric ctypes value, or declare a "
                    "signature")
