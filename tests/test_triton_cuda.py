"""ur_cffi.triton's CUDA path, compile-only, on the CPU machine.

Triton 3.3's NVIDIA backend (bundled in triton-xpu, with its own ``ptxas``) compiles for
sm_90 here; the launcher is built for those kernels on the active UR driver and checked
against what the cubins declare (argument count and sizes), with shared memory moved to the
launch's work-group memory and clusters refused.  Launching happens in ``test_gpu.py``.
"""

import sys

import pytest

import ur_cffi
from ur_cffi import _compat, nvidia_binary
from ur_cffi._ur import ffi

triton = pytest.importorskip("triton")
ur_triton = pytest.importorskip("ur_cffi.triton")

import kernels  # noqa: E402
from ur_cffi.triton import abi, backend, cuda, launcher  # noqa: E402

SCALE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32", "BLOCK": "constexpr"}
MATMUL = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", **{
    name: "i32" for name in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                             "stride_cm", "stride_cn")},
    "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
MIXED = {"out_ptr": "*fp32", "i": "i32", "j": "i64", "h": "fp16", "d": "fp64", "flag": "i1",
         "small": "i8", "wide": "u32", "half": "fp16", "bf": "bf16", "f": "fp32", "big": "u64"}


@pytest.fixture(scope="module")
def driver(tmp_path_factory, context, device):
    """The UR driver active on a CPU queue, torch blocked, a fresh Triton cache."""
    with pytest.MonkeyPatch.context() as patch, ur_cffi.Queue(context, device) as queue:
        patch.setitem(sys.modules, "torch", None)
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("cuda_cache")))
        ur_triton.activate(queue)
        try:
            yield ur_triton.active_driver()
        finally:
            ur_triton.deactivate()


def compile_for_sm90(fn, signature, constants=None, **options):
    return cuda.compile(fn, signature, constants, arch=90, **options)


def test_ptxas_and_target(driver):
    compiled = compile_for_sm90(kernels.scale, SCALE, {"BLOCK": 1024})
    assert compiled.metadata.target == cuda.gpu_target(None, 90)
    assert compiled.asm["cubin"][:4] == b"\x7fELF" and ".target sm_90a" in compiled.asm["ptx"]
    assert cuda.capability("9.0") == 90 and cuda.capability("12.1") == 121
    with pytest.raises(ValueError, match="compute capability"):
        cuda.capability("OpenCL 3.0")
    assert "torch" not in sys.modules or sys.modules["torch"] is None


def test_signature_is_checked_and_taken_by_name(driver):
    with pytest.raises(ValueError, match=r"signature\['a'\]: 'float' is not a Triton type"):
        compile_for_sm90(kernels.scale, dict(SCALE, a="float"), {"BLOCK": 1024})
    reordered = dict(reversed(SCALE.items()))
    compiled = compile_for_sm90(kernels.scale, reordered, {"BLOCK": 1024})
    assert list(compiled.src.signature) == list(SCALE)


@pytest.mark.parametrize("name, signature, constants, options", [
    ("scale", SCALE, {"BLOCK": 1024}, {}),
    ("mixed_scalars", MIXED, {}, {}),
    ("matmul", MATMUL, {"BM": 128, "BN": 128, "BK": 64}, {"num_warps": 8, "num_stages": 3}),
])
def test_launcher_agrees_with_the_cubin(driver, name, signature, constants, options):
    compiled = compile_for_sm90(getattr(kernels, name), signature, constants, **options)
    declared = nvidia_binary.entries(compiled.asm["cubin"])[compiled.metadata.name]
    if compiled.metadata.shared and not _compat.HAS_LAUNCH_WITH_ARGS:
        with pytest.raises(NotImplementedError, match="from oneAPI 2026.0 on"):
            launcher.Launcher(compiled.src, compiled.metadata, driver)  # no launch properties
        return
    built = launcher.Launcher(compiled.src, compiled.metadata, driver)
    rules = abi.rules_for(triton.__version__, "cuda")
    assert built.rules is rules and rules.scratch_pointers == len(rules.scratch_metadata) >= 1
    assert built.kernel_arg_count == len(declared)
    assert built.argument_sizes == list(declared)
    assert built.local_size == compiled.metadata.num_warps * 32
    assert all(kind != "local" for kind, *_ in built.entries)
    shared = compiled.metadata.shared
    if shared:  # the matmul's (64 KiB with Triton 3.3), as the launch's work-group memory
        assert name == "matmul"
        properties = built._properties
        memory = ffi.cast("ur_kernel_launch_workgroup_property_t *", properties[0].pNext)
        assert (properties[0].flags, memory.workgroup_mem_size) == (0, shared)
    else:
        assert built._properties == ffi.NULL
    assert built._scratch == []  # global_scratch_size is 0 for these kernels


