"""Device memory: strided USM arrays (device, host, shared) and ``urMemBufferCreate`` buffers.

A ``USMArray`` owns a block of the caching allocator (``allocator.py``) or, as a view, shares
its base's: layouts (indexing, reshape, transpose) are worked out in ``_strided.py``, element
types in ``dtypes.py``, interchange (numpy, DLPack, dpctl) in ``interop.py``.  Every size,
offset, dtype and context is checked here before UR sees a pointer, so a copy that does not
fit raises instead of writing past an allocation.
"""

from __future__ import annotations

import ctypes
import math
import weakref

import numpy as np

from . import _checks, _forking, _handle, _interrupts, _strided, _waiting, allocator, dtypes
from ._interrupts import hold_back_in, section
from ._ur import ffi, lib
from .enums import ur_mem_flag_t, ur_usm_alloc_info_t, ur_usm_type_t
from .errors import URError, check
from . import queue as queue_module
from .queue import Event, Queue, enqueue_command, recording, wait_list

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
    _check_dimensions(shape)
    # numpy's bound (an index-sized integer), even where another extent is 0
    return tuple(_checks.integer(f"shape {shape} extent", extent, maximum=_INTP_MAX)
                 for extent in shape)


def _check_dimensions(shape: tuple) -> None:
    if len(shape) > _MAX_DIMENSIONS:  # (to_numpy() would fail, inside numpy)
        raise ValueError(f"shape of {len(shape)} dimensions: numpy's arrays have at most "
                         f"{_MAX_DIMENSIONS}")


_INTP_MAX = _strided.INTP_MAX
_MAX_DIMENSIONS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32


def _span(what: str, offset, count, size: int) -> tuple[int, int]:
    """``(offset, count)`` as Python ints; raises unless ``[offset, offset + count)`` lies
    inside ``[0, size)``."""
    offset = _checks.integer(f"{what}: offset", offset)
    count = _checks.integer(f"{what}: count", count)
    if offset + count > size:
        raise ValueError(f"{what}: {count} element(s) at offset {offset} do not fit in {size}")
    return offset, count


_dtype = dtypes.dtype


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


def _held(queue: Queue, keep_alive: tuple) -> tuple:
    """What a command's Event must keep alive: not USMArrays from the caching allocator used
    on their own in-order queue, whose memory is reused only after this command
    (``allocator``), so that a temporary freed right after an asynchronous copy is reused at
    once; host memory and memory the allocator does not own, yes."""
    if queue.out_of_order or (recording and queue in recording):  # a Graph keeps them
        return keep_alive
    return tuple(held for held in keep_alive if not (
        type(held) is USMArray
        and (root := held if held._base is None else held._base).queue is queue
        and type(root._handle) is allocator.Block))


def _ordered(queue: Queue, wait_for):
    """``wait_for``, or on an out-of-order queue given none, a barrier after everything
    submitted to it so far: a copy or fill there never reads data an earlier kernel has yet to
    write, nor writes data it has yet to read (``a[...] = b``, ``copy()``, ``clone()`` take no
    ``wait_for``).  Not in a Graph recording, where ``wait_for`` alone orders commands."""
    if queue.out_of_order and not (recording and queue in recording) and \
            wait_list(wait_for)[0] == 0:
        return (queue.barrier(),)
    return wait_for


def _enqueue_memcpy(queue: Queue, dst: int, src: int, nbytes: int, blocking: bool, wait_for,
                    keep_alive: tuple) -> Event:
    keep_alive = _held(queue, keep_alive)
    wait_for = _ordered(queue, wait_for)
    if nbytes == 0:
        return _enqueue_nothing(queue, blocking, wait_for)
    return enqueue_command(queue, lib.urEnqueueUSMMemcpy,
                            (False, ffi.cast("void *", dst), ffi.cast("void *", src), nbytes),
                            wait_for, keep_alive, blocking)


def _wait_before_pageable_copy(queue: Queue, host: np.ndarray, wait_for) -> None:
    """Where a copy to or from pageable memory blocks in its enqueue until the queue is idle
    (``_compat.pageable_copies_wait``), wait for that first: interruptibly, and holding
    neither the enqueue lock (other threads go on enqueueing) nor a Ctrl-C section.  Called
    once the copy's arguments are checked, with the host array it copies."""
    if not queue.device.pageable_copies_wait or (recording and queue in recording):
        return
    context = queue.context._handle
    # A closed Context object (its queue keeps the UR context): the address goes unchecked.
    if context is not None and _usm_type(context, host.ctypes.data) != _USM_UNKNOWN:
        return
    count, events = wait_list(wait_for, queue.context)
    if count:
        _waiting.wait(lib.urEventWait, "urEventWait", count, events)
    queue.finish()


def is_usm(context, address: int) -> bool:
    """Whether UR knows ``address`` as USM memory (device, host or shared) of ``context``; host
    memory such as a numpy array's, and memory of other contexts, is not."""
    return _usm_type(context.handle, address) != _USM_UNKNOWN


def _usm_type(context_handle, address: int) -> int:
    """UR's ``ur_usm_type_t`` of ``address`` (UNKNOWN where UR fails to say)."""
    out = ffi.new("ur_usm_type_t *")
    result = lib.urUSMGetMemAllocInfo(context_handle, ffi.cast("void *", address), _USM_TYPE,
                                      ffi.sizeof("ur_usm_type_t"), out, ffi.NULL)
    return out[0] if result == 0 else _USM_UNKNOWN


class ExportPin:
    """Held by what shows an array's memory outside ur_cffi (``np.asarray``'s view, a DLPack
    tensor): while one lives, closing the array (or its base) leaves the memory in place for
    it, and the last one to go gives it back.  Numpy and CuPy free memory only when no view
    of it remains; an explicit close cannot take it from under them either.

    Each root array keeps the ids of its live pins in a set (``_exports``): adding to and
    discarding from a set are single steps under the GIL, so a finalizer running in any
    thread, or inside the code it interrupts, needs no lock."""

    __slots__ = ("array", "_root")

    @hold_back_in  # Ctrl-C comes after the pin is counted
    def __init__(self, array: USMArray, hold: bool = True, inside: bool = False):
        self.array = array if hold else None  # (not: a view that holds its own pin)
        self._root = root = array if array._base is None else array._base
        if inside:  # held by a ur_cffi array (from_pointer's owner): no teardown waits for it
            _pins_inside.add(id(self))
        _exports_of(root).add(id(self))

    @hold_back_in  # a finalizer, as the registry's own callback is (_handle._collected)
    def __del__(self):
        root = getattr(self, "_root", None)
        if root is None or getattr(_handle, "_live", None) is None:  # __init__ did not get as
            return  # far; the interpreter's end cleared the modules (the process frees all)
        _pins_inside.discard(id(self))
        exports = root._exports
        exports.discard(id(self))
        if not exports and root._handle is None:  # closed meanwhile: its release waits here
            _handle.run_after_collection(_handle._release_entry, root._serial)  # (pops it)


_exports_lock = _forking.lock()  # never taken by a finalizer
_pins_inside: set = set()  # ids of the ExportPins that ur_cffi's own arrays hold


def shown_outside(array: USMArray) -> bool:
    """Whether memory of root ``array`` is used outside ur_cffi (an :class:`ExportPin` that no
    ur_cffi array holds, or a SYCL consumer): what a teardown must not free."""
    return any(pin not in _pins_inside for pin in array._exports or ())

current_queue = None
"""Set by ``ur_cffi.triton`` while it is active: a function giving this thread's Triton queue
(or None).  The PyTorch-style methods Triton's autotuner calls (``clone``, ``copy_``,
``zero_``) run there, where it is of the array's context, as PyTorch runs them on the current
stream: after the kernels being timed there, not on the array's own queue.  (Of the
array's device too: PyTorch's current stream is the tensor's device's.)"""


def _current_queue_of(array: USMArray):
    queue = current_queue() if current_queue is not None else None
    return queue if queue is not None and queue.context is array.context and \
        queue.device is array.queue.device else None


def _exports_of(root: USMArray) -> set:
    exports = root._exports
    if exports is None:
        with _exports_lock:  # two first pins of one array in two threads: one set
            exports = root._exports
            if exports is None:
                exports = root._exports = set()
    return exports


_SHOWN = -1
"""In a root array's ``_exports`` (no pin's id) once ``__sycl_usm_array_interface__`` showed
it: close() then leaves the memory until the array object is collected."""


def show(array: USMArray) -> None:
    """Keep ``array``'s memory for consumers that hold the array object itself (dpctl, of
    ``__sycl_usm_array_interface__``) past close(), until the object goes: no cycle, so
    dropping the last reference frees it at once."""
    if array._base is None:
        _exports_of(array).add(_SHOWN)  # the registry's release at collection frees it
        array._shown = True
    else:  # a pin of the base that only the view holds
        array._shown = ExportPin(array, hold=False)


def _still_exported(array: USMArray) -> bool:
    """Whether a pin of ``array`` lives, once the DLPack capsules nobody took are forgotten
    (numpy drops the capsule of device memory it refuses: it must not hold the memory)."""
    allocator.forget_unused_exports()
    return bool(array._exports)


