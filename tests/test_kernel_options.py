"""Kernels launched by hand that take more than the user's arguments: parameters their compiler
adds after the user's (``hidden_args``: Triton's Intel backend takes its shared memory as a
trailing local-memory argument, its NVIDIA backend scratch pointers) and shared memory given as
a launch property (``work_group_memory``, NVIDIA).  ``ur_cffi.triton.kernel_options(compiled)``
gives both for ``Program.kernel(name, **options)``; on the test device the results are exact,
and for the NVIDIA backend (compile-only here) they agree with the cubin.
"""

import ctypes

import numpy as np
import pytest

import ur_cffi
from ur_cffi import _compat, nvidia_binary, spirv

triton = pytest.importorskip("triton")
ur_triton = pytest.importorskip("ur_cffi.triton")

import kernels  # noqa: E402
from ur_cffi.triton import abi, backend, cuda  # noqa: E402

BLOCK = 256
ADD = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
SUMS = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@pytest.fixture(scope="module")
def compiled(device, torch_blocked):
    """``compiled(name, signature)``: kernels.py's ``name`` compiled for the test device
    (Triton's ``CompiledKernel``), once per module."""
    made = {}

    def build(name, signature):
        if name not in made:
            kernel = ur_triton.compile(getattr(kernels, name), signature, {"BLOCK": BLOCK},
                                       device=device)
            made[name] = kernel
        return made[name]

    return build


def program_of(context, kernel):
    if "spv" in kernel.asm:
        return ur_cffi.Program.from_il(context, spirv.drop_capabilities(kernel.asm["spv"]))
    return ur_cffi.Program.from_binary(context, kernel.asm["cubin"])


def local_size(kernel):
    rules = abi.current(abi.TARGET_BACKENDS[kernel.metadata.target.backend])
    return kernel.metadata.num_warps * rules.threads_per_warp(kernel.metadata)


def test_a_launch_by_hand_passes_the_hidden_args(compiled, context, queue, rng):
    kernel = compiled("add", ADD)
    options = ur_triton.kernel_options(kernel)
    hidden = options["hidden_args"]
    assert options["work_group_memory"] == 0
    if backend.triton_backend(queue.device) == "nvidia":
        assert hidden == (0,) * abi.current("nvidia").scratch_pointers
        assert all(type(value) is np.uint64 for value in hidden)
    else:
        assert hidden == ()
    n = 5 * BLOCK + 3
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    with program_of(context, kernel) as program, \
            program.kernel(kernel.metadata.name, ("ptr", "ptr", "ptr", "int32"),
                           hidden_args=hidden) as add:
        assert add.num_args == 4 + len(hidden) and add.hidden_args == hidden
        assert add.signature == ("ptr", "ptr", "ptr", np.dtype(np.int32))  # the caller's
        out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
        add.launch(queue, -(-n // BLOCK) * local_size(kernel), local_size(kernel),
                   ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue), out,
                   n).wait()
        assert np.array_equal(out.to_numpy(), (x.astype(np.float64) + y).astype(np.float32))