def test_clusters_are_refused(driver):
    with pytest.raises(NotImplementedError, match="num_ctas=2"):  # before compiling
        compile_for_sm90(kernels.scale, SCALE, {"BLOCK": 1024}, num_ctas=2)
    # Before Triton's own refusal too (a plain ValueError for GPUs older than sm_90 in 3.6):
    # ours is an OutOfResources, which @triton.autotune skips.
    with pytest.raises(triton.runtime.errors.OutOfResources, match="num_ctas=2"):
        cuda.compile(kernels.scale, SCALE, {"BLOCK": 1024}, arch=80, num_ctas=2)
    compiled = compile_for_sm90(kernels.scale, SCALE, {"BLOCK": 1024})
    with pytest.raises(NotImplementedError, match="num_ctas=2"):  # compiled elsewhere
        launcher.Launcher(compiled.src, compiled.metadata._replace(num_ctas=2), driver)


def test_rules_per_backend_and_version():
    nvidia_36 = abi.rules_for("3.6.0", "cuda")
    assert (nvidia_36.backend, nvidia_36.scratch_pointers, nvidia_36.load_binary_values,
            nvidia_36.shared_memory_argument) == ("nvidia", 2, 5, False)
    assert nvidia_36.scratch_metadata == ("global_scratch", "profile_scratch")
    assert abi.rules_for("3.3.0b1", "xpu").shared_memory_argument
    with pytest.raises(NotImplementedError, match="intel 3.3, nvidia 3.3, nvidia 3.6"):
        abi.rules_for("3.6.0", "xpu")
    abi.check_installed()


def test_backend_of_each_device(device):
    cuda_device = device.backend.name.endswith("CUDA")
    assert backend.triton_backend(device) == ("nvidia" if cuda_device else "intel")
    assert backend.gpu_target(device).backend == ("cuda" if cuda_device else "xpu")
    assert backend.TRITON_BACKENDS["CUDA"] == "nvidia"


def test_launch_properties_flags():
    class Metadata:
        name, num_ctas, shared, launch_cooperative_grid, launch_pdl = "k", 1, 0, True, True

    if not _compat.HAS_LAUNCH_WITH_ARGS:  # before oneAPI 2026.0 (UR 0.10 lacks the flags)
        with pytest.raises(NotImplementedError, match="from oneAPI 2026.0 on|not in the UR API"):
            cuda.launch_properties(Metadata)
        return
    properties = cuda.launch_properties(Metadata)
    flags = ur_cffi.enums.ur_kernel_launch_flag_t
    assert properties[0].flags == (flags.UR_KERNEL_LAUNCH_FLAG_COOPERATIVE
                                   | flags.UR_KERNEL_LAUNCH_FLAG_OPPORTUNISTIC_QUEUE_SERIALIZE)
    assert properties[0].pNext == ffi.NULL


def test_scratch_layout():
    class Metadata:
        global_scratch_size, global_scratch_align = 256, 128
        profile_scratch_size, profile_scratch_align = 0, 1

    assert cuda.scratch_layout(abi.rules_for("3.6.0", "cuda"), Metadata) == [(0, 256, 128)]
    assert cuda._aligned(1000, 128) == 1024


