"""Programs (from SPIR-V IL or a native binary) and kernels, with checked launches."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import _handle, _release, spirv
from ._release import LOCAL, MEM_OBJ, POINTER, VALUE, write_argument
from ._ur import ffi, lib
from .enums import ur_kernel_info_t, ur_program_build_info_t, ur_program_info_t
from .errors import URError, check
from .info import query
from .memory import Buffer, USMArray
from .queue import Event, Queue, enqueue_lock, wait_list

_POINTER_SIZE = ffi.sizeof("void *")

# Declared dtypes a Python int or float converts to through cffi (which range-checks ints).
_C_SCALARS = {np.dtype(name): f"{ctype} *" for name, ctype in (
    ("int8", "int8_t"), ("int16", "int16_t"), ("int32", "int32_t"), ("int64", "int64_t"),
    ("uint8", "uint8_t"), ("uint16", "uint16_t"), ("uint32", "uint32_t"),
    ("uint64", "uint64_t"), ("float32", "float"), ("float64", "double"))}


class Program(_handle.Resource):
    """A built UR program.  Make one with :meth:`from_il` or :meth:`from_binary`."""

    __slots__ = ("context",)
    _release_function = "urProgramRelease"

    def __init__(self, context, handle):
        """Take ownership of a ``ur_program_handle_t`` (use the factories instead)."""
        self.context = context
        self._own(handle, parents=(context,))

    @classmethod
    def from_il(cls, context, il: bytes, options: str = "") -> Program:
        """Create from SPIR-V and build.  A malformed SPIR-V module raises ``ValueError``
        before UR sees it; a failed build raises with the build log in the message."""
        il = bytes(il)
        if il[:4] in (spirv.MAGIC.to_bytes(4, "little"), spirv.MAGIC.to_bytes(4, "big")):
            spirv.validate(il)  # the CPU runtime crashes on truncated modules
        out = ffi.new("ur_program_handle_t *")
        check(lib.urProgramCreateWithIL(context.handle, il, len(il), ffi.NULL, out),
              "urProgramCreateWithIL")
        program = cls(context, out[0])
        program.build(options)
        return program

    @classmethod
    def from_binary(cls, context, binary: bytes, options: str = "", device=None) -> Program:
        """Create from a native binary (e.g. :attr:`binaries` of an earlier build) and build."""
        device = device or context.devices[0]
        program = cls(context, _release.program_from_binary(context.handle, device.handle,
                                                            bytes(binary)))
        program.build(options)
        return program

    def build(self, options: str = "") -> None:
        """``urProgramBuild``; on failure the raised error's message carries the build log."""
        try:
            check(lib.urProgramBuild(self.context.handle, self.handle, options.encode()),
                  "urProgramBuild")
        except URError as error:
            logs = "\n".join(self.build_log(device) for device in self.context.devices)
            raise type(error)(error.result, error.function, f"build log:\n{logs.strip()}") \
                from None

    def build_log(self, device=None) -> str:
        """The compiler's log for ``device`` (default: the context's first device)."""
        device = device or self.context.devices[0]
        return query("urProgramGetBuildInfo", self.handle, device.handle,
                     ur_program_build_info_t.UR_PROGRAM_BUILD_INFO_LOG)

    @property
    def kernel_names(self) -> list[str]:
        """The names of the program's kernels."""
        names = query("urProgramGetInfo", self.handle,
                      ur_program_info_t.UR_PROGRAM_INFO_KERNEL_NAMES)
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

    def kernel(self, name: str, signature=None) -> Kernel:
        """The kernel called ``name``; see :class:`Kernel` for ``signature``."""
        return Kernel(self, name, signature)


