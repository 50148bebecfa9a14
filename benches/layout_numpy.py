"""numpy contenders for `bench_layout`, driven over stdin/stdout by the Rust binary.

The binary starts this script once, so numpy's batches alternate with the Rust ones round
by round in one run. Protocol, one line each way:
  startup            -> "ready <numpy version>"
  "<case> <reps>"    -> seconds per call of that case, the mean of one batch of `reps` calls
  "quit" (or EOF)    -> exit
Cases mirror the Rust contenders (same shapes, F32): t2d / t2d_out (4096 x 4096 transpose,
allocating / into a reused array), p4d / p4d_out ((32, 128, 32, 128) permuted (0, 2, 1, 3)),
add_dense / add_row / add_col (4096 x 4096 plus a dense matrix / a (4096,) row / a
(4096, 1) column, into a reused output), sum0 / sum1 (`np.sum` over axis 0 / 1 into a reused
output), take (`np.take` of all 4096 rows in a shuffled order, into a reused output), concat
(`np.concatenate` of four 1024 x 4096 blocks along axis 0, into a reused output).

numpy 2.4.6 from PyPI (`pip install numpy==2.4.6`); its copies run on one thread.
"""

import sys
import time

import numpy as np

N = 4096
P4 = (32, 128, 32, 128)


def main():
    x = (np.arange(N * N, dtype=np.float32) % 1000) * np.float32(1e-3)
    x = x.reshape(N, N)
    y = x[::-1].copy()
    x4 = x.reshape(P4)
    row = x[0].copy()
    col = x[:, :1].copy()
    out2 = np.empty((N, N), dtype=np.float32)
    out4 = np.empty((P4[0], P4[2], P4[1], P4[3]), dtype=np.float32)
    out_sum0 = np.empty((N,), dtype=np.float32)
    out_sum1 = np.empty((N,), dtype=np.float32)
    # The same shuffle as the Rust side: row r goes to position (r * 1031) % N.
    order = (np.arange(N, dtype=np.int64) * 1031) % N
    blocks = [x[i * (N // 4):(i + 1) * (N // 4)].copy() for i in range(4)]
    cases = {
        "t2d": lambda: np.ascontiguousarray(x.T),
        "t2d_out": lambda: np.copyto(out2, x.T),
        "p4d": lambda: np.ascontiguousarray(x4.transpose(0, 2, 1, 3)),
        "p4d_out": lambda: np.copyto(out4, x4.transpose(0, 2, 1, 3)),
        "add_dense": lambda: np.add(x, y, out=out2),
        "add_row": lambda: np.add(x, row, out=out2),
        "add_col": lambda: np.add(x, col, out=out2),
        "sum0": lambda: np.sum(x, axis=0, out=out_sum0),
        "sum1": lambda: np.sum(x, axis=1, out=out_sum1),
        "take": lambda: np.take(x, order, axis=0, out=out2),
        "concat": lambda: np.concatenate(blocks, axis=0, out=out2),
    }
    # The results must be what they claim: spot-check each case once.
    assert np.array_equal(cases["t2d"](), x.T)
    cases["p4d_out"]()
    assert np.array_equal(out4[1, 2, 3], x4[1, 3, 2])
    cases["take"]()
    assert np.array_equal(out2[5], x[order[5]])
    cases["concat"]()
    assert np.array_equal(out2, x)
    print("ready", np.__version__, flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        f, reps = cases[words[0]], int(words[1])
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        print(repr((time.perf_counter() - t0) / reps), flush=True)


if __name__ == "__main__":
    main()
