"""The UR loader's lifetime: initialised once on first use, torn down at interpreter exit.

``init()`` calls ``urLoaderInit`` (optionally with UR's validation and leak-checking layers) and
``urAdapterGet``; ``teardown()`` releases everything ur_cffi still owns, newest first, then
calls ``urLoaderTearDown``.  After a teardown the next use initialises again.

Validation mode (``init(validation=True)`` or ``UR_CFFI_VALIDATION=1``) routes UR's validation
log to a file of our own and reads it back at teardown, where UR reports leaks: any leak or
validation error there raises :class:`ValidationError`, and at interpreter exit it is printed
and the process exits with status :data:`VALIDATION_EXIT_STATUS`, so a test run fails.  That
holds for a process's first loader initialisation: UR's logger writes to stderr after a
teardown, so a later one in validation mode warns that its reports go unread.

A teardown first finishes every open queue, so that nothing still runs on the memory and
events it then releases.

After ``fork()`` a child process cannot use what its parent initialised: every object raises
``ClosedError``, and so does ``init()`` (and so ``devices()``).  Fork before the first use of
ur_cffi, or use multiprocessing's ``"spawn"`` or ``"forkserver"`` start method.

``ONEAPI_DEVICE_SELECTOR`` is checked here (:func:`device_selector`) before UR reads it: UR's
loader applies its backend and device-type parts when ``urLoaderInit`` picks adapters, and
``urDeviceGetSelected`` applies all of it (``ur_cffi.devices()``), but neither reports a
malformed selector reliably: by release, UR ignores it, drops every adapter, answers
``UR_RESULT_ERROR_INVALID_VALUE``, aborts (oneAPI 2025.2) or crashes (2025.0), so ur_cffi raises
:class:`DeviceSelectorError` instead of passing one on.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import sys
import tempfile
import threading
import warnings

from . import _checks, _compat, _forking, _handle, _waiting, queue
from ._interrupts import section
from ._ur import ffi, lib
from .enums import ur_adapter_info_t, ur_platform_info_t
from .errors import check
from .info import query

VALIDATION_ENV = "UR_CFFI_VALIDATION"
"""Set to ``1`` to initialise with UR's full validation and leak-checking layers."""

VALIDATION_LAYERS = ("UR_LAYER_FULL_VALIDATION", "UR_LAYER_LEAK_CHECKING")

VALIDATION_LOG_DIR_ENV = "UR_CFFI_VALIDATION_LOG_DIR"
"""A directory where validation mode keeps UR's validation logs, one per process and loader
initialisation (default: temporary files, removed once read).  If you set UR's own
``UR_LOG_VALIDATION``, UR logs where you said and ur_cffi reads nothing."""

VALIDATION_EXIT_STATUS = 3
"""The exit status of a process in validation mode whose teardown found leaks or errors."""

# Lines UR's validation layer logs for correct programs.  Its lifetime check looks up every
# handle argument, including the optional NULL pool each urUSM*Alloc takes, and logs this
# for it (ur_cffi allocates with a NULL pool, as USM pools are unsupported on many adapters).
SPURIOUS_VALIDATION_MESSAGES = frozenset({"There are no valid references to handle 0"})

# What the leak checker of UR 0.10 and 0.11 reports for events it never recorded (_compat),
# dropped there: their uses, releases and negative counts, and new handles at the address of
# one whose count went wrong.  Leaks (a positive count retained) and every other check still count.
_UNRECORDED_EVENT_REPORTS = re.compile(
    r"Attempting to re(lease|tain) nonexistent handle |Retained -\d+ reference\(s\) to handle "
    r"|There are no valid references to handle |Handle \S+ already exists")

# UR's logger writes "<VALIDATION>[ERROR]: message"; a leak report goes on with lines
# "Handle 0x... was recorded for first time here:" and "#3 frame", which belong to it.
_LOG_LINE = re.compile(r"<VALIDATION>\[(\w+)\]: ?(.*?)\s*$")
_CONTINUATION = re.compile(r"Handle \S+ was recorded for first time here:$|#\d+ ")

SELECTOR_ENV = "ONEAPI_DEVICE_SELECTOR"
"""The variable that selects devices, as in SYCL: ``[!]backend:device[,device...]`` terms
separated by ``;`` (empty or unset: every device)."""
PRELOAD_FILTER_ENV = "UR_LOADER_PRELOAD_FILTER"
"""UR's switch for the loader's own filtering of adapters by the selector (on by default)."""

_lock = _forking.lock(reentrant=True)
_state: dict = {"adapters": None, "validation": False, "generation": 0,
                "log": None, "own_log": False, "forked": False, "selector": None,
                "initialising": False, "exited": False}


