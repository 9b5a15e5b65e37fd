"""Layer normalization, forward and backward (Triton's tutorial 05), without PyTorch.

The forward pass normalizes each row and keeps its mean and 1/std.  The backward pass
computes dx per row and accumulates the weight and bias gradients of all rows with atomic
adds (``tl.atomic_add``) into float32 buffers that start at zero.  Everything is checked
against float64 numpy (the gradients of ``sum(y * dy)``); exits with status 1 if it is off.

    python examples/tutorial_layer_norm.py
"""

import sys

import numpy as np
import triton
import triton.language as tl

import ur_cffi
import ur_cffi.triton


@triton.jit
def layer_norm_forward(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n, eps,
                       BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(xc * xc, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, xc * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_backward(x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr,
                        stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, axis=0) / n
    c2 = tl.sum(wdy, axis=0) / n
    tl.store(dx_ptr + row * stride + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
    tl.atomic_add(dw_ptr + cols, dy * xhat, mask=mask)  # every row adds its share
    tl.atomic_add(db_ptr + cols, dy, mask=mask)


def main():
    queue = ur_cffi.triton.activate()
    rng = np.random.default_rng()
    rows, n, eps = 64, 300, 1e-5
    x_h = rng.standard_normal((rows, n)).astype(np.float32)
    w_h = rng.standard_normal(n).astype(np.float32)
    b_h = rng.standard_normal(n).astype(np.float32)
    dy_h = rng.standard_normal((rows, n)).astype(np.float32)
    x, w, b, dy = (ur_cffi.asarray(a, queue=queue) for a in (x_h, w_h, b_h, dy_h))
    y, dx = ur_cffi.empty_like(x), ur_cffi.empty_like(x)
    mean, rstd = (ur_cffi.empty(rows, np.float32, queue=queue) for _ in range(2))
    dw, db = ur_cffi.zeros(n, np.float32, queue=queue), ur_cffi.zeros(n, np.float32, queue=queue)
    block = triton.next_power_of_2(n)
    layer_norm_forward[(rows,)](x, y, w, b, mean, rstd, x.stride(0), n, eps, BLOCK=block)
    layer_norm_backward[(rows,)](x, dy, dx, w, mean, rstd, dw, db, x.stride(0), n,
                                 BLOCK=block)

    xd, wd, bd, dyd = (a.astype(np.float64) for a in (x_h, w_h, b_h, dy_h))
    mu = xd.mean(axis=1, keepdims=True)
    rs = 1 / np.sqrt(((xd - mu) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (xd - mu) * rs
    y_ref = xhat * wd + bd
    wdy = wd * dyd
    dx_ref = (wdy - (xhat * (xhat * wdy).mean(axis=1, keepdims=True)
                     + wdy.mean(axis=1, keepdims=True))) * rs
    errors = {name: float(np.max(np.abs(got.to_numpy() - ref)) / (1 + np.max(np.abs(ref))))
              for name, got, ref in (("y", y, y_ref), ("dx", dx, dx_ref),
                                     ("dw", dw, (dyd * xhat).sum(axis=0)),
                                     ("db", db, dyd.sum(axis=0)))}
    print("layer norm forward and backward: " + ", ".join(
        f"{name} max error {error:.3g}" for name, error in errors.items()))
    ur_cffi.triton.deactivate()
    return 0 if max(errors.values()) < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
