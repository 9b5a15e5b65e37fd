#!/usr/bin/env bash
# Build ur_cffi against UR's CUDA adapter and run the GPU tests and figures.
#
#   scripts/gpu_check.sh [UR_DIR]
#
# UR_DIR holds include/ur_api.h and lib/ (libur_loader.so.0, libur_adapter_cuda.so.0 and
# what it links: libumf.so.1, libhwloc.so.15), and optionally wheels-cp312/ with cffi and
# pycparser wheels for a Python that lacks them (the layout of shared/ur-cuda), and
# wheels-extra/ with hypothesis and ml_dtypes for step 5.  Default:
# $UR_DIR, else .gpu/ in this checkout, else ../shared/ur-cuda.  Needs an NVIDIA driver, a C
# compiler, and Python 3 with numpy, pytest and Triton (3.6 tested); CuPy and torch only for
# the comparison figures.  Nothing is installed system-wide: the build goes to src/ur_cffi,
# wheels to a temporary directory.
#
# Steps (each logged; output also to $OUT/gpu_check.log when OUT is set):
#   1. python build_ffi.py against UR_DIR's header and loader
#   2. python -m ur_cffi (the adapters and devices UR lists)
#   3. pytest tests/test_gpu.py (the GPU suite; GPU_TESTS_TIMEOUT seconds, default 300)
#   4. python -m benchmarks.gpu (the figures; GPU_BENCH_ROUNDS, default 15;
#      GPU_BENCH_TIMEOUT seconds, default 300)
#   5. pytest with UR_CFFI_TEST_DEVICE=gpu: the whole suite on the GPU, tests that apply to
#      the CPU device only skipped with their reasons; one pytest per file, GPU_SUITE_JOBS
#      (default 4) at a time, each within GPU_SUITE_TIMEOUT seconds (default 300);
#      GPU_SUITE_FILES (e.g. "tests/test_memory.py tests/test_views.py") runs only those
# Set GPU_CHECK_STEPS (e.g. "1 2 3") to run only some, and GPU_CHECK_COMMAND to run a command
# of your own after step 1, in the same environment (PYTHONPATH, loader, adapter).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
ur_dir="${1:-${UR_DIR:-}}"
if [ -z "$ur_dir" ]; then
    for candidate in "$here/.gpu" "$here/../shared/ur-cuda"; do
        if [ -f "$candidate/include/ur_api.h" ]; then ur_dir="$candidate"; break; fi
    done
fi
if [ -z "$ur_dir" ] || [ ! -f "$ur_dir/include/ur_api.h" ]; then
    echo "gpu_check: no UR directory with include/ur_api.h (pass one, or set UR_DIR)" >&2
    exit 2
fi
ur_dir="$(cd "$ur_dir" && pwd)"
python="${PYTHON:-python3}"
steps="${GPU_CHECK_STEPS:-1 2 3 4 5}"
out="${OUT:-}"
log() { echo "== $(date +%H:%M:%S) $*"; }
if [ -n "$out" ]; then
    mkdir -p "$out"
    exec > >(tee -a "$out/gpu_check.log") 2>&1
fi

