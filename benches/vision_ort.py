#!/usr/bin/env python3
"""ONNX Runtime's speed on the image models of issue 31, the peer of brotensor's bench_vision:
one workload per call, one warm-up run, then the best of --reps timed runs. Prints one JSON line:
the seconds of the best run and the peak RSS of the process (ru_maxrss, MiB).

    python3 benches/vision_ort.py WORKLOAD [--threads 2] [--reps 5]

Workloads (inputs are fixed-seed normals; the speed does not depend on their values):
- dcgan:    the DCGAN generator on a batch of 64 latent vectors, on the ONNX graph that
            tests/fixtures/models/make_dcgan.py builds from $BROTENSOR_MODELS/dcgan/generator.safetensors;
- terrain:  one evaluation of the terrain UNet at 1x1x128x128 (sigma 80, difficulty 0.5), on the
            package's graph $BROTENSOR_MODELS/terrain/terrain_unet.onnx;
- ocr-det:  the PP-OCRv4 detector on 1x3x640x640 ($BROTENSOR_MODELS/ppocr/det.onnx);
- ocr-rec:  the PP-OCRv4 recognizer on 1x3x48x320 ($BROTENSOR_MODELS/ppocr/rec.onnx).
BROTENSOR_MODELS defaults to ~/.cache/brotensor/models. Needs onnxruntime==1.32.0, onnx==1.23.2
(for dcgan) and numpy.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODELS = os.environ.get("BROTENSOR_MODELS") or os.path.expanduser("~/.cache/brotensor/models")


def options(threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return opts


def workload(name, threads):
    """(session, feed) of a workload."""
    rng = np.random.default_rng(0)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    if name == "dcgan":
        sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "models"))
        import make_dcgan

        weights = make_dcgan.read_safetensors(os.path.join(MODELS, "dcgan", "generator.safetensors"))
        model = make_dcgan.build_graph(weights).SerializeToString()
        return ort.InferenceSession(model, options(threads)), {"z": normal(64, 100, 1, 1)}
    paths = {
        "terrain": ("terrain", "terrain_unet.onnx"),
        "ocr-det": ("ppocr", "det.onnx"),
        "ocr-rec": ("ppocr", "rec.onnx"),
    }
    if name not in paths:
        sys.exit(f"unknown workload {name!r}")
    sess = ort.InferenceSession(os.path.join(MODELS, *paths[name]), options(threads))
    inputs = sess.get_inputs()
    if name == "terrain":
        feed = {inputs[0].name: 80.0 * normal(1, 1, 128, 128),
                inputs[1].name: np.array([80.0], np.float32),
                inputs[2].name: np.array([0.5], np.float32)}
    elif name == "ocr-det":
        feed = {inputs[0].name: normal(1, 3, 640, 640)}
    else:
        feed = {inputs[0].name: normal(1, 3, 48, 320)}
    return sess, feed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workload")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    sess, feed = workload(a.workload, a.threads)
    sess.run(None, feed)
    best = float("inf")
    for _ in range(a.reps):
        t = time.perf_counter()
        sess.run(None, feed)
        best = min(best, time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"workload": a.workload, "threads": a.threads, "seconds": best,
                      "peak_rss_mib": rss}))


if __name__ == "__main__":
    main()
