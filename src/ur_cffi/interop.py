"""Zero-copy interchange: numpy views of host USM, DLPack, ``__sycl_usm_array_interface__``,
USM pointers from elsewhere, and contexts and queues shared with dpctl.

- ``np.asarray(array)`` of host or shared USM is a numpy view of the same memory (the array
  is kept alive by it); of device USM it raises a ``TypeError`` naming ``to_numpy()``, as
  CuPy does.  The host reads the memory directly: finish the queue first.
- DLPack, with DLPack's oneAPI convention: device and shared USM are ``kDLOneAPI`` (14), with
  the device's index among ``ur_cffi.devices()`` as ``device_id``; host USM is ``kDLCPU``,
  which numpy imports.  :func:`from_dlpack` wraps USM of the queue's context without a copy
  (a numpy or other CPU tensor is copied, unless ``copy=False``).
- ``__sycl_usm_array_interface__`` (dpctl's protocol): exported where the array's context was
  made from a dpctl one, or one of its queues was given to dpctl with :func:`to_dpctl` (the
  interface names a SYCL queue, which only dpctl has); imported by
  :func:`from_sycl_usm_array_interface`, which finds or makes the ur_cffi context over the
  same native OpenCL context.
- :func:`from_pointer` wraps any USM address of a context with a shape and dtype.
"""

from __future__ import annotations

import ctypes
import math
import sys
import weakref

import numpy as np

from . import _checks, _forking, _handle, _strided, allocator
from ._interrupts import hold_back_in, section
from ._ur import ffi, lib
from .enums import ur_usm_alloc_info_t, ur_usm_type_t
from .errors import check
from .program import _check_context
from .queue import recording
from .memory import (ExportPin, USMArray, _after_earlier_work, _check_queue, _dtype,
                     _MAX_DIMENSIONS, _element_stride, _no_objects, _over_arrays, _shape,
                     _usm_type, asarray, show)

KDL_CPU, KDL_ONEAPI = 1, 14
_NULL = ffi.NULL
_KINDS = {int(ur_usm_type_t.UR_USM_TYPE_DEVICE): "device",
          int(ur_usm_type_t.UR_USM_TYPE_HOST): "host",
          int(ur_usm_type_t.UR_USM_TYPE_SHARED): "shared"}


def usm_kind(context, address: int) -> str | None:
    """``"device"``, ``"host"`` or ``"shared"`` for a USM address of ``context``; None for
    memory UR does not know as USM of that context."""
    _check_context(context, "usm_kind: context")
    address = _checks.integer("usm_kind: address", address)
    return _KINDS.get(int(_usm_type(context.handle, address)))


def allocation_bounds(context, address: int) -> tuple[int, int] | None:
    """``(base address, size)`` of the USM allocation of ``context`` that holds ``address``;
    None where UR does not say (an adapter without ``UR_USM_ALLOC_INFO_BASE_PTR``/``SIZE``)."""
    _check_context(context, "allocation_bounds: context")
    address = _checks.integer("allocation_bounds: address", address)
    base, size = ffi.new("void **"), ffi.new("size_t *")
    pointer = ffi.cast("void *", address)
    if lib.urUSMGetMemAllocInfo(context.handle, pointer, _BASE_PTR, ffi.sizeof("void *"), base,
                                _NULL) or \
            lib.urUSMGetMemAllocInfo(context.handle, pointer, _SIZE, ffi.sizeof("size_t"), size,
                                     _NULL) or base[0] == _NULL or not size[0]:
        return None
    return int(ffi.cast("uintptr_t", base[0])), size[0]


def _check_device_of(queue, address: int, where: str) -> None:
    """Raise where the device USM at ``address`` is another device's of the queue's context
    (a context of several GPUs, as SYCL's default one): kernels of the queue's device cannot
    read it."""
    device = ffi.new("ur_device_handle_t *")
    if lib.urUSMGetMemAllocInfo(queue.context.handle, ffi.cast("void *", address), _DEVICE,
                                ffi.sizeof(device[0]), device, _NULL) or \
            device[0] in (_NULL, queue.device.handle):
        return  # (an adapter that does not say)
    index = next((n for n, other in enumerate(queue.context.devices)
                  if other.handle == device[0]), None)
    raise ValueError(f"{where}: the device USM at 0x{address:x} belongs to another device of "
                     f"the context than the queue's ({queue.device!r}): its devices[{index}]; "
                     f"a queue of that device reads it")


_BASE_PTR = int(ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_BASE_PTR)
_DEVICE = int(ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_DEVICE)
_SIZE = int(ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_SIZE)


