"""Shared fixtures: the CPU UR device, a context and queue on it, fresh random numbers, and the
small Triton kernels of ``kernels.py`` compiled to SPIR-V without PyTorch (cached per session).
"""

import secrets
import sys
from collections import namedtuple

import numpy as np
import pytest

import crash_probe
import ur_cffi
from ur_cffi import spirv

TritonKernel = namedtuple("TritonKernel", "spirv name shared local_size")
"""A compiled kernel: SPIR-V the CPU runtime accepts, entry point, local-memory bytes, and the
work-group size Triton assumes (``num_warps * threads_per_warp``)."""

SIGNATURES = {
    "scale_addresses": {"x_addr": "i64", "y_addr": "i64", "a": "fp32", "n": "i32"},
    "add": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    "lcg_steps": {"x_ptr": "*i32", "y_ptr": "*i32", "n": "i32", "steps": "i32"},
    "block_sums": {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    "store_scalars": {"out_ptr": "*fp64", "a": "i8", "b": "i16", "c": "i32", "d": "i64",
                      "e": "fp32", "f": "fp64"},
}


@pytest.fixture(scope="session")
def device():
    """The CPU UR device (the OpenCL adapter over Intel's CPU runtime)."""
    found = ur_cffi.devices("cpu")
    if not found:
        pytest.skip("no UR CPU device: install the 'cpu' extra (intel-opencl-rt)")
    return found[0]


@pytest.fixture(scope="session")
def context(device):
    with device.create_context() as context:
        yield context


@pytest.fixture(scope="session")
def kernels(tmp_path_factory):
    """The directory of ``crash_probe``'s kernels, compiled once per session in a child
    process (the reliability tests load them in children of their own)."""
    pytest.importorskip("triton")
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
    """``compile_triton("add", BLOCK=128, num_warps=4)``: a :data:`TritonKernel` of kernels.py.

    Torch-free (``torch`` is blocked from importing) through ``ur_cffi.triton.compile``;
    Triton's cache lives in a per-session directory; results are also kept in memory.
    """
    import kernels
    import ur_cffi.triton

    compiled = {}

    def compile_kernel(name, num_warps=4, **constants):
        key = (name, num_warps, tuple(sorted(constants.items())))
        if key not in compiled:
            signature = dict(SIGNATURES[name], **{c: "constexpr" for c in constants})
            kernel = ur_cffi.triton.compile(getattr(kernels, name), signature, constants,
                                            device=device, num_warps=num_warps)
            metadata = kernel.metadata
            compiled[key] = TritonKernel(spirv.drop_capabilities(kernel.asm["spv"]),
                                         metadata.name, metadata.shared,
                                         metadata.num_warps * metadata.threads_per_warp)
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
            programs[compiled] = ur_cffi.Program.from_il(context, compiled.spirv)
        return programs[compiled], compiled

    yield build
    for program in programs.values():
        program.close()