class ValidationError(RuntimeError):
    """UR's validation or leak-checking layer reported problems (``.problems``, one string
    each, with UR's backtrace where it gave one)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"UR's validation layer reported {len(problems)} problem(s):\n"
                         + "\n".join(problems))

    def __reduce__(self):  # (pickle: a pool's worker raising it)
        return type(self), (self.problems,)


class DeviceSelectorError(ValueError):
    """``ONEAPI_DEVICE_SELECTOR`` is malformed, or UR refused it; ``.selector`` is its value,
    and ``reason`` (``"is malformed: ..."``) follows it in the message."""

    def __init__(self, selector: str, reason: str):
        self.selector, self.reason = selector, reason
        backends = ", ".join(_selector_backends())
        super().__init__(
            f"{SELECTOR_ENV}={selector!r} {reason}. The form is "
            "'[!]backend:device[,device...]', terms separated by ';' (backend: *, "
            f"{backends}; device: *, cpu, gpu, fpga or an index, optionally followed by "
            "'.sub-device' and '.sub-sub-device', each an index or *), e.g. 'opencl:cpu', "
            f"'level_zero:0,1' or '!opencl:gpu'; unset {SELECTOR_ENV} to select every device")

    def __reduce__(self):  # (unpickled without its reason, a pool's result thread died)
        return type(self), (self.selector, self.reason)


def _selector_backends() -> list[str]:
    """The backend names a selector may use: those of the header's backend enum."""
    names = (_compat.backend_name(member).lower() for member in _compat.Backend)
    return [name for name in names if name != "unknown"]


_SELECTOR_INDEX = re.compile(r"[0-9]+")  # ASCII digits only


def _selector_device_problem(device: str) -> str | None:
    """Why ``device`` (one ``root[.sub[.subsub]]`` of a term) is malformed, or None."""
    parts = device.split(".")
    if len(parts) > 3:
        return f"device {device!r} has more than two '.'"
    wildcard = False
    for level, part in enumerate(parts):
        if part == "*":
            wildcard = True
        elif wildcard:
            return f"device {device!r}: only '*' may follow '*' (as in '*.*')"
        elif _SELECTOR_INDEX.fullmatch(part):
            # UR reads indices with stoul: one past 64 bits crashes oneAPI 2025.0, and
            # 2**64 - 1 selects every device.
            if int(part) >= 2**32:
                return f"device {device!r}: index {part} is too large"
        elif level or part.lower() not in ("cpu", "gpu", "fpga"):
            kind = "* or an index" if level else "*, cpu, gpu, fpga or an index"
            return f"device {device!r}: {part!r} is not {kind}"
    return None


def device_selector(text: str | None = None) -> tuple | None:
    """The terms of selector ``text`` (default: ``ONEAPI_DEVICE_SELECTOR`` now) as
    ``(negative, backend, devices)`` tuples, or None when it is unset or empty; raises
    :class:`DeviceSelectorError` if it is malformed.

    The grammar is the one UR documents for ``urDeviceGetSelected``; backend names come from
    the header's backend enum, and each backend (and each ``!backend``) has one term.
    """
    selector = os.environ.get(SELECTOR_ENV) if text is None else text
    if not selector:
        return None

    def malformed(reason: str):
        return DeviceSelectorError(selector, f"is malformed: {reason}")

    # Each rule below keeps from UR what some release crashes on: an empty backend or term
    # (a trailing ';' excepted) or an index past 64 bits (oneAPI 2025.0), a backend in two
    # terms (2025.0, and an abort in 2025.2).
    terms, seen = [], set()
    for text in selector.removesuffix(";").split(";"):
        if not text:
            raise malformed("it has an empty term")
        if text.count(":") != 1:
            raise malformed(f"term {text!r} needs one ':' between backend and devices")
        backend, devices = text.split(":")
        negative = backend.startswith("!")
        name = backend[negative:].lower()
        if not name:
            raise malformed(f"term {text!r} names no backend")
        if name != "*" and name not in _selector_backends():
            raise malformed(f"term {text!r}: unknown backend {backend[negative:]!r}")
        if (negative, name) in seen:
            raise malformed(f"backend {backend!r} has two terms; list its devices in one, "
                            f"e.g. '{backend}:cpu,gpu'")
        seen.add((negative, name))
        if not devices:
            raise malformed(f"term {text!r} names no device")
        for device in devices.split(","):
            problem = (_selector_device_problem(device) if device
                       else f"term {text!r} has an empty device")
            if problem:
                raise malformed(problem)
        terms.append((negative, name, tuple(devices.split(","))))
    return tuple(terms)


def selector_text() -> str | None:
    """``ONEAPI_DEVICE_SELECTOR`` as UR read it when the loader initialised (a change after
    that selects nothing anew), or as it is now before that."""
    return _state["selector"] if _state["adapters"] is not None else \
        os.environ.get(SELECTOR_ENV)