def from_pointer(address, shape, dtype, *, queue, strides=None, owner=None) -> USMArray:
    """A USMArray over USM memory at ``address`` (an int) that something else allocated:
    ``shape`` and ``dtype``, ``strides`` in bytes (default C-contiguous).  ``owner`` is kept
    alive as long as the array or a view of it; nothing is freed (a USMArray ``owner``'s
    ``close()`` leaves its memory in place until then).  Raises ``ValueError`` if
    the address is not aligned to the dtype, UR does not know it as USM of ``queue``'s
    context, it is device USM of another device of that context, or the elements reach
    outside the allocation that holds it (either end, negative strides included)."""
    _check_queue(queue)
    queue.handle  # noqa: B018 - raises ClosedError
    address = _checks.integer("from_pointer: address", address, minimum=1)
    shape, dtype = _shape(shape), _dtype(dtype)
    _no_objects(dtype, "from_pointer")
    if not math.prod(shape):  # (as USMArray checks it: numpy and DLPack failed on it later)
        _strided.check_empty_span(f"from_pointer: shape {shape} of {dtype}", shape,
                                  dtype.itemsize)
    if strides is not None:
        strides = tuple(_checks.integer("from_pointer: stride", s, minimum=-(1 << 62),
                                        maximum=1 << 62)  # (DLPack's are int64 elements)
                        for s in _sequence("from_pointer: strides", strides))
        if len(strides) != len(shape):
            raise ValueError(f"from_pointer: strides {strides} do not match shape {shape}")
    if address % dtype.alignment:  # a kernel's loads of it would be misaligned
        raise ValueError(f"from_pointer: address 0x{address:x} is not aligned to {dtype}'s "
                         f"{dtype.alignment} bytes")
    if _misaligned_strides(shape, strides, dtype):  # nor of the others
        raise ValueError(f"from_pointer: strides {strides} are not multiples of {dtype}'s "
                         f"alignment ({dtype.alignment} bytes)")
    kind = usm_kind(queue.context, address)
    if kind is None:
        raise ValueError(f"from_pointer: address 0x{address:x} is not USM memory of "
                         f"{queue.context!r}")
    if kind == "device":
        _check_device_of(queue, address, "from_pointer")
    strides = strides or _strided.contiguous_strides(shape, dtype.itemsize)
    low, high = _strided.span(shape, strides, dtype.itemsize)
    if high > low:
        bounds = allocation_bounds(queue.context, address)
        if bounds is not None:
            base, size = bounds
            inside = base <= address + low and address + high <= base + size
        else:  # both ends at least USM of the context
            inside = address + low > 0 and all(
                usm_kind(queue.context, end) is not None
                for end in (address + low, address + high - 1))
        if not inside:
            raise ValueError(
                f"from_pointer: shape {shape} with strides {strides} reaches bytes {low} to "
                f"{high} from 0x{address:x}, which run past the USM allocation" + (
                    f" (0x{base:x}, {size} bytes)" if bounds is not None else ""))
    ordered_by = None  # a ur_cffi array whose memory's reuse this array's queues order
    if isinstance(owner, USMArray):
        pin = ExportPin(owner, inside=True)  # from now on its close leaves the memory here
        owner.data_ptr()  # noqa: B018 - raises ClosedError
        if owner.context is queue.context:  # its memory, used on queue: ordered as
            owner._used_on(queue)  # record_queue does
            ordered_by = owner
        owner = (owner, pin)
    array = USMArray._over(queue, address, shape, dtype, kind, strides, owner)
    if ordered_by is not None:
        _over_arrays[array] = ordered_by
    return array


def _misaligned_strides(shape, strides, dtype: np.dtype) -> bool:
    """Whether a stride of an axis that steps (strides in bytes, None: contiguous) is not a
    multiple of ``dtype``'s alignment: a kernel's loads of the elements would be misaligned."""
    return strides is not None and any(
        s % dtype.alignment for s, n in zip(strides, shape) if n > 1)


# --- numpy -----------------------------------------------------------------------------------

def _typestr(dtype: np.dtype) -> str:
    """An array interface's typestr of ``dtype``: raw bytes for the dtypes numpy cannot name
    (ml_dtypes' bfloat16 and float8 types: ``float8_e5m2`` would read ``<f1``)."""
    return dtype.str if dtype.isbuiltin != 2 else f"|V{dtype.itemsize}"


def _descr(dtype: np.dtype, typestr: str) -> list:
    """An array interface's descr of ``dtype``: raw bytes where numpy has none (the dtypes of
    :func:`_typestr`, records whose fields overlap or are out of order)."""
    if dtype.isbuiltin == 2:
        return [("", typestr)]
    try:
        return dtype.descr
    except ValueError:  # "dtype.descr is not defined for types with overlapping or
        return [("", f"|V{dtype.itemsize}")]  # out-of-order fields"


class _HostView:
    """What numpy reads through ``__array_interface__``; it keeps the USMArray alive, and its
    memory even past the array's ``close()`` (an :class:`ExportPin`)."""

    __slots__ = ("pin", "__array_interface__")

    def __init__(self, array: USMArray):
        self.pin = ExportPin(array)
        dtype = array.dtype
        # numpy cannot name extension dtypes (ml_dtypes' float8_e5m2 is "<f1"): raw bytes,
        # which to_host_view views as the dtype
        typestr = _typestr(dtype)
        self.__array_interface__ = {
            "data": (array.data_ptr(), False), "shape": array.shape,
            "strides": array.strides, "typestr": typestr,
            "descr": _descr(dtype, typestr), "version": 3}


def to_host_view(array: USMArray, dtype=None, copy=None) -> np.ndarray:
    """``USMArray.__array__``: a numpy view of host or shared USM."""
    if array.kind == "device":
        raise TypeError("device USM cannot be read by the host: np.asarray() and np.array() "
                        "take no device array (as with CuPy's and PyTorch's); copy it with "
                        "array.to_numpy() (or allocate with kind='host' or 'shared')")
    if copy:
        host = array.to_numpy()
    else:
        host = np.asarray(_HostView(array))
        if host.dtype != array.dtype:  # numpy reads extension dtypes (bfloat16) as raw bytes
            host = host.view(array.dtype)
    if dtype is not None and np.dtype(dtype) != host.dtype:
        if copy is False:
            raise ValueError(f"np.asarray(..., dtype={dtype}, copy=False) of {array.dtype}")
        host = host.astype(dtype)
    return host


# --- DLPack ----------------------------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DLManagedTensorVersioned._fields_ = [
    ("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
    ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]

