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