def selector_hint(backends: frozenset = frozenset()) -> str:
    """Why ``ONEAPI_DEVICE_SELECTOR`` may have selected nothing where UR's loaders read it
    otherwise than its grammar says (seen with PyPI's runtime wheels), with a form they all
    read; empty where there is nothing to say.  (UR reads the selector itself.)  ``backends``:
    the selector names of the platforms' backends."""
    terms = device_selector(selector_text() or "") or ()
    hints = []
    if terms and all(negative for negative, _, _ in terms):
        if not _compat.NEGATIVE_TERMS_ALONE_SELECT and \
                os.environ.get(PRELOAD_FILTER_ENV, "").lower() in ("1", "true", "yes"):
            hints.append(f"this loader (before oneAPI 2025.2) selects nothing with '!' terms "
                         f"alone while {PRELOAD_FILTER_ENV}={os.environ[PRELOAD_FILTER_ENV]!r} "
                         "keeps its filter on: unset it, or put '*:*;' in front")
        elif backends - {name for _, name, _ in terms} and \
                all(name != "*" for _, name, _ in terms):
            hints.append("UR's loader selects no device of a backend that no term names, "
                         "'!' terms too: put '*:*;' in front")
    if not _compat.CAPITAL_DEVICE_TYPES_READ and any(
            device != device.lower() for negative, _, devices in terms if not negative
            for device in devices):
        hints.append("this loader (oneAPI 2025.2 on) matches device types in lower case: "
                     "write 'cpu', 'gpu', 'fpga'")
    return "; ".join(hints)


def refused_selector_hint(backend: str) -> str:
    """Why ``urDeviceGetSelected`` for a platform of ``backend`` (its selector name) may have
    refused a well-formed ``ONEAPI_DEVICE_SELECTOR``, or empty: the loaders of oneAPI 2025.0
    to 2025.2 refuse a ``!`` term of any other backend (``*:*;!level_zero:*`` too), and
    2025.0's and 2025.1's know no ``native_cpu`` backend (their headers' enums have it)."""
    terms = device_selector(selector_text() or "") or ()
    hints = []
    if not _compat.SELECTOR_KNOWS_NATIVE_CPU and any(name == "native_cpu"
                                                     for _, name, _ in terms):
        hints.append("the loaders of oneAPI 2025.0 and 2025.1 know no native_cpu backend: "
                     "leave out its terms")
    others = [name for negative, name, _ in terms if negative and name not in ("*", backend)]
    if others:
        hints.append(f"the loaders of oneAPI 2025.0 to 2025.2 refuse '!' terms of a backend "
                     f"other than the platform's ({backend}): leave out those of "
                     f"{', '.join(repr('!' + name) for name in others)}")
    return "; ".join(hints)


def _after_fork_in_child() -> None:
    # The child shares the parent's UR state but not its runtime threads; it must not use it,
    # release it or tear it down (the parent still owns it).  A fork while another thread
    # initialises the loader leaves the child a half-made one (its first call waited for good).
    forked_from_python_main = threading.get_ident() == _python_exit["main thread"]
    if not forked_from_python_main:
        _python_exit["main thread"] = None
    if _state["adapters"] is not None or _state["initialising"]:
        _state["forked"] = True
        _exit_past_the_runtime("now" if _python_exit["began"] else "at Python's exit"
                               if forked_from_python_main else "as this thread ends")


def _python_exit_begins() -> None:
    _python_exit["began"] = True


def _thread_running_python_exit() -> int | None:
    # In a child forked from another thread, threading names that thread the main one; its
    # end runs no Python exit steps.
    main = threading.main_thread()
    return main.ident if isinstance(main, threading._MainThread) else None


# The thread whose end runs Python's exit steps (None: none does), and whether they began:
# exit functions registered since then never run.
_python_exit = {"main thread": _thread_running_python_exit(), "began": True}
with contextlib.suppress(AttributeError, RuntimeError):  # (CPython's, run before any atexit)
    threading._register_atexit(_python_exit_begins)
    _python_exit["began"] = False
_child_exit: dict = {}


