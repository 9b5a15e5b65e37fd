"""Device memory: typed USM arrays (device, host, shared) and ``urMemBufferCreate`` buffers.

Every size, offset, dtype and context is checked here before UR sees a pointer, so a copy
that does not fit raises instead of writing past an allocation.
"""

from __future__ import annotations

import math

import numpy as np

from . import _checks, _handle
from ._interrupts import section
from ._ur import ffi, lib
from .enums import ur_mem_flag_t, ur_usm_alloc_info_t, ur_usm_type_t
from .errors import check
from .queue import Event, Queue, enqueue_command, wait_list

USM_KINDS = ("device", "host", "shared")


SIZE_MAX = 2 ** (8 * ffi.sizeof("size_t")) - 1


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer, bool, np.bool_)):
        shape = (shape,)
    elif isinstance(shape, (str, bytes)):
        raise TypeError(f"shape {shape!r} must be an integer or a sequence of integers")
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape {shape!r} must be an integer or a sequence of integers") from None
    return tuple(_checks.integer(f"shape {shape} extent", extent) for extent in shape)


def _span(what: str, offset, count, size: int) -> tuple[int, int]:
    """``(offset, count)`` as Python ints; raises unless ``[offset, offset + count)`` lies
    inside ``[0, size)``."""
    offset = _checks.integer(f"{what}: offset", offset)
    count = _checks.integer(f"{what}: count", count)
    if offset + count > size:
        raise ValueError(f"{what}: {count} element(s) at offset {offset} do not fit in {size}")
    return offset, count


def _dtype(dtype) -> np.dtype:
    if dtype is None:  # numpy would read it as float64
        raise TypeError("dtype None: name the element type")
    try:
        return np.dtype(dtype)
    except (TypeError, ValueError) as error:
        raise TypeError(f"dtype {dtype!r} is not a numpy dtype ({error})") from None


def _check_queue(queue) -> None:
    if not isinstance(queue, Queue):
        raise TypeError(f"queue must be a ur_cffi Queue, not {type(queue).__name__} {queue!r}")


def _no_objects(dtype: np.dtype, what: str) -> None:
    if dtype.hasobject:  # the bytes are PyObject pointers: read back, they crash the process
        raise TypeError(f"{what}: dtype {dtype} holds Python objects; device memory cannot")


def _host_view(array, dtype: np.dtype, what: str) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{what} needs a numpy array or USMArray, not {type(array).__name__}")
    if array.dtype != dtype:
        raise TypeError(f"{what}: dtype {array.dtype} does not match the USM array's {dtype}")
    return array


def _enqueue_nothing(queue: Queue, blocking: bool, wait_for) -> Event:
    """An Event for an empty copy or fill: UR rejects size 0 (the OpenCL adapter even returns
    success from an empty fill without making its event), so enqueue a plain wait instead."""
    return enqueue_command(queue, lib.urEnqueueEventsWait, (), wait_for, (), blocking)


def _enqueue_memcpy(queue: Queue, dst: int, src: int, nbytes: int, blocking: bool, wait_for,
                    keep_alive: tuple) -> Event:
    if nbytes == 0:
        return _enqueue_nothing(queue, blocking, wait_for)
    return enqueue_command(queue, lib.urEnqueueUSMMemcpy,
                            (False, ffi.cast("void *", dst), ffi.cast("void *", src), nbytes),
                            wait_for, keep_alive, blocking)


def is_usm(context, address: int) -> bool:
    """Whether UR knows ``address`` as USM memory (device, host or shared) of ``context``; host
    memory such as a numpy array's, and memory of other contexts, is not."""
    out = ffi.new("ur_usm_type_t *")
    result = lib.urUSMGetMemAllocInfo(context.handle, ffi.cast("void *", address), _USM_TYPE,
                                      ffi.sizeof("ur_usm_type_t"), out, ffi.NULL)
    return result == 0 and out[0] != _USM_UNKNOWN


_USM_TYPE = int(ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_TYPE)
_USM_UNKNOWN = int(ur_usm_type_t.UR_USM_TYPE_UNKNOWN)


def _free(queue, context, pointer) -> int:
    _handle.note_release()
    # Commands on the array's queue may still use the memory (an asynchronous copy, a kernel):
    # urUSMFree does not wait for them, and freeing under them crashes the runtime.
    results = (lib.urQueueFinish(queue), lib.urUSMFree(context, pointer),
               lib.urQueueRelease(queue), lib.urContextRelease(context))
    return next((result for result in results if result), 0)