# Address of a managed tensor -> what it keeps alive, until the consumer calls the deleter.
# The capsules have no destructor: a consumer that fails (numpy, given device memory) drops the
# capsule with its exception pending, and Python code cannot run then without losing it.  The
# capsules not consumed yet (``_unconsumed``) are looked at by the next export or import
# instead: one that nobody else holds deletes its tensor (DLPack's rule for an unconsumed
# capsule); one a consumer renamed is its consumer's.
_exported: dict[int, tuple] = {}
_unconsumed: dict[int, object] = {}  # address of a managed tensor -> its capsule
_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}  # kDLBool, kDLInt, kDLUInt, kDLFloat, kDLComplex
_BFLOAT = 4  # kDLBfloat
_FLAG_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_FLAG_IS_COPIED = 2  # DLPACK_FLAG_BITMASK_IS_COPIED
_IEEE = (np.float16, np.float32, np.float64, np.complex64, np.complex128)  # not longdouble
_FLOAT8 = {"float8_e3m4": 7, "float8_e4m3": 8, "float8_e4m3b11fnuz": 9, "float8_e4m3fn": 10,
           "float8_e4m3fnuz": 11, "float8_e5m2": 12, "float8_e5m2fnuz": 13,
           "float8_e8m0fnu": 14}  # DLPack 1.1's kDLFloat8_*, as ml_dtypes names them


@ffi.def_extern()
def _ur_cffi_dlpack_deleted(managed) -> None:
    _exported.pop(int(ffi.cast("uintptr_t", managed)), None)


# C, around the function above: consumers call it with an exception pending (build_ffi.py).
_delete = _DELETER(int(ffi.cast("uintptr_t", lib.ur_cffi_dlpack_deleter)))


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.argtypes = [ctypes.py_object, ctypes.c_char_p]
# PyCapsule_SetName keeps the pointer it is given: names that live as long as the module.
_USED = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}


def _references(capsules: dict, address: int) -> int:
    """The reference count of ``capsules[address]``; 0 where another thread took it out."""
    capsule = capsules.get(address)
    return 0 if capsule is None else sys.getrefcount(capsule)


# What _references reads for an object that only the dictionary holds (Python versions count
# a call's argument differently).
_NOBODY_ELSE = _references({0: object()}, 0)


def _forget_unused_capsules() -> None:
    """Delete the tensors of unconsumed capsules that nobody else holds; forget the capsules
    consumers have taken (renamed).  Any thread may run it, several at once: each capsule is
    taken out with one ``pop``, and its name is read as final only once nobody else holds it
    (a consumer renames a capsule it holds, then calls the deleter when done)."""
    for address in list(_unconsumed):
        count = _references(_unconsumed, address)
        if not count:
            continue
        if count <= _NOBODY_ELSE:  # nobody can rename it any more
            capsule = _unconsumed.pop(address, None)
            if capsule is not None and _capsule_name(capsule) in _USED:  # (its first name)
                _exported.pop(address, None)  # dropped unused: DLPack's rule deletes it
            continue
        capsule = _unconsumed.get(address)
        if capsule is not None and _capsule_name(capsule) not in _USED:  # renamed: taken
            _unconsumed.pop(address, None)  # a consumer's: it calls the deleter


def _dl_dtype(dtype: np.dtype) -> _DLDataType:
    name = dtype.name
    if name == "bfloat16":
        code = _BFLOAT
    elif name in _FLOAT8:
        code = _FLOAT8[name]
    elif dtype.kind in _CODES and dtype.byteorder in "=|<" and \
            (dtype.kind not in "fc" or dtype.type in _IEEE):
        code = _CODES[dtype.kind]
    elif name == "complex32":  # two float16s, PyTorch's complex32 too
        code = _CODES["c"]
    elif dtype.type.__module__ == "ml_dtypes" and dtype.itemsize == 1:  # float4_e2m1fn, int4..
        raise BufferError(f"DLPack has no type for {dtype} as ml_dtypes stores it (a byte per "
                          "element, where DLPack's codes count the element's own bits)")
    elif dtype.type.__module__ == "ml_dtypes":
        raise BufferError(f"DLPack has no type for {dtype}")
    elif dtype.byteorder == ">" and dtype.kind in _CODES:
        raise BufferError(f"DLPack has no type for {dtype}: its numbers are in native byte "
                          "order (astype the array first)")
    elif dtype.kind in "fc":
        raise BufferError(f"DLPack has no type for {dtype} (its floats are IEEE formats "
                          "without padding: not longdouble)")
    else:
        raise BufferError(f"DLPack has no type for {dtype}: it holds numbers and booleans "
                          "(not strings, records, dates or times)")
    return _DLDataType(code, dtype.itemsize * 8, 1)


def _dtype_of_name(name: str) -> np.dtype:
    """The dtype a DLPack type maps to (:data:`_NUMPY_TYPES`): ``ml_dtypes``' for bfloat16,
    float8 and complex32 (``BufferError`` where the installed ``ml_dtypes`` has no such type)."""
    if not name.startswith(("float8", "bfloat16", "complex32")):
        return _dtype(name)
    import ml_dtypes

    if not hasattr(ml_dtypes, name):
        raise BufferError(f"DLPack type {name}: ml_dtypes {ml_dtypes.__version__} has no such "
                          "type (a newer ml_dtypes has)")
    return _dtype(getattr(ml_dtypes, name))


def dlpack_device(array: USMArray) -> tuple[int, int]:
    """``(device type, device id)`` for ``__dlpack_device__`` (see the module's text)."""
    if array.kind == "host":
        return KDL_CPU, 0
    from .device import devices

    found = devices()
    if array.device not in found:  # (a sub-device, made with the raw layer, say)
        raise BufferError(f"__dlpack_device__: {array.device!r} is not among ur_cffi.devices()"
                          ", which DLPack's kDLOneAPI numbers (root devices only)")
    return KDL_ONEAPI, found.index(array.device)