class Local:
    """A kernel argument of ``nbytes`` of work-group local memory."""

    __slots__ = ("_nbytes",)

    def __init__(self, nbytes: int):
        if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise ValueError(f"Local memory size must be a positive integer, not {nbytes!r}")
        self._nbytes = int(nbytes)

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
        sizes = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    except TypeError:
        raise TypeError(f"{name} {value!r} must be an integer or 1 to 3 integers") from None
    if not 1 <= len(sizes) <= 3 or not all(isinstance(s, (int, np.integer))
                                           and smallest <= s <= _SIZE_MAX for s in sizes):
        kind = "positive" if smallest > 0 else "non-negative"
        raise ValueError(f"{name} {value!r} must be 1 to 3 {kind} integers")
    return tuple(int(s) for s in sizes)


def _accepts(declared, kind: str) -> bool:
    """Whether signature entry ``declared`` admits an argument of ``kind`` (no signature: yes).

    Not ``declared in (None, kind)``: numpy reads ``np.dtype("float64") == None`` as true.
    """
    return declared is None or (isinstance(declared, str) and declared == kind)


class Kernel(_handle.Resource):
    """A kernel of a built program.

    ``signature``, if given, declares each argument: ``"ptr"`` (a USMArray or an integer
    device address), ``"local"`` (a :class:`Local`), ``"mem"`` (a :class:`Buffer`), or a
    numpy dtype name (``"float32"``, ``"int64"``, ...) for a value.  Without it, values must
    carry their own type: numpy scalars or ctypes values.
    """

    __slots__ = ("program", "name", "num_args", "signature", "_reusable")
    _release_function = "urKernelRelease"

    def __init__(self, program: Program, name: str, signature=None):
        out = ffi.new("ur_kernel_handle_t *")
        check(lib.urKernelCreate(program.handle, name.encode(), out), "urKernelCreate",
              f"kernel name {name!r}")
        self._own(out[0], parents=(program,))
        self.program, self.name = program, name
        self.num_args = query("urKernelGetInfo", out[0], ur_kernel_info_t.UR_KERNEL_INFO_NUM_ARGS)
        if signature is not None:
            signature = tuple(s if s in ("ptr", "local", "mem") else np.dtype(s)
                              for s in signature)
            if len(signature) != self.num_args:
                raise ValueError(f"signature declares {len(signature)} arguments; kernel "
                                 f"{name!r} takes {self.num_args}")
        self.signature = signature
        self._reusable: tuple = ((),)  # (key, launch arguments, held values, held buffers)

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
        reused = self._reusable
        try:
            reuse = global_offset is None and reused[0] == (
                id(queue), global_size, local_size, _handle.released, *map(id, args))
        except (TypeError, ValueError):  # nothing to reuse yet; sizes that do not compare
            reuse = False
        if reuse:
            call_args = reused[1]
        else:
            call_args, held = self._check_and_pack(queue, global_size, local_size, args,
                                                   global_offset)
            if (global_offset is None and type(global_size) in _IMMUTABLE_SIZES
                    and type(local_size) in _IMMUTABLE_SIZES
                    and all(isinstance(arg, _IMMUTABLE) for arg in args)):
                # Ids of released memory or queues are caught by the release count; the
                # other arguments are held so that their ids stay theirs.
                key = (id(queue), global_size, local_size, held[0], *map(id, args))
                self._reusable = (key, call_args, tuple(
                    arg for arg in args if not isinstance(arg, _handle.Resource)), held[1])
        return _launch(self, queue, call_args, wait_for, event)

    def prepare(self, queue: Queue, global_size, local_size, *args,
                global_offset=None) -> PreparedLaunch:
        """Check a launch once and return a :class:`PreparedLaunch` that enqueues it each
        time it is called.  It holds the queue and the arguments (and so their memory)."""
        call_args, held = self._check_and_pack(queue, global_size, local_size, args,
                                               global_offset)
        return PreparedLaunch(self, queue, args, call_args, held)

    def _check_and_pack(self, queue: Queue, global_size, local_size, args,
                        global_offset) -> tuple:
        """``(the launch's arguments after the kernel (``_release.enqueue_launch``), with no
        wait list and no event, (release count when checked, memory they point into))``."""
        self.handle  # noqa: B018 - raises if closed
        queue.handle  # noqa: B018
        if len(args) != self.num_args:
            raise TypeError(f"kernel {self.name!r} takes {self.num_args} arguments, "
                            f"{len(args)} given")
        if queue.context is not self.program.context:
            raise ValueError(f"kernel {self.name!r} belongs to another context than {queue!r}")
        global_sizes = _sizes("global_size", global_size)
        dims = len(global_sizes)
        local_array = ffi.NULL
        if local_size is not None:
            local_sizes = _sizes("local_size", local_size)
            if len(local_sizes) != dims:
                raise ValueError(f"local_size {local_sizes} and global_size {global_sizes} "
                                 "differ in dimensions")
            if any(g % s for g, s in zip(global_sizes, local_sizes)):
                raise ValueError(f"local_size {local_sizes} does not divide global_size "
                                 f"{global_sizes}")
            limit = queue.device.max_work_group_size
            if math.prod(local_sizes) > limit:
                raise ValueError(f"local_size {local_sizes} exceeds the device's maximum "
                                 f"work-group size {limit}")
            local_array = ffi.new("size_t[]", local_sizes)
        offset_array = ffi.NULL
        if global_offset is not None:
            offsets = _sizes("global_offset", global_offset, smallest=0)
            if len(offsets) != dims:  # UR reads one offset per dimension
                raise ValueError(f"global_offset {offsets} and global_size {global_sizes} "
                                 "differ in dimensions")
            offset_array = ffi.new("size_t[]", offsets)
        released = _handle.released
        block, arguments, value_buffers = self._pack(queue, args)
        call_args = (dims, offset_array, ffi.new("size_t[]", global_sizes), local_array,
                     len(args), arguments, ffi.NULL, 0, ffi.NULL, ffi.NULL)
        return call_args, (released, (block, value_buffers))

    def _pack(self, queue: Queue, args) -> tuple:
        """``(argument block, its argument list for the launch, the by-value buffers it points
        into)`` (see ``_release.new_arguments``)."""
        block, arguments, words = _release.new_arguments(len(args))
        value_buffers = []
        for index, arg in enumerate(args):
            declared = self.signature[index] if self.signature else None
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
                write_argument(words, index, LOCAL, arg.nbytes)
            elif isinstance(arg, Buffer):
                if not _accepts(declared, "mem"):
                    raise TypeError(f"argument {index} of {self.name!r} is declared {declared}, "
                                    "got a Buffer")
                write_argument(words, index, MEM_OBJ, _POINTER_SIZE, _address(arg.handle))
            elif declared == "ptr" and isinstance(arg, (int, np.integer)):
                write_argument(words, index, POINTER, _POINTER_SIZE, int(arg))
            else:
                buffer, size = _value_buffer(self.name, index, arg, declared)
                value_buffers.append(buffer)
                write_argument(words, index, VALUE, size, _address(buffer))
        return block, arguments, tuple(value_buffers)