def test_shared_memory_as_the_backend_takes_it(compiled, context, queue, rng):
    """A Local argument after the user's (Intel), or the launch's work-group memory
    (NVIDIA)."""
    kernel = compiled("block_sums", SUMS)
    options = ur_triton.kernel_options(kernel)
    assert kernel.metadata.shared > 0
    if backend.triton_backend(queue.device) == "nvidia":
        assert options["work_group_memory"] == kernel.metadata.shared
    else:
        (local,) = options["hidden_args"]
        assert isinstance(local, ur_cffi.Local) and local.nbytes == kernel.metadata.shared
        assert options["work_group_memory"] == 0
    n = 9 * BLOCK + 17
    x = rng.integers(-1000, 1000, n).astype(np.float32)  # every partial sum exact
    groups = -(-n // BLOCK)
    with program_of(context, kernel) as program, \
            program.kernel(kernel.metadata.name, **options) as sums:
        out = ur_cffi.asarray(np.full(groups, np.nan, np.float32), queue=queue)
        sums.prepare(queue, groups * local_size(kernel), local_size(kernel),
                     ur_cffi.asarray(x, queue=queue), out, np.int32(n))().wait()
        padded = np.zeros(groups * BLOCK)
        padded[:n] = x
        assert np.array_equal(out.to_numpy(), padded.reshape(groups, BLOCK).sum(axis=1))


def test_counts_and_mistakes_name_the_hidden_args(compiled, context, queue):
    kernel = compiled("add", ADD)
    with program_of(context, kernel) as program:
        name = kernel.metadata.name
        total = program.kernel(name).num_args
        hidden = (np.uint64(0),) * (total - 3)  # leaves 3 for the caller's 4
        with program.kernel(name, hidden_args=hidden) as extra:
            a = ur_cffi.empty(4, queue=queue)
            with pytest.raises(TypeError, match=rf"takes 3 arguments \(and {len(hidden)} "
                                                r"hidden_args\), 4 given"):
                extra.launch(queue, 64, 64, a, a, a, np.int32(4))
        one_too_many = (np.uint64(0),) * (total - 4 + 1)
        with pytest.raises(ValueError, match=rf"signature declares 4 arguments and "
                                             rf"{len(one_too_many)} hidden_args; kernel "
                                             rf"'{name}' takes {total}"):
            program.kernel(name, ("ptr", "ptr", "ptr", "int32"), hidden_args=one_too_many)
        with pytest.raises(ValueError, match=f"{total + 1} hidden_args given"):
            program.kernel(name, hidden_args=(np.uint64(0),) * (total + 1))
        for wrong in (5, "ab", None):
            with pytest.raises(TypeError, match="hidden_args of .* must be a sequence"):
                program.kernel(name, hidden_args=wrong)
        for wrong in (0, 1.5, a, ctypes.c_uint64(0), "x"):
            with pytest.raises(TypeError, match=r"hidden_args\[0\] of .* must be a numpy "
                                                r"scalar or a ur_cffi.Local"):
                program.kernel(name, hidden_args=(wrong,))
        for wrong, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
            with pytest.raises(error, match="work_group_memory"):
                program.kernel(name, work_group_memory=wrong)
        with pytest.raises(ValueError, match=r"work_group_memory \d+ of .* is more than the "
                                             r"context's devices have"):
            program.kernel(name, work_group_memory=2**40)


@pytest.mark.cpu_device("the OpenCL adapter's answer")
def test_work_group_memory_where_the_adapter_takes_none_is_refused_by_ur(compiled, context,
                                                                         queue):
    """The CPU device's kernels take local memory as arguments only: UR refuses a launch that
    asks for work-group memory, with an error naming the kernel, and the queue goes on."""
    kernel = compiled("add", ADD)
    x = ur_cffi.asarray(np.ones(BLOCK, np.float32), queue=queue)
    out = ur_cffi.full(BLOCK, np.nan, np.float32, queue=queue)
    if not _compat.HAS_LAUNCH_WITH_ARGS:  # before oneAPI 2026.0: no launch properties at all
        with program_of(context, kernel) as program, \
                pytest.raises(NotImplementedError, match="from oneAPI 2026.0 on"):
            program.kernel(kernel.metadata.name, work_group_memory=16)
        return
    with program_of(context, kernel) as program, \
            program.kernel(kernel.metadata.name, work_group_memory=16) as add:
        with pytest.raises(ur_cffi.URError, match=f"{kernel.metadata.name}.*with "
                                                  "work_group_memory=16 bytes"):
            add.launch(queue, local_size(kernel), local_size(kernel), x, x, out,
                       np.int32(BLOCK))
        assert np.isnan(out.to_numpy()).all()  # nothing ran
        program.kernel(kernel.metadata.name).launch(
            queue, local_size(kernel), local_size(kernel), x, x, out, np.int32(BLOCK)).wait()
    assert np.array_equal(out.to_numpy(), np.full(BLOCK, 2.0, np.float32))  # the queue goes on


def test_nvidia_options_match_the_cubin():
    """Compile-only: the NVIDIA backend of the installed Triton adds as many parameters as
    ``hidden_args`` gives (Triton 3.3: one global-scratch pointer; 3.6: two), and shared
    memory is work-group memory, not an argument."""
    pytest.importorskip("triton.backends.nvidia")
    for function, signature in ((kernels.add, ADD), (kernels.block_sums, SUMS)):
        kernel = cuda.compile(function, signature, {"BLOCK": BLOCK}, arch=90)
        options = ur_triton.kernel_options(kernel)
        entries = nvidia_binary.entries(kernel.asm["cubin"])
        users = sum(1 for ty in signature.values() if ty != "constexpr")
        assert len(entries[kernel.metadata.name]) == users + len(options["hidden_args"])
        assert options["work_group_memory"] == kernel.metadata.shared
    assert options["work_group_memory"] > 0  # block_sums


def with_local_size(module: bytes, size: int) -> bytes:
    """``module`` with ``OpExecutionMode LocalSize size 1 1`` for its entry point: what OpenCL
    C's ``reqd_work_group_size`` compiles to."""
    words, _ = spirv._words(module)
    entries = [(offset, count) for offset, opcode, count in spirv._instructions(words)
               if opcode == spirv.OP_ENTRY_POINT]
    (offset, count), = entries
    mode = [(6 << 16) | spirv.OP_EXECUTION_MODE, words[offset + 2], 17, size, 1, 1]
    return (words[:offset + count] + type(words)(words.typecode, mode)
            + words[offset + count:]).tobytes()


def test_a_launch_by_hand_takes_the_local_size_triton_compiled_for(compiled, context, queue,
                                                                   rng):
    """Another work-group size than ``num_warps`` times the threads per warp leaves Triton's
    output partly unwritten with no error from the runtime: ``kernel_options`` gives the size,
    a launch with ``local_size=None`` takes it, and another raises naming both."""
    kernel = compiled("add", ADD)
    options = ur_triton.kernel_options(kernel)
    local = local_size(kernel)
    assert options["required_local_size"] == (local,)
    n = int(rng.integers(3 * BLOCK, 9 * BLOCK))
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    expected = (x.astype(np.float64) + y).astype(np.float32)
    global_size = -(-n // BLOCK) * local
    with program_of(context, kernel) as program, \
            program.kernel(kernel.metadata.name, ("ptr", "ptr", "ptr", "int32"),
                           **options) as add:
        assert add.required_local_size == (local,)
        dx, dy = ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)
        out = ur_cffi.full(n, np.nan, np.float32, queue=queue)
        add.launch(queue, global_size, None, dx, dy, out, n).wait()
        assert np.array_equal(out.to_numpy(), expected)
        out.fill(np.nan)
        add.prepare(queue, global_size, (local,), dx, dy, out, n)().wait()
        assert np.array_equal(out.to_numpy(), expected)
        out.fill(np.nan)
        for wrong in (local // 2, 2 * local, (local // 4,)):
            message = rf"local_size \({wrong if type(wrong) is int else wrong[0]},.*" \
                      rf"'{kernel.metadata.name}'.*work-groups of \({local},\)"
            with pytest.raises(ValueError, match=message):
                add.launch(queue, 4 * global_size, wrong, dx, dy, out, n)
            with pytest.raises(ValueError, match=message):
                add.prepare(queue, 4 * global_size, wrong, dx, dy, out, n)
        with program.kernel(kernel.metadata.name,
                            **{**options, "required_local_size": (local, 2)}) as flat, \
                pytest.raises(ValueError, match=rf"work-groups of \({local}, 2\).*1 dimension"):
            flat.launch(queue, (global_size,), None, dx, dy, out, n)
        queue.finish()
        assert np.isnan(out.to_numpy()).all()  # nothing was launched
        graph = ur_cffi.Graph(context)
        with graph.recording(queue):
            command = add.launch(queue, global_size, None, dx, dy, out, n)
        with pytest.raises(ValueError, match=r"work-groups of"):
            command.update(local_size=local // 2)
        graph.replay(queue).wait()
        assert np.array_equal(out.to_numpy(), expected)
        graph.close()


def test_the_size_a_kernel_was_compiled_for_comes_from_the_runtime(compiled, context, queue,
                                                                    rng):
    kernel = compiled("add", ADD)
    if "spv" not in kernel.asm:
        pytest.skip("the module is SPIR-V written here; the test device takes a cubin")
    local = local_size(kernel)
    module = with_local_size(spirv.drop_capabilities(kernel.asm["spv"]), local)
    n = int(rng.integers(BLOCK, 4 * BLOCK))
    x = rng.standard_normal(n).astype(np.float32)
    with ur_cffi.Program.from_il(context, module) as program, \
            program.kernel(kernel.metadata.name, ("ptr", "ptr", "ptr", "int32")) as add:
        assert add.required_local_size == (local,)
        with pytest.raises(AttributeError):
            add.required_local_size = (local // 2,)  # a launch's checked block may hold it
        assert add.group_info(ur_cffi.enums.ur_kernel_group_info_t
                              .UR_KERNEL_GROUP_INFO_COMPILE_WORK_GROUP_SIZE) == [local, 1, 1]
        dx = ur_cffi.asarray(x, queue=queue)
        out = ur_cffi.full(n, np.nan, np.float32, queue=queue)
        add.launch(queue, -(-n // BLOCK) * local, None, dx, dx, out, n).wait()
        assert np.array_equal(out.to_numpy(), (2 * x.astype(np.float64)).astype(np.float32))
        with pytest.raises(ValueError, match=r"local_size \(64,\).*required_local_size"):
            add.launch(queue, local, 64, dx, dx, out, n)
        assert program.kernel(kernel.metadata.name,
                              required_local_size=(local, 1)).required_local_size == (local,)
        with pytest.raises(ValueError, match=rf"required_local_size \(64,\) of .*: the runtime "
                                             rf"says it was compiled for work-groups of "
                                             rf"\({local},\)"):
            program.kernel(kernel.metadata.name, required_local_size=64)
    with program_of(context, kernel) as program, \
            program.kernel(kernel.metadata.name) as plain:
        assert plain.required_local_size is None  # Triton's module does not say


def test_group_info_answers_for_the_kernel(compiled, context, queue, device):
    from ur_cffi.enums import ur_kernel_group_info_t as group, \
        ur_kernel_sub_group_info_t as sub_group

    kernel = compiled("add", ADD)
    with program_of(context, kernel) as program, \
            program.kernel(kernel.metadata.name) as add:
        largest = add.group_info(group.UR_KERNEL_GROUP_INFO_WORK_GROUP_SIZE)
        assert type(largest) is int and local_size(kernel) <= largest \
            <= device.max_work_group_size
        assert add.group_info(group.UR_KERNEL_GROUP_INFO_WORK_GROUP_SIZE, device) == largest
        assert add.group_info(
            group.UR_KERNEL_GROUP_INFO_PREFERRED_WORK_GROUP_SIZE_MULTIPLE) >= 1
        assert type(add.group_info(group.UR_KERNEL_GROUP_INFO_PRIVATE_MEM_SIZE)) is int
        if "spv" in kernel.asm:  # Intel's sub-groups: Triton's threads per warp
            assert add.sub_group_info(
                sub_group.UR_KERNEL_SUB_GROUP_INFO_MAX_SUB_GROUP_SIZE) == \
                abi.current("intel").threads_per_warp(kernel.metadata)
        with pytest.raises(TypeError, match="group_info takes a ur_kernel_group_info_t, not "
                                            "int 1"):
            add.group_info(1)
        with pytest.raises(TypeError, match="sub_group_info takes a "
                                            "ur_kernel_sub_group_info_t"):
            add.sub_group_info(group.UR_KERNEL_GROUP_INFO_WORK_GROUP_SIZE)
        with pytest.raises(ValueError, match="device 'gpu' is not one of its context's"):
            add.group_info(group.UR_KERNEL_GROUP_INFO_WORK_GROUP_SIZE, "gpu")
        for wrong, error in ((0, ValueError), ("128", TypeError), ((1, 2, 3, 4), ValueError),
                             (2 * device.max_work_group_size, ValueError), (1.5, TypeError)):
            with pytest.raises(error, match="required_local_size"):
                program.kernel(kernel.metadata.name, required_local_size=wrong)
