"""The tutorial examples of issue 12 (strided views, transposed operands, ``tl.rand``, atomics,
arrays of addresses), each run as a user would: a fresh process, torch unimportable; each
checks itself against float64 numpy and exits non-zero if it is off."""

import re

import pytest

pytest.importorskip("triton")

from test_triton_examples import run  # noqa: E402 - after the skip: it needs triton


def error(pattern: str, stdout: str) -> float:
    return float(re.search(pattern, stdout).group(1))


def test_softmax_over_a_strided_view(tmp_path_factory):
    stdout = run("tutorial_softmax_strided.py", tmp_path_factory)
    assert "strides (1554, 1)" in stdout
    assert error(r"max error (\S+)", stdout) < 1e-5


def test_matmul_with_autotune_and_a_transposed_operand(tmp_path_factory):
    stdout = run("tutorial_matmul_transposed.py", tmp_path_factory)
    assert "best config BM:" in stdout
    assert error(r"max relative error (\S+)", stdout) < 1e-4


def test_dropout_with_tl_rand(tmp_path_factory):
    stdout = run("tutorial_dropout.py", tmp_path_factory)
    assert "same seed same mask: True" in stdout
    assert error(r"max error (\S+),", stdout) < 1e-6


def test_layer_norm_forward_and_backward(tmp_path_factory):
    stdout = run("tutorial_layer_norm.py", tmp_path_factory)
    errors = [float(e) for e in re.findall(r"max error (\S+?)(?:,|$)", stdout.strip())]
    assert len(errors) == 4 and max(errors) < 1e-4


def test_grouped_gemm_with_an_array_of_addresses(tmp_path_factory):
    stdout = run("tutorial_grouped_gemm.py", tmp_path_factory)
    errors = re.search(r"max relative errors (.+)$", stdout.strip()).group(1).split(", ")
    assert len(errors) == 3 and max(float(e) for e in errors) < 1e-4


HOST_FUNCTIONS = '''
import sys
import numpy as np
import ur_cffi, ur_cffi.triton
sys.path.insert(0, sys.argv[1])
import matmul, softmax, tutorial_dropout, tutorial_matmul_transposed, tutorial_softmax_strided

rng = np.random.default_rng()
queue = ur_cffi.triton.activate()
other = ur_cffi.Queue(queue.context, queue.device)  # the inputs' queue, not the launches'


def softmax64(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def refused(call, words):
    try:
        call()
    except ValueError as error:
        assert words in str(error), error
    else:
        raise AssertionError(f"no ValueError with {words!r}")


host = (rng.standard_normal((61, 90)) * 4).astype(np.float32)
wide = ur_cffi.asarray(host, queue=other)
other.finish()
for function in (softmax.softmax, tutorial_softmax_strided.softmax):
    for view, reference in ((wide[::2, 7:80], host[::2, 7:80]), (wide[::-1], host[::-1]),
                            (wide[:, :0], host[:, :0])):
        got = function(view).to_numpy()  # on the Triton queue: waits for the kernel
        assert got.shape == reference.shape
        assert reference.size == 0 or np.max(np.abs(got - softmax64(reference))) < 1e-5
    refused(lambda: function(wide.T), "contiguous rows")

a_h, b_h = (rng.standard_normal(shape).astype(np.float32) for shape in ((37, 45), (23, 45)))
a, b = ur_cffi.asarray(a_h, queue=queue), ur_cffi.asarray(b_h, queue=queue)
for function in (matmul.matmul, tutorial_matmul_transposed.matmul):
    for left, right, reference in ((a, b.T, a_h @ b_h.T), (a[::-1, :30], b.T[:30, ::3],
                                                            a_h[::-1, :30] @ b_h.T[:30, ::3])):
        got = function(left, right).to_numpy()
        error = np.max(np.abs(got - reference.astype(np.float64)) / (1 + np.abs(reference)))
        assert error < 1e-4, error
    refused(lambda: function(a, b), "(37, 45) and (23, 45)")

x = ur_cffi.asarray(rng.standard_normal((8, 16)).astype(np.float32) + 5, queue=queue)
refused(lambda: tutorial_dropout.dropout(x, 0.3, 1), "1-D float32")
refused(lambda: tutorial_dropout.dropout(x.ravel(), 1.5, 1), "in [0, 1)")
flat = x.ravel().to_numpy().astype(np.float64)
kept = tutorial_dropout.dropout(x.ravel(), 0.25, 7).to_numpy()
assert np.allclose(kept[kept != 0], flat[kept != 0] / 0.75, rtol=1e-6)
print("ok")
'''


def test_the_tutorials_host_functions_take_views_refuse_misfits_and_wait_right(
        tmp_path_factory):
    # softmax.py's read every view as contiguous, matmul took mismatched inner sizes (reading
    # past b), dropout read a 2-D array as 1-D, and outputs on the inputs' queue were read
    # before the kernel on the Triton queue ran (2026-12-05 audit).
    from test_triton_examples import EXAMPLES

    script = tmp_path_factory.mktemp("host_functions") / "host_functions.py"
    script.write_text(HOST_FUNCTIONS.replace("sys.argv[1]", repr(str(EXAMPLES))))
    assert run(str(script), tmp_path_factory).split() == ["ok"]