# The loader finds adapters by their unversioned names; the shipped files are read-only.
work="$(mktemp -d)"
mkdir -p "$work/lib" "$work/site"
for file in "$ur_dir"/lib/*.so*; do ln -sf "$file" "$work/lib/$(basename "$file")"; done
ln -sf "$ur_dir/lib/libur_loader.so.0" "$work/lib/libur_loader.so"
ln -sf "$ur_dir/lib/libur_adapter_cuda.so.0" "$work/lib/libur_adapter_cuda.so"
export UR_INCLUDE_DIR="$ur_dir/include" UR_LIBRARY_DIR="$work/lib"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! "$python" -c "import cffi, pycparser" 2>/dev/null; then
    if compgen -G "$ur_dir/wheels-cp312/*.whl" >/dev/null; then
        "$python" -m pip install -q --no-index --no-deps --target "$work/site" \
            "$ur_dir"/wheels-cp312/*.whl
        export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
    else
        echo "gpu_check: $python has no cffi/pycparser and $ur_dir has no wheels" >&2
        exit 2
    fi
fi
# The whole suite (step 5) needs hypothesis and ml_dtypes: from UR_DIR/wheels-extra where the
# machine has none (no registry is reachable there).
if ! "$python" -c "import hypothesis, ml_dtypes" 2>/dev/null \
        && compgen -G "$ur_dir/wheels-extra/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --target "$work/site" \
        "$ur_dir"/wheels-extra/*.whl
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$here/src:$here/tests${PYTHONPATH:+:$PYTHONPATH}"
# Keep the multi-GPU safety settings of shared machines; ur_cffi itself uses none of this.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=0

log "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $("$python" --version 2>&1); triton $("$python" -c 'import triton; print(triton.__version__)' 2>&1)"
if [[ " $steps " == *" 1 "* ]]; then
    log "1. build ur_cffi against $UR_INCLUDE_DIR"
    started=$(date +%s)
    "$python" build_ffi.py || exit 1
    log "built in $(( $(date +%s) - started )) s"
fi
if [ -n "${GPU_CHECK_COMMAND:-}" ]; then
    log "GPU_CHECK_COMMAND: $GPU_CHECK_COMMAND"
    bash -c "$GPU_CHECK_COMMAND" || status=1
fi
if [[ " $steps " == *" 2 "* ]]; then
    log "2. python -m ur_cffi"
    "$python" -m ur_cffi || status=1
fi
if [[ " $steps " == *" 3 "* ]]; then
    log "3. GPU suite"
    timeout "${GPU_TESTS_TIMEOUT:-300}" "$python" -m pytest -q -rs -p no:cacheprovider \
        -o faulthandler_timeout=120 tests/test_gpu.py ${out:+--junitxml "$out/test_gpu.xml"} \
        || status=1
fi
if [[ " $steps " == *" 4 "* ]]; then
    log "4. GPU figures"
    timeout "${GPU_BENCH_TIMEOUT:-300}" "$python" -m benchmarks.gpu \
        --rounds "${GPU_BENCH_ROUNDS:-15}" \
        ${out:+--json "$out/gpu_bench.json"} || status=1
fi
if [[ " $steps " == *" 5 "* ]]; then
    # One pytest per file, GPU_SUITE_JOBS at a time: a crash ends one file's run, not all.
    jobs="${GPU_SUITE_JOBS:-4}"
    logs="${out:-$work}/suite"
    mkdir -p "$logs"
    log "5. the whole suite on the GPU (UR_CFFI_TEST_DEVICE=${GPU_SUITE_DEVICE:-gpu}), one" \
        "pytest per file, $jobs at a time; logs in $logs"
    export UR_CFFI_TEST_DEVICE="${GPU_SUITE_DEVICE:-gpu}" GPU_SUITE_LOGS="$logs" python
    export GPU_SUITE_TIMEOUT="${GPU_SUITE_TIMEOUT:-300}"
    files="${GPU_SUITE_FILES:-$(ls tests/test_*.py | grep -v '^tests/test_gpu.py$')}"
    printf '%s\n' $files | xargs -P "$jobs" -I{} bash -c '
        name="$(basename "$1" .py)"
        timeout "$GPU_SUITE_TIMEOUT" "$python" -m pytest -q -rfEs --tb=short \
            -p no:cacheprovider -o faulthandler_timeout=120 "$1" \
            > "$GPU_SUITE_LOGS/$name.log" 2>&1
        echo "exit status $?" >> "$GPU_SUITE_LOGS/$name.log"' _ {}
    for file in "$logs"/test_*.log; do
        summary="$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$file" | tail -1)"
        echo "$(basename "$file" .log): ${summary:-no summary} ($(tail -1 "$file"))"
        grep -q "exit status 0" "$file" || status=1
    done
    grep -h -E "^(FAILED|ERROR) " "$logs"/test_*.log || true
    # One file to bring back (a lent machine returns only a few files).
    [ -n "$out" ] && tar czf "$out/suite-logs.tgz" -C "$logs" . && rm -r "$logs"
fi
log "done, status $status"
exit $status