def _exit_past_the_runtime(registered: str) -> None:
    """Make this forked child end without the runtime libraries' own exit handlers.

    Intel's CPU OpenCL runtime waits at exit for its worker threads, which a forked child does
    not have: with work in flight at the fork, the child would never exit.  glibc's ``on_exit``
    makes the C library's ``exit`` call ``_exit`` with its status first (handlers registered
    last run first; ``_exit`` ignores the second argument).  Registering takes glibc's lock of
    exit handlers, which the fork leaves held for good if another thread was registering one
    (loading a library, as UR's initialisation does), so the child registers ``registered``:
    "at Python's exit" (in an exit function) where its exit functions are still to run, "as
    this thread ends" (the forking thread, whose end is the child's ``exit``) where it was
    forked from another thread, else "now".  One that ends with ``os._exit`` or ``exec``
    then never waits on that lock (one that exits would, in ``exit`` itself).  Without ``on_exit``,
    ``os._exit`` ends the process after the atexit functions with the status ``sys.exit`` was
    given (1 after an uncaught exception).
    """
    if _ON_EXIT is not None:
        if registered == "at Python's exit":
            atexit.register(_exit_before_the_runtime_in_c)
        elif registered == "as this thread ends":
            _this_thread.registers_as_it_ends = _RegistersAsItsThreadEnds()
        else:
            _exit_before_the_runtime_in_c()
        return
    parent_exit = sys.exit

    def child_exit(status=None):
        _child_exit["status"] = status
        parent_exit(status)

    sys.exit = child_exit
    atexit.register(_leave_child)


def _exit_before_the_runtime_in_c() -> None:
    _ON_EXIT(_EXIT_NOW, None)  # nonzero: not registered, and nothing to do about it here


class _RegistersAsItsThreadEnds:
    """Kept in a thread-local: its finalizer runs as that thread's state is cleared."""

    __slots__ = ()

    def __del__(self):
        _exit_before_the_runtime_in_c()


_this_thread = threading.local()


def _c_exit_functions() -> tuple:
    """``(on_exit, _exit as a pointer)`` of glibc, or ``(None, None)`` elsewhere (the child
    may then hang at exit, as before)."""
    try:
        libc = ctypes.CDLL(None)
        return libc.on_exit, ctypes.cast(libc._exit, ctypes.c_void_p)
    except (OSError, AttributeError):
        return None, None


_ON_EXIT, _EXIT_NOW = _c_exit_functions()  # found in the parent: the child only registers


def _leave_child() -> None:
    atexit.unregister(_leave_child)
    atexit._run_exitfuncs()  # the others, as Python would run them after this one
    status = _child_exit.get("status")
    if getattr(sys, "last_value", None) is not None and status is None:
        status = 1  # an uncaught exception, already printed
    if status is not None and not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(status or 0)


os.register_at_fork(after_in_child=_after_fork_in_child)


class Adapter(_handle.Resource):
    """One UR adapter (Level Zero, OpenCL, CUDA, HIP, ...) as returned by ``urAdapterGet``."""

    __slots__ = ()
    _release_function = "urAdapterRelease"

    def __init__(self, handle):
        """An Adapter over ``handle`` (a ``ur_adapter_handle_t`` of this process's loader,
        e.g. ``UR_PLATFORM_INFO_ADAPTER``'s), with a reference of its own
        (``urAdapterRetain``): what the loader's adapters are, :func:`adapters` gives."""
        if not isinstance(handle, ffi.CData) or ffi.typeof(handle) is not _ADAPTER_HANDLE or \
                handle == ffi.NULL:
            raise TypeError(f"Adapter takes a non-null ur_adapter_handle_t, not {handle!r}")
        with section:
            check(lib.urAdapterRetain(handle), "urAdapterRetain")
            self._own(handle)

    @classmethod
    def _taking(cls, handle) -> Adapter:
        """An Adapter owning the reference ``urAdapterGet`` gave with ``handle``."""
        adapter = object.__new__(cls)
        adapter._own(handle)
        return adapter

    @property
    def backend(self):
        """The adapter's backend (a :data:`ur_cffi.Backend`)."""
        return _compat.backend(query("urAdapterGetInfo", self.handle,
                                     ur_adapter_info_t.UR_ADAPTER_INFO_BACKEND))

    @property
    def version(self) -> int:
        """The adapter's own version number; ``NotImplementedError`` where the UR release has
        no ``UR_ADAPTER_INFO_VERSION`` (oneAPI 2025.0)."""
        return query("urAdapterGetInfo", self.handle,
                     _compat.require("ur_adapter_info_t", "UR_ADAPTER_INFO_VERSION"))

    def platforms(self) -> list[Platform]:
        """The adapter's platforms (``urPlatformGet``)."""
        return [Platform(handle, self) for handle in _compat.platforms(self.handle)]

    def close(self) -> None:
        """Adapters live as long as the loader; they are released at :func:`teardown`."""


_ADAPTER_HANDLE = ffi.typeof("ur_adapter_handle_t")


