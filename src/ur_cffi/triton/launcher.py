"""Kernel launches for Triton's JIT on a ur_cffi queue.

Triton calls ``driver.launcher_cls(src, metadata)`` once per compiled kernel, then the
launcher for every launch, as in ``XPULauncher`` (``triton/backends/intel/driver.py``)::

    launcher(gX, gY, gZ, stream, function, kernel_metadata, launch_metadata,
             enter_hook, exit_hook, *args)

``args`` are the kernel's arguments in signature order, constexprs included; which of them the
kernel takes and in what layout comes from ``abi.py``.  Everything that does not change
between launches is prepared at construction: the argument entries (``_compat``'s layout:
kinds, indices, sizes, the local-memory argument), one buffer for the scalar values and the
work sizes, and a ``struct`` format that writes them in one call.  A launch then writes the
pointer addresses and packs the scalars and work sizes, and enqueues through
``_compat.enqueue_launch``.  Which rules apply follows the compiled kernel's target
(``metadata.target.backend``: Intel's or NVIDIA's); for NVIDIA kernels ``cuda.py`` supplies
the launch properties (dynamic shared memory, flags) and the scratch memory.

Arguments are checked before anything is enqueued: the count; pointers must be ur_cffi
``USMArray`` of the queue's context and of the element type the kernel was compiled for, None
(a null pointer), or, for other objects with ``data_ptr()`` and plain integers in pointer
slots, an address UR knows as USM memory of the queue's context (``urUSMGetMemAllocInfo``
answers ``UR_USM_TYPE_UNKNOWN`` for host memory such as a numpy array's).  Integers passed to
an integer parameter (the original demo's raw addresses, which the kernel casts with
``.to(tl.pointer_type(...))``) are values and are not checked.
"""

from __future__ import annotations

import collections.abc as abc
import re
import struct
import weakref
from operator import itemgetter
from threading import get_ident
from time import perf_counter

import numpy as np

from .. import _checks, _compat, _handle, _interrupts
from .._interrupts import hold_back_in
from .._compat import ARGUMENT_SIZE, LOCAL, POINTER, VALUE, value_word, write_argument
from .._ur import ffi
from ..errors import check
from ..memory import USMArray, is_usm, memory_of
from ..program import Kernel, PreparedLaunch
from ..queue import Queue, recording
from . import abi, backend

_POINTER_SIZE = ffi.sizeof("void *")
_SIZE_T = {4: "I", 8: "Q"}[ffi.sizeof("size_t")]
_enqueue = _compat.enqueue_launch
try:  # Triton 3.4+: launch hooks are chains, passed to the launcher even when empty
    from triton.knobs import HookChain as _HookChain
except ImportError:
    _HookChain = None
_NULL = ffi.NULL

_KEPT_VALUES = (int, float, bool)  # with numpy scalars: values that stay what they are
_elements: dict = {}  # dtype -> Triton element type ("fp32"), as Triton's JIT names it


def element_type(dtype) -> str | None:
    """Triton's name for the elements of an array of ``dtype`` (``"fp32"``), None if none."""
    try:
        return _elements[dtype]
    except KeyError:
        from triton.runtime.jit import type_canonicalisation_dict

        element = type_canonicalisation_dict.get(str(dtype).split(".")[-1])
        _elements[dtype] = element
        return element
    except TypeError:  # an unhashable dtype-like object
        return None