def to_dlpack(array: USMArray, stream=None, max_version=None, dl_device=None,
              copy=None):
    """``USMArray.__dlpack__``: a capsule of DLPack 1.x (``max_version`` >= (1, 0)) or of the
    unversioned ABI.  ``stream`` is accepted for the protocol and ignored: finish the queue
    first.  ``dl_device=(kDLCPU, 0)`` of device USM copies to the host (``copy`` not False)."""
    max_version = _pair("max_version", max_version)
    dl_device = _pair("dl_device", dl_device)
    if stream is not None and (array.kind == "host" or dl_device == (KDL_CPU, 0)):
        raise BufferError(f"__dlpack__: stream must be None for memory exported as kDLCPU "
                          f"(DLPack: a device without streams), not {stream!r}")
    copy = _checks.optional_flag("__dlpack__: copy", copy)
    source = array
    if dl_device is not None and dl_device != dlpack_device(array):
        if dl_device != (KDL_CPU, 0):
            raise BufferError(f"__dlpack__ cannot export to device {tuple(dl_device)}")
        if array.kind == "device":
            if copy is False:
                raise BufferError("__dlpack__(dl_device=kDLCPU, copy=False) of device USM")
            _after_work_on(array)  # (to_numpy waits for the array's own queue only)
            host = array.to_numpy()
            return _capsule(host.ctypes.data, host.shape, host.strides, host.dtype,
                            (KDL_CPU, 0), host, max_version, copied=True)
    device = dl_device if dl_device is not None else dlpack_device(array)
    if copy or device == (KDL_CPU, 0):  # a consumer on the host reads at once (DLPack: no
        _after_work_on(array)           # stream), and a copy, made now, is read as it is
    if copy:  # (shared USM exported as kDLCPU too: the host reads it in place)
        source = array.copy()  # (blocking)
    pin = ExportPin(source)  # before the address is read: a close from now on leaves it
    return _capsule(source.data_ptr(), source.shape, source.strides, source.dtype, device, pin,
                    max_version, copied=bool(copy))


def _after_work_on(array: USMArray) -> None:
    """Wait for the work submitted so far to the queues that may write ``array``'s memory: its
    own, its base's and those noted with ``record_queue`` (not one that a Graph is recording:
    nothing recorded has run)."""
    root = array if array._base is None else array._base
    queues = [array.queue, root.queue]
    block = root._handle
    if type(block) is allocator.Block and block.used_on:
        queues += [ref() for ref in list(block.used_on)]
    for queue in dict.fromkeys(queues):
        if queue is not None and queue._handle is not None and \
                not (recording and queue in recording):
            _after_earlier_work(queue, ())


def _sequence(name: str, value) -> tuple:
    """``value`` (strides) as a tuple; ``TypeError`` naming ``name`` where it is no sequence."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of integers or None, not "
                        f"{type(value).__name__} {value!r}")
    return tuple(value)


def _pair(name: str, value) -> tuple[int, int] | None:
    """``__dlpack__``'s ``max_version`` or ``dl_device``: None or two integers."""
    if value is None:
        return None
    try:
        first, second = value
    except (TypeError, ValueError):
        raise TypeError(f"__dlpack__: {name} must be a pair of integers or None, not "
                        f"{value!r}") from None
    return _checks.integer(f"__dlpack__: {name}", first), \
        _checks.integer(f"__dlpack__: {name}", second)


def _element_strides(shape, strides, itemsize: int) -> list[int]:
    """``strides`` in elements, as DLPack counts them; ``BufferError`` where one is not."""
    try:
        return [_element_stride(s, itemsize, "__dlpack__", n) for s, n in zip(strides, shape)]
    except ValueError as error:
        raise BufferError(str(error)) from None


def _capsule(data: int, shape, strides, dtype, device, keep, max_version, copied: bool):
    """A DLPack capsule of the elements at ``data``; ``keep`` lives until the consumer calls
    the deleter (or the capsule is dropped unused: ``_forget_unused_capsules``); ``copied``:
    a copy made for this export (DLPack 1.x's flag, where versioned)."""
    _forget_unused_capsules()
    ndim = len(shape)
    element_strides = _element_strides(shape, strides, dtype.itemsize)
    if any(not -2**63 <= n < 2**63 for n in (*shape, *element_strides)):
        raise BufferError(f"__dlpack__: shape {tuple(shape)} or strides {tuple(strides)} do "
                          "not fit DLPack's int64")
    shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*element_strides)
    tensor = _DLTensor(data, _DLDevice(*device), ndim, _dl_dtype(dtype), shape, strides, 0)
    versioned = max_version is not None and max_version[0] >= 1
    if versioned:
        managed = _DLManagedTensorVersioned(_DLPackVersion(1, 1), None, _delete,
                                            _FLAG_IS_COPIED if copied else 0, tensor)
        name = b"dltensor_versioned"
    else:
        managed = _DLManagedTensor(tensor, None, _delete)
        name = b"dltensor"
    address = ctypes.addressof(managed)
    capsule = _capsule_new(address, name, None)
    _exported[address] = (managed, shape, strides, keep)
    _unconsumed[address] = capsule
    return capsule


_NUMPY_TYPES = {(0, 8): "i1", (0, 16): "i2", (0, 32): "i4", (0, 64): "i8", (1, 8): "u1",
                (1, 16): "u2", (1, 32): "u4", (1, 64): "u8", (2, 16): "f2", (2, 32): "f4",
                (2, 64): "f8", (5, 32): "complex32", (5, 64): "c8", (5, 128): "c16",
                (6, 8): "?", (_BFLOAT, 16): "bfloat16",
                **{(code, 8): name for name, code in _FLOAT8.items()}}


