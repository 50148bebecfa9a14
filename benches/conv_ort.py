#!/usr/bin/env python3
"""ONNX Runtime's time for one convolution, the peer of `bench_conv`: a one-node Conv or
ConvTranspose graph built with the `onnx` package, run by onnxruntime on the CPU with
`--threads` intra-op threads; prints the best milliseconds per run of `--reps` runs after a
warm-up. The shape: `kind n c_in h w c_out k stride pad groups` (kind `conv` or `convt`).

Needs onnx, onnxruntime and numpy (pip install onnxruntime==1.32.0 onnx numpy).
"""
import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def model(kind, n, c_in, h, w, c_out, k, stride, pad, groups):
    if kind == "conv":
        wshape = [c_out, c_in // groups, k, k]
        op = "Conv"
    else:
        wshape = [c_in, c_out // groups, k, k]
        op = "ConvTranspose"
    node = helper.make_node(
        op, ["x", "w"], ["y"], kernel_shape=[k, k], strides=[stride, stride],
        pads=[pad] * 4, group=groups)
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c_in, h, w]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, wshape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return m.SerializeToString(), wshape


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["conv", "convt"])
    p.add_argument("dims", type=int, nargs=9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    n, c_in, h, w, c_out, k, stride, pad, groups = a.dims
    data, wshape = model(a.kind, n, c_in, h, w, c_out, k, stride, pad, groups)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = a.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.uniform(-1, 1, (n, c_in, h, w)).astype(np.float32),
        "w": rng.uniform(-1, 1, wshape).astype(np.float32),
    }
    sess.run(None, feeds)
    best = float("inf")
    for _ in range(a.reps):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        best = min(best, time.perf_counter() - t0)
    print(f"{best * 1e3:.4f}")


if __name__ == "__main__":
    main()