class Launcher:
    """Launches one compiled Triton kernel on the queue Triton passes as ``stream``."""

    def __init__(self, src, metadata, driver):
        rules = abi.current(metadata.target.backend)
        signature = src.signature
        self.driver = driver
        self.name = metadata.name
        self.rules = rules
        self.arg_count = rules.argument_count(signature)
        # What a graph update must keep (None: unknown, the recorded values are kept instead).
        self.divisible = abi.divisible_parameters(src)
        self.tuple_signature = signature if abi.has_tuples(signature) else None
        threads_per_warp = rules.threads_per_warp(metadata)
        self.local_size = metadata.num_warps * threads_per_warp
        driver.check_work_group(metadata.num_warps, threads_per_warp)
        backend.check_num_ctas(getattr(metadata, "num_ctas", 1))

        # The kernel's arguments in order: (kind, position in *args, name, type).
        entries = [("pointer" if rules.is_pointer(ty) else "value", position, name, ty)
                   for position, name, ty in rules.parameters(signature)]
        entries += [("scratch", None, "scratch", None)] * rules.scratch_pointers
        if rules.shared_memory_argument and metadata.shared > 0:
            entries.append(("local", None, "shared memory", None))
        self.entries = entries
        self.kernel_arg_count = len(entries)
        # NVIDIA: shared memory as the launch's work-group memory, and scratch memory where a
        # kernel needs it: (word of the pointer, scratch index, bytes per instance, alignment).
        self._properties, self._scratch = _NULL, []
        if rules.backend == "nvidia":
            from . import cuda

            self._properties = cuda.launch_properties(metadata)
            first = len(entries) - rules.scratch_pointers
            self._scratch = [(value_word(first + index), index, size, align)
                             for index, size, align in cuda.scratch_layout(rules, metadata)]

        # One block: the argument array, then the scalar values, then the work sizes.
        value_formats = [rules.scalar_format(ty) for kind, _, _, ty in entries
                         if kind == "value"]
        values_start = len(entries) * ARGUMENT_SIZE
        values_format, value_offsets = _layout(value_formats)
        sizes_offset = _align(values_start + struct.calcsize("<" + values_format),
                              ffi.sizeof("size_t"))
        packed = "<" + values_format + "x" * (sizes_offset - values_start
                                              - struct.calcsize("<" + values_format))
        packed += _SIZE_T * 3
        self._layout = (_align(sizes_offset + 6 * ffi.sizeof("size_t"), 8), values_start,
                        value_formats, value_offsets, sizes_offset, metadata.shared)
        self._values_start = values_start
        self._packer = struct.Struct(packed)
        self._out = ffi.new("ur_event_handle_t *")

        self.pointers = []  # (word index of value.pointer, position, name, element type)
        self.scalars = []  # positions of the scalar arguments, in block order
        self.conversions = []  # (index into the scalars, abi.CONVERSIONS of its type)
        value_index = 0
        for index, (kind, position, name, ty) in enumerate(entries):
            if kind == "pointer":
                self.pointers.append((value_word(index), position, name,
                                      rules.pointer_element(ty)))
            elif kind == "value":
                if ty in abi.CONVERSIONS:
                    self.conversions.append((value_index, abi.CONVERSIONS[ty]))
                self.scalars.append(position)
                value_index += 1
        self._scalars_of = _getter(self.scalars)
        # What Triton compiled the kernel for, which a CompiledKernel launched by hand
        # (compiled[grid](...)) may contradict: numbers compiled in, 16-byte alignment and
        # divisibility by 16 (pointers: their index in self.pointers; scalars: in the values)
        self.constants = abi.compiled_constants(src)
        self._constants_of = _getter([position for position, _, _ in self.constants])
        divisible = self.divisible or ()
        self._aligned = [(index, name) for index, (_, _, name, _) in enumerate(self.pointers)
                         if name in divisible]
        # What the shared block was last filled from, where a launch with the very same
        # objects (and grid, context, release count) may skip filling it again.
        self._key_of = _key_function([position for _, position, _, _ in self.pointers]
                                     + self.scalars
                                     + [position for position, _, _ in self.constants])
        self._block_key, self._block_args = None, ()
        # Bytes of each argument as passed (None: local memory), checked against the binary.
        self.argument_sizes = [struct.calcsize("<" + rules.scalar_format(ty)) if kind == "value"
                               else None if kind == "local" else _POINTER_SIZE
                               for kind, _, _, ty in entries]
        self.value_types = [ty for kind, _, _, ty in entries if kind == "value"]
        self.value_names = [name for kind, _, name, _ in entries if kind == "value"]
        self._divisible = [(index, name) for index, name in enumerate(self.value_names)
                           if name in divisible]
        self._checked_function = self._checked_context = None
        # Every launch's, under the driver's lock, rewritten for each.
        self._shared_block = self._new_block(volatile=True)
        (self._block, self._args, self._buffer, self._words, self._global_size,
         self._local_size) = self._shared_block

    def _new_block(self, volatile: bool = False) -> tuple:
        """A fresh argument block: ``(memory, its argument list for the launch, its buffer, its
        64-bit words, the global size, the local size)``, with everything that does not change
        between launches filled in."""
        size, values_start, value_formats, value_offsets, sizes_offset, shared = self._layout
        block, arguments, words = _compat.new_arguments(
            len(self.entries), size - values_start, volatile)
        buffer = ffi.buffer(block)
        global_size = ffi.cast("size_t *", block + sizes_offset)
        local_size = ffi.cast("size_t *", block + sizes_offset + 3 * ffi.sizeof("size_t"))
        local_size[0], local_size[1], local_size[2] = self.local_size, 1, 1
        values = int(ffi.cast("uintptr_t", block)) + values_start
        value_index = 0
        for index, (kind, _, _, _) in enumerate(self.entries):
            if kind in ("pointer", "scratch"):
                write_argument(words, index, POINTER, _POINTER_SIZE)
            elif kind == "local":
                write_argument(words, index, LOCAL, shared)
            else:
                write_argument(words, index, VALUE,
                               struct.calcsize("<" + value_formats[value_index]),
                               values + value_offsets[value_index])
                value_index += 1
        return block, arguments, buffer, words, global_size, local_size

    @hold_back_in  # Ctrl-C waits until the launch's event is recorded (_interrupts)
    def __call__(self, grid_x, grid_y, grid_z, stream, function, kernel_metadata,
                 launch_metadata, enter_hook, exit_hook, *args):
        # Triton 3.4+ passes its hook chains (knobs.runtime) always, most often empty.
        if enter_hook is not None and not (type(enter_hook) is _HookChain
                                           and not enter_hook.calls) and \
                not (self.driver.preparing and get_ident() in self.driver.preparing):
            enter_hook(launch_metadata)  # (not by prepare(), which runs no exit hook either)
        if self.tuple_signature:
            try:
                args = abi.flatten_arguments(args, self.tuple_signature)
            except TypeError as error:
                raise TypeError(f"kernel {self.name!r}: {error}") from None
        if len(args) != self.arg_count:
            raise TypeError(f"kernel {self.name!r} takes {self.arg_count} arguments "
                            f"(constexprs included), {len(args)} given")
        if type(stream) is not Queue and not isinstance(stream, Queue):
            raise TypeError(f"kernel {self.name!r}: the stream must be a ur_cffi Queue, not "
                            f"{type(stream).__name__}")
        context = stream._context
        if function is not self._checked_function or context is not self._checked_context:
            self._check_function(function, context)
        key = self._key_of(args, grid_x, grid_y, grid_z, context, _handle.release_count)
        block_key = self._block_key
        try:
            same = key == block_key
        except TypeError:  # a grid of Decimals against a numpy one: _check_grid names it
            same = False
        if same and type(grid_x) is int and type(grid_y) is int \
                and type(grid_z) is int:  # the shared block holds these (16.0 == 16: checked)
            addresses = values = None
        else:
            addresses, values, stable = self._arguments(args, stream, context)
        driver = self.driver
        preparing = driver.preparing and get_ident() in driver.preparing
        if addresses is None and (preparing or (recording and stream in recording)):
            addresses, values, stable = self._arguments(args, stream, context)
        if addresses is not None:  # a grid not seen with these arguments before
            grid_x, grid_y, grid_z = self._check_grid((grid_x, grid_y, grid_z), stream.device)
        owners = shared_scratch = None
        if self._scratch and grid_x and grid_y and grid_z:
            # A prepared or recorded launch keeps scratch of its own, not the queue's shared
            # block, which a larger launch replaces; this call holds that until it enqueues.
            shared_scratch = []
            owners = self._scratch_memory(addresses, stream, grid_x * grid_y * grid_z,
                                          preparing or bool(recording and stream in recording),
                                          shared_scratch)
        if preparing:
            driver.preparing[get_ident()] = self._prepare((grid_x, grid_y, grid_z), stream,
                                                          function, addresses, values, args,
                                                          owners)
            return
        stack = driver._scopes.get()  # driver.scope(), inlined: a hot path
        scope = stack[-1][1] if stack and stack[-1][0] is driver else \
            not stack and driver._default or driver.scope()
        if recording and stream in recording:  # a ur_cffi.Graph records it instead (graph.py)
            recording[stream].record_triton(self, (grid_x, grid_y, grid_z), stream, function,
                                            addresses, values, args, owners, scope.wait_for)
        elif not (grid_x and grid_y and grid_z):
            driver.mark_empty_launch(stream, scope)
        else:
            words = self._words
            lock = driver.raw_launch_lock
            lock.acquire()  # not ``with``: a hot path, and Ctrl-C is held back here
            try:
                if addresses is None and self._block_key is not block_key:  # another thread's
                    addresses, values, stable = self._arguments(args, stream, context)
                if addresses is not None:
                    self._block_key = None
                    for word, address in addresses:  # self._fill, inlined: a hot path
                        words[word] = address
                    try:
                        self._packer.pack_into(self._buffer, self._values_start, *values,
                                               grid_x * self.local_size, grid_y, grid_z)
                    except (struct.error, OverflowError, TypeError):
                        self._explain([args[position] for position in self.scalars],
                                      (grid_x, grid_y, grid_z))
                    if stable and not owners:  # (the release count moves on a close)
                        self._block_key, self._block_args = key, self._held(args)
                own_event = owners or not stream._in_order_untimed  # see driver.last_event
                try:
                    result = _enqueue(stream._handle, function._handle, 3, _NULL,
                                      self._global_size, self._local_size,
                                      self.kernel_arg_count, self._args, self._properties,
                                      scope.wait_count, scope.wait_events,
                                      self._out if own_event else _NULL)
                except TypeError:  # no handle: closed, or inherited across fork()
                    try:
                        stream.handle, function.handle  # noqa: B018 - raises ClosedError
                    except _handle.ClosedError as error:
                        raise _handle.ClosedError(
                            f"kernel {self.name!r}: {error} (the queue ur_cffi.triton launches "
                            "on: a using() block's, or activate()'s)") from None
                    raise
                if result:
                    check(result, _compat.LAUNCH, f"kernel {self.name!r}")
                timing = None if scope.wait_count else function.timing  # see _durations
                window = stream._window  # stream._note_work, inlined: a hot path
                if not window:
                    stream._window_start = perf_counter()
                window[timing] = window.get(timing, 0) + \
                    grid_x * grid_y * grid_z * self.local_size
                if owners:
                    from .cuda import keep_until_complete

                    keep_until_complete(self._out[0], owners)
                if own_event or driver._latest_queue is not stream or \
                        driver._last_event is not None or \
                        driver._latest.handle_slot[0] is not None:
                    driver.record(self._out[0] if own_event else None, stream)
                else:  # what driver.record would do, all but this already in place
                    stream._last_event = None
            finally:
                lock.release()
        if exit_hook is not None and not (type(exit_hook) is _HookChain
                                          and not exit_hook.calls):
            exit_hook(launch_metadata)

    def _held(self, args) -> tuple:
        """What keeps the ids in the block's key those of its arguments, without keeping its
        arrays alive: the scalars themselves, and a weak reference to each array (all USMArrays
        where the block is kept) whose callback forgets the block as the array goes, before
        its id can be another object's."""
        forget = self._forget_block
        return self._scalars_of(args), self._constants_of(args), \
            [weakref.ref(args[position], forget) for _, position, _, _ in self.pointers]

    def _forget_block(self, _reference) -> None:
        self._block_key = None

    def _check_grid(self, grid: tuple, device) -> tuple:
        """``grid`` as Python ints (numpy's would wrap in the global size's product); raise
        naming the grid where a cell is not a non-negative integer (None or 0.0 would
        otherwise launch nothing) or the launch is larger than ``device`` runs."""
        if any(type(cell) is not int or cell < 0 for cell in grid):
            grid = tuple(_checks.integer(f"kernel {self.name!r}: grid {grid}: cell", cell, 0)
                         for cell in grid)
        if all(grid):
            local = self.local_size
            try:
                device.check_launch_size("global_size", (grid[0] * local, grid[1], grid[2]),
                                         (local, 1, 1))
            except ValueError as error:
                raise ValueError(f"kernel {self.name!r}: grid {grid} of {local} work-items per "
                                 f"program: {error}") from None
        return grid

    def _arguments(self, args, stream, context) -> tuple:
        """``(the (word, address) of each pointer, the scalar values as packed, whether all
        are of types whose value an object keeps: USMArrays taken as they are, numbers)``."""
        addresses, stable = [], not self._scratch  # scratch addresses change
        for word, position, name, element in self.pointers:
            arg = args[position]
            if type(arg) is USMArray and arg._handle is not None and \
                    arg._queue.context is context and _elements.get(arg._dtype) == element and \
                    (arg._base is None or arg._base._handle is not None):  # data_ptr(), inlined
                addresses.append((word, arg._address))
            else:
                addresses.append((word, self._address(arg, name, element, stream)))
                stable = False
        values = self._scalars_of(args)
        if self._aligned or self._divisible or self.constants:
            self._check_specialization(args, addresses, values)
        if stable:  # a plain loop: every launch that does not reuse the block passes here
            for value in values:
                if type(value) not in _KEPT_VALUES and not isinstance(value, np.generic):
                    stable = False
                    break
        if self.conversions:
            values = self._converted(values)
        return addresses, values, stable

    def _check_specialization(self, args, addresses: list, values: tuple) -> None:
        """Raise where an argument contradicts what Triton compiled the kernel for (only a
        CompiledKernel launched by hand can: ``kernel[grid]`` specializes for each call)."""
        relaunch = "launch it with kernel[grid](...), which compiles for each call's arguments"
        hint = f"which Triton compiled the kernel for: {relaunch}"
        for index, name in self._aligned:
            if addresses[index][1] % 16:
                raise ValueError(f"argument {name!r} of kernel {self.name!r}: address "
                                 f"0x{addresses[index][1]:x} is not 16-byte aligned, {hint}")
        for index, name in self._divisible:
            value = values[index]
            if isinstance(value, (int, np.integer)) and value % 16:
                raise ValueError(f"argument {name!r} of kernel {self.name!r}: {value!r} is not "
                                 f"divisible by 16, {hint}")
        for position, name, value in self.constants:
            given = args[position]
            if given is not value and _differs(given, value):
                if repr(given) == repr(value):  # (a function defined again, say)
                    raise ValueError(
                        f"argument {name!r} of kernel {self.name!r}: {given!r} is another "
                        "object than the one of that repr Triton compiled the kernel with: "
                        "its cache keys on the repr and gave the other's kernel; clear the "
                        f"cache ({self.name}.device_caches.clear(), of the @triton.jit "
                        "function) to compile for this one")
                raise ValueError(f"argument {name!r} of kernel {self.name!r}: {given!r}, where "
                                 f"Triton compiled the kernel with {value!r}: {relaunch}")

    def _scratch_memory(self, addresses: list, stream, instances: int, fresh: bool,
                        held: list | None = None) -> list:
        """Add ``(word, address)`` of this launch's scratch memory to ``addresses``; returns
        the allocations the launch must keep until it completes (none for an in-order queue's
        shared ones, which go to ``held``, for the caller to hold until it has enqueued)."""
        from .cuda import scratch

        owners = []
        for word, index, size, align in self._scratch:
            address, memory, owned = scratch(stream, index, instances * size, align, fresh)
            addresses.append((word, address))
            (owners if owned else held).append(memory)
        return owners

    def _prepare(self, grid, stream, function, addresses, values, args,
                 owners=None) -> PreparedLaunch:
        """The launch, checked and packed into a block of its own (``ur_cffi.triton.prepare``)."""
        if not all(grid):
            raise ValueError(f"kernel {self.name!r}: grid {grid} is empty, a launch of it runs "
                             "nothing: there is nothing to prepare")
        block, arg_array, buffer, words, global_size, local_size = self._new_block()
        self._fill(words, buffer, addresses, values, grid, args)
        call_args = (3, _NULL, global_size, local_size, self.kernel_arg_count, arg_array,
                     self._properties)
        items = grid[0] * grid[1] * grid[2] * self.local_size
        # Release count -1: the first call checks that no argument was closed meanwhile.
        held = (block, self._properties, owners) if owners or self._properties else block
        return PreparedLaunch(function, stream, tuple(args), (call_args, items), (-1, held),
                              self)

    def _fill(self, words, buffer, addresses, values, grid, args) -> None:
        """Write a launch's pointer addresses, scalars and work sizes into an argument block
        (its 64-bit ``words`` and its ``buffer``)."""
        for word, address in addresses:
            words[word] = address
        try:
            self._packer.pack_into(buffer, self._values_start, *values,
                                   grid[0] * self.local_size, grid[1], grid[2])
        except (struct.error, OverflowError, TypeError):
            self._explain([args[position] for position in self.scalars], grid)

    def _converted(self, values: list) -> list:
        """``values`` with the bf16 scalars replaced by their 16-bit patterns and the i1 ones
        checked (``abi.CONVERSIONS``)."""
        converted = list(values)
        try:
            for index, conversion in self.conversions:
                converted[index] = conversion(values[index])
        except (struct.error, OverflowError, TypeError):
            self._explain(values, None)
        return converted

    def _check_function(self, function, context) -> None:
        """Once per loaded kernel and queue context: is it a UR kernel of that context, and
        does it take the arguments these rules pass?"""
        if not isinstance(function, Kernel):
            raise TypeError(f"kernel {self.name!r}: expected a ur_cffi Kernel, not "
                            f"{type(function).__name__}")
        if function.program.context is not context:
            raise ValueError(
                f"kernel {self.name!r} was loaded in another context than the launch queue's: "
                "a compiled kernel loads in the context of its first launch and stays there "
                "(one kept from warmup() or compile() and launched first on another context's "
                "queue does so even inside its JITFunction's cache: clear that with "
                f"{self.name}.device_caches.clear(), or compile one for each context)")
        if function.num_args != self.kernel_arg_count:
            raise RuntimeError(
                f"kernel {self.name!r} takes {function.num_args} arguments but the Triton "
                f"{self.rules.series} launch rules (ur_cffi/triton/abi.py) pass "
                f"{self.kernel_arg_count}: {[e[2] for e in self.entries]}")
        declared = function.argument_sizes  # where the binary states them (a cubin, PTX)
        if declared is not None and any(
                size not in (None, expected)
                for size, expected in zip(self.argument_sizes, declared)):
            raise RuntimeError(
                f"kernel {self.name!r}: its binary declares parameters of {list(declared)} "
                f"bytes but the Triton {self.rules.backend} {self.rules.series} launch rules "
                f"(ur_cffi/triton/abi.py) pass {self.argument_sizes}")
        self._checked_function, self._checked_context = function, context

    def _address(self, arg, name: str, element: str, queue) -> int:
        """The address of a pointer argument that is not a USMArray of the queue's context
        with the right dtype; raises ``TypeError``/``ValueError`` saying what is wrong."""
        where = f"argument {name!r} of kernel {self.name!r}"
        if arg is None:
            return 0
        if isinstance(arg, USMArray):
            if arg.queue.context is not queue.context:
                raise ValueError(f"{where}: the USMArray belongs to another context than the "
                                 "launch queue")
            if element_type(arg.dtype) != element:
                raise TypeError(f"{where}: the kernel was compiled for *{element} but the "
                                f"USMArray holds {arg.dtype}")
            return arg.data_ptr()
        if isinstance(arg, bool) or not isinstance(arg, int):
            data_ptr = getattr(arg, "data_ptr", None)
            if data_ptr is None:
                raise TypeError(f"{where} is a pointer (*{element}); got "
                                f"{type(arg).__name__}, which has no data_ptr(). Pass UR "
                                "memory: ur_cffi.asarray(x, queue=queue)")
            dtype = getattr(arg, "dtype", None)
            if dtype is not None and element_type(dtype) != element:  # (complex64: none)
                raise TypeError(f"{where}: the kernel was compiled for *{element} but the "
                                f"argument holds {dtype}")
            address = _checked_address(where, data_ptr(), arg)
            base = getattr(arg, "base", None)  # (triton.reinterpret's wrapper keeps its array)
            if isinstance(base, USMArray) and base.queue.context is not queue.context:
                _refuse_another_context(where, base)  # (as a USMArray's: whatever UR says)
        elif not 0 <= arg <= _checks.SIZE_MAX:
            raise ValueError(f"{where}: {arg} is no address (negative or past 64 bits)")
        else:
            address = arg
        if address % _element_bytes(element):  # (triton.reinterpret(b8[1:], tl.float32))
            raise ValueError(f"{where}: address 0x{address:x} is not aligned to the "
                             f"{_element_bytes(element)}-byte elements of *{element}")
        if address and not is_usm(queue.context, address):
            memory = memory_of(arg) if not isinstance(arg, int) else None
            if memory is not None and memory.context is not queue.context:
                _refuse_another_context(where, memory)
            raise ValueError(f"{where}: address 0x{address:x} is not USM memory of the launch "
                             "queue's context (host memory such as a numpy array's cannot be "
                             "passed; copy it with ur_cffi.asarray(x, queue=queue))")
        return address

    def integer_addresses(self, args) -> tuple:
        """``(argument name, address)`` of each pointer of ``args`` given as an integer
        (``program.integer_addresses``)."""
        return tuple((repr(name), args[position]) for _, position, name, _ in self.pointers
                     if isinstance(args[position], int) and not isinstance(args[position], bool))

    def _explain(self, values, grid) -> None:
        """Raise naming the scalar (as passed) or the grid size that cannot be packed."""
        for value, ty, name in zip(values, self.value_types, self.value_names):
            try:
                if ty in abi.CONVERSIONS:
                    value = abi.CONVERSIONS[ty](value)
                struct.pack("<" + self.rules.scalar_format(ty), value)
            except (struct.error, OverflowError, TypeError):
                raise TypeError(f"argument {name!r} of kernel {self.name!r} is {ty}: "
                                f"{type(value).__name__} {value!r} cannot be passed as "
                                f"{ty}") from None
        raise ValueError(f"kernel {self.name!r}: grid {grid} must be non-negative integers and "
                         f"grid[0] * {self.local_size} must fit in size_t")


