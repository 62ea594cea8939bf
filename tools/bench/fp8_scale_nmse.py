#!/usr/bin/env python3
"""How much one FP8 scale per matrix (weights) and per row (inputs) costs against DeepSeek's blocks.

E4M3 rounding emulated exactly (nearest even, subnormals, saturating at 448) in numpy. Prints the
NMSE of the quantized weights, inputs and their product, for the two scalings kiln's prefill uses:
128 x 128 weight blocks with 1 x 128 input blocks (FP8 checkpoints), and one scale per matrix with
one per row (--quantize fp8, templates/fp8_rows.hpp). --outliers adds outlier input channels and
weights and a few "massive activation" channels, the hard case for a scale that spans them.
"""
import argparse

import numpy as np


def e4m3(x):
    a, s = np.abs(x), np.sign(x)
    e = np.maximum(np.floor(np.log2(np.maximum(a, 1e-30))), -6)  # below 2^-6: subnormal steps
    step = 2.0 ** (e - 3)
    return s * np.minimum(np.round(a / step) * step, 448.0)


def quantize(x, rows, cols):
    """Each rows x cols block scaled by its own max |x| / 448 (rows/cols None: the whole extent)."""
    rows, cols = rows or x.shape[0], cols or x.shape[1]
    out = np.empty_like(x)
    for i in range(0, x.shape[0], rows):
        for j in range(0, x.shape[1], cols):
            b = x[i:i + rows, j:j + cols]
            scale = np.abs(b).max() / 448
            out[i:i + rows, j:j + cols] = e4m3(b / scale) * scale
    return out


def nmse(got, want):
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--outliers", action="store_true")
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=64)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.02, (a.n, a.k))
    x = rng.normal(0, 1, (a.tokens, a.k))
    if a.outliers:
        w[:, rng.choice(a.k, 40, replace=False)] *= 10
        w[rng.choice(a.n, 5, replace=False), :5] *= 100
        x[:, rng.choice(a.k, 4, replace=False)] *= 100
    y = x @ w.T
    wb, wt = quantize(w, 128, 128), quantize(w, None, None)
    xb, xr = quantize(x, 1, 128), quantize(x, 1, None)
    print(f"max |w| / median |w| {np.abs(w).max() / np.median(np.abs(w)):.0f}, "
          f"max |x| / median |x| {np.abs(x).max() / np.median(np.abs(x)):.0f}")
    print(f"weights NMSE: 128x128 blocks {nmse(wb, w):.3g}, one scale {nmse(wt, w):.3g}")
    print(f"inputs NMSE: 1x128 blocks {nmse(xb, x):.3g}, one scale a row {nmse(xr, x):.3g}")
    print(f"product NMSE: blocks {nmse(xb @ wb.T, y):.3g}, one scale a matrix and a row {nmse(xr @ wt.T, y):.3g}")


if __name__ == "__main__":
    main()