_USM_TYPE = int(ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_TYPE)
_USM_UNKNOWN = int(ur_usm_type_t.UR_USM_TYPE_UNKNOWN)
_NO_DTYPE = object()  # view()'s dtype when not given (an explicit None is refused, as view(None))


def _give_back(pool, block, queue) -> int:
    """The release of a USMArray's memory: back to its pool, not to ``urUSMFree``, and with no
    wait (``allocator``: later users are ordered after the commands that used it)."""
    _handle.note_release()
    pool.give_back(block, queue)
    return 0


def _forget(queue: Queue, owner, used_on: list) -> int:
    """The release of a USMArray over memory it does not own: drop the reference it held to
    ``owner`` (which may free the memory: a producer's DLPack deleter) once the work submitted
    so far to ``queue`` and to the queues it was used on too (``used_on``, weak references)
    has completed.  (A close while a copy into it still ran freed the memory under the copy.)"""
    _handle.note_release()
    if owner is None or _handle._forked:
        return 0
    for ref in [queue.ref] + [ref for ref in used_on if ref is not queue.ref]:
        other = ref()
        if other is not None and other._handle is not None:
            queue_module.release_after_barrier(other, (owner,))
        elif not ref.finished:  # gone or closing: until its release's finish has returned
            queue_module.release_after_barrier(ref, (owner,))
    return 0


def _element_stride(stride: int, itemsize: int, what: str, extent: int) -> int:
    """A byte stride of an axis of ``extent`` elements, in elements; ValueError where it is not
    a whole number of them (a view numpy allows, e.g. ``from_pointer`` or ``view(dtype)`` of a
    strided view) on an axis that steps (an axis of one element never does: rounded down)."""
    if stride % itemsize and extent > 1:
        raise ValueError(f"{what}: a stride of {stride} bytes is not a whole number of "
                         f"{itemsize}-byte elements")
    return stride // itemsize


def _same_size_overlap(address: int, other_address: int, nbytes: int) -> bool:
    """Whether ``nbytes`` at ``address`` and ``nbytes`` at ``other_address`` share a byte."""
    return nbytes > 0 and address < other_address + nbytes and other_address < address + nbytes


def _overlap(address: int, shape, strides, itemsize: int, other_address: int, other_shape,
             other_strides, other_itemsize: int) -> bool:
    """Whether two strided layouts touch a common byte range (their spans intersect)."""
    if 0 in shape or 0 in other_shape:
        return False
    low, high = _strided.span(shape, strides, itemsize)
    other_low, other_high = _strided.span(other_shape, other_strides, other_itemsize)
    return address + low < other_address + other_high and \
        other_address + other_low < address + high


def _not_recorded(queue: Queue, what: str, needed: str) -> None:
    """Refuse, in a Graph recording, a copy that would go through a host copy made now: a
    replay reads and writes the user's host memory itself."""
    if recording and queue in recording:
        raise ValueError(f"{what} in a Graph recording: each replay copies the numpy array "
                         f"itself, so it must be {needed} (this one would be copied once, now)")


def _after_earlier_work(queue: Queue, wait_for) -> tuple:
    """Wait for what a copy on ``queue`` after ``wait_for`` would wait for: ``wait_for`` and
    the queue's earlier work, which may write host memory the caller reads next (a
    ``copy_to`` into it, a kernel writing ``np.asarray`` of shared USM).  Returns the copy's
    wait list from then on: nothing."""
    _enqueue_nothing(queue, True, _ordered(queue, wait_for))
    return ()


def _host_reads_now(queue: Queue, wait_for, what: str, needed: str) -> tuple:
    """:func:`_after_earlier_work`, before the host reads a numpy source now (to copy it into
    another layout or dtype); refused in a Graph recording (``_not_recorded``)."""
    _not_recorded(queue, what, needed)
    return _after_earlier_work(queue, wait_for)


def memory_of(arg):
    """The ur_cffi memory a kernel argument passes: ``arg`` itself if it is a USMArray or
    Buffer, the array under a wrapper that passes its address (Triton's ``reinterpret`` keeps it
    as ``base``; another wrapper's ``data_ptr()`` is looked up among the open arrays), else
    None.  What a launch checked once must check is still open."""
    if isinstance(arg, (USMArray, Buffer)):
        return arg
    if not hasattr(arg, "data_ptr"):
        return None
    base = getattr(arg, "base", None)
    if isinstance(base, (USMArray, Buffer)):
        return base
    try:
        address = arg.data_ptr()
    except Exception:  # (closed: the launch that asks refuses it itself)
        return None
    return _array_holding(address) if type(address) is int else None


def _array_holding(address: int) -> USMArray | None:
    """The open USMArray whose memory from the caching allocator holds ``address``, or None
    (a scan of the registry; a closed array's memory that numpy or DLPack still use is in it,
    kept for them: not this array's to check)."""
    for entry in list(_handle._live.values()):
        if entry[1] is _give_back:
            block = entry[2][1]
            if block.address <= address < block.address + block.size:
                owner = entry[0]()
                return owner if owner is not None and owner._handle is not None else None
    return None


def _span_fits(array: USMArray, reading: bool) -> bool:
    """Whether one plain copy of the bytes ``array`` spans may stand for a copy of its
    elements: reading no more than twice their bytes, or writing a span they fill exactly
    (no gap between them to overwrite).  Not structured dtypes (records), whose padding the
    host side would not hold."""
    if array.dtype.fields is not None:
        return False
    if reading:
        low, high = _strided.span(array.shape, array._strides, array.itemsize)
        return high - low <= 2 * array.nbytes
    return _strided.is_dense(array.shape, array._strides, array.itemsize)


def _through_span(array: USMArray, host: np.ndarray, reading: bool, blocking: bool) -> bool:
    """Whether a copy between ``array`` (a view) and ``host`` goes as one plain copy of the
    bytes the view spans, numpy placing the elements on the host side, rather than as UR's
    copies row by row (one per element along a reversed axis: seconds for a[::-1] of a million
    floats on the CPU device): where it needs more than one row and the span fits
    (:func:`_span_fits`), or a read of it costs less than the rows would.  The host side is
    read or written at the call, so a copy that is not blocking goes so only where the rows
    are many and short on a device that copies them one by one (as :func:`_staged_on_host`),
    and returns with the copy done."""
    rows = _strided.copy_rows(array.shape, host.strides, array._strides, array.itemsize)
    if rows <= 1:
        return False
    if not blocking and not _many_short_rows(array, rows):
        return False
    if _span_fits(array, reading):
        return True
    # Reading more than twice the bytes still beats a copy per row where the device makes
    # one (a[:, ::3] of 3000 x 3000 floats: 17.5 s as 3,000,000 row copies, 0.03 s read whole).
    if not reading or array.dtype.fields is not None or \
            not array._queue.device.copies_rows_one_by_one:
        return False
    low, high = _strided.span(array.shape, array._strides, array.itemsize)
    return high - low <= rows * _ROW_READ_BYTES


_ROW_READ_BYTES = 4096
"""What a row's copy costs, in bytes read instead (on devices that copy rows one by one): 5.8
us per row above; reading and placing the 36 MB span took 0.8 ns a byte, and a larger span's
fresh pages cost more (a[::32000] of 512 MiB of int8 took 2 to 3.5 s so, 0.05 s by rows)."""

_SPAN_PART_BYTES = 16 << 20
"""The most host memory a read through a view's span holds at once: a larger span is read
in parts along its outermost axis."""


_STAGED_ROWS = 32
_STAGED_ROW_BYTES = 4096


def _staged_on_host(destination: USMArray, source: USMArray) -> bool:
    """Whether a copy between two USM views goes through host memory, as two plain copies of
    the bytes each spans with numpy placing the elements, rather than as UR's copies: on
    devices whose 2D copies go row by row (``Device.copies_rows_one_by_one``), where the rows
    are many and short (seconds for ``a.T`` of a million floats on the CPU device, against
    milliseconds) and both spans fit (:func:`_span_fits`).  The call then returns with the
    copy done."""
    rows = _strided.copy_rows(destination.shape, destination._strides, source._strides,
                              destination.itemsize)
    return _many_short_rows(destination, rows) and _span_fits(source, reading=True) and \
        _span_fits(destination, reading=False)


def _many_short_rows(array: USMArray, rows: int) -> bool:
    """Whether UR would copy ``array`` as ``rows`` rows that are many and short, each a copy
    of its own (``Device.copies_rows_one_by_one``)."""
    return array._queue.device.copies_rows_one_by_one and rows >= _STAGED_ROWS and \
        array.nbytes <= rows * _STAGED_ROW_BYTES