def test_scratch_memory_per_queue(queue, context, device):
    address, _, owned = cuda.scratch(queue, 0, 1000, 128)
    assert not owned and address % 128 == 0
    again, _, _ = cuda.scratch(queue, 0, 500, 128)
    assert again == address  # the in-order queue's allocation serves the next launch
    fresh, held, owned = cuda.scratch(queue, 0, 500, 128, fresh=True)
    assert owned and held is not None and fresh != address and fresh % 128 == 0
    with ur_cffi.Queue(context, device, out_of_order=True) as unordered:
        _, held, owned = cuda.scratch(unordered, 0, 64, 16)
        assert owned and held is not None


def test_shared_scratch_outlives_its_replacement_while_held_and_goes_as_its_queue_closes(
        context, device):
    """A larger launch on another thread closed the shared scratch another launch had taken
    but not yet enqueued (the next allocation of its size got the same memory: the kernel
    would have written over it); and a queue's scratch, in a module-wide table, was never
    freed, closed or not."""
    import gc
    import weakref

    import numpy as np

    queue = ur_cffi.Queue(context, device)
    address, taken, _ = cuda.scratch(queue, 0, 64 * 1024, 128)  # launch A, not yet enqueued
    cuda.scratch(queue, 0, 4096 * 1024, 128)  # launch B, larger: the shared one is replaced
    assert not taken.closed
    other = ur_cffi.empty(taken.nbytes, np.uint8, queue=queue)
    assert not other.data_ptr() <= address < other.data_ptr() + other.nbytes
    gone = [weakref.ref(memory) for memory in (taken, queue.triton_scratch[0])]
    del taken, other
    queue.close()
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


def test_the_nvidia_backends_own_arch_passes_where_triton_parses_it_again(driver, monkeypatch):
    # Triton's JITFunction.run parses the launch options, then its compile() parses the parsed
    # ones, arch='sm90' included: refusing every arch failed every kernel[grid] on the H100.
    from triton.compiler.compiler import make_backend

    monkeypatch.delenv("TRITON_OVERRIDE_ARCH", raising=False)

    nvidia = make_backend(cuda.gpu_target(None, 90))
    parsed = nvidia.parse_options({"num_warps": 8})
    again = nvidia.parse_options(parsed.__dict__)
    assert (again.arch, again.num_warps) == ("sm90", 8)
    with pytest.raises(TypeError, match="compile option arch='sm80': ur_cffi.triton compiles"):
        nvidia.parse_options({**parsed.__dict__, "arch": "sm80"})
    with pytest.raises(TypeError, match="compile option arch=90: ur_cffi.triton compiles"):
        nvidia.parse_options({"arch": 90})


def test_compile_refuses_options_and_targets_triton_would_drop_or_misread(driver, device):
    # Triton's parse_options drops what it does not know: num_warp=8 compiled 4 warps.
    with pytest.raises(TypeError, match="unknown compile option.* num_warp for Triton's cuda"):
        compile_for_sm90(kernels.scale, SCALE, {"BLOCK": 1024}, num_warp=8)
    # On a CUDA device Triton's NVIDIA backend took arch for its target: a bare re error.
    with pytest.raises(TypeError, match=r"compile option arch=90: ur_cffi.triton compiles "
                                        r"for the device's own target"):
        ur_triton.compile(kernels.scale, SCALE, {"BLOCK": 1024}, device=device, arch=90)
    for arch, error in ((None, TypeError), ("90", TypeError), (90.0, TypeError),
                        (True, TypeError), (0, ValueError)):
        with pytest.raises(error, match="cuda.compile: arch"):
            cuda.compile(kernels.scale, SCALE, {"BLOCK": 1024}, arch=arch)
    for version in ("-1.0", None, "9", "x.y"):
        with pytest.raises(ValueError, match="is not a CUDA compute capability"):
            cuda.capability(version)
    assert cuda.capability("9.0") == 90 and cuda.capability(" 12.1 ") == 121
    compiled = compile_for_sm90(kernels.scale, SCALE, {"BLOCK": 1024}, num_warps=8)
    assert compiled.metadata.num_warps == 8


def test_kernel_options_names_what_it_takes():
    with pytest.raises(TypeError, match="kernel_options takes what ur_cffi.triton.compile "
                                        "returned, not JITFunction"):
        ur_triton.kernel_options(kernels.scale)
