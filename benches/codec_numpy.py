#!/usr/bin/env python3
"""numpy's times for the codec quantizers, the peer of `bench_codec`: vector quantization
as numpy users write it (codeword norms, one matmul, argmin, the gather of the chosen
codewords) and finite scalar quantization by its formula. Prints `name<TAB>best ms`, names
as `bench_codec` prints them; best of `--reps` runs after a warm-up. numpy's matmul uses its
BLAS (OpenBLAS in the wheels, all cores); the rest is single-threaded.

Usage: codec_numpy.py N K D FSQ_ROWS   (needs numpy: pip install numpy==2.4.6)
"""
import argparse
import time

import numpy as np


def best_ms(f, reps):
    f()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dims", type=int, nargs=4)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    n, k, d, fsq_rows = a.dims
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d), dtype=np.float32)
    c = rng.standard_normal((k, d), dtype=np.float32)

    def vq():
        score = (c * c).sum(axis=1)[None, :] - 2.0 * (x @ c.T)
        idx = score.argmin(axis=1)
        return idx, c[idx]

    levels = np.array([8, 5, 5, 5, 5, 5, 5, 5], dtype=np.int32)
    y = rng.uniform(-1.0, 1.0, (fsq_rows, len(levels))).astype(np.float32)
    span = (levels - 1).astype(np.float32)
    strides = np.concatenate([[1], np.cumprod(levels[:-1])]).astype(np.int64)

    def fsq():
        i = np.floor((np.clip(y, -1.0, 1.0) + 1.0) * 0.5 * span + 0.5)
        q = i / (span * 0.5) - 1.0
        return q, (i.astype(np.int64) * strides).sum(axis=1).astype(np.int32)

    print(f"vq_encode\t{best_ms(vq, a.reps):.3f}", flush=True)
    print(f"fsq_quantize\t{best_ms(fsq, a.reps):.3f}", flush=True)


if __name__ == "__main__":
    main()
