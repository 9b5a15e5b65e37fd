"""Every place where triton-xpu 3.3 would import torch, replaced at run time (no file changes).

With ``ur_cffi.triton`` active, these module attributes of the installed Triton are replaced;
``deactivate()`` puts the originals back:

- ``compile_module_from_src`` as ``XPUBackend`` sees it (Triton loads each backend's
  ``compiler.py`` as its own module object, so the name is replaced in the globals of
  ``triton.backends.backends["intel"].compiler``, not in ``triton.backends.intel.compiler``).
  ``XPUBackend.__init__`` builds ``arch_parser.c`` (C++ against SYCL headers, linked with
  ``ze_loader``; the build calls ``is_xpu()``, which imports torch) only to name a GPU
  architecture for ``ocloc`` queries.
  The target's properties come from the UR device here (``target.py``), so the name is left
  empty: :class:`NoArchParser` answers instead of the compiled helper.
- ``triton.runtime.build.is_xpu``: imports torch to pick the C++ compiler for Intel's helper
  sources; any such build in this process is for the Intel backend, so the answer is True.
- ``triton.testing._support_elapsed_time`` and ``triton.testing.Event``: torch XPU events;
  replaced by UR profiling events (``bench.py``).
- ``triton.testing.assert_close``: makes torch tensors of its inputs only to read them back
  as numpy arrays; :func:`assert_close` reads them as numpy arrays directly.

Not replaced: ``triton.testing.do_bench_cudagraph`` (CUDA graphs), and ``get_dram_gbps``,
``get_max_tensorcore_tflops`` and ``get_max_simd_tflops`` (NVIDIA's figures, from
``torch.cuda``): with torch blocked they raise ``ImportError``.

The stock driver's torch uses (``XPUDriver.get_current_stream``, ``get_current_target``,
``get_device_interface``, ``get_empty_cache_for_benchmark``...) are not patched: the UR driver
(``driver.py``) answers them, and ``XPUDriver.is_active()`` is never asked once it is set.

Triton 3.4+ specializes arguments in C++, which imports torch when it first meets an array;
:func:`prime_specializer` settles that without torch at ``activate()``.

Each replacement is made only where the installed Triton has the name: Triton 3.6 (NVIDIA,
no Intel backend) has neither ``is_xpu`` nor ``testing.Event`` (its ``do_bench`` asks the
driver's device interface, ``bench.DeviceInterface``).  Its ``DriverConfig`` creates the stock
driver, whose ``is_active()`` imports torch, as soon as ``.active`` or ``.default`` is read
before a driver was set: :func:`set_active_driver` and :func:`restore_active_driver` touch
its private ``_active`` instead.
"""

from __future__ import annotations

_MISSING = object()


class Patches:
    """Module attributes replaced together and restored together."""

    def __init__(self):
        self._saved: list = []

    def replace(self, owner, name: str, value) -> None:
        """Set ``owner.name = value``, remembering the original for :meth:`restore`."""
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def replace_item(self, namespace: dict, name: str, value) -> None:
        """Set ``namespace[name] = value`` (a module's globals), remembering the original."""
        self._saved.append((namespace, name, namespace.get(name, _MISSING)))
        namespace[name] = value

    def restore(self) -> None:
        """Put every original back, newest first."""
        while self._saved:
            owner, name, original = self._saved.pop()
            if isinstance(owner, dict):
                if original is _MISSING:
                    owner.pop(name, None)
                else:
                    owner[name] = original
            elif original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    @property
    def active(self) -> bool:
        """Whether replacements are in place."""
        return bool(self._saved)


class NoArchParser:
    """Stands in for the ``arch_utils`` module compiled from ``arch_parser.c``."""

    @staticmethod
    def parse_device_arch(arch) -> str:
        # An empty name makes XPUBackend.parse_target skip its `ocloc query` of extensions;
        # the UR device's own extension list is in the target already.
        return ""


def _without_arch_parser(compile_module_from_src):
    def compile_module(src, name):
        if name == "arch_utils":
            return NoArchParser()
        return compile_module_from_src(src, name)

    compile_module.__wrapped__ = compile_module_from_src
    return compile_module


def _is_xpu() -> bool:
    """``triton.runtime.build.is_xpu`` without torch: builds here are the Intel backend's."""
    return True


def intel_backend():
    """The ``XPUBackend`` class Triton compiles with (``triton.backends.backends["intel"]``)."""
    from triton.backends import backends

    if "intel" not in backends:
        raise NotImplementedError("this Triton has no Intel backend: install triton-xpu")
    return backends["intel"].compiler