class _Consumed:
    """Calls a consumed DLPack tensor's deleter when the arrays over it are gone."""

    __slots__ = ("deleter", "address", "__weakref__")

    @hold_back_in  # both or neither set
    def __init__(self, deleter, address: int):
        self.deleter, self.address = deleter, address

    @hold_back_in  # a finalizer: an exception there would be printed and the deleter skipped
    def __del__(self):
        deleter = getattr(self, "deleter", None)
        if deleter and getattr(_handle, "_live", None) is not None:  # (None: the interpreter's
            _handle.run_after_collection(deleter, self.address)  # end cleared the modules)


def from_dlpack(x, *, queue, copy=None) -> USMArray:
    """A USMArray from any object with ``__dlpack__`` (or a DLPack capsule).  USM of
    ``queue``'s context (device USM: of its device) is wrapped without a copy (the producer's
    memory stays alive with the array; a ur_cffi array comes back as a view of it, closed with
    it); CPU memory that is not USM is copied into device USM on ``queue``, unless
    ``copy=False`` (``BufferError``).
    ``copy=True`` always copies, and so does ``copy=None`` for memory its producer marks
    read-only (DLPack 1.x's flag): a USMArray has no read-only mode, so writes through a wrap
    would reach it (``copy=False`` raises ``BufferError`` there)."""
    _check_queue(queue)
    queue.handle  # noqa: B018 - raises ClosedError before the capsule is taken
    copy = _checks.optional_flag("from_dlpack: copy", copy)
    _forget_unused_capsules()
    if type(x) is USMArray and x.context is queue.context:  # a view, as of its capsule
        _dl_dtype(x.dtype), _element_strides(x.shape, x._strides, x.itemsize)  # (or raise)
        return _own_view(x, x.shape, x._strides, x.data_ptr(), queue, copy)
    if hasattr(x, "__dlpack__"):
        try:
            try:
                capsule = x.__dlpack__(max_version=(1, 1))
            except TypeError:  # a producer of the older protocol
                capsule = x.__dlpack__()
        except BufferError:  # numpy before 2.1 exports no read-only array: copied, as it is
            if isinstance(x, np.ndarray) and not x.flags.writeable and copy is not False and \
                    np.lib.NumpyVersion(np.__version__) < "2.1.0":  # where numpy marks it so
                return asarray(x, queue=queue)
            raise
    else:
        capsule = x
    name = _capsule_name(capsule) if type(capsule).__name__ == "PyCapsule" else None
    if name not in (b"dltensor", b"dltensor_versioned"):
        if capsule is not x:
            raise TypeError(f"from_dlpack: {type(x).__name__}.__dlpack__() returned "
                            f"{type(capsule).__name__}, not a DLPack capsule")
        raise TypeError(f"from_dlpack needs an object with __dlpack__ or an unused DLPack "
                        f"capsule, not {type(x).__name__}")
    address = _capsule_pointer(capsule, name)
    read_only = False
    if name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(address)
        if managed.version.major != 1:
            raise BufferError(f"DLPack {managed.version.major}.x is not supported")
        read_only = bool(managed.flags & _FLAG_READ_ONLY)
    else:
        managed = _DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    if tensor.ndim < 0 or (tensor.ndim and not tensor.shape):
        raise BufferError(f"from_dlpack: a DLPack tensor of ndim {tensor.ndim} with "
                          f"{'a NULL' if not tensor.shape else 'its'} shape pointer")
    if tensor.ndim > _MAX_DIMENSIONS:  # before its shape is read
        raise BufferError(f"from_dlpack: a DLPack tensor of ndim {tensor.ndim}: numpy's "
                          f"arrays have at most {_MAX_DIMENSIONS} dimensions")
    if any(tensor.shape[i] < 0 for i in range(tensor.ndim)):
        raise BufferError(f"from_dlpack: a DLPack tensor of shape "
                          f"{tuple(tensor.shape[i] for i in range(tensor.ndim))}")
    key = (tensor.dtype.code, tensor.dtype.bits)
    if tensor.dtype.lanes != 1 or key not in _NUMPY_TYPES:
        raise BufferError(f"DLPack type code {key[0]}, {key[1]} bits, {tensor.dtype.lanes} "
                          "lanes has no ur_cffi dtype")
    dtype = _dtype_of_name(_NUMPY_TYPES[key])
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = tuple(tensor.strides[i] * dtype.itemsize for i in range(tensor.ndim)) \
        if tensor.strides else None
    data = (tensor.data or 0) + tensor.byte_offset
    empty = 0 in shape
    if not tensor.data and not empty:
        raise BufferError(f"from_dlpack: a DLPack tensor of shape {shape} with a NULL data "
                          f"pointer")
    _check_numpy_layout(shape, strides, dtype)
    _capsule_rename(capsule, _USED[name])
    ours = _exported.get(address)
    own = ours[3].array if ours is not None and isinstance(ours[3], ExportPin) and \
        ours[3].array.context is queue.context else None
    if own is not None and not own.closed:  # our own export: a view, closed with its array
        del _exported[address]
        _unconsumed.pop(address, None)
        return _own_view(own, shape, strides or _strided.contiguous_strides(
            shape, dtype.itemsize), data, queue, copy)
    owner = _Consumed(managed.deleter, address)
    if empty:  # no memory to share or read (an empty tensor's pointer may be NULL)
        del owner
        return asarray(np.empty(shape, dtype), queue=queue)
    kind = usm_kind(queue.context, data) if data else None
    misaligned = kind is not None and (data % dtype.alignment
                                       or _misaligned_strides(shape, strides, dtype))
    if kind is not None and not misaligned:
        if read_only and copy is False:
            raise BufferError("from_dlpack(copy=False): the DLPack tensor's flags mark its "
                              "memory read-only, and a USMArray over it would let writes "
                              "reach it; leave copy=None (a copy) or pass copy=True")
        copy = copy or read_only
        result = from_pointer(data, shape, dtype, queue=queue, strides=strides,
                              owner=(owner, x))
        if own is not None:  # ur_cffi's memory of an array closed since, which the capsule's
            _over_arrays[result] = own  # pin holds: its queues order the memory's reuse
            own._used_on(queue)
        return result.copy(queue=queue) if copy else result
    if kind is None and tensor.device.device_type != KDL_CPU:
        device = tensor.device.device_type
        del owner
        if copy is not False and hasattr(x, "__dlpack__"):  # the producer's own copy to the host
            try:
                return from_dlpack(x.__dlpack__(max_version=(1, 1), dl_device=(KDL_CPU, 0),
                                                copy=True), queue=queue, copy=True)
            except (TypeError, BufferError, NotImplementedError):
                pass  # (an older producer, or one that cannot copy to the host)
        raise BufferError(f"from_dlpack: DLPack device {device} memory at 0x{data:x} is not "
                          f"USM of the queue's context, and its producer gave no copy on the "
                          f"host (__dlpack__(dl_device=(kDLCPU, 0), copy=True))"
                          + (": copy=False forbids one" if copy is False else
                             "; a capsule cannot give one: pass the array" if not
                             hasattr(x, "__dlpack__") else ""))
    if copy is False:
        raise BufferError(
            f"from_dlpack(copy=False): USM at 0x{data:x} is not aligned to {dtype} "
            f"({dtype.alignment} bytes) in its address or strides {strides}, as kernels load "
            "it" if misaligned else
            "from_dlpack(copy=False) of host memory that is not USM of the queue's context")
    if recording and queue in recording:  # (graph.py)
        raise ValueError("from_dlpack of host memory in a Graph recording: the producer's "
                         "memory is released once imported, and each replay would read it; "
                         "import it before recording")
    strides = strides or _strided.contiguous_strides(shape, dtype.itemsize)
    low, high = _strided.span(shape, strides, dtype.itemsize)
    if kind == "device":  # misaligned: its bytes through the host, then laid out anew
        raw = from_pointer(data + low, (high - low,), np.uint8, queue=queue,
                           owner=owner).to_numpy()
    else:
        raw = (ctypes.c_char * max(1, high - low)).from_address(data + low) if data else b"\0"
    # np.ndarray over the bytes: as_strided cannot make arrays of ml_dtypes' types
    host = np.ndarray(shape, dtype, buffer=raw, offset=-low, strides=strides) if data and \
        high > low else np.empty(shape, dtype)
    result = asarray(host, queue=queue, kind=kind or "device")  # (np.ascontiguousarray
    del owner  # would make a 0-d array 1-d); the producer's memory is no longer needed
    return result