def _as_whole(array: USMArray, what: str, other):
    """A view of ``other`` (a USMArray or numpy array) in ``array``'s shape, for a copy of the
    whole array (``copy_from``/``copy_to`` without ``offset=``), or None where no view has
    that shape (the caller copies it into that shape, on the copy's queue and after what the
    copy waits for).  ``other`` must have that shape already, or as many elements with either
    side flat (at most one axis) or the two the same but for axes of extent 1: a forgotten
    transpose or a smaller source copied part of the array, silently."""
    shape = tuple(other.shape)
    if shape == array.shape:
        return other
    if math.prod(shape) != array.size or not (
            len(shape) <= 1 or array.ndim <= 1 or
            tuple(e for e in shape if e != 1) == tuple(e for e in array.shape if e != 1)):
        raise ValueError(f"{what}: shape {shape} does not match {array.shape}; for part of a "
                         f"contiguous array, pass offset= (in elements)")
    try:
        if isinstance(other, USMArray):
            return other.view(*array.shape)
        try:
            return np.reshape(other, array.shape, copy=False)  # (ValueError: needs a copy)
        except TypeError:  # numpy before 2.1 has no copy=; 2.5 deprecates setting a shape
            view = other.view()
            view.shape = array.shape  # (AttributeError where that needs a copy)
            return view
    except (ValueError, AttributeError):
        return None


def _relaid(fresh: USMArray, shape, strides=None) -> USMArray:
    """``fresh`` (a contiguous array just made, owning its memory) as ``shape`` and ``strides``
    (None: C-contiguous) over the same bytes, still the owner: a reshape's or ``empty_like``'s
    new memory then goes with its ``close()`` (a view of it would close alone, the memory
    staying allocated)."""
    shape = tuple(shape)
    fresh._shape = shape
    fresh._strides = tuple(strides) if strides is not None else \
        _strided.contiguous_strides(shape, fresh.itemsize)
    return fresh


def _is_shape(given) -> bool:
    """Whether ``view``'s one argument is a shape (an integer or a sequence of them), not a
    dtype (a structured one is a list of tuples)."""
    return isinstance(given, (int, np.integer)) or isinstance(given, (tuple, list)) and all(
        isinstance(extent, (int, np.integer)) for extent in given)


_over_arrays: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Arrays over the memory of an array of their context (``from_pointer(..., owner=array)``)
-> that array, whose memory's reuse their queues order too (:meth:`USMArray.record_queue`)."""


def _root(array) -> USMArray:
    """The array that owns ``array``'s memory (``array`` itself unless it is a view)."""
    return array if array._base is None else array._base


def _read_only(name: str, what: str) -> property:
    """A USMArray attribute that views and copies rely on (``a.shape = ...`` would leave its
    strides and size those of the old shape)."""
    return _checks.read_only("USMArray", name, what)


def _pointer(address: int):
    return ffi.cast("void *", address)