def install(patches: Patches) -> None:
    """Replace the torch paths (see the module docstring) through ``patches``."""
    import triton.runtime.build as build
    import triton.testing as testing
    from triton.backends import backends

    from . import bench

    if "intel" in backends:
        namespace = intel_backend().__init__.__globals__
        patches.replace_item(namespace, "compile_module_from_src",
                             _without_arch_parser(namespace["compile_module_from_src"]))
    if hasattr(build, "is_xpu"):
        patches.replace(build, "is_xpu", _is_xpu)
    if hasattr(testing, "_support_elapsed_time"):
        patches.replace(testing, "_support_elapsed_time", bench.supports_elapsed_time)
    if hasattr(testing, "Event"):
        patches.replace(testing, "Event", bench.make_event)
    if hasattr(testing, "assert_close"):
        patches.replace(testing, "assert_close", assert_close)


def assert_close(x, y, atol=None, rtol=None, err_msg="") -> None:
    """``triton.testing.assert_close`` without torch: ``x`` and ``y`` are numbers,
    sequences, numpy arrays or arrays with ``to_numpy()`` (a USMArray: a blocking read);
    ``atol`` (default 1e-2) and ``rtol`` (default 0) as Triton's, a callable given ``x``'s
    numpy dtype.  ml_dtypes' low-precision numbers are compared as float32, as Triton
    compares a bfloat16 tensor."""
    import numpy as np

    x, y = _compared(x), _compared(y)
    atol = 1e-2 if atol is None else atol
    atol = atol(x.dtype) if callable(atol) else atol
    rtol = 0.0 if rtol is None else rtol
    rtol = rtol(x.dtype) if callable(rtol) else rtol
    if x.dtype.type.__module__.startswith("ml_dtypes"):
        x = x.astype(np.float32)
    if y.dtype.type.__module__.startswith("ml_dtypes"):
        y = y.astype(np.float32)
    if x.size > 1 or y.size > 1:
        np.testing.assert_allclose(x, y, atol=atol, rtol=rtol, equal_nan=True)
        return
    if not np.allclose(x, y, atol=atol, rtol=rtol):
        raise AssertionError(f"{err_msg} {x} is not close to {y} (atol={atol}, rtol={rtol})")


def _compared(value):
    import numpy as np

    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value)


class _Array:
    """The least an array is to Triton's specializer: an address and a numpy dtype."""

    dtype = None

    @staticmethod
    def data_ptr() -> int:
        return 0


def prime_specializer() -> None:
    """Make Triton 3.4+'s argument specializer settle without torch.

    ``native_specialize_impl`` (C++) imports torch the first time it meets an object with
    ``data_ptr()``, to recognise torch tensors, and keeps what it found: a ``kernel[grid]``
    on ur_cffi arrays would load torch wherever it is installed.  It meets one here with
    torch blocked, unless torch is imported already (then nothing changes).  This cannot be
    undone: torch imported later in this process is not recognised by Triton's specializer
    as such (import torch first to use both).  Triton 3.3 specializes in Python, without
    torch: nothing to do there.
    """
    import sys

    if "torch" in sys.modules:
        return
    try:
        from triton.backends.compiler import BaseBackend
        from triton.runtime.jit import native_specialize_impl
    except ImportError:
        return
    import numpy as np

    _Array.dtype = np.dtype(np.float32)
    sys.modules["torch"] = None  # the import fails (ImportError) while this is in place
    try:
        native_specialize_impl(BaseBackend, _Array(), False, True, True)
    except Exception:  # noqa: BLE001 - priming only: the real call reports its own errors
        pass
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


def set_active_driver(driver):
    """Make ``driver`` Triton's active driver without creating the stock one; returns what
    :func:`restore_active_driver` puts back."""
    import triton

    config = triton.runtime.driver
    if "_active" in vars(config):  # Triton 3.4+: reading .active or .default creates it
        previous = ("_active", vars(config)["_active"])
        config._active = driver
        return previous
    # Triton 3.3: lazy proxies, compared without being created
    previous = None if config.active is config.default else config.active
    config.set_active(driver)
    return previous


def restore_active_driver(previous) -> None:
    """Undo :func:`set_active_driver` (``previous`` is what it returned)."""
    import triton

    config = triton.runtime.driver
    if isinstance(previous, tuple) and previous[:1] == ("_active",):
        config._active = previous[1]
    elif previous is None:
        config.reset_active()
    else:
        config.set_active(previous)