def _check_numpy_layout(shape, strides, dtype) -> None:
    """Raises BufferError unless numpy can index a tensor of ``shape`` and ``strides`` (bytes,
    or None) of ``dtype``: its extents, and the bytes they and its strides span."""
    extents = math.prod(filter(None, shape)) * dtype.itemsize
    low, high = _strided.span(shape, strides, dtype.itemsize) if strides else (0, 0)
    if max(shape, default=0) > _strided.INTP_MAX or extents > _strided.INTP_MAX or \
            high - low > _strided.INTP_MAX:
        raise BufferError(f"from_dlpack: a DLPack tensor of shape {shape}"
                          + (f", strides {tuple(s // dtype.itemsize for s in strides)}"
                             if strides else "")
                          + f" of {dtype} spans more bytes than numpy's index holds "
                          f"({_strided.INTP_MAX})")


def _own_view(source: USMArray, shape, strides, data: int, queue, copy) -> USMArray:
    """``from_dlpack`` of ur_cffi memory of the queue's context: a view of ``source`` (closed
    with it) on ``queue``, or its copy."""
    if source._kind == "device" and source._queue.device is not queue.device:
        _check_device_of(queue, data, "from_dlpack")
    result = source._view(shape, strides, data - source.data_ptr())
    result._queue = queue  # (of the same context: copies go there, as from_pointer's)
    source._used_on(queue)  # its work there orders the memory's reuse (record_queue)
    return result.copy(queue=queue) if copy else result


# --- dpctl (SYCL) ----------------------------------------------------------------------------

_from_dpctl: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_from_dpctl_lock = _forking.lock()
_dpctl_queues: dict = {}  # id(ur_cffi Context) -> the dpctl SyclQueue it was made from
# dpctl SyclQueue -> the Queue its imports go to (_import_queue), while that is in use
_import_queues: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _native_opencl_context(sycl_context) -> int:
    """The ``cl_context`` under a dpctl ``SyclContext`` (``sycl::get_native<opencl>``, as
    dpctl's own library instantiates it; OpenCL devices only), borrowed: valid while the
    SYCL context lives."""
    import os

    import dpctl

    library = ctypes.CDLL(os.path.join(os.path.dirname(dpctl.__file__),
                                       "libDPCTLSyclInterface.so"))
    get_native = library["_ZN4sycl3_V110get_nativeILNS0_7backendE1ENS0_7contextEEENS0_"
                         "14backend_traitsIXT_EE11return_typeIT0_EERKS7_"]
    get_native.restype, get_native.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    handle = get_native(sycl_context.addressof_ref())
    # get_native gives a reference of its own; the SYCL context holds one, and lives on with
    # the dpctl queue kept beside the ur_cffi Context (_dpctl_queues).
    result = ctypes.CDLL("libOpenCL.so.1").clReleaseContext(ctypes.c_void_p(handle))
    if result:
        raise RuntimeError(f"clReleaseContext returned {result}")
    return handle