class USMArray(_handle.Resource):
    """An n-dimensional strided array in USM memory of ``queue``'s context and device.

    ``kind`` is ``"device"`` (default), ``"host"`` or ``"shared"``.  Memory comes from the
    caching allocator (``ur_cffi.allocator``) and goes back to it when the array is closed or
    collected.  Indexing, ``reshape``, ``view``, ``transpose``/``permute``/``T`` give views
    that share the memory and keep it alive; ``strides`` are in bytes (numpy), ``stride(dim)``
    in elements (PyTorch).  Copies go on the array's queue unless another queue of the same
    context is given.  Raises UR's out-of-memory error, a ``MemoryError``
    (``OutOfDeviceMemoryError``, or ``OutOfHostMemoryError`` as the CPU device answers), or
    ``InvalidUsmSizeError`` when UR cannot allocate.
    """

    __slots__ = ("_queue", "_shape", "_dtype", "_kind", "_size", "_nbytes", "_address",
                 "_strides", "_base", "_exports", "_shown")
    _release_function = "urUSMFree"

    def __init__(self, queue: Queue, shape, dtype=np.float32, kind: str = "device"):
        if type(queue) is not Queue:
            _check_queue(queue)
        if type(kind) is not str or kind not in USM_KINDS:
            raise ValueError(f"kind must be one of {USM_KINDS}, not {kind!r}")
        if queue._handle is None or queue._context._handle is None:
            queue.handle, queue.context.handle  # noqa: B018 - raise ClosedError (cached
            # memory would otherwise hand out memory of a closed context)
        self._queue, self._kind = queue, kind
        if type(shape) is int and 0 <= shape <= _INTP_MAX:
            shape, size = (shape,), shape
        else:
            shape = _shape(shape)
            size = math.prod(shape)
        self._shape, self._size = shape, size
        self._dtype = dtype = _dtype(dtype)
        if dtype.hasobject:
            _no_objects(dtype, "USMArray")
        self._nbytes = nbytes = size * dtype.itemsize
        if nbytes > SIZE_MAX:
            raise ValueError(f"shape {shape} of {dtype} is {nbytes} bytes, more than size_t "
                             f"holds ({SIZE_MAX})")
        if not size:
            _strided.check_empty_span(f"shape {shape} of {dtype}", shape, dtype.itemsize)
        self._strides = (dtype.itemsize,) if len(shape) == 1 else \
            _strided.contiguous_strides(shape, dtype.itemsize)
        self._base = self._exports = None
        try:
            self._take_memory(queue, kind, nbytes or 1)  # empty: a block still
        except allocator.EmptyCacheFirst:  # (at a memory limit, or out of memory)
            allocator.empty_cache()
            self._take_memory(queue, kind, nbytes or 1, True)
        if _interrupts.resend is not None:  # Ctrl-C held back in an allocation or a release:
            _interrupts.deliver_held()  # raised here (a loop would take each re-send in one)

    @hold_back_in  # Ctrl-C waits until this array owns the memory (_interrupts)
    def _take_memory(self, queue: Queue, kind: str, nbytes: int, emptied: bool = False) -> None:
        if _interrupts._installed is None:  # hold_back_in needs it: the main thread's first use
            _interrupts.install()
        pool = allocator.pool_for(queue, kind)
        block = pool.take(queue, nbytes, self, emptied)
        try:
            self._own(block, (queue,), (pool, block, queue), _give_back)
        except BaseException:  # before this array owned the memory (MemoryError)
            if not _handle.owns(block):
                pool.give_back(block, queue)
            raise
        self._address = block.address

    @classmethod
    def _over(cls, queue: Queue, address: int, shape, dtype, kind: str, strides=None,
              owner=None) -> USMArray:
        """An array over memory it does not allocate (``ur_cffi.interop``): ``owner`` is kept
        alive as long as the array or a view of it, and nothing is freed."""
        array = object.__new__(cls)
        array._queue, array._kind, array._shape, array._dtype = queue, kind, shape, dtype
        array._size = math.prod(shape)
        array._nbytes = array._size * dtype.itemsize
        array._strides = strides if strides is not None else \
            _strided.contiguous_strides(shape, dtype.itemsize)
        array._base, array._exports, array._address = None, None, address
        # (used_on: the other queues it is used on, noted by _used_on, which _forget waits for)
        array._own(_pointer(address), parents=(queue,), release_args=(queue, owner, []),
                   release=_forget)
        return array

    def _view(self, shape, strides, offset: int = 0, dtype=None) -> USMArray:
        """A view of this array's memory at byte ``offset`` from its first element."""
        if self._handle is None or (self._base is not None and self._base._handle is None):
            self.handle  # noqa: B018 - raises ClosedError
        if len(shape) > _MAX_DIMENSIONS:
            _check_dimensions(shape)
        view = object.__new__(USMArray)
        view._queue, view._kind = self._queue, self._kind
        view._dtype = dtype = self._dtype if dtype is None else dtype
        view._shape, view._strides = tuple(shape), tuple(strides)
        view._size = math.prod(view._shape)
        view._nbytes = view._size * dtype.itemsize
        view._address = self._address + offset
        view._base = self._base if self._base is not None else self
        view._handle = True  # a view owns no handle: it is open until it or its base closes
        return view

    # -- what the array is -----------------------------------------------------------------

    queue = _read_only("queue", "the queue its copies go on (copies take another of its "
                       "context as queue=)")
    shape = _read_only("shape", "its extents (reshape() gives a view of another shape)")
    dtype = _read_only("dtype", "its element type (view(dtype) reinterprets its bytes)")
    kind = _read_only("kind", "its USM kind: 'device', 'host' or 'shared'")
    size = _read_only("size", "its number of elements")
    nbytes = _read_only("nbytes", "the bytes its elements take")

    @property
    def context(self):
        """The context the memory belongs to."""
        return self._queue.context

    @property
    def device(self):
        """The device the memory belongs to (the array API's ``device``)."""
        return self._queue.device

    @property
    def base(self) -> USMArray | None:
        """The array that owns the memory of this view; None if this array owns it (numpy)."""
        return self._base

    @property
    def data(self) -> USMArray:
        """This array (PyTorch's ``tensor.data``; Triton's ``reinterpret`` reads it)."""
        return self

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes to step in each dimension (numpy's ``strides``)."""
        return self._strides

    def stride(self, dim: int | None = None):
        """Elements to step in dimension ``dim``, or a tuple for all (PyTorch's ``stride``)."""
        itemsize = self._dtype.itemsize
        if dim is None:
            return tuple(_element_stride(s, itemsize, "stride", n)
                         for s, n in zip(self._strides, self._shape))
        axis = _strided.axis_index(self.ndim, dim, "stride")
        return _element_stride(self._strides[axis], itemsize, "stride", self._shape[axis])

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    def numel(self) -> int:
        """The number of elements (PyTorch's name for ``size``)."""
        return self._size

    def element_size(self) -> int:
        """Bytes per element (PyTorch's name for ``itemsize``)."""
        return self._dtype.itemsize

    @property
    def grad(self) -> None:
        """None: there is no autograd.  Setting it to None is accepted, as Triton's
        ``do_bench(grad_to_none=[...])`` does between runs."""
        return None

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            raise TypeError(f"ur_cffi arrays have no gradients: grad can only be set to None, "
                            f"not {type(value).__name__}")

    def is_contiguous(self) -> bool:
        """Whether the elements lie in C order without gaps (PyTorch's ``is_contiguous``)."""
        return _strided.is_contiguous(self._shape, self._strides, self._dtype.itemsize)

    @property
    def handle(self):
        """The USM pointer of the first element (a ``void *`` cdata); raises
        :class:`ClosedError` once this array (or, for a view, its base) is closed."""
        if self._base is None:
            _handle.Resource.handle.fget(self)  # raises ClosedError
        elif self._handle is None:
            raise _handle.ClosedError("USMArray view is closed")
        else:
            self._base.handle  # noqa: B018 - raises ClosedError
        return ffi.cast("void *", self._address)

    @property
    def closed(self) -> bool:
        """True once closed, or for a view once its base is closed."""
        return self._handle is None or (self._base is not None and self._base._handle is None)

    @hold_back_in  # a release is never cut in half by Ctrl-C (_interrupts)
    def close(self) -> None:
        """Give the memory back (to the caching allocator) now, or, while a numpy view or
        DLPack tensor of it lives (:class:`ExportPin`), once the last of them is gone.
        Closing a view closes only the view; closing the base makes its views raise
        ``ClosedError``."""
        if self._handle is None:
            return
        if _interrupts._installed is None:
            _interrupts.install()
        self._handle = None
        if self._base is not None:
            _handle.note_release()  # launches reusing this view's argument block recheck
        elif self._exports and _still_exported(self):
            _handle.note_release()  # the last ExportPin to go releases the memory
        else:
            _handle._release_entry(self._serial)  # _give_back or _forget: they cannot fail

    def data_ptr(self) -> int:
        """The address of the first element (a view's own) as an integer; raises
        ``ClosedError`` once closed."""
        if self._handle is None or (self._base is not None and self._base._handle is None):
            self.handle  # noqa: B018 - raises ClosedError
        return self._address

    # -- views -----------------------------------------------------------------------------

    def __getitem__(self, key) -> USMArray:
        """A view (basic indexing: integers, slices with any step, None, ...); an integer for
        every axis gives a 0-d view (CuPy's choice), read it with :meth:`item`."""
        shape, strides, offset = _strided.index(self._shape, self._strides, key)
        return self._view(shape, strides, offset)

    def __setitem__(self, key, value) -> None:
        """Write ``value`` (a number, or a numpy array, sequence or USMArray broadcast to the
        view and cast as numpy does) into ``self[key]``; blocking, like numpy's assignment.
        Raises ``ValueError`` for a value of one or more dimensions where ``key`` has an
        integer for each axis, as numpy does."""
        target = self[key]
        if not target._shape and _strided.names_one_element(len(self._shape), key):
            shape = value.shape if isinstance(value, USMArray) else np.shape(value)
            if shape:
                raise ValueError(f"a[{key!r}] = value: a value of shape {shape} for one element "
                                 "(numpy refuses it too: setting an array element with a "
                                 "sequence); add ... to the index to broadcast it")
        target._assign(value, None)

    def _assign(self, value, queue: Queue | None) -> None:
        """``self[...] = value`` on ``queue`` (None: the array's own)."""
        on = self._queue if queue is None else queue
        if not self.is_contiguous():
            self._check_written("a[key] = value")
        if isinstance(value, USMArray):
            if value.context is not self.context:
                raise ValueError("a[key] = value: the value array belongs to another context")
            if value.shape == self._shape and value.dtype == self._dtype:
                read = ()
                if self._overlaps(value):  # numpy reads the whole value before writing
                    value, copied = value._in_shape(value.shape, on, ())
                    read = (copied,)
                self.copy_from(value, queue=queue, wait_for=read)
                return
            _not_recorded(on, "a[key] = value", "of the target's shape and dtype")
            value = value.to_numpy(queue=on)  # broadcast and cast on the host
        if isinstance(value, np.ndarray):
            if type(value) is not np.ndarray:  # a subclass: np.matrix stays 2-d when reshaped
                value = value.view(np.ndarray)
            if value.dtype != self._dtype or value.shape != self._shape or \
                    not value.flags.c_contiguous:
                _host_reads_now(on, (), "a[key] = value",
                                "C-contiguous, of the target's shape and dtype")
            host = value if value.dtype == self._dtype else value.astype(self._dtype)
        elif np.ndim(value) != 0:  # (its rows may be numpy arrays that earlier work writes)
            _host_reads_now(on, (), "a[key] = value",
                            "C-contiguous, of the target's shape and dtype")
            host = np.asarray(value, dtype=self._dtype)  # numpy's checks of Python numbers
        else:  # numpy's assignment of one value: truncated, wrapped or refused as numpy does
            if isinstance(value, ctypes._SimpleCData):  # (numpy reads c_double(2.5) as text)
                value = value.value
            cell = np.empty((), self._dtype)
            cell[()] = value
            self.fill(cell, queue=queue)
            return
        leading = host.ndim - self.ndim
        if leading > 0 and not isinstance(value, (list, tuple)) and \
                all(extent == 1 for extent in host.shape[:leading]):
            host = host.reshape(host.shape[leading:])  # numpy: for all but nested sequences
        try:
            host = np.broadcast_to(host, self._shape)
        except ValueError:
            raise ValueError(f"a[key] = value: a value of shape {host.shape} does not broadcast "
                             f"to the target's shape {self._shape}") from None
        self.copy_from(np.ascontiguousarray(host), queue=queue)

    def reshape(self, *shape) -> USMArray:
        """This array in ``shape`` (one extent may be -1): a view where strides can express it
        (numpy's rule), else a contiguous copy on the same queue."""
        if not shape:
            raise TypeError("reshape takes the new shape: reshape(2, 3) or reshape((2, 3))")
        target = _strided.new_shape(shape, self._size, self.itemsize)
        strides = _strided.reshaped_strides(self._shape, self._strides, target, self.itemsize)
        if strides is None:
            _check_dimensions(target)
            return _relaid(self.copy(), target)
        return self._view(target, strides)

    def view(self, *shape_or_dtype, dtype=_NO_DTYPE) -> USMArray:
        """A view: ``view()`` of the same shape, ``view(dtype)`` reinterprets the bytes
        (numpy's ``view``; the last axis must be contiguous where the item size changes),
        ``view(shape)`` reshapes and raises where that needs a copy (PyTorch's ``view``)."""
        if dtype is not _NO_DTYPE:
            if shape_or_dtype:
                raise TypeError(f"view takes a dtype or a shape, not {shape_or_dtype} and "
                                f"dtype={dtype!r}")
            return self._view_as(_dtype(dtype))
        if not shape_or_dtype:
            return self._view(self._shape, self._strides)
        if len(shape_or_dtype) == 1 and not _is_shape(shape_or_dtype[0]):
            return self._view_as(_dtype(shape_or_dtype[0]))
        target = _strided.new_shape(shape_or_dtype, self._size, self.itemsize)
        strides = _strided.reshaped_strides(self._shape, self._strides, target, self.itemsize)
        if strides is None:
            raise ValueError(f"view {target} of an array of shape {self._shape} and strides "
                             f"{self._strides} needs a copy; use reshape()")
        return self._view(target, strides)

    def _view_as(self, dtype: np.dtype) -> USMArray:
        _no_objects(dtype, "view")
        old, new = self.itemsize, dtype.itemsize
        if not new:
            raise ValueError(f"view as {dtype}: a dtype of 0 bytes holds no elements")
        if old == new:
            alignment = dtype.alignment
            if alignment > self._dtype.alignment and self._size and (
                    self._address % alignment
                    or any(s % alignment for s, n in zip(self._strides, self._shape) if n > 1)):
                raise ValueError(f"view as {dtype}: the address 0x{self._address:x} or strides "
                                 f"{self._strides} are not multiples of its alignment, "
                                 f"{alignment} bytes")
            return self._view(self._shape, self._strides, dtype=dtype)
        if not self._shape:
            raise ValueError(f"view as {dtype}: a 0-d array of {self._dtype} cannot change its "
                             "item size")
        if new < old and old % new:
            raise ValueError(f"view as {dtype}: a smaller item size must divide the array's, "
                             f"{old} bytes (numpy's rule)")
        # As numpy: a last axis of 0 or 1 elements, or of an array of none, is contiguous
        # whatever its stride.
        if self._size and self._shape[-1] > 1 and self._strides[-1] != old:
            raise ValueError(f"view as {dtype}: the last axis must be contiguous to change the "
                             f"item size from {old} to {new}")
        last = self._shape[-1] * old
        if last % new:
            raise ValueError(f"view as {dtype}: the last axis of {last} bytes is not a "
                             f"multiple of {new}")
        strides = (*self._strides[:-1], new)
        alignment = dtype.alignment  # (as a kernel loads it: complex128's is 8, S3's 1)
        # (an axis of one element uses no stride, as numpy sees it)
        if self._size and any(s % alignment for s, n in zip(strides, self._shape) if n > 1):
            raise ValueError(f"view as {dtype}: strides {strides} are not multiples of its "
                             f"alignment, {alignment} bytes")
        if self._size and self._address % alignment:
            raise ValueError(f"view as {dtype}: the address 0x{self._address:x} is not a "
                             f"multiple of its alignment, {alignment} bytes")
        return self._view((*self._shape[:-1], last // new), strides, dtype=dtype)

    def transpose(self, *axes) -> USMArray:
        """A view with the axes reversed, or ordered as ``axes`` (numpy's ``transpose``; to
        swap two axes as PyTorch's ``transpose(a, b)`` does, use :meth:`swapaxes`)."""
        reverse = not axes or (len(axes) == 1 and axes[0] is None)
        order = tuple(reversed(range(self.ndim))) if reverse else \
            _strided.axes(self.ndim, axes, "transpose")
        if len(axes) == 2 and order == (0, 1):  # (PyTorch code's x.transpose(0, 1) or (-2, -1))
            raise ValueError(f"transpose{axes} of a 2-D array: numpy's transpose takes the axes' "
                             "new order, so this keeps it as it is, where PyTorch's swaps the "
                             f"two: a.swapaxes{axes} or a.T swaps them")
        return self._view([self._shape[a] for a in order], [self._strides[a] for a in order])

    def permute(self, *dims) -> USMArray:
        """A view with the axes in the order ``dims`` (PyTorch's ``permute``)."""
        order = _strided.axes(self.ndim, dims, "permute")
        return self._view([self._shape[a] for a in order], [self._strides[a] for a in order])

    def swapaxes(self, axis1, axis2) -> USMArray:
        """A view with two axes exchanged (numpy's ``swapaxes``, PyTorch's ``transpose``)."""
        a = _strided.axis_index(self.ndim, axis1, "swapaxes")
        b = _strided.axis_index(self.ndim, axis2, "swapaxes")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self._view([self._shape[i] for i in order], [self._strides[i] for i in order])

    @property
    def T(self) -> USMArray:
        """The view with the axes reversed."""
        return self.transpose()

    def squeeze(self, axis=None) -> USMArray:
        """A view without the axes of extent 1 (or only ``axis``, an int or sequence of them,
        each of extent 1: ``ValueError`` otherwise, as numpy)."""
        if axis is None:
            drop = {i for i, extent in enumerate(self._shape) if extent == 1}
        else:
            drop = _strided.axis_set(self.ndim, axis, "squeeze")
            wide = [i for i in sorted(drop) if self._shape[i] != 1]
            if wide:
                raise ValueError(f"squeeze: axis {wide[0]} has extent {self._shape[wide[0]]}, "
                                 "not 1")
        keep = [i for i in range(self.ndim) if i not in drop]
        return self._view([self._shape[i] for i in keep], [self._strides[i] for i in keep])

    def unsqueeze(self, dim) -> USMArray:
        """A view with an axis of extent 1 inserted before ``dim`` (PyTorch's ``unsqueeze``,
        numpy's ``expand_dims``; ``dim`` from ``-ndim - 1`` to ``ndim``)."""
        position = _strided.axis_index(self.ndim + 1, dim, "unsqueeze")
        shape, strides = list(self._shape), list(self._strides)
        # PyTorch's stride for the new axis (not numpy's 0 of a[..., None]): x.stride(-1) == 1
        stride = shape[position] * strides[position] if position < self.ndim else self.itemsize
        shape.insert(position, 1)
        strides.insert(position, stride)
        return self._view(shape, strides)

    def flip(self, axis=None) -> USMArray:
        """A view with the elements of ``axis`` (an int or sequence of them; None: every axis)
        in reverse order (numpy's ``flip``; PyTorch's ``flip`` copies)."""
        axes = range(self.ndim) if axis is None else _strided.axis_set(self.ndim, axis, "flip")
        return self[tuple(slice(None, None, -1) if i in axes else slice(None)
                          for i in range(self.ndim))]

    def ravel(self) -> USMArray:
        """The elements along one axis: a view where strides allow, else a copy (numpy's
        ``reshape(-1)``; its ``ravel`` copies where the array is not C-contiguous; PyTorch's
        ``flatten``)."""
        return self.reshape(-1)

    def flatten(self) -> USMArray:
        """A new one-axis array of the elements, always a copy (numpy's ``flatten``; PyTorch's
        ``flatten`` is :meth:`ravel`)."""
        return _relaid(self.copy(), (self._size,))

    def contiguous(self) -> USMArray:
        """This array if it is C-contiguous, else a contiguous copy (PyTorch's
        ``contiguous``)."""
        return self if self.is_contiguous() else self.copy()

    def dim(self) -> int:
        """The number of dimensions (PyTorch's name for ``ndim``)."""
        return len(self._shape)

    def copy(self, *, queue: Queue | None = None, kind: str | None = None) -> USMArray:
        """A new contiguous array with this array's elements (same queue and kind unless
        given), copied on the device."""
        out = USMArray(self._queue_for(queue), self._shape, self._dtype,
                       self._kind if kind is None else kind)
        out.copy_from(self, queue=queue)
        return out

    def astype(self, dtype, *, copy: bool = True) -> USMArray:
        """A new array of ``dtype`` with this array's elements cast as numpy casts them
        (numpy's ``astype``, PyTorch's ``to(dtype)``), laid out as this one is, on its queue
        and of its kind; ``copy=False``: this array itself where it is of ``dtype`` already.
        A cast goes through host memory (read, cast by numpy, written back), blocking."""
        from .creation import empty_like

        target = _dtype(dtype)
        copy = _checks.flag("astype: copy", copy)
        if not copy and target == self._dtype:
            self.data_ptr()  # noqa: B018 - raises ClosedError
            return self
        out = empty_like(self, target)
        out._assign(self, None)
        return out

    def zero_(self) -> USMArray:
        """Set every element to zero, in place (PyTorch's ``zero_``; a blocking fill); returns
        this array.  ``@triton.autotune(reset_to_zero=...)`` calls it.  On the current Triton
        queue (see :data:`current_queue`)."""
        if self._size:
            queue = _current_queue_of(self)
            if self.is_contiguous():
                self.reshape(-1).view(np.uint8).fill(0, queue=queue)
            else:
                self.fill(np.zeros((), self._dtype), queue=queue)  # every byte 0: "" for str
        return self

    def clone(self) -> USMArray:
        """A new array with this array's elements, laid out as it is (PyTorch's ``clone``, as
        :func:`~ur_cffi.empty_like` lays it out; :meth:`copy` makes a contiguous one), made
        and copied on the current Triton queue (:data:`current_queue`)."""
        from .creation import empty_like

        queue = _current_queue_of(self)
        out = empty_like(self, queue=self._queue_for(queue))
        out.copy_from(self, queue=queue)
        return out

    def copy_(self, source) -> USMArray:
        """Write ``source`` into this array as ``self[...] = source`` does (PyTorch's ``copy_``:
        broadcast and cast), on the current Triton queue (:data:`current_queue`); returns this
        array.  ``@triton.autotune(restore_value=...)`` calls it with a :meth:`clone`."""
        self._assign(source, _current_queue_of(self))
        return self

    def record_queue(self, queue: Queue) -> None:
        """Note that commands on ``queue`` (another queue of this context) use this array's
        memory: once freed, it is reused only after the work submitted to ``queue`` until the
        free (PyTorch's ``record_stream``).  Views record for their base.  Copies and fills on
        another queue record it themselves; kernel launches there need this."""
        _check_queue(queue)
        self._queue_for(queue)  # which records it
        root = _root(self)
        if root._handle is None:
            root.handle  # noqa: B018 - raises ClosedError

    def _used_on(self, queue: Queue) -> None:
        """:meth:`record_queue` for ``queue`` (of this context), unless it is the memory's
        own queue: on the allocator's block (of a closed array too, whose memory a pin
        keeps); for an array over another array's memory (``from_pointer(..., owner=array)``),
        that array's; for one over memory of an owner outside ur_cffi, the list of queues its
        release waits for (``_forget``'s ``used_on``)."""
        root = _root(self)
        if queue is not root.queue and type(root._handle) is allocator.Block:
            allocator.record_queue(root._handle, queue)
        elif _over_arrays and (owner := _over_arrays.get(root)) is not None:
            owner._used_on(queue)
        elif queue is not root.queue and (entry := _handle._live.get(root._serial)):
            release, args = entry[1], entry[2]
            if release is _give_back:  # closed, its memory kept for a pin: (pool, block, queue)
                allocator.record_queue(args[1], queue)
            elif release is _forget and args[1] is not None:  # (queue, owner, used_on)
                queue_module.note_queue(args[2], queue)

    def item(self):
        """The only element as a Python number (a blocking read)."""
        if self._size != 1:
            raise ValueError(f"item() of an array of {self._size} elements")
        return self.to_numpy().item()

    # -- copies ----------------------------------------------------------------------------

    def _queue_for(self, queue: Queue | None) -> Queue:
        """The queue a command on this array goes to: ``queue``, checked, which from then on
        orders the memory's reuse too (:meth:`record_queue`), or the array's own."""
        if queue is None:
            queue = self._queue
            if queue._handle is None:
                if _handle._forked or self.closed:  # (closed too at loader.teardown())
                    (queue if _handle._forked else self).handle  # noqa: B018 - ClosedError
                raise _handle.ClosedError(
                    f"the queue this {self._shape} {self._dtype} array was made on is closed; "
                    "give the calls that take queue= (to_numpy, copy_from, copy_to, fill, "
                    "copy) another queue of its context: a.to_numpy(queue=q), "
                    "a.copy(queue=q) for an array that works on q")
            if self._base is not None:  # a view may have another queue (from_dlpack)
                self._used_on(queue)
            return queue
        _check_queue(queue)
        if queue.context is not self._queue.context:
            raise ValueError(f"{queue!r} is not of the context this array was allocated in")
        self._used_on(queue)
        return queue

    def _strided_copy(self, queue: Queue, dst: int, dst_strides, src: int, src_strides,
                      blocking: bool, wait_for, keep_alive: tuple) -> Event:
        """Copy the elements of :attr:`shape` between two strided layouts (either side this
        array, a USMArray or host memory): UR's 2D copies where rows fit, one Event for all."""
        plan = _strided.copy_plan(self._shape, dst_strides, src_strides, self.itemsize)
        keep_alive = _held(queue, keep_alive)
        wait_for = _ordered(queue, wait_for)
        if not plan:
            return _enqueue_nothing(queue, blocking, wait_for)
        commands = []
        for d, s, width, height, dst_pitch, src_pitch in plan:
            if height == 1:
                commands.append((lib.urEnqueueUSMMemcpy,
                                 (False, _pointer(dst + d), _pointer(src + s), width)))
            else:
                commands.append((lib.urEnqueueUSMMemcpy2D,
                                 (False, _pointer(dst + d), dst_pitch, _pointer(src + s),
                                  src_pitch, width, height)))
        if len(commands) == 1 and commands[0][0] is lib.urEnqueueUSMMemcpy:
            return enqueue_command(queue, *commands[0], wait_for, keep_alive, blocking)
        # The copies make no events of their own; a barrier after them is the Event of all
        # (in a Graph recording: each copy recorded, then a marker; enqueue_command).
        # (Not one event per copy: oneAPI 2026.2's leak checker does not register the events
        # of urEnqueueUSMMemcpy2D and reports every later use of them.)
        return enqueue_command(queue, lib.urEnqueueEventsWaitWithBarrier, (), wait_for,
                               keep_alive, blocking, before=tuple(commands))

    def _staging(self) -> tuple[np.ndarray, int]:
        """``(a numpy array laid out as this view, over a buffer of the bytes it spans, and the
        first element's offset from the lowest byte)``, for :meth:`_copy_span`."""
        low, high = _strided.span(self._shape, self._strides, self.itemsize)
        buffer = np.empty(high - low, np.uint8)
        return np.ndarray(self._shape, self._dtype, buffer=buffer, offset=-low,
                          strides=self._strides), low

    def _copy_span(self, queue: Queue, staging: np.ndarray, low: int, to_host: bool,
                   blocking: bool, wait_for) -> Event:
        """One plain copy of the bytes this view spans, between them and ``staging``'s buffer
        (see :func:`_through_span`)."""
        buffer = staging.base
        _wait_before_pageable_copy(queue, buffer, wait_for)
        device, host = self.data_ptr() + low, buffer.ctypes.data  # (raises ClosedError)
        return _enqueue_memcpy(queue, *((host, device) if to_host else (device, host)),
                               buffer.nbytes, blocking, wait_for, (buffer, self))

    def _overlaps(self, other: USMArray) -> bool:
        return _overlap(self._address, self._shape, self._strides, self.itemsize,
                        other._address, other.shape, other._strides, other.itemsize)

    def _overlaps_host(self, host: np.ndarray) -> bool:
        """Whether ``host`` (e.g. ``np.asarray`` of host USM) shares bytes with this array."""
        return self._kind != "device" and _overlap(
            self._address, self._shape, self._strides, self.itemsize, host.ctypes.data,
            host.shape, host.strides, host.itemsize)

    def _check_overlap(self, other: USMArray, what: str) -> None:
        if self._overlaps(other):
            raise ValueError(f"{what}: the source's bytes and the destination's overlap or "
                             "interleave (UR copies between distinct ranges only; assignment, "
                             "a[...] = b, copies through a temporary)")

    def copy_from(self, source, *, offset: int | None = None, queue: Queue | None = None,
                  blocking: bool = True, wait_for=()) -> Event:
        """Copy a numpy array or USMArray of the same dtype into this array.  The shapes must
        match (strides may differ on either side), or one side be flat with as many elements.
        With ``offset`` (in elements, over the flattened array), both contiguous: any number
        of elements that fits from there.  Returns the copy's Event.

        The source is read after ``wait_for`` and the queue's earlier work.  A numpy source
        that must first be copied on the host (not C-contiguous where this array is, negative
        strides, a view of this array's own memory) is copied once that work is done: the
        call waits for it even with ``blocking=False``.  A copy between USM views that goes
        through the host (``_staged_on_host``) is done in the call."""
        queue = self._queue_for(queue)
        if blocking is not True and blocking is not False:
            blocking = _checks.flag("copy_from: blocking", blocking)
        if isinstance(source, USMArray):
            if source.context is not self.context:
                raise ValueError("copy_from: the source array belongs to another context")
            if source.dtype != self._dtype:
                raise TypeError(f"copy_from: dtype {source.dtype} does not match {self._dtype}")
            source.data_ptr()  # noqa: B018 - raises ClosedError
            if offset is None:
                whole = _as_whole(self, "copy_from", source)
                if whole is None:
                    whole, copied = source._in_shape(self._shape, queue, wait_for)
                    wait_for = (copied,)
                source, offset = whole, 0
            source._used_on(queue)
            if self.is_contiguous() and source.is_contiguous():
                offset, _ = _span("copy_from", offset, source.size, self._size)
                if _same_size_overlap(self._address + offset * self.itemsize, source._address,
                                      source.nbytes):
                    raise ValueError(f"copy_from: the source at offset {offset} overlaps "
                                     "(UR copies between distinct ranges only)")
                return _enqueue_memcpy(queue, self.data_ptr() + offset * self.itemsize,
                                       source.data_ptr(), source.nbytes, blocking, wait_for,
                                       (source, self))
            self._check_written("copy_from")
            self._same_shape("copy_from", source.shape, offset)
            self._check_overlap(source, "copy_from")
            if _staged_on_host(self, source) and not (recording and queue in recording):
                source_span, source_low = source._staging()
                source._copy_span(queue, source_span, source_low, to_host=True, blocking=True,
                                  wait_for=wait_for)
                target_span, target_low = self._staging()
                target_span[...] = source_span
                return self._copy_span(queue, target_span, target_low, to_host=False,
                                       blocking=True, wait_for=())
            return self._strided_copy(queue, self.data_ptr(), self._strides, source.data_ptr(),
                                      source._strides, blocking, wait_for, (source, self))
        host = _host_view(source, self._dtype, "copy_from")
        if offset is None:
            whole = _as_whole(self, "copy_from", host)
            if whole is None:
                wait_for = _host_reads_now(queue, wait_for, "copy_from",
                                           "a view in the destination's shape")
                whole = np.reshape(host, self._shape)
            host, offset = whole, 0
        if self._overlaps_host(host):  # np.asarray of this host USM: read it first (numpy)
            wait_for = _host_reads_now(queue, wait_for, "copy_from",
                                       "apart from this array's memory")
            host = host.copy()
        if self.is_contiguous():
            if not host.flags.c_contiguous:
                wait_for = _host_reads_now(queue, wait_for, "copy_from", "C-contiguous")
                host = np.ascontiguousarray(host)
            offset, _ = _span("copy_from", offset, host.size, self._size)
            _wait_before_pageable_copy(queue, host, wait_for)
            return _enqueue_memcpy(queue, self.data_ptr() + offset * self.itemsize,
                                   host.ctypes.data, host.nbytes, blocking, wait_for,
                                   (host, self))
        self._check_written("copy_from")
        self._same_shape("copy_from", host.shape, offset)
        if _through_span(self, host, False, blocking) and not (recording and queue in recording):
            _after_earlier_work(queue, wait_for)  # the source is read now
            staging, low = self._staging()
            staging[...] = host
            return self._copy_span(queue, staging, low, to_host=False, blocking=True,
                                   wait_for=())
        if any(s < 0 for s in host.strides):
            wait_for = _host_reads_now(queue, wait_for, "copy_from", "with non-negative strides")
            host = np.ascontiguousarray(host)
        _wait_before_pageable_copy(queue, host, wait_for)
        return self._strided_copy(queue, self.data_ptr(), self._strides, host.ctypes.data,
                                  host.strides, blocking, wait_for, (host, self))

    def _check_written(self, what: str) -> None:
        """Raise where elements of this (non-contiguous) array share memory (a stride of 0
        from ``from_pointer`` or DLPack, PyTorch's ``expand``): a write would leave one of
        the values written there, unspecified which (numpy and PyTorch refuse it too)."""
        if not _strided.may_overlap(self._shape, self._strides, self.itemsize):
            return
        overlaps = _strided.overlaps_itself(self._shape, self._strides, self.itemsize)
        if overlaps is not False:
            how = "share memory" if overlaps else \
                f"may share memory (past {_strided.OVERLAP_ELEMENTS} elements it is not counted)"
            raise ValueError(f"{what}: the elements of this array (shape {self._shape}, "
                             f"strides {self._strides}) {how}, and a write to them "
                             "would keep one value of those written there: write to the "
                             "memory's own array, or to a copy")

    def _same_shape(self, what: str, shape, offset) -> None:
        if _checks.integer(f"{what}: offset", offset):
            raise ValueError(f"{what}: an offset needs contiguous arrays; index the view "
                             "instead (a[5:].copy_from(...))")
        if tuple(shape) != self._shape:
            raise ValueError(f"{what}: shape {tuple(shape)} does not match {self._shape} (a "
                             "non-contiguous view copies element by element)")

    def copy_to(self, destination, *, offset: int | None = None, queue: Queue | None = None,
                blocking: bool = True, wait_for=()) -> Event:
        """Copy into a writeable numpy array or a USMArray of the same dtype.  The shapes must
        match, or one side be flat with as many elements.  With ``offset``, both contiguous:
        ``destination.size`` elements from ``offset`` of this array.  Returns the copy's
        Event.

        On an out-of-order queue the copy waits for ``wait_for``, or, if none is given, for
        everything submitted to the queue before it (a barrier), so it never reads data that a
        kernel submitted earlier has yet to write; so do every copy and fill there."""
        self.data_ptr()  # noqa: B018 - raises ClosedError (before the destination's checks)
        queue = self._queue_for(queue)
        if blocking is not True and blocking is not False:
            blocking = _checks.flag("copy_to: blocking", blocking)
        if isinstance(destination, USMArray):
            if destination.context is not self.context:
                raise ValueError("copy_to: the destination array belongs to another context")
            if destination.dtype != self._dtype:
                raise TypeError(f"copy_to: dtype {self._dtype} does not match the "
                                f"destination's {destination.dtype}")
            destination.data_ptr()  # noqa: B018 - raises ClosedError
            if not destination.is_contiguous():
                destination._check_written("copy_to")
        else:
            destination = _host_view(destination, self._dtype, "copy_to")
            if not destination.flags.writeable:
                raise ValueError("copy_to needs a writeable C-contiguous (or strided) numpy "
                                 "array; this one is read-only")
        if offset is None:
            whole = _as_whole(self, "copy_to", destination)
            if whole is None:
                if blocking and recording and queue in recording and \
                        not isinstance(destination, USMArray):  # refused before recording one
                    raise RuntimeError("copy_to: a blocking copy into host memory while "
                                       "recording (its data would exist only after a replay):"
                                       " record it with blocking=False")
                relaid, copied = self._in_shape(destination.shape, queue, wait_for)
                return relaid.copy_to(destination, queue=queue, blocking=blocking,
                                      wait_for=(copied,))
            destination, offset = whole, 0
        if isinstance(destination, USMArray):
            if offset == 0 and destination.shape == self._shape:
                self._check_overlap(destination, "copy_to")
                return destination.copy_from(self, queue=queue, blocking=blocking,
                                             wait_for=wait_for)
            if not self.is_contiguous():
                self._same_shape("copy_to", destination.shape, offset)
            return self._copy_part_to(destination, offset, queue, blocking, wait_for)
        host = destination
        if self._overlaps_host(host):  # np.asarray of this host USM: through a copy (numpy)
            _not_recorded(queue, "copy_to", "apart from this array's memory")
            whole = self.to_numpy(queue=queue, wait_for=wait_for)
            if self.is_contiguous() and host.flags.c_contiguous:
                offset, _ = _span("copy_to", offset, host.size, self._size)
                host.reshape(-1)[:] = whole.reshape(-1)[offset:offset + host.size]
            else:
                self._same_shape("copy_to", host.shape, offset)
                host[...] = whole
            return _enqueue_nothing(queue, blocking, ())
        if self.is_contiguous() and host.flags.c_contiguous:
            offset, _ = _span("copy_to", offset, host.size, self._size)
            _wait_before_pageable_copy(queue, host, wait_for)
            return _enqueue_memcpy(queue, host.ctypes.data, self.data_ptr() + offset *
                                   self.itemsize, host.nbytes, blocking, wait_for,
                                   (host, self))
        self._same_shape("copy_to", host.shape, offset)
        # (An axis of one element never steps: numpy may give it any stride, -16 included.)
        host_strides = tuple(s if n > 1 else 0 for n, s in zip(host.shape, host.strides))
        if any(s < 0 for s in host_strides):
            raise ValueError(f"copy_to needs a numpy array with non-negative strides, not "
                             f"strides {host.strides} (shape {host.shape}): read into a new "
                             "one, dst[...] = a.to_numpy()")
        if _through_span(self, host, True, blocking) and not (recording and queue in recording):
            return self._read_through_span(queue, host, wait_for)
        _wait_before_pageable_copy(queue, host, wait_for)
        return self._strided_copy(queue, host.ctypes.data, host_strides, self.data_ptr(),
                                  self._strides, blocking, wait_for, (host, self))

    def _read_through_span(self, queue: Queue, host: np.ndarray, wait_for) -> Event:
        """Read this view into ``host`` through the bytes it spans (:func:`_through_span`), in
        parts along its outermost axis where those are more than ``_SPAN_PART_BYTES``."""
        low, high = _strided.span(self._shape, self._strides, self.itemsize)
        outer = max(range(self.ndim), key=lambda axis: abs(self._strides[axis])
                    if self._shape[axis] > 1 else -1, default=None)
        if high - low <= _SPAN_PART_BYTES or outer is None or self._shape[outer] <= 1 or \
                (step := max(1, _SPAN_PART_BYTES // abs(self._strides[outer]))) \
                >= self._shape[outer]:  # (overlapping rows: a part may span no less)
            staging, low = self._staging()
            event = self._copy_span(queue, staging, low, to_host=True, blocking=True,
                                    wait_for=wait_for)
            host[...] = staging
            return event
        for start in range(0, self._shape[outer], step):
            part = (slice(None),) * outer + (slice(start, start + step),)
            event = self[part]._read_through_span(queue, host[part], wait_for)
            wait_for = ()  # (the first part waited: the rest read what it saw)
        return event

    def _in_shape(self, shape, queue: Queue, wait_for) -> tuple:
        """``(a new array of shape holding this array's elements in C order, the Event (or
        recorded command) of their copy)``, copied on ``queue`` after ``wait_for``; what
        reads the new array waits for that copy (an out-of-order queue or recording orders
        nothing else)."""
        out = USMArray(queue, self._shape, self._dtype, self._kind)
        copied = out.copy_from(self, queue=queue, blocking=False, wait_for=wait_for)
        return _relaid(out, shape), copied

    def _copy_part_to(self, destination: USMArray, offset, queue, blocking, wait_for) -> Event:
        if destination.context is not self.context:
            raise ValueError("copy_to: the destination array belongs to another context")
        if destination.dtype != self._dtype:
            raise TypeError(f"copy_to: dtype {destination.dtype} does not match {self._dtype}")
        offset, _ = _span("copy_to", offset, destination.size, self._size)
        if not destination.is_contiguous():
            raise ValueError(f"copy_to: shape {destination.shape} does not match {self._shape}; "
                             "a part of this array (offset=) goes into a contiguous array only")
        if _same_size_overlap(self._address + offset * self.itemsize, destination._address,
                              destination.nbytes):
            raise ValueError(f"copy_to: the part from offset {offset} overlaps the destination "
                             "in memory (UR copies between distinct ranges only)")
        destination._used_on(queue)  # its reuse waits for this copy (as copy_from's source)
        return _enqueue_memcpy(queue, destination.data_ptr(),
                               self.data_ptr() + offset * self.itemsize,
                               destination.nbytes, blocking, wait_for, (self, destination))

    def tolist(self):
        """The elements as nested Python lists (numpy's and PyTorch's ``tolist``): a blocking
        read, as :meth:`to_numpy`."""
        return self.to_numpy().tolist()

    def to_numpy(self, *, queue: Queue | None = None, wait_for=()) -> np.ndarray:
        """A new numpy array holding this array's (or view's) elements, and reading only
        them: a blocking copy, ordered as :meth:`copy_to` orders it."""
        out = np.empty(self._shape, self._dtype)
        self.copy_to(out, queue=queue, wait_for=wait_for)
        return out

    def fill(self, value, *, offset: int = 0, count: int | None = None,
             queue: Queue | None = None, blocking: bool = True, wait_for=()) -> Event:
        """Set ``count`` elements (default: all from ``offset``) to ``value``; a
        non-contiguous view is filled whole (no ``offset``/``count``)."""
        queue = self._queue_for(queue)
        if blocking is not True and blocking is not False:
            blocking = _checks.flag("fill: blocking", blocking)
        if not self.is_contiguous():
            if offset or count is not None:
                raise ValueError("fill: offset and count need a contiguous array; index the "
                                 "view instead")
            self._check_written("fill")
            pattern = _checks.scalar("fill: value", value, self._dtype)
            return self.copy_from(np.full(self._shape, pattern), queue=queue,
                                  blocking=blocking, wait_for=wait_for)
        offset = _checks.integer("fill: offset", offset)
        if count is None:
            if offset > self._size:
                raise ValueError(f"fill: offset {offset} is past the end of {self._size} elements")
            count = self._size - offset
        offset, count = _span("fill", offset, count, self._size)
        pattern = _checks.scalar("fill: value", value, self._dtype)
        if count == 0:
            return _enqueue_nothing(queue, blocking, wait_for)
        if pattern.nbytes & (pattern.nbytes - 1):  # UR wants a power-of-two pattern size
            return self.copy_from(np.full(count, pattern), offset=offset, queue=queue,
                                  blocking=blocking, wait_for=wait_for)
        return enqueue_command(
            queue, lib.urEnqueueUSMFill,
            (_pointer(self.data_ptr() + offset * pattern.nbytes), pattern.nbytes,
             ffi.from_buffer(pattern), count * pattern.nbytes),
            _ordered(queue, wait_for), (pattern, *_held(queue, (self,))), blocking)

    # -- interchange (ur_cffi.interop) -----------------------------------------------------

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray``: a view of host or shared USM without a copy; ``TypeError`` for device
        USM (use :meth:`to_numpy`)."""
        from .interop import to_host_view

        return to_host_view(self, dtype, copy)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this array (DLPack's oneAPI convention; ``interop``)."""
        from .interop import to_dlpack

        return to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLOneAPI, device index)`` for device and shared USM, ``(kDLCPU, 0)`` for host."""
        from .interop import dlpack_device

        return dlpack_device(self)

    @property
    def __sycl_usm_array_interface__(self) -> dict:
        """dpctl's interface, for arrays of a context made from a dpctl queue (``interop``)."""
        from .interop import sycl_usm_array_interface

        return sycl_usm_array_interface(self)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d USMArray")
        return self._shape[0]

    def __iter__(self):
        """Its views along the first axis, as numpy's rows (no read of device memory).  (A 0-d
        array raises ``TypeError``, as numpy's; it was an empty sequence.)"""
        if not self._shape:
            raise TypeError("iteration over a 0-d USMArray")
        return (self[i] for i in range(self._shape[0]))

    def __bool__(self) -> bool:
        """Raises ``ValueError``: an array's truth would be a read of device memory, which a
        conversion must not do behind a caller's back (an argument packed under a launch's
        lock would wait for that lock); ``bool(a.item())`` reads it.  (An array was always
        true, whatever it held.)"""
        raise ValueError(f"the truth value of a USMArray ({self._size} elements) is a read of "
                         "device memory: use bool(a.item()), or any()/all() of a.to_numpy()")

    def __contains__(self, value) -> bool:
        """Raises ``TypeError``, as :meth:`__bool__` does: ``x in a`` compares elements, a read
        of device memory.  (Python's fallback compared ``x`` with each row's object: ``0.0 in
        zeros(3)`` was False.)"""
        raise TypeError(f"'in' compares the elements of a USMArray ({self._size} elements), a "
                        "read of device memory: use x in a.to_numpy()")

    def __repr__(self) -> str:
        state = "closed" if self.closed else hex(self._address)
        view = "" if self._base is None else " view"
        strides = "" if self.is_contiguous() else f" strides {self._strides}"
        return f"<USMArray {self._kind}{view} {self._shape}{strides} {self._dtype} at {state}>"


def empty(shape, dtype=np.float32, *, queue: Queue, kind: str = "device") -> USMArray:
    """An uninitialised USMArray."""
    return USMArray(queue, shape, dtype, kind)


def zeros(shape, dtype=np.float32, *, queue: Queue, kind: str = "device") -> USMArray:
    """A USMArray of zeros: every byte 0, as numpy's (empty strings and records too)."""
    array = USMArray(queue, shape, dtype, kind)
    if array.size:
        array.reshape(-1).view(np.uint8).fill(0)
    return array


def asarray(array, dtype=None, *, queue: Queue, kind: str = "device",
            copy: bool | None = None) -> USMArray:
    """``array`` (anything ``numpy.asarray`` accepts, or a USMArray) as a USMArray of ``dtype``
    (None: its own) on ``queue``, in ``kind`` of USM, as ``numpy.asarray`` makes arrays: a
    USMArray that is that already (made on ``queue``, of that kind and dtype) comes back as it
    is, anything else as a copy (``copy=True``: always; ``copy=False``: never, ``ValueError``
    where one is needed).  A USMArray of the queue's context is copied on the device as
    :meth:`USMArray.copy` does, through the host where the dtype changes or the context
    differs."""
    _check_queue(queue)
    copy = _checks.optional_flag("asarray: copy", copy)
    dtype = None if dtype is None else _dtype(dtype)
    if isinstance(array, USMArray):
        same_dtype = dtype is None or dtype == array.dtype
        if not copy and same_dtype and array.queue is queue and array.kind == kind:
            array.data_ptr()  # noqa: B018 - raises ClosedError
            return array
        if copy is False:
            reasons = [reason for reason, differs in (
                ("made on another queue", array.queue is not queue),
                (f"{array.kind} USM, not {kind}", array.kind != kind),
                (f"of {array.dtype}, not {dtype}", not same_dtype)) if differs]
            raise ValueError(f"asarray(copy=False) needs a copy: the array is "
                             f"{', '.join(reasons)}")
        if array.context is queue.context and same_dtype:
            return array.copy(queue=queue, kind=kind)
        # Another context's (read on its own queue), or another dtype: through the host.
        if recording and queue in recording:
            raise ValueError("asarray in a Graph recording: a USMArray of another dtype or "
                             "context goes through host memory, read once, now; a replay "
                             "would copy that snapshot: convert it before recording")
        array = array.to_numpy(queue=queue if array.context is queue.context else None)
    elif copy is False:
        raise ValueError(f"asarray(copy=False): {type(array).__name__} memory is not USM; "
                         "ur_cffi.from_dlpack(x, queue=q, copy=False) wraps USM it holds")
    if isinstance(array, np.ndarray):
        if not (array.flags.c_contiguous and (dtype is None or array.dtype == dtype)):
            _host_reads_now(queue, (), "asarray", "C-contiguous, of the dtype asked for")
    elif not (recording and queue in recording):  # a sequence or buffer of host memory
        _after_earlier_work(queue, ())
    host = np.asarray(array, dtype=dtype, order="C")  # (ascontiguousarray makes 0-d 1-d)
    if host.dtype.hasobject and isinstance(array, np.ndarray) and array.dtype.hasobject:
        raise TypeError(f"asarray: a numpy array of dtype {array.dtype} holds Python objects; "
                        "device memory holds numbers")
    if host.dtype.hasobject:
        raise TypeError(f"asarray: {type(array).__name__} {array!r:.60} makes numpy objects "
                        "(a number beyond 64 bits, or mixed types); device memory holds numbers")
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
        self.context, self.nbytes = context, int(nbytes)
        with section:
            check(lib.urMemBufferCreate(context.handle, flags, nbytes, ffi.NULL, out),
                  "urMemBufferCreate", f"{nbytes} bytes")
            self._own(out[0], parents=(context,), release=_release_buffer)

    def native_handle(self, device=None) -> int:
        """The backend's own handle for this buffer (a ``cl_mem`` on OpenCL), as an integer."""
        device = self.context.devices[0] if device is None else device
        if device not in self.context.devices:
            raise ValueError(f"{device!r} is not a device of {self.context!r}")
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
        if blocking is not True and blocking is not False:
            blocking = _checks.flag("Buffer.write: blocking", blocking)
        source = np.asarray(source)
        offset = self._check("write", queue, offset, source)
        if not source.flags.c_contiguous:
            wait_for = _host_reads_now(queue, wait_for, "Buffer.write", "C-contiguous")
        host = np.ascontiguousarray(source)
        return enqueue_command(
            queue, lib.urEnqueueMemBufferWrite,
            (self.handle, False, offset, host.nbytes, ffi.from_buffer(host)),
            _ordered(queue, wait_for), (host,), blocking)

    def read(self, queue: Queue, destination: np.ndarray, *, offset: int = 0,
             blocking: bool = True, wait_for=()) -> Event:
        """Copy from byte ``offset`` of the buffer into a writeable C-contiguous numpy array."""
        if blocking is not True and blocking is not False:
            blocking = _checks.flag("Buffer.read: blocking", blocking)
        if not isinstance(destination, np.ndarray):
            raise TypeError(f"read needs a numpy array, not {type(destination).__name__}")
        if not destination.flags.c_contiguous or not destination.flags.writeable:
            raise ValueError("read needs a writeable C-contiguous numpy array")
        offset = self._check("read", queue, offset, destination)
        return enqueue_command(
            queue, lib.urEnqueueMemBufferRead,
            (self.handle, False, offset, destination.nbytes, ffi.from_buffer(destination)),
            _ordered(queue, wait_for), (destination,), blocking)