def _element_bytes(element: str) -> int:
    """Bytes of one element of Triton's type ``element`` (``"fp32"``: 4, ``"fp8e4nv"``: 1,
    ``"i1"``: 1)."""
    bits = re.match(r"[a-z]+(\d+)", element)
    return max(1, int(bits.group(1)) // 8) if bits else 1


def _key_function(positions: list[int]):
    """``(args, grid_x, grid_y, grid_z, context, released) -> (grid_x, grid_y, grid_z, context,
    released, id(args[position]) for each of positions)``: what a launch's shared block was
    filled from, written out, as one call costs half of building it with ``itemgetter``."""
    ids = "".join(f"id(args[{int(position)}]), " for position in positions)
    source = ("def key(args, grid_x, grid_y, grid_z, context, released):\n"
              f"    return (grid_x, grid_y, grid_z, context, released, {ids})\n")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - source made above from integers only
    return namespace["key"]


def _getter(positions: list[int]):
    """``args -> tuple of args[position] for position in positions``, in C where it can be."""
    if len(positions) > 1:
        return itemgetter(*positions)
    if positions:
        position = positions[0]
        return lambda args: (args[position],)
    return lambda args: ()


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def _layout(formats: list[str]) -> tuple[str, list[int]]:
    """A padded struct format for ``formats`` (each naturally aligned) and their offsets."""
    layout, offsets, offset = "", [], 0
    for fmt in formats:
        size = struct.calcsize("<" + fmt)
        padding = _align(offset, size) - offset
        layout += "x" * padding + fmt
        offset += padding
        offsets.append(offset)
        offset += size
    return layout, offsets


def install_argument_check(patches) -> None:
    """Make Triton's argument binding reject host arrays and integer pointers clearly.

    Triton's JIT treats any argument with a ``dtype`` as a tensor and asks the backend for its
    alignment: a numpy array or numpy scalar fails there, with an ``AttributeError`` in
    Triton 3.3 (``get_arg_specialization(arg, "tensor")`` calls ``arg.data_ptr()``) and a
    ``TypeError`` ("failed to specialize argument") in 3.4+.  An integer given where the
    kernel uses a pointer compiles as an integer and fails in Triton's code generator.
    ``kernel[grid](...)``, for as long as ur_cffi.triton is active, turns both into a
    ``TypeError`` that says what to pass instead, still before anything is compiled or
    launched.  Only failures pay: the launcher ``kernel[grid]`` returns replaces Triton's own,
    and nothing wraps each argument.  (``kernel.run(...)`` and ``kernel.warmup(...)`` called
    directly get Triton's errors.)
    """
    import triton._utils
    import triton.runtime.jit as jit

    # Triton looks an array's dtype up in this table and fails on others (a big-endian or
    # structured numpy dtype) with a bare KeyError('>f4').  Triton 3.3 reads it in
    # triton.runtime.jit, 3.4+ in triton._utils.
    for module in (jit, triton._utils):
        table = getattr(module, "type_canonicalisation_dict", None)
        if table is not None:
            patches.replace(module, "type_canonicalisation_dict", _ElementTypes(table))
    _explain_bad_arguments(patches, jit.KernelInterface)


def _explain_bad_arguments(patches, kernel_interface) -> None:
    """Give ``kernel[grid]`` a launcher that explains (see :func:`install_argument_check`):
    ``kernel_interface.__getitem__`` (JITFunction's, Autotuner's, Heuristics') returns it in
    place of Triton's own one-line lambda, so a launch pays no extra call for the check."""
    from triton.compiler.errors import CompilationError

    def __getitem__(self, grid):
        if type(grid) is not tuple or not 0 < len(grid) < 4:
            grid = _checked_grid(grid)

        def launch(*args, **kwargs):
            try:
                launched = self.run(grid=grid, warmup=False, *args, **kwargs)
                if _interrupts.resend is not None:  # Ctrl-C in the launcher: raised here (a
                    _interrupts.deliver_held()  # loop would take each re-send in a launch)
                return launched
            except (AttributeError, TypeError, OverflowError):  # 3.3: no data_ptr(); 3.4+:
                # failed to specialize (an address past 64 bits: OverflowError)
                function = _jit_function(self)
                if function is not None:
                    _explain_host_arrays(function, args, kwargs)
                raise
            except _handle.ClosedError as error:  # Triton's specialization asked data_ptr()
                function = _jit_function(self)
                if function is not None:
                    _explain_closed(function, args, kwargs, error)
                raise
            except CompilationError as error:
                function = _jit_function(self)
                if function is not None:
                    _explain_integer_pointers(function, args, kwargs, error)
                raise

        return launch

    patches.replace(kernel_interface, "__getitem__", __getitem__)


def _checked_grid(grid):
    """``grid`` (other than a tuple of 1 to 3 cells) as Triton may take it: a list of 1 to 3
    cells, or a callable whose result is checked at each launch.  Triton reads ``grid[0]`` to
    ``grid[2]`` only: a fourth dimension would be dropped silently."""
    if callable(grid):
        def checked(meta):
            cells = grid(meta)
            if type(cells) is not tuple or not 0 < len(cells) < 4:
                _grid_cells(cells, f"the grid function {grid!r} returned")
            return cells

        return checked
    _grid_cells(grid, "grid")
    return grid


def _grid_cells(cells, what: str) -> None:
    """Raise unless ``cells`` is a sequence (a tuple, a list, a numpy array: what Triton
    takes) of 1 to 3 grid sizes (not bytes, whose items Triton would take as sizes, nor a set
    or a dict, which Triton would index by size or key)."""
    try:
        if isinstance(cells, (str, bytes, bytearray, abc.Set, abc.Mapping)):
            raise TypeError
        dimensions = len(cells)
    except TypeError:
        raise TypeError(f"{what} {cells!r}: a grid is a tuple of 1 to 3 sizes, e.g. "
                        f"({cells!r},), or a callable of the meta-parameters returning one") \
            from None
    if not 0 < dimensions < 4:
        raise ValueError(f"{what} {tuple(cells)!r}: a grid has 1 to 3 dimensions, not "
                         f"{dimensions}")


def _explain_closed(function, args, kwargs, error) -> None:
    """Raise ``ClosedError`` naming the closed memory among the arguments."""
    for name, value in _named_arguments(function, args, kwargs):
        memory = memory_of(value)
        if memory.closed if memory is not None else _data_ptr_raises_closed(value):
            raise _handle.ClosedError(f"kernel {function.__name__!r}: argument {name!r}: "
                                      f"{error}") from None


def _refuse_another_context(where: str, memory) -> None:
    raise ValueError(f"{where}: its {type(memory).__name__} belongs to another context than "
                     "the launch queue")


def _data_ptr_raises_closed(value) -> bool:
    """Whether ``value`` has a ``data_ptr()`` that raises ``ClosedError`` (a wrapper of a
    closed array)."""
    try:
        value.data_ptr()
    except _handle.ClosedError:
        return True
    except Exception:  # no data_ptr(), or another fault: not this one
        return False
    return False


def _jit_function(kernel):
    """The JITFunction inside ``kernel`` (an Autotuner or Heuristics wraps one in ``fn``), or
    None (another kind of KernelInterface: its own errors stand)."""
    while not hasattr(kernel, "params") and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel if hasattr(kernel, "params") else None


def _named_arguments(function, args, kwargs):
    """``(name, value)`` of each kernel argument (not the launch options among ``kwargs``);
    the items of a tuple (Triton passes each to the kernel) as ``name[index]``, constexpr
    tuples as they are."""
    names = [param.name for param in function.params]
    constexprs = {param.name for param in function.params if param.is_constexpr}
    for name, value in (*zip(names, args), *((k, v) for k, v in kwargs.items() if k in names)):
        yield from ((name, value),) if name in constexprs else _items(name, value)


def _items(name: str, value):
    if isinstance(value, tuple):
        for index, item in enumerate(value):
            yield from _items(f"{name}[{index}]", item)
    else:
        yield name, value


def _explain_host_arrays(function, args, kwargs) -> None:
    """Raise ``TypeError`` naming an argument that has a ``dtype`` but no ``data_ptr()``, or
    that is no kernel argument at all (a list, a str, a complex number: Triton asks it for
    a ``dtype``)."""
    from triton.language import constexpr
    from triton.runtime.jit import JITFunction

    constexprs = {param.name for param in function.params if param.is_constexpr}
    for name, value in _named_arguments(function, args, kwargs):
        if name in constexprs or isinstance(value, (int, float)):  # (np.float64 is a float)
            continue
        if hasattr(value, "data_ptr") and not isinstance(value, USMArray):
            _checked_address(f"argument {name!r} of kernel {function.__name__!r}",
                             value.data_ptr(), value)  # Triton's specialization: it % 16
        if hasattr(value, "data_ptr") and hasattr(value, "dtype") and \
                element_type(value.dtype) is None:
            raise TypeError(f"kernel {function.__name__!r}: argument {name!r}: "
                            f"{_no_element_type(str(value.dtype))}") from None
        if hasattr(value, "dtype") and not hasattr(value, "data_ptr"):
            raise TypeError(
                f"kernel {function.__name__!r}: argument {name!r} is a "
                f"{type(value).__module__}.{type(value).__name__}: it has a dtype, so Triton "
                "takes it for device memory, but it has no data_ptr(). Pass UR memory "
                "(ur_cffi.asarray(x, queue=queue)) for arrays, and Python int/float for "
                "scalars") from None
        if not (value is None or isinstance(value, (bool, int, float, tuple, JITFunction,
                                                    constexpr)) or hasattr(value, "dtype")):
            raise TypeError(
                f"kernel {function.__name__!r}: argument {name!r} is a "
                f"{type(value).__name__} {value!r:.60}: a kernel takes device memory (an "
                "object with data_ptr() and dtype), Python int/float/bool or None; a "
                "compile-time value (a tl.dtype, a str) needs its parameter annotated "
                "tl.constexpr") from None


def _checked_address(where: str, address, arg) -> int:
    """What ``arg.data_ptr()`` returned, as an int; ``TypeError`` if no integer, ``ValueError``
    if no address, or null for memory that has elements (a kernel would read through it)."""
    if isinstance(address, (bool, np.bool_)) or not isinstance(address, (int, np.integer)):
        raise TypeError(f"{where}: data_ptr() returned {type(address).__name__} {address!r}; "
                        "it must return the integer address of the memory")
    address = int(address)
    if not 0 <= address <= _checks.SIZE_MAX:
        raise ValueError(f"{where}: data_ptr() returned {address}, which is no address")
    if not address and not _has_no_elements(arg):
        raise ValueError(f"{where}: data_ptr() returned 0, a null pointer, for memory that "
                         "does not say it is empty (numel() or size 0); pass None where the "
                         "kernel takes a null pointer")
    return address


def _differs(given, compiled) -> bool:
    """Whether an argument ``given`` is not the value Triton ``compiled`` into the kernel
    (NaN is NaN, in tuples too; memory, or a value that does not compare, never is)."""
    if (given is None) != (compiled is None) or hasattr(given, "data_ptr"):
        return True
    if isinstance(given, tuple) and isinstance(compiled, tuple):
        return len(given) != len(compiled) or any(map(_differs, given, compiled))
    try:
        return bool(given != compiled) and not (given != given and compiled != compiled)
    except Exception:  # noqa: BLE001 - whatever comparing raises, it is no match
        return True


def _has_no_elements(arg) -> bool:
    """Whether ``arg`` says it holds no elements (an empty tensor's ``data_ptr()`` is 0): by
    ``numel()``, ``size`` or a ``shape`` with an extent of 0 (``triton.reinterpret``'s)."""
    numel = getattr(arg, "numel", None)
    count = numel() if callable(numel) else getattr(arg, "size", None)
    if isinstance(count, (int, np.integer)) and not isinstance(count, bool):
        return count == 0
    shape = getattr(arg, "shape", None)
    return isinstance(shape, (tuple, list)) and 0 in shape


_POINTER_ERRORS = ("Unsupported ptr type", "Pointer argument of")
"""What Triton's code generator says of an operand of ``tl.load``, ``tl.store`` or an atomic
that is no pointer (its error's cause; the error's own text quotes the kernel's source)."""


def _explain_integer_pointers(function, args, kwargs, error) -> None:
    """An integer passed where the kernel uses a pointer compiles as an integer and fails in
    Triton's code generator; name the argument (the integers that are USM addresses of the
    launch queue's context, else every large one) and say how to pass an address instead."""
    if not any(marker in f"{error.__cause__}" for marker in _POINTER_ERRORS):
        return
    integers = [(name, value) for name, value in _named_arguments(function, args, kwargs)
                if type(value) is int and abs(value) >= 1 << 16]
    if not integers:
        return
    from . import current_queue

    try:
        context = current_queue().context
        addresses = [name for name, value in integers if is_usm(context, value)]
    except (RuntimeError, ValueError, OverflowError):  # not active; closed; not an address
        addresses = []
    integers = addresses or [name for name, _ in integers]
    raise TypeError(
        f"kernel {function.__name__!r}: {', '.join(map(repr, integers))} got an int, which "
        "Triton compiles as an integer, but the kernel uses it as a pointer. Pass the "
        "array itself (a ur_cffi USMArray or view, or any object with data_ptr() and "
        "dtype), or keep the int and cast it in the kernel: "
        "x.to(tl.pointer_type(tl.float32))") from error


class _ElementTypes(dict):
    """Triton's dtype-name table, raising a ``TypeError`` that says what Triton takes."""

    def __missing__(self, name):
        raise TypeError(_no_element_type(name))


def _no_element_type(name: str) -> str:
    return (f"an array of dtype {name!r} was passed to a Triton kernel: Triton has no element "
            "type for it (it takes numbers in native byte order: float32, int64, float16, ...)")