class USMArray(_handle.Resource):
    """An n-dimensional array in USM memory of ``queue``'s context and device.

    ``kind`` is ``"device"`` (default), ``"host"`` or ``"shared"``.  Copies go on the array's
    queue unless another queue of the same context is given.  Raises ``OutOfDeviceMemoryError``
    (a ``MemoryError``) or ``InvalidUsmSizeError`` when UR cannot allocate.
    """

    __slots__ = ("queue", "shape", "dtype", "kind", "size", "nbytes", "_address")
    _release_function = "urUSMFree"

    def __init__(self, queue: Queue, shape, dtype=np.float32, kind: str = "device"):
        _check_queue(queue)
        if not isinstance(kind, str) or kind not in USM_KINDS:
            raise ValueError(f"kind must be one of {USM_KINDS}, not {kind!r}")
        queue.handle  # noqa: B018 - raises ClosedError if the queue is closed
        self.queue, self.kind = queue, kind
        self.shape, self.dtype = _shape(shape), _dtype(dtype)
        _no_objects(self.dtype, "USMArray")
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        if self.nbytes > SIZE_MAX:
            raise ValueError(f"shape {self.shape} of {self.dtype} is {self.nbytes} bytes, more "
                             f"than size_t holds ({SIZE_MAX})")
        out = ffi.new("void **")
        with section:  # Ctrl-C waits until this array owns the memory (_interrupts)
            self._allocate(queue, out)

    def _allocate(self, queue: Queue, out) -> None:
        context, device, kind = queue.context.handle, queue.device.handle, self.kind
        nbytes = max(self.nbytes, 1)  # UR rejects empty allocations; an empty array still owns one
        if kind == "device":
            function = "urUSMDeviceAlloc"
            result = lib.urUSMDeviceAlloc(context, device, ffi.NULL, ffi.NULL, nbytes, out)
        elif kind == "host":
            function = "urUSMHostAlloc"
            result = lib.urUSMHostAlloc(context, ffi.NULL, ffi.NULL, nbytes, out)
        else:
            function = "urUSMSharedAlloc"
            result = lib.urUSMSharedAlloc(context, device, ffi.NULL, ffi.NULL, nbytes, out)
        if result:
            check(result, function, f"shape {self.shape} of {self.dtype}: {nbytes} bytes; the "
                                    "device's largest allocation is "
                                    f"{queue.device.max_mem_alloc_size}")
        self._address = int(ffi.cast("uintptr_t", out[0]))
        # USM memory has no reference count, so the allocation holds one on its context for
        # urUSMFree (closing the Context first must not free it: the CPU runtime segfaults),
        # and one on its queue, which is finished before the memory is freed.
        try:
            check(lib.urContextRetain(context), "urContextRetain")
            check(lib.urQueueRetain(queue.handle), "urQueueRetain")
            self._own(out[0], parents=(queue,), release_args=(queue.handle, context, out[0]),
                      release=_free)
        except BaseException:  # interrupted (Ctrl-C) before this array owned the memory
            if not _handle.owns(out[0]):
                lib.urUSMFree(context, out[0])
            raise

    @property
    def context(self):
        """The context the memory belongs to."""
        return self.queue.context

    def data_ptr(self) -> int:
        """The USM address as an integer; raises ``ClosedError`` once freed."""
        if self._handle is None:
            self.handle  # noqa: B018 - raises ClosedError
        return self._address

    def _queue_for(self, queue: Queue | None) -> Queue:
        if queue is None:
            return self.queue
        _check_queue(queue)
        if queue.context is not self.queue.context:
            raise ValueError(f"{queue!r} is not of the context this array was allocated in")
        return queue

    def copy_from(self, source, *, offset: int = 0, queue: Queue | None = None,
                  blocking: bool = True, wait_for=()) -> Event:
        """Copy a numpy array or USMArray of the same dtype into this array at ``offset``
        (in elements, over the flattened array).  Returns the copy's Event."""
        queue = self._queue_for(queue)
        if isinstance(source, USMArray):
            if source.context is not self.context:
                raise ValueError("copy_from: the source array belongs to another context")
            if source.dtype != self.dtype:
                raise TypeError(f"copy_from: dtype {source.dtype} does not match {self.dtype}")
            offset, _ = _span("copy_from", offset, source.size, self.size)
            if source is self and source.size and offset < source.size:
                raise ValueError(f"copy_from: the array onto itself at offset {offset} "
                                 "overlaps (UR copies between distinct ranges only)")
            return _enqueue_memcpy(queue, self.data_ptr() + offset * self.dtype.itemsize,
                                   source.data_ptr(), source.nbytes, blocking, wait_for,
                                   (source, self))
        host = np.ascontiguousarray(_host_view(source, self.dtype, "copy_from"))
        offset, _ = _span("copy_from", offset, host.size, self.size)
        return _enqueue_memcpy(queue, self.data_ptr() + offset * self.dtype.itemsize,
                               host.ctypes.data, host.nbytes, blocking, wait_for, (host, self))

    def copy_to(self, destination, *, offset: int = 0, queue: Queue | None = None,
                blocking: bool = True, wait_for=()) -> Event:
        """Copy ``destination.size`` elements from ``offset`` of this array into a C-contiguous
        numpy array or a USMArray of the same dtype.  Returns the copy's Event.

        On an out-of-order queue the copy waits for ``wait_for``, or, if none is given, for
        everything submitted to the queue before it (a barrier), so it never reads data that a
        kernel submitted earlier has yet to write."""
        queue = self._queue_for(queue)
        if queue.out_of_order and wait_list(wait_for)[0] == 0:
            wait_for = (queue.barrier(),)
        if isinstance(destination, USMArray):
            return destination.copy_from(self, offset=0, queue=queue, blocking=blocking,
                                         wait_for=wait_for) if offset == 0 and \
                destination.size == self.size else self._copy_part_to(
                    destination, offset, queue, blocking, wait_for)
        host = _host_view(destination, self.dtype, "copy_to")
        if not host.flags.c_contiguous or not host.flags.writeable:
            raise ValueError("copy_to needs a writeable C-contiguous numpy array")
        offset, _ = _span("copy_to", offset, host.size, self.size)
        return _enqueue_memcpy(queue, host.ctypes.data,
                               self.data_ptr() + offset * self.dtype.itemsize, host.nbytes,
                               blocking, wait_for, (host, self))

    def _copy_part_to(self, destination: USMArray, offset, queue, blocking, wait_for) -> Event:
        if destination.context is not self.context:
            raise ValueError("copy_to: the destination array belongs to another context")
        if destination.dtype != self.dtype:
            raise TypeError(f"copy_to: dtype {destination.dtype} does not match {self.dtype}")
        offset, _ = _span("copy_to", offset, destination.size, self.size)
        if destination is self and offset < self.size:
            raise ValueError(f"copy_to: the array onto itself from offset {offset} overlaps "
                             "(UR copies between distinct ranges only)")
        return _enqueue_memcpy(queue, destination.data_ptr(),
                               self.data_ptr() + offset * self.dtype.itemsize,
                               destination.nbytes, blocking, wait_for, (self, destination))

    def to_numpy(self, *, queue: Queue | None = None, wait_for=()) -> np.ndarray:
        """A new numpy array holding this array's contents (a blocking copy, ordered as
        :meth:`copy_to` orders it)."""
        out = np.empty(self.shape, self.dtype)
        self.copy_to(out, queue=queue, wait_for=wait_for)
        return out

    def fill(self, value, *, offset: int = 0, count: int | None = None,
             queue: Queue | None = None, blocking: bool = True, wait_for=()) -> Event:
        """Set ``count`` elements (default: all from ``offset``) to ``value``."""
        queue = self._queue_for(queue)
        offset = _checks.integer("fill: offset", offset)
        if count is None:
            if offset > self.size:
                raise ValueError(f"fill: offset {offset} is past the end of {self.size} elements")
            count = self.size - offset
        offset, count = _span("fill", offset, count, self.size)
        pattern = _checks.scalar("fill: value", value, self.dtype)
        if count == 0:
            return _enqueue_nothing(queue, blocking, wait_for)
        if pattern.nbytes & (pattern.nbytes - 1):  # UR wants a power-of-two pattern size
            return self.copy_from(np.full(count, pattern), offset=offset, queue=queue,
                                  blocking=blocking, wait_for=wait_for)
        return enqueue_command(
            queue, lib.urEnqueueUSMFill,
            (ffi.cast("void *", self.data_ptr() + offset * pattern.nbytes), pattern.nbytes,
             ffi.from_buffer(pattern), count * pattern.nbytes),
            wait_for, (pattern, self), blocking)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d USMArray")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "closed" if self.closed else hex(self._address)
        return f"<USMArray {self.kind} {self.shape} {self.dtype} at {state}>"


