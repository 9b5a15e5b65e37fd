"""A small network step in Triton, recorded once into a ``ur_cffi.Graph`` and replayed in a loop.

The step: copy a batch in from host memory, layer norm, a matmul with a weight matrix, a row
softmax, copy the probabilities out.  Recorded once, it is replayed with one enqueue per step
(a UR command buffer where the device has them, else its commands one by one: ``graph.native``
says which).  A replay reads the host batch as it is then, so the loop only writes new numbers
into it; halfway the matmul launch is updated to a second weight matrix.  Every step is checked
against float64 numpy; exits with status 1 if one is off.

    python examples/graph_step.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / n + eps)
    y = diff * rstd * tl.load(w_ptr + cols, mask=mask) + tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, y, mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    # Row-major A (M x K), B (K x N), C (M x N).
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :],
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :],
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n + cols, numerator / tl.sum(numerator, axis=0), mask=cols < n)


ROWS, FEATURES, CLASSES, EPS = 64, 200, 37, 1e-5


def step(x, gamma, beta, normed, weights, logits, probabilities):
    """Layer norm, matmul and softmax: three Triton launches on the current queue."""
    layer_norm_kernel[(ROWS,)](x, normed, gamma, beta, FEATURES, FEATURES, EPS,
                               BLOCK=triton.next_power_of_2(FEATURES))
    matmul_kernel[(triton.cdiv(ROWS, 32), triton.cdiv(CLASSES, 32))](
        normed, weights, logits, ROWS, CLASSES, FEATURES, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    softmax_kernel[(ROWS,)](probabilities, logits, CLASSES,
                            BLOCK=triton.next_power_of_2(CLASSES))


def reference(x, gamma, beta, weights):
    """The step in float64 numpy."""
    x = x.astype(np.float64)
    normed = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + EPS)
    logits = (normed * gamma + beta) @ weights
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    queue = ur_cffi.triton.activate()
    rng = np.random.default_rng()
    gamma, beta = (rng.standard_normal(FEATURES).astype(np.float32) for _ in range(2))
    weights = [(rng.standard_normal((FEATURES, CLASSES)) / np.sqrt(FEATURES)).astype(np.float32)
               for _ in range(2)]
    batch = np.empty((ROWS, FEATURES), np.float32)  # each replay reads it as it is then
    result = np.empty((ROWS, CLASSES), np.float32)  # and writes the probabilities here
    device = [ur_cffi.asarray(a, queue=queue) for a in (gamma, beta, *weights)]
    d_gamma, d_beta, d_weights = device[0], device[1], device[2:]
    x, normed = (ur_cffi.empty((ROWS, FEATURES), np.float32, queue=queue) for _ in range(2))
    logits, probabilities = (ur_cffi.empty((ROWS, CLASSES), np.float32, queue=queue)
                             for _ in range(2))

    step(x, d_gamma, d_beta, normed, d_weights[0], logits, probabilities)  # compiles
    queue.finish()
    graph = ur_cffi.Graph(queue.context)
    with graph.recording(queue):
        x.copy_from(batch, blocking=False)
        step(x, d_gamma, d_beta, normed, d_weights[0], logits, probabilities)
        probabilities.copy_to(result, blocking=False)
    how = "a UR command buffer" if graph.native else "its commands replayed one by one"
    print(f"recorded {len(graph.commands)} commands "
          f"({', '.join(command.kind for command in graph.commands)}) into {how}")

    matmul = graph.commands[2]
    worst, current = 0.0, 0
    for index in range(8):
        if index == 4:
            matmul.update(b_ptr=d_weights[1])  # the second weight matrix, from now on
            current = 1
        batch[:] = rng.standard_normal((ROWS, FEATURES)) * 3 + 1
        result[:] = np.nan
        graph.replay(queue).wait()
        error = float(np.max(np.abs(result - reference(batch, gamma, beta, weights[current]))))
        worst = max(worst, error)
        print(f"step {index}: weights {current}, max error {error:.3g}")
    ok = worst < 1e-5
    print(f"{ROWS}x{FEATURES} batch, {CLASSES} classes, one enqueue per step: "
          f"{'every step within 1e-5' if ok else 'OFF'}")
    graph.close()
    ur_cffi.triton.deactivate()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