def _address(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata))


class PreparedLaunch:
    """One kernel launch on one queue, checked once (:meth:`Kernel.prepare`); each call
    enqueues it.  It holds its kernel, queue and arguments."""

    __slots__ = ("kernel", "queue", "args", "_call_args", "_buffers", "_released")

    def __init__(self, kernel: Kernel, queue: Queue, args: tuple, call_args: tuple,
                 held: tuple):
        self.kernel, self.queue, self.args = kernel, queue, args
        self._call_args = call_args
        self._released, self._buffers = held

    def __call__(self, *, wait_for=(), event: bool = True) -> Event | None:
        """Enqueue the launch; returns its Event, or None with ``event=False``.  Raises
        ``ClosedError`` if an argument was closed since :meth:`Kernel.prepare`."""
        if self._released != _handle.released:
            for arg in self.args:
                if isinstance(arg, _handle.Resource):
                    arg.handle  # noqa: B018 - raises if closed
            self._released = _handle.released
        return _launch(self.kernel, self.queue, self._call_args, wait_for, event)

    def __repr__(self) -> str:
        return f"<PreparedLaunch of {self.kernel.name!r} on {self.queue!r}>"


def _launch(kernel: Kernel, queue: Queue, call_args: tuple, wait_for, event: bool):
    """Enqueue with ``call_args``, the launch arguments after the kernel, whose last three
    (wait list and event) are filled in here if ``wait_for`` or ``event``."""
    if wait_for or event:
        count, events = wait_list(wait_for, queue.context) if wait_for else (0, _NULL)
        out = ffi.new(_EVENT_OUT) if event else _NULL
        call_args = (*call_args[:-3], count, events, out)
    lock = enqueue_lock
    lock.acquire()
    try:
        result = _release.enqueue_launch(queue._handle, kernel._handle, *call_args)
    except TypeError:  # a handle is None: closed, or inherited across fork()
        queue.handle, kernel.handle  # noqa: B018 - raise ClosedError
        raise
    finally:
        lock.release()
    if result:
        check(result, _release.LAUNCH, f"kernel {kernel.name!r}")
    if not event:
        queue._last_event = None  # Queue.finish has no event of the latest command
        return None
    # UR copied the argument values at enqueue; a USM array's free finishes its queue.
    return Event(out[0], queue)