def empty(shape, dtype=np.float32, *, queue: Queue, kind: str = "device") -> USMArray:
    """An uninitialised USMArray."""
    return USMArray(queue, shape, dtype, kind)


def zeros(shape, dtype=np.float32, *, queue: Queue, kind: str = "device") -> USMArray:
    """A USMArray of zeros."""
    array = USMArray(queue, shape, dtype, kind)
    if array.size:
        array.fill(0)
    return array


def asarray(array, *, queue: Queue, kind: str = "device") -> USMArray:
    """A USMArray holding a copy of ``array`` (anything ``numpy.asarray`` accepts)."""
    host = np.asarray(array, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    result = USMArray(queue, host.shape, host.dtype, kind)
    if result.size:
        result.copy_from(host)
    return result


def _release_buffer(handle) -> int:
    _handle.note_release()
    return lib.urMemRelease(handle)


class Buffer(_handle.Resource):
    """A UR memory object from ``urMemBufferCreate`` (the original demo's kind of memory)."""

    __slots__ = ("context", "nbytes")
    _release_function = "urMemRelease"

    def __init__(self, context, nbytes: int,
                 flags: ur_mem_flag_t = ur_mem_flag_t.UR_MEM_FLAG_READ_WRITE):
        from .context import Context

        if not isinstance(context, Context):
            raise TypeError(f"context must be a ur_cffi Context, not {type(context).__name__}")
        nbytes = _checks.integer("Buffer size", nbytes, minimum=1)
        largest = min(device.max_mem_alloc_size for device in context.devices)
        if nbytes > largest:
            raise ValueError(f"Buffer size {nbytes} exceeds the device's largest allocation "
                             f"({largest} bytes)")
        if not isinstance(flags, (int, ur_mem_flag_t)) or isinstance(flags, bool):
            raise TypeError(f"flags must be ur_mem_flag_t, not {type(flags).__name__} {flags!r}")
        out = ffi.new("ur_mem_handle_t *")
        check(lib.urMemBufferCreate(context.handle, flags, nbytes, ffi.NULL, out),
              "urMemBufferCreate", f"{nbytes} bytes")
        self.context, self.nbytes = context, int(nbytes)
        self._own(out[0], parents=(context,), release=_release_buffer)

    def native_handle(self, device=None) -> int:
        """The backend's own handle for this buffer (a ``cl_mem`` on OpenCL), as an integer."""
        device = device or self.context.devices[0]
        out = ffi.new("ur_native_handle_t *")
        check(lib.urMemGetNativeHandle(self.handle, device.handle, out), "urMemGetNativeHandle")
        return int(out[0])

    def _check(self, what: str, queue: Queue, offset, host: np.ndarray) -> int:
        _no_objects(host.dtype, what)
        _check_queue(queue)
        offset = _checks.integer(f"{what}: offset", offset)
        nbytes = host.nbytes
        if queue.context is not self.context:
            raise ValueError(f"{what}: {queue!r} is not of this buffer's context")
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"{what}: {nbytes} bytes at offset {offset} do not fit in "
                             f"{self.nbytes}")
        return offset

    def write(self, queue: Queue, source: np.ndarray, *, offset: int = 0, blocking: bool = True,
              wait_for=()) -> Event:
        """Copy a numpy array into the buffer at byte ``offset``."""
        host = np.ascontiguousarray(source)
        offset = self._check("write", queue, offset, host)
        return enqueue_command(
            queue, lib.urEnqueueMemBufferWrite,
            (self.handle, False, offset, host.nbytes, ffi.from_buffer(host)), wait_for, (host,),
            blocking)

    def read(self, queue: Queue, destination: np.ndarray, *, offset: int = 0,
             blocking: bool = True, wait_for=()) -> Event:
        """Copy from byte ``offset`` of the buffer into a writeable C-contiguous numpy array."""
        if not isinstance(destination, np.ndarray):
            raise TypeError(f"read needs a numpy array, not {type(destination).__name__}")
        if not destination.flags.c_contiguous or not destination.flags.writeable:
            raise ValueError("read needs a writeable C-contiguous numpy array")
        offset = self._check("read", queue, offset, destination)
        return enqueue_command(
            queue, lib.urEnqueueMemBufferRead,
            (self.handle, False, offset, destination.nbytes, ffi.from_buffer(destination)),
            wait_for, (destination,), blocking)