class Platform:
    """A UR platform; UR does not reference-count platforms, so there is nothing to release."""

    __slots__ = ("_platform_handle", "adapter")

    def __init__(self, handle, adapter: Adapter):
        self._platform_handle, self.adapter = handle, adapter

    @property
    def handle(self):
        """The raw UR handle; raises :class:`ClosedError` once its adapter is released
        (``loader.teardown()``): the handle belongs to that loader's generation."""
        if self.adapter.closed:
            raise _handle.ClosedError(
                "Platform belongs to the parent process (forked)" if _handle._forked else
                "Platform is closed: its adapter was released at the loader's teardown")
        return self._platform_handle

    @property
    def closed(self) -> bool:
        """True once its adapter was released (``loader.teardown()``)."""
        return self.adapter.closed

    def info(self, prop: ur_platform_info_t):
        """Any ``ur_platform_info_t`` property, decoded."""
        if not isinstance(prop, ur_platform_info_t):
            raise TypeError(f"info takes a ur_platform_info_t, not {type(prop).__name__} "
                            f"{prop!r}")
        return query("urPlatformGetInfo", self.handle, prop)

    @property
    def name(self) -> str:
        """The platform's name."""
        return self.info(ur_platform_info_t.UR_PLATFORM_INFO_NAME)

    @property
    def backend(self):
        """The platform's backend (a :data:`ur_cffi.Backend`)."""
        return self.info(ur_platform_info_t.UR_PLATFORM_INFO_BACKEND)

    @property
    def version(self) -> str:
        """The platform's version string."""
        return self.info(ur_platform_info_t.UR_PLATFORM_INFO_VERSION)

    def __repr__(self) -> str:
        return "<Platform (closed)>" if self.adapter.closed else f"<Platform {self.name!r}>"


def init(validation: bool | None = None) -> list[Adapter]:
    """Initialise the loader once and return its adapters; later calls return the same list.

    ``validation`` (default: the ``UR_CFFI_VALIDATION`` variable) enables UR's full validation
    and leak-checking layers; it can only be chosen before the first initialisation.
    Raises :class:`DeviceSelectorError` if ``ONEAPI_DEVICE_SELECTOR`` is malformed.
    """
    if validation is not None:
        validation = _checks.flag("init: validation", validation)
    with _lock, section:  # a lock a waiting teardown may hold; then Ctrl-C is held back
        if _state["forked"]:
            raise _handle.ClosedError(
                "ur_cffi was initialised (or being initialised by another thread) before "
                "this process was forked; a child cannot use "
                "its parent's UR state. Fork before using ur_cffi, or use multiprocessing's "
                "'spawn' or 'forkserver' start method")
        if _state["exited"] and _state["adapters"] is None and \
                threading.current_thread() is not threading.main_thread():
            raise _handle.ClosedError("UR was torn down at the interpreter's exit: another "
                                      "thread cannot initialise it again (the process's end "
                                      "under it crashed the CUDA adapter)")
        if _state["adapters"] is not None:
            if validation and not _state["validation"]:
                raise RuntimeError("the UR loader is already initialised without validation")
            return _state["adapters"]
        if validation is None:  # (read at this initialisation only: a later change is not
            validation = _checks.env_flag(VALIDATION_ENV, False)  # an error at each call)
        _waiting.interruptible_waits()  # (reads its variable)
        selector = os.environ.get(SELECTOR_ENV)
        terms = device_selector(selector or "")  # urLoaderInit reads it: refuse a malformed one
        _state["selector"] = selector
        _state["initialising"] = True
        try:
            _loader_init(validation, _preload_filter_drops_selected(terms or ()))
            count = ffi.new("uint32_t *")
            check(lib.urAdapterGet(0, ffi.NULL, count), "urAdapterGet")
            handles = ffi.new("ur_adapter_handle_t[]", count[0])
            if count[0]:  # (none where ONEAPI_DEVICE_SELECTOR names only absent backends)
                check(lib.urAdapterGet(count[0], handles, ffi.NULL), "urAdapterGet")
            _state["adapters"] = [Adapter._taking(handles[i]) for i in range(count[0])]
        finally:
            _state["initialising"] = False
        _state["validation"] = validation
        _state["generation"] += 1
        return _state["adapters"]


def _preload_filter_drops_selected(terms) -> bool:
    """Whether UR's loader, filtering adapters by the selector before ``urDeviceGetSelected``
    applies it, would drop devices the selector keeps (unless ``UR_LOADER_PRELOAD_FILTER=0``):
    every adapter of a backend a ``!`` term names devices of by index (oneAPI 2026.2:
    ``!opencl:1`` and ``*:*;!opencl:1`` left no OpenCL device), and every adapter for ``!``
    terms alone before oneAPI 2025.2 (``!opencl:gpu`` left none)."""
    if terms and all(negative for negative, _, _ in terms) and \
            not _compat.NEGATIVE_TERMS_ALONE_SELECT:
        return True
    return any(negative and any(device.lower() not in ("*", "cpu", "gpu", "fpga")
                                for device in devices)
               for negative, _, devices in terms)