def context_from_dpctl(sycl_queue):
    """The ur_cffi Context over the same native OpenCL context as a dpctl ``SyclQueue`` (one
    per SYCL context), so that USM memory of either is usable by the other without a copy.
    Raises ``NotImplementedError`` for devices other than OpenCL ones."""
    from .context import Context
    from .device import devices

    _check_sycl_queue("context_from_dpctl", sycl_queue)
    if sycl_queue.sycl_device.backend.name != "opencl":
        raise NotImplementedError(f"context_from_dpctl: {sycl_queue.sycl_device} is not an "
                                  "OpenCL device (only OpenCL's native context is reachable)")
    with _from_dpctl_lock:  # (two threads made two Contexts of one SYCL context)
        native = _native_opencl_context(sycl_queue.sycl_context)
        found = _from_dpctl.get(native)
        if found is not None and not found.closed:
            return found
        name = sycl_queue.sycl_device.name
        named = [d for d in devices() if d.name == name and d.backend.name.endswith("OPENCL")]
        if not named:
            raise ValueError(f"context_from_dpctl: no UR OpenCL device named {name!r}")
        if len(named) > 1:  # (the first would be the wrong one for the queue of a second)
            raise NotImplementedError(f"context_from_dpctl: {len(named)} UR OpenCL devices "
                                      f"are named {name!r}: which is the queue's is not known")
        device = named[0]
        out = ffi.new("ur_context_handle_t *")
        handles = ffi.new("ur_device_handle_t[1]", [device.handle])
        properties = ffi.new("ur_context_native_properties_t *", {
            "stype": _structure("UR_STRUCTURE_TYPE_CONTEXT_NATIVE_PROPERTIES"),
            "isNativeHandleOwned": False})
        context = Context.__new__(Context)
        context.devices = (device,)
        with section:
            check(lib.urContextCreateWithNativeHandle(native, device.platform.adapter.handle, 1,
                                                      handles, properties, out),
                  "urContextCreateWithNativeHandle")
            context._own(out[0], parents=(device,))
        _from_dpctl[native] = context
        _dpctl_queues[id(context)] = (weakref.ref(context), sycl_queue)
        return context


def _structure(name: str):
    from .enums import ur_structure_type_t

    return getattr(ur_structure_type_t, name)


def _check_sycl_queue(what: str, sycl_queue) -> None:
    import dpctl

    if not isinstance(sycl_queue, dpctl.SyclQueue):
        raise TypeError(f"{what}: sycl_queue must be a dpctl SyclQueue, not "
                        f"{type(sycl_queue).__name__} {sycl_queue!r:.60}")


def queue_from_dpctl(sycl_queue):
    """A ur_cffi Queue in :func:`context_from_dpctl`'s context on the same device (a UR queue
    of its own: order it against the SYCL queue by waiting, e.g. ``sycl_queue.wait()``),
    out of order unless ``sycl_queue`` is in order (dpctl's default queue is not)."""
    from .queue import Queue

    _check_sycl_queue("queue_from_dpctl", sycl_queue)
    context = context_from_dpctl(sycl_queue)
    return Queue(context, context.devices[0],
                 out_of_order=not sycl_queue.is_in_order)


def _import_queue(sycl_queue):
    """The Queue :func:`from_sycl_usm_array_interface` puts arrays of ``sycl_queue`` on: one
    :func:`queue_from_dpctl` for every import from it while that is open and in use, so that
    work on them stays in one order (each import made a queue of its own)."""
    with _from_dpctl_lock:
        queue = _import_queues.get(sycl_queue)
    if queue is None or queue.closed:
        made = queue_from_dpctl(sycl_queue)
        with _from_dpctl_lock:
            queue = _import_queues.get(sycl_queue)
            if queue is None or queue.closed:  # (another thread's may have come first)
                queue = _import_queues[sycl_queue] = made
    return queue


def to_dpctl(queue):
    """A dpctl ``SyclQueue`` over ``queue`` itself: the same native OpenCL queue and context,
    so that work submitted through either runs in one order and USM memory of either is the
    other's without a copy.  Arrays of ``queue``'s context then export
    ``__sycl_usm_array_interface__`` naming it (or, for a context made from dpctl, the queue it
    was made from).  The same SyclQueue comes back for the same queue.

    SYCL keeps the native handles it was given without a reference of its own, and dpctl may
    use them as long as it likes: they are retained here and stay alive until the process
    exits, even after ``queue`` and its context are closed.  Needs dpctl, and a C++ compiler
    on first use (``_sycl_shim``: SYCL makes queues from native handles only in C++).  Raises
    ``NotImplementedError`` for devices other than OpenCL ones."""
    import dpctl

    from . import _sycl_shim
    from .queue import Queue

    if type(queue) is not Queue:
        _check_queue(queue)
    backend = queue.device.backend.name
    if not backend.endswith("OPENCL"):
        raise NotImplementedError(f"to_dpctl: {queue.device!r} is a {backend} device; only "
                                  "OpenCL queues are made into SYCL queues here")
    native_queue = ffi.new("ur_native_handle_t *")
    check(lib.urQueueGetNativeHandle(queue.handle, _NULL, native_queue),
          "urQueueGetNativeHandle")
    native_context = ffi.new("ur_native_handle_t *")
    check(lib.urContextGetNativeHandle(queue.context.handle, native_context),
          "urContextGetNativeHandle")
    cl_queue, cl_context = int(native_queue[0]), int(native_context[0])
    with _to_dpctl_lock:
        sycl_queue = _to_dpctl.get(cl_queue)
        if sycl_queue is None:
            _opencl_references(cl_queue, cl_context, "Retain")  # the SYCL queue's own
            try:
                pointer = _sycl_shim.sycl_queue_from_opencl(cl_queue, cl_context)
            except BaseException:  # (the shim did not build, or SYCL refused the handles)
                _opencl_references(cl_queue, cl_context, "Release")
                raise
            try:
                sycl_queue = dpctl.SyclQueue(_capsule_new(pointer, b"SyclQueueRef", None))
            finally:  # dpctl made its own copy
                _sycl_shim.delete_sycl_queue(pointer)
            _to_dpctl[cl_queue] = sycl_queue
    context = queue.context
    entry = _dpctl_queues.get(id(context))
    if entry is None or entry[0]() is not context:
        _dpctl_queues[id(context)] = (weakref.ref(context), sycl_queue)
        _from_dpctl.setdefault(cl_context, context)
    return sycl_queue


