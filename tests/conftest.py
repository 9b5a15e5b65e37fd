"""Shared fixtures: the UR device the suite runs on (the CPU unless ``UR_CFFI_TEST_DEVICE``
names another type), a context and queue on it, fresh random numbers, and the small Triton
kernels of ``kernels.py`` compiled for that device without PyTorch (cached per session).

``UR_CFFI_TEST_DEVICE=gpu pytest tests`` runs the suite on a GPU (``scripts/gpu_check.sh``
step 5).  Tests that only apply to the CPU device's runtime carry ``@pytest.mark.cpu_device``
with the reason; they are skipped, saying it, elsewhere.
"""

import secrets
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import crash_probe
import device_under_test
import ur_cffi
from ur_cffi import spirv

TEST_DEVICE = device_under_test.TYPE
NO_TRITON = device_under_test.NO_TRITON


@dataclass(frozen=True)
class TritonKernel:
    """A kernel of kernels.py compiled for the test device."""

    binary: bytes
    """SPIR-V the CPU runtime accepts (Intel backend), or a cubin (NVIDIA backend)."""
    il: bool
    """Whether ``binary`` is IL (SPIR-V) for ``Program.from_il``."""
    name: str
    shared: int
    """Local (shared) memory bytes the kernel needs."""
    local_size: int
    """The work-group size Triton assumes (``num_warps * threads_per_warp``)."""
    options_or_why_not: tuple | str = ()
    """On NVIDIA, the items of ``ur_cffi.triton.kernel_options`` (scratch pointers, shared
    memory), or why a launch by hand cannot run the kernel.  Empty on Intel, where the tests
    pass a kernel's shared memory as the ``Local`` argument themselves."""

    @property
    def spirv(self) -> bytes:
        """The SPIR-V; skips the test on a device that takes another binary."""
        if not self.il:
            pytest.skip(f"needs SPIR-V; the test device ({TEST_DEVICE}) takes a cubin")
        return self.binary

    @property
    def options(self) -> dict:
        """For ``program.kernel(name, **compiled.options)``; skips the test where a launch by
        hand cannot run the kernel."""
        if isinstance(self.options_or_why_not, str):
            pytest.skip(self.options_or_why_not)
        return dict(self.options_or_why_not)

    def program(self, context):
        if self.il:
            return ur_cffi.Program.from_il(context, self.binary)
        return ur_cffi.Program.from_binary(context, self.binary)


SIGNATURES = {
    "scale_addresses": {"x_addr": "i64", "y_addr": "i64", "a": "fp32", "n": "i32"},
    "add": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    "lcg_steps": {"x_ptr": "*i32", "y_ptr": "*i32", "n": "i32", "steps": "i32"},
    "block_sums": {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    "store_scalars": {"out_ptr": "*fp64", "a": "i8", "b": "i16", "c": "i32", "d": "i64",
                      "e": "fp32", "f": "fp64"},
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cpu_device(reason): applies to the CPU device's runtime only (skipped, "
                   "with the reason, when UR_CFFI_TEST_DEVICE names another device)")


def pytest_collection_modifyitems(config, items):
    if TEST_DEVICE == "cpu":
        return
    for item in items:
        marker = item.get_closest_marker("cpu_device")
        if marker is not None:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(
                reason=f"CPU device only ({reason}); the suite runs on {TEST_DEVICE}"))


@pytest.fixture(scope="session")
def device():
    """The test device: the CPU UR device (the OpenCL adapter over Intel's CPU runtime), or
    the first device of type ``UR_CFFI_TEST_DEVICE``."""
    found = ur_cffi.devices(TEST_DEVICE)
    if not found:
        if TEST_DEVICE == "cpu":
            pytest.skip("no UR CPU device: install the 'cpu' extra (intel-opencl-rt)")
        pytest.fail(f"UR_CFFI_TEST_DEVICE={TEST_DEVICE}: UR lists no such device")
    return found[0]


@pytest.fixture(scope="session")
def context(device):
    with device.create_context() as context:
        yield context


