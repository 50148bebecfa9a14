#!/usr/bin/env python3
"""numpy's and scipy's times for the spectral transforms, the peers of `bench_fft`: fft and
rfft of 4 Mi values as rows of each length (numpy.fft single-threaded, scipy.fft with
workers=2), and the STFT of 8 signals of 480000 samples (n_fft 400, hop 160, periodic Hann,
centred as torch.stft) by scipy.signal.ShortTimeFFT. Prints `name<TAB>best ms`, names as
`bench_fft` prints them; best of `--reps` runs after a warm-up.

Usage: fft_scipy.py TOTAL LEN [LEN ...]   (needs numpy==2.4.6 scipy==1.16.3)
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
    ap.add_argument("total", type=int)
    ap.add_argument("lens", type=int, nargs="+")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import scipy.fft
    import scipy.signal

    rng = np.random.default_rng(0)
    for n in a.lens:
        rows = a.total // n
        z = (rng.uniform(-1, 1, (rows, n)) + 1j * rng.uniform(-1, 1, (rows, n))).astype(np.complex64)
        x = rng.uniform(-1, 1, (rows, n)).astype(np.float32)
        print(f"numpy fft {n}\t{best_ms(lambda: np.fft.fft(z, axis=-1), a.reps):.3f}")
        print(f"scipy fft {n}\t{best_ms(lambda: scipy.fft.fft(z, axis=-1, workers=2), a.reps):.3f}")
        print(f"numpy rfft {n}\t{best_ms(lambda: np.fft.rfft(x, axis=-1), a.reps):.3f}")
        print(f"scipy rfft {n}\t{best_ms(lambda: scipy.fft.rfft(x, axis=-1, workers=2), a.reps):.3f}")
    sig = rng.uniform(-1, 1, (8, 480000)).astype(np.float32)
    win = scipy.signal.get_window("hann", 400, fftbins=True)
    stf = scipy.signal.ShortTimeFFT(win, hop=160, fs=1.0, fft_mode="onesided")
    print(f"scipy stft\t{best_ms(lambda: stf.stft(sig, axis=-1), a.reps):.3f}")


if __name__ == "__main__":
    main()