def _loader_init(validation: bool, every_adapter: bool = False) -> None:
    """``urLoaderInit``, with UR's validation layers; with every adapter loaded where the
    loader's own selector filter would drop devices ``urDeviceGetSelected`` keeps."""
    config = ffi.NULL
    if validation:
        config_ptr = ffi.new("ur_loader_config_handle_t *")
        check(lib.urLoaderConfigCreate(config_ptr), "urLoaderConfigCreate")
        config = config_ptr[0]
    log_setting = None
    settings = {}  # environment variables UR reads in urLoaderInit, unset again after it
    if every_adapter and PRELOAD_FILTER_ENV not in os.environ:
        settings[PRELOAD_FILTER_ENV] = "0"
    if validation and _state["generation"]:
        # UR's logger takes its output once a process: after a teardown it writes to stderr,
        # whatever UR_LOG_VALIDATION says (seen with oneAPI 2026.2).
        _state["log"], _state["own_log"] = None, False
        if "UR_LOG_VALIDATION" not in os.environ:  # (without it UR reports nowhere)
            log_setting = "level:warning;flush:warning;output:stderr"
        warnings.warn("the UR loader is initialised again in validation mode: UR's validation "
                      "layer now reports to stderr only, so ur_cffi cannot read its reports "
                      "and teardown() will raise no ValidationError for this initialisation "
                      "(run each validated program in a process of its own)", RuntimeWarning,
                      stacklevel=_caller_outside_ur_cffi())
    elif validation:
        log_setting = _open_validation_log()
    try:
        for layer in VALIDATION_LAYERS if validation else ():
            check(lib.urLoaderConfigEnableLayer(config, layer.encode()),
                  "urLoaderConfigEnableLayer", layer)
        if log_setting is not None:
            # UR's logger reads UR_LOG_VALIDATION when urLoaderInit creates the layer; it is
            # unset again so that child processes open logs of their own.
            settings["UR_LOG_VALIDATION"] = log_setting
        os.environ.update(settings)
        check(lib.urLoaderInit(0, config), "urLoaderInit")
    except BaseException:
        _remove_own_validation_log()
        raise
    finally:
        for name in settings:
            os.environ.pop(name, None)
        if config != ffi.NULL:
            lib.urLoaderConfigRelease(config)


def _caller_outside_ur_cffi() -> int:
    """The ``stacklevel``, for a warning its caller gives, of the first frame outside ur_cffi
    (the user's call that initialised the loader)."""
    level, frame = 1, sys._getframe(1)
    package = os.path.dirname(__file__)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        level, frame = level + 1, frame.f_back
    return level


_LOG_SETTING_SEPARATORS = ",;:"  # (UR's setting syntax; with one of them UR logs nowhere)


def _open_validation_log() -> str | None:
    """Make the validation log's file and return the UR_LOG_VALIDATION setting naming it;
    None if the user set UR_LOG_VALIDATION (then UR logs where they said, unread by us)."""
    _state["log"], _state["own_log"] = None, False
    if "UR_LOG_VALIDATION" in os.environ:
        return None
    directory = os.environ.get(VALIDATION_LOG_DIR_ENV) or None
    if directory:
        directory = os.path.expanduser(directory)
        if any(c in directory for c in _LOG_SETTING_SEPARATORS):
            raise ValueError(f"{VALIDATION_LOG_DIR_ENV}={directory!r}: UR's log setting "
                             "cannot hold a path with ',', ';' or ':'")
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as error:
            raise ValueError(f"{VALIDATION_LOG_DIR_ENV}={directory!r}: {error}") from None
    where = f"{VALIDATION_LOG_DIR_ENV}={directory!r}" if directory else \
        f"the temporary directory (TMPDIR; {VALIDATION_LOG_DIR_ENV} names another)"
    try:
        descriptor, path = tempfile.mkstemp(prefix=f"ur_cffi-validation-{os.getpid()}-",
                                            suffix=".log", dir=directory)
    except OSError as error:
        raise ValueError(f"the validation log cannot be made in {where}: {error}") from None
    os.close(descriptor)
    if any(c in path for c in _LOG_SETTING_SEPARATORS):
        os.unlink(path)
        raise ValueError(f"the validation log's path {path!r}, in {where}, may not contain "
                         "',', ';' or ':' (UR reads no log there: its setting's separators)")
    _state["log"], _state["own_log"] = path, directory is None
    # Every message at warning level and above, flushed as it is written.
    return f"level:warning;flush:warning;output:file,{path}"