@pytest.fixture(scope="session")
def kernels(tmp_path_factory):
    """The directory of ``crash_probe``'s kernels, compiled once per session in a child
    process (the reliability tests load them in children of their own)."""
    pytest.importorskip("triton", reason=NO_TRITON)
    return crash_probe.kernel_dir(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def torch_blocked(tmp_path_factory):
    """Block torch and point Triton at one cache per test session, for a whole module; fails
    the module if anything imported torch meanwhile."""
    cache = tmp_path_factory.getbasetemp() / "triton_cache"
    cache.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        patch.setenv("TRITON_CACHE_DIR", str(cache))
        yield
        assert sys.modules.get("torch") is None, "something imported torch"


@pytest.fixture(scope="module")
def triton_queue(context, device, torch_blocked):
    """An in-order queue that ur_cffi.triton launches on, for a whole module."""
    pytest.importorskip("triton")
    import ur_cffi.triton as ur_triton

    with ur_cffi.Queue(context, device) as queue:
        ur_triton.activate(queue)
        yield queue
        ur_triton.deactivate()


@pytest.fixture(scope="session")
def validation_layer_report():
    """What UR's validation layer reports for a correct raw program (``validation_control.py``):
    empty where the layer is sound, so that reports about ur_cffi mean something."""
    import os
    import subprocess
    from pathlib import Path

    done = subprocess.run([sys.executable, str(Path(__file__).parent / "validation_control.py")],
                          env=dict(os.environ, UR_CFFI_VALIDATION="1"), capture_output=True,
                          text=True, timeout=120)
    assert "control done" in done.stdout, done.stderr[-2000:]
    return "" if done.returncode == 0 else done.stderr


@pytest.fixture
def queue(context, device):
    """A fresh in-order queue per test, finished and released afterwards."""
    with ur_cffi.Queue(context, device) as queue:
        yield queue


@pytest.fixture
def rng():
    """A generator with a fresh seed per test; the seed is printed for reproducing failures."""
    seed = secrets.randbits(64)
    print(f"numpy seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def compile_triton(tmp_path_factory, device):
    """``compile_triton("add", BLOCK=128, num_warps=4)``: a :class:`TritonKernel` of kernels.py.

    Torch-free (``torch`` is blocked from importing) through ``ur_cffi.triton.compile``;
    Triton's cache lives in a per-session directory; results are also kept in memory.
    """
    pytest.importorskip("triton", reason=NO_TRITON)
    import kernels
    import ur_cffi.triton
    from ur_cffi.triton import abi, backend

    compiled = {}
    triton_backend = backend.triton_backend(device)
    rules = abi.current(triton_backend)

    def compile_kernel(name, num_warps=4, **constants):
        key = (name, num_warps, tuple(sorted(constants.items())))
        if key not in compiled:
            signature = dict(SIGNATURES[name], **{c: "constexpr" for c in constants})
            kernel = ur_cffi.triton.compile(getattr(kernels, name), signature, constants,
                                            device=device, num_warps=num_warps)
            metadata = kernel.metadata
            local_size = metadata.num_warps * rules.threads_per_warp(metadata)
            if triton_backend == "nvidia":
                try:
                    options = tuple(ur_cffi.triton.kernel_options(kernel).items())
                except NotImplementedError as error:
                    options = f"on {TEST_DEVICE}: {error}"
                compiled[key] = TritonKernel(kernel.asm["cubin"], False, metadata.name,
                                             metadata.shared, local_size, options)
            else:
                compiled[key] = TritonKernel(spirv.drop_capabilities(kernel.asm["spv"]), True,
                                             metadata.name, metadata.shared, local_size)
        return compiled[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton_cache")))
        yield compile_kernel


@pytest.fixture(scope="session")
def build_triton(compile_triton, context):
    """``build_triton("add", BLOCK=128)``: ``(Program, TritonKernel)`` in the session context,
    built once per session."""
    programs = {}

    def build(name, num_warps=4, **constants):
        compiled = compile_triton(name, num_warps, **constants)
        if compiled not in programs:
            programs[compiled] = compiled.program(context)
        return programs[compiled], compiled

    yield build
    for program in programs.values():
        program.close()

