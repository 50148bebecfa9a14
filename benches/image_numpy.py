#!/usr/bin/env python3
"""numpy's times for the image-space ops, the second peer of `bench_image`: for an NCHW F32
tensor of `n c h w`, the idiomatic numpy form of each op it has (nearest 2x by `repeat`,
2x2 average and max by reshape + reduce, `np.pad` in three modes, the pixel shuffle and the
NCHW-to-sequence transpose as `transpose` + a contiguous copy, normalisation by
broadcasting). Prints `name<TAB>best ms` per op, names as `bench_image` prints them; best of
`--reps` runs after a warm-up. numpy runs these single-threaded.

Needs numpy (pip install numpy==2.4.6).
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
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    n, c, h, w = a.dims
    x = np.random.default_rng(0).standard_normal((n, c, h, w), dtype=np.float32)
    mean = np.full((1, c, 1, 1), 0.5, np.float32)
    ops = {
        "upsample_nearest_2x": lambda: x.repeat(2, axis=2).repeat(2, axis=3),
        "max_pool2d 2x2 s2 (+ I32 indices)": lambda: x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5)),
        "downsample_avg_2x": lambda: x.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5)),
        "pad2d zero 1 px": lambda: np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
        "pad2d replicate 1 px": lambda: np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge"),
        "pad2d reflect 1 px": lambda: np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect"),
        "pixel_shuffle(2)": lambda: np.ascontiguousarray(
            x.reshape(n, c // 4, 2, 2, h, w).transpose(0, 1, 4, 2, 5, 3)),
        "nchw_to_sequence": lambda: np.ascontiguousarray(x.reshape(n, c, h * w).transpose(0, 2, 1)),
        "image_normalize": lambda: (x - mean) / mean,
    }
    for name, f in ops.items():
        print(f"{name}\t{best_ms(f, a.reps):.3f}", flush=True)


if __name__ == "__main__":
    main()