_EVENT_OUT = ffi.typeof("ur_event_handle_t *")
_NULL = ffi.NULL

# Arguments and sizes whose value cannot change while they are the same object (a ctypes
# value or a list can).
_IMMUTABLE = (USMArray, Buffer, int, float, np.generic, Local)
_IMMUTABLE_SIZES = (int, tuple, type(None))


def _value_buffer(kernel: str, index: int, arg, declared) -> tuple:
    """``(cdata, size)`` holding a by-value argument in its declared or its own type."""
    if isinstance(declared, np.dtype) and not isinstance(arg, (int, float, np.generic,
                                                                ctypes._SimpleCData)):
        raise TypeError(f"argument {index} of {kernel!r} is declared {declared}, got "
                        f"{type(arg).__name__} {arg!r}")
    ctype = _C_SCALARS.get(declared) if type(arg) in (int, float) else None
    if ctype is not None and not (type(arg) is float and declared.kind in "biu"):
        try:
            return ffi.new(ctype, arg), declared.itemsize
        except OverflowError:
            raise ValueError(f"argument {index} of {kernel!r}: {arg!r} does not fit in "
                             f"{declared}") from None
    data = _value_bytes(kernel, index, arg, declared)
    return ffi.new("char[]", data), len(data)


def _value_bytes(kernel: str, index: int, arg, declared) -> bytes:
    """The bytes of a by-value argument, in its declared or its own type."""
    where = f"argument {index} of {kernel!r}"
    if isinstance(declared, np.dtype):
        if isinstance(arg, (USMArray, Local, Buffer)):
            raise TypeError(f"{where} is declared {declared}, got {type(arg).__name__}")
        if type(arg) is float and declared.kind in "biu":  # numpy would truncate it
            raise TypeError(f"{where} is declared {declared}, got float {arg!r}")
        try:
            value = np.array(arg, dtype=declared) if not isinstance(arg, np.generic) else arg
            if isinstance(arg, np.generic) and arg.dtype != declared:
                raise TypeError(f"{where} is declared {declared}, got {arg.dtype}")
            if not isinstance(arg, np.generic) and np.ndim(value) != 0:
                raise TypeError(f"{where} is declared {declared}, got {type(arg).__name__}")
            if isinstance(arg, int) and value.item() != arg:
                raise OverflowError
        except OverflowError:
            raise ValueError(f"{where}: {arg!r} does not fit in {declared}") from None
        return np.asarray(value).tobytes()
    if declared is not None:
        raise TypeError(f"{where} is declared {declared}, got {type(arg).__name__}")
    if isinstance(arg, np.generic):
        return arg.tobytes()
    if isinstance(arg, ctypes._SimpleCData):
        return bytes(arg)
    raise TypeError(f"{where}: {type(arg).__name__} {arg!r} has no C type; pass a numpy scalar "
                    "(np.float32(x)), a ctypes value, or declare a signature")