def parse_validation_log(text: str) -> list[str]:
    """The problems in UR validation-log ``text``, one string per message (a leak's backtrace
    lines joined to it), without :data:`SPURIOUS_VALIDATION_MESSAGES` (and, where UR's leak
    checker does not record events, its reports of them: ``_compat``)."""
    problems: list[str] = []
    dropped = False
    for line in text.splitlines():
        found = _LOG_LINE.match(line)
        if found is None:  # not the logger's format: keep it, so nothing is lost
            if line.strip():
                problems.append(line.strip())
            continue
        level, message = found.groups()
        if _CONTINUATION.match(message) and (dropped or problems):
            if not dropped:  # (the lines of a dropped report go with it)
                problems[-1] += "\n    " + message
            continue
        dropped = message in SPURIOUS_VALIDATION_MESSAGES or (
            not _compat.LEAK_CHECKER_RECORDS_EVENTS
            and _UNRECORDED_EVENT_REPORTS.match(message) is not None)
        if not dropped:
            problems.append(f"[{level}] {message}")
    return problems


def validation_problems() -> list[str] | None:
    """What UR's validation layer has reported so far in this process (leaks appear only after
    :func:`teardown`); None unless validation mode logs to a file ur_cffi reads."""
    path = _state["log"]
    if path is None:
        return None
    try:
        with open(path, errors="replace") as log:
            return parse_validation_log(log.read())
    except FileNotFoundError:
        return []


def initialized() -> bool:
    """Whether the loader is initialised now."""
    return _state["adapters"] is not None


def generation() -> int:
    """Counts initialisations, so caches of handles know when they went stale."""
    return _state["generation"]


def validation_enabled() -> bool:
    """Whether the loader was initialised with the validation and leak-checking layers."""
    return _state["validation"]


def teardown() -> None:
    """Release every object ur_cffi still owns (newest first) and call ``urLoaderTearDown``.

    Raises ``RuntimeError``, releasing nothing, while memory of an array is still used outside
    ur_cffi (a numpy view from ``np.asarray``, a DLPack tensor, a consumer of
    ``__sycl_usm_array_interface__``): the teardown would free it under them.  In validation
    mode, raises :class:`ValidationError` if UR reported any leak or validation error (known
    spurious messages aside).

    Called by a finalizer while its thread collects garbage, it runs once the collection has
    ended (the other finalizers of that garbage may still use its objects); what it raises
    then, the collector prints.
    """
    _handle.run_after_collection(_teardown, "raise")


def _arrays_shown() -> int:
    """How many arrays' memory an :class:`~ur_cffi.memory.ExportPin` (or a SYCL consumer)
    keeps past their close: what a teardown must not free."""
    memory = sys.modules.get(f"{__package__}.memory")
    if memory is None:
        return 0
    memory.allocator.forget_unused_exports()  # (capsules nobody took hold nothing)
    return sum(1 for array in _handle.live_owners(memory.USMArray)
               if memory.shown_outside(array))


def _teardown(if_shown: str) -> int:
    """:func:`teardown`; while memory of arrays is used outside ur_cffi, ``if_shown`` says
    what to do: ``"raise"``, or ``"skip"`` the teardown (at exit: daemon threads, exit
    functions registered earlier and finalizers may still read a numpy view; the process's
    end frees what is left).  Returns how many arrays made it skip (0: torn down)."""
    with _lock:
        if not _ours_to_tear_down():
            return 0
        shown = _arrays_shown()
        if shown and if_shown == "skip":
            return shown
        if shown:
            raise RuntimeError(
                f"loader.teardown(): the memory of {shown} array(s) is still used outside "
                "ur_cffi (numpy views from np.asarray, DLPack tensors; an array once shown "
                "through __sycl_usm_array_interface__, until the array object goes), which "
                "the teardown would free under them: drop those first")
        _waiting.drain()  # waits a Ctrl-C left running hold references of their own
        program = sys.modules.get(f"{__package__}.program")
        with program.builds_stopped() if program is not None else contextlib.nullcontext():
            allocator = sys.modules.get(f"{__package__}.allocator")
            if allocator is not None:
                allocator.give_back_kept()  # frees a collection could not do at once
            queue.release_orphans(wait=True)  # commands of dropped Events, memory still held
            _finish_open_queues()  # nothing may still run on memory or events released next
            _handle.release_all(queue.raw_enqueue_lock, closed_first=(queue.Queue,))
            queue.release_orphans(wait=True)  # Events release_all found with memory to keep
            try:  # (adapters kept meanwhile: a child forked inside it counts as forked after use)
                result = lib.urLoaderTearDown()
            finally:
                _state["adapters"] = None
            check(result, "urLoaderTearDown")
        if not _state["validation"] or _state["log"] is None:
            return 0
        problems = validation_problems()
        _remove_own_validation_log()
        if problems:
            raise ValidationError(problems)
    return 0


def _ours_to_tear_down() -> bool:
    """Whether UR is initialised and this process's to release: not a forked child's (the
    parent's), nor left to the process's end by an exit under other threads."""
    return _state["adapters"] is not None and not _state["forked"] and not _handle._forked \
        and not _handle._abandoned


