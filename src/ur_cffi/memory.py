"""Device memory: typed USM arrays (device, host, shared) and ``urMemBufferCreate`` buffers.

Every size, offset, dtype and context is checked here before UR sees a pointer, so a copy
that does not fit raises instead of writing past an allocation.
"""

from __future__ import annotations

import math

import numpy as np

from . import _handle
from ._ur import ffi, lib
from .enums import ur_mem_flag_t
from .errors import check
from .queue import Event, Queue, enqueue_command

USM_KINDS = ("device", "host", "shared")


def _shape(shape) -> tuple[int, ...]:
    try:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    except TypeError:
        raise TypeError(f"shape {shape!r} must be an integer or a sequence of integers") from None
    for extent in shape:
        if not isinstance(extent, (int, np.integer)) or extent < 0:
            raise ValueError(f"shape {shape} must hold non-negative integers")
    return tuple(int(e) for e in shape)


SIZE_MAX = 2 ** (8 * ffi.sizeof("size_t")) - 1


def _span(what: str, offset: int, count: int, size: int) -> None:
    """Raise unless ``[offset, offset + count)`` lies inside ``[0, size)``."""
    for name, value in (("offset", offset), ("count", count)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{what}: {name} {value!r} is not an integer")
    if offset < 0 or count < 0 or offset + count > size:
        raise ValueError(f"{what}: {count} element(s) at offset {offset} do not fit in {size}")


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
        if not isinstance(queue, Queue):
            raise TypeError(f"USMArray needs a Queue, not {type(queue).__name__}")
        if kind not in USM_KINDS:
            raise ValueError(f"kind must be one of {USM_KINDS}, not {kind!r}")
        queue.handle  # noqa: B018 - raises ClosedError if the queue is closed
        self.queue, self.kind = queue, kind
        self.shape, self.dtype = _shape(shape), np.dtype(dtype)
        _no_objects(self.dtype, "USMArray")
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        if self.nbytes > SIZE_MAX:
            raise ValueError(f"shape {self.shape} of {self.dtype} is {self.nbytes} bytes, more "
                             f"than size_t holds ({SIZE_MAX})")
        context, device = queue.context.handle, queue.device.handle
        out = ffi.new("void **")
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
            check(result, function, f"{nbytes} bytes; the device's largest allocation is "
                                    f"{queue.device.max_mem_alloc_size}")
        self._address = int(ffi.cast("uintptr_t", out[0]))
        # USM memory has no reference count, so the allocation holds one on its context for
        # urUSMFree (closing the Context first must not free it: the CPU runtime segfaults),
        # and one on its queue, which is finished before the memory is freed.
        check(lib.urContextRetain(context), "urContextRetain")
        check(lib.urQueueRetain(queue.handle), "urQueueRetain")
        self._own(out[0], parents=(queue,), release_args=(queue.handle, context, out[0]),
                  release=_free)

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
        queue = queue or self.queue
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
            _span("copy_from", offset, source.size, self.size)
            return _enqueue_memcpy(queue, self.data_ptr() + offset * self.dtype.itemsize,
                                   source.data_ptr(), source.nbytes, blocking, wait_for,
                                   (source, self))
        host = np.ascontiguousarray(_host_view(source, self.dtype, "copy_from"))
        _span("copy_from", offset, host.size, self.size)
        return _enqueue_memcpy(queue, self.data_ptr() + offset * self.dtype.itemsize,
                               host.ctypes.data, host.nbytes, blocking, wait_for, (host, self))

    def copy_to(self, destination, *, offset: int = 0, queue: Queue | None = None,
                blocking: bool = True, wait_for=()) -> Event:
        """Copy ``destination.size`` elements from ``offset`` of this array into a C-contiguous
        numpy array or a USMArray of the same dtype.  Returns the copy's Event."""
        queue = self._queue_for(queue)
        if isinstance(destination, USMArray):
            return destination.copy_from(self, offset=0, queue=queue, blocking=blocking,
                                         wait_for=wait_for) if offset == 0 and \
                destination.size == self.size else self._copy_part_to(
                    destination, offset, queue, blocking, wait_for)
        host = _host_view(destination, self.dtype, "copy_to")
        if not host.flags.c_contiguous or not host.flags.writeable:
            raise ValueError("copy_to needs a writeable C-contiguous numpy array")
        _span("copy_to", offset, host.size, self.size)
        return _enqueue_memcpy(queue, host.ctypes.data,
                               self.data_ptr() + offset * self.dtype.itemsize, host.nbytes,
                               blocking, wait_for, (host, self))

    def _copy_part_to(self, destination: USMArray, offset, queue, blocking, wait_for) -> Event:
        if destination.context is not self.context:
            raise ValueError("copy_to: the destination array belongs to another context")
        if destination.dtype != self.dtype:
            raise TypeError(f"copy_to: dtype {destination.dtype} does not match {self.dtype}")
        _span("copy_to", offset, destination.size, self.size)
        return _enqueue_memcpy(queue, destination.data_ptr(),
                               self.data_ptr() + offset * self.dtype.itemsize,
                               destination.nbytes, blocking, wait_for, (self, destination))

    def to_numpy(self, *, queue: Queue | None = None) -> np.ndarray:
        """A new numpy array holding this array's contents (a blocking copy)."""
        out = np.empty(self.shape, self.dtype)
        self.copy_to(out, queue=queue)
        return out

    def fill(self, value, *, offset: int = 0, count: int | None = None,
             queue: Queue | None = None, blocking: bool = True, wait_for=()) -> Event:
        """Set ``count`` elements (default: all from ``offset``) to ``value``."""
        queue = self._queue_for(queue)
        count = self.size - offset if count is None else count
        _span("fill", offset, count, self.size)
        pattern = np.array(value, dtype=self.dtype)
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
        if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise ValueError(f"Buffer size must be a positive integer, not {nbytes!r}")
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

    def _check(self, what: str, queue: Queue, offset: int, host: np.ndarray) -> None:
        _no_objects(host.dtype, what)
        nbytes = host.nbytes
        if queue.context is not self.context:
            raise ValueError(f"{what}: {queue!r} is not of this buffer's context")
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"{what}: {nbytes} bytes at offset {offset} do not fit in "
                             f"{self.nbytes}")

    def write(self, queue: Queue, source: np.ndarray, *, offset: int = 0, blocking: bool = True,
              wait_for=()) -> Event:
        """Copy a numpy array into the buffer at byte ``offset``."""
        host = np.ascontiguousarray(source)
        self._check("write", queue, offset, host)
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
        self._check("read", queue, offset, destination)
        return enqueue_command(
            queue, lib.urEnqueueMemBufferRead,
            (self.handle, False, offset, destination.nbytes, ffi.from_buffer(destination)),
            wait_for, (destination,), blocking)