_to_dpctl: dict = {}  # native OpenCL queue -> the dpctl SyclQueue made over it
_to_dpctl_lock = _forking.lock()


def _opencl_references(cl_queue: int, cl_context: int, verb: str) -> None:
    """One reference more (``verb`` "Retain") or less ("Release") on a native OpenCL queue and
    context."""
    opencl = ctypes.CDLL("libOpenCL.so.1")  # the ICD loader the OpenCL adapter has loaded
    for name, handle in ((f"cl{verb}CommandQueue", cl_queue), (f"cl{verb}Context", cl_context)):
        result = getattr(opencl, name)(ctypes.c_void_p(handle))
        if result:
            raise RuntimeError(f"{name} returned {result}")


def sycl_usm_array_interface(array: USMArray) -> dict:
    """``USMArray.__sycl_usm_array_interface__``: for arrays of a context made from a dpctl
    queue, or one of whose queues went to dpctl (:func:`to_dpctl`): the interface must name a
    SYCL object."""
    entry = _dpctl_queues.get(id(array.context))
    if entry is None or entry[0]() is not array.context:
        raise AttributeError("__sycl_usm_array_interface__ names a SYCL queue: only arrays "
                             "of a context made with ur_cffi.interop.context_from_dpctl, or "
                             "of one whose queue went to ur_cffi.interop.to_dpctl, have one "
                             "(use __dlpack__ otherwise)")
    array.data_ptr()  # noqa: B018 - raises ClosedError
    itemsize = array.itemsize
    try:
        strides = None if array.is_contiguous() else tuple(
            _element_stride(s, itemsize, "__sycl_usm_array_interface__", n)
            for s, n in zip(array.strides, array.shape))
    except ValueError as error:  # (AttributeError: a consumer probing with hasattr goes on)
        raise AttributeError(f"{error}; no __sycl_usm_array_interface__") from None
    if getattr(array, "_shown", None) is None:
        show(array)  # its consumers keep the array object, not a pin
    return {"data": (array.data_ptr(), False), "shape": array.shape, "strides": strides,
            "typestr": _typestr(array.dtype), "version": 1, "syclobj": entry[1]}


def from_sycl_usm_array_interface(obj, *, queue=None) -> USMArray:
    """A USMArray over the memory of ``obj`` (anything with ``__sycl_usm_array_interface__``,
    e.g. dpctl's USM memory), without a copy; ``queue`` defaults to one made with
    :func:`queue_from_dpctl` on the interface's SYCL queue, the same for every import from it
    while that Queue is open and in use.  ``obj`` stays alive with it.

    The flag in ``data`` is not read: the protocol calls it read-only, but dpctl's memory
    objects set it True for writable memory (their documentation says so), so it cannot
    tell the two apart."""
    what = "from_sycl_usm_array_interface"
    if not hasattr(obj, "__sycl_usm_array_interface__"):
        raise TypeError(f"{what}: {type(obj).__name__} has no __sycl_usm_array_interface__")
    interface = obj.__sycl_usm_array_interface__
    if not isinstance(interface, dict):
        raise TypeError(f"{what}: the __sycl_usm_array_interface__ of {type(obj).__name__} "
                        f"must be a dict, not {type(interface).__name__} {interface!r}")
    if queue is None:
        syclobj = interface.get("syclobj")
        if not hasattr(syclobj, "sycl_context"):
            raise TypeError("from_sycl_usm_array_interface: give queue= (the interface names "
                            f"{type(syclobj).__name__}, not a dpctl SyclQueue)")
        queue = _import_queue(syclobj)
    missing = [key for key in ("data", "shape", "typestr") if key not in interface]
    if missing:
        raise ValueError(f"{what}: the interface has no {', '.join(map(repr, missing))}")
    try:
        dtype = _dtype(interface["typestr"])
        shape = _shape(interface["shape"])
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: the interface's {error}") from None
    if dtype.hasobject:
        _no_objects(dtype, f"{what}: the interface's typestr")
    strides = interface.get("strides")
    if strides is not None:  # in elements
        strides = tuple(_checks.integer(f"{what}: stride", s, minimum=-(1 << 62),
                                        maximum=1 << 62)
                        for s in _sequence(f"{what}: strides", strides))
        if len(strides) != len(shape):
            raise ValueError(f"{what}: the interface's strides {strides} do not match its "
                             f"shape {shape}")
        strides = tuple(s * dtype.itemsize for s in strides)
    offset = _checks.integer(f"{what}: offset", interface.get("offset", 0)) * dtype.itemsize
    data = interface["data"]
    if not isinstance(data, (tuple, list)) or not data:
        raise ValueError(f"{what}: data must be (address, read-only flag), not {data!r}")
    address = _checks.integer(f"{what}: data address", data[0], minimum=1)
    return from_pointer(address + offset, shape, dtype, queue=queue, strides=strides,
                        owner=obj)