def _other_threads_running() -> int:
    """How many threads other than this one and ur_cffi's wait helpers are alive (whether or
    not they used UR): at exit, daemon threads, which may be inside a UR call on any object.
    (A helper's wait is another thread's, counted, or this one's, which Ctrl-C cut short.)"""
    current, helpers = threading.current_thread(), _waiting.helper_threads()
    return sum(1 for thread in threading.enumerate()
               if thread is not current and thread not in helpers and thread.is_alive())


def _finish_open_queues() -> None:
    """Close every open queue to enqueues, then wait for its work (a thread launching in a
    loop, a daemon thread at exit, kept a finish from ever returning)."""
    handles = []
    with queue.enqueue_lock:
        for open_queue in _handle.live_owners(queue.Queue):
            handle = queue.retained(open_queue)  # (another thread may close it meanwhile)
            open_queue._handle = None  # (its release is the registry's, later)
            if handle is not None:
                handles.append(handle)
    for handle in handles:
        lib.urQueueFinish(handle)  # (an error: nothing more to wait for)
        lib.urQueueRelease(handle)


def _teardown_at_exit() -> None:
    """:func:`teardown` at interpreter exit, unless memory of an array is used outside ur_cffi
    or other threads are still running (daemon threads: they may be inside a UR call on any
    object, or about to make one).  Then nothing is released (the process's end frees it);
    with threads running, the open queues are closed and their work waited for, and nothing
    owned then is released later either (``_handle.abandon_all``).  Builds in progress are
    waited for, and later ones refused, in every case.  In
    validation mode, a report of leaks or errors is printed and the process exits with
    :data:`VALIDATION_EXIT_STATUS` at once (exit functions registered before ur_cffi's import
    do not run then); a skipped teardown is said on stderr, as it makes no report."""
    try:
        # A Ctrl-C (or one re-sent) now comes after the teardown, not inside it.  A device
        # enumeration another thread is in ends first (on CUDA, the process's end under one
        # crashed: urPlatformGet), and none begins after: the enumeration's lock comes first,
        # as devices() takes them.
        with section, _enumerations_ended(), _lock:
            program = sys.modules.get(f"{__package__}.program")
            if program is not None:
                program.stop_builds_for_good()
            threads = _other_threads_running()
            if threads and _ours_to_tear_down():
                _finish_open_queues()
                _handle.abandon_all()
                kept = f"{threads} other thread(s) still running (daemon threads) may use UR"
                _remove_own_validation_log()  # (nothing reports on it later)
            else:
                shown = _teardown("skip")
                kept = f"the memory of {shown} array(s) is still used outside ur_cffi " \
                    "(numpy views, DLPack tensors)" if shown else None
            _state["exited"] = True
        if kept and _state["validation"] and sys.stderr is not None:
            sys.stderr.write(f"ur_cffi: no teardown at exit, so no leak report: {kept}\n")
    except ValidationError as error:
        # An exception in an atexit function does not change the exit status: force it.
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        if sys.stderr is not None:
            sys.stderr.write(f"ur_cffi: {error}\n")
            sys.stderr.flush()
        os._exit(VALIDATION_EXIT_STATUS)


def _remove_own_validation_log() -> None:
    if _state["own_log"]:  # (UR's logger may still write to it: unlinked, it goes too)
        with contextlib.suppress(OSError):
            os.unlink(_state["log"])
    _state["log"], _state["own_log"] = None, False


def _enumerations_ended():
    """``device.devices()``'s lock (a no-op where that module is not loaded)."""
    device = sys.modules.get(f"{__package__}.device")
    return device._cache_lock if device is not None else contextlib.nullcontext()


# At import, before any finalizer of ours, so it runs after them at exit; its lock also makes
# the exit wait for an initialisation another thread is in.
atexit.register(_teardown_at_exit)


def adapter_specific_messages() -> list[str]:
    """What each adapter says of the last ``UR_RESULT_ERROR_ADAPTER_SPECIFIC`` one of its calls
    returned in this thread (``urAdapterGetLastError``), for those with a message."""
    said = []
    for adapter in _state["adapters"] or ():
        message, code = ffi.new("const char **"), ffi.new("int32_t *")
        if adapter._handle is None or \
                lib.urAdapterGetLastError(adapter._handle, message, code) != 0 or \
                message[0] == ffi.NULL:
            continue
        text = ffi.string(message[0]).decode(errors="replace")
        if text:
            said.append(f"the {adapter.backend.name} adapter's last message "
                        f"(urAdapterGetLastError; an adapter may keep an older one): {text!r} "
                        f"(its error {code[0]})")
    return said


def adapters() -> list[Adapter]:
    """The loader's adapters, initialising it on first use."""
    return init()
