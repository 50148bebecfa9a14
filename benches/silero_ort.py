#!/usr/bin/env python3
"""ONNX Runtime's speed on Silero VAD v6 (16 kHz), the peer of brotensor's silero bench: 60 s of
tests/fixtures/audio/speech.wav (repeated, then cut to exactly 960000 samples) streamed the way
silero does it, 1875 chunks of 512 samples each with the 64 samples before it (576 inputs) and
the LSTM state carried from chunk to chunk. One warm-up pass, then the best of 5 timed passes.
Prints one JSON line: chunks per second, real-time factor, milliseconds per pass, and the peak
RSS of the process (ru_maxrss, MiB).

    python3 benches/silero_ort.py [--threads 1|2] [--model PATH]

PATH defaults to $BROTENSOR_MODELS/silero/silero_vad_16k_op15.onnx (BROTENSOR_MODELS defaults
to ~/.cache/brotensor/models). Needs onnxruntime and numpy (onnxruntime==1.32.0, numpy==2.4.6).
"""
import argparse
import json
import os
import resource
import time
import wave

import numpy as np
import onnxruntime as ort

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RATE, CHUNK, CONTEXT, SECONDS = 16000, 512, 64, 60


def signal():
    """speech.wav as float32 (int16 / 32768), tiled and cut to exactly 60 s."""
    with wave.open(os.path.join(ROOT, "tests", "fixtures", "audio", "speech.wav")) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    n = RATE * SECONDS
    return (np.resize(pcm, n).astype(np.float32) / 32768.0).astype(np.float32)


def inputs(audio):
    """The (1, 576) model inputs: 64 samples of context (zeros at first), then the chunk."""
    padded = np.concatenate([np.zeros(CONTEXT, dtype=np.float32), audio])
    return [np.ascontiguousarray(padded[None, i: i + CONTEXT + CHUNK])
            for i in range(0, len(audio), CHUNK)]


def one_pass(sess, xs):
    state = np.zeros((2, 1, 128), dtype=np.float32)
    sr = np.array(RATE, dtype=np.int64)
    for x in xs:
        _, state = sess.run(None, {"input": x, "state": state, "sr": sr})


def main():
    base = os.environ.get("BROTENSOR_MODELS") or os.path.expanduser("~/.cache/brotensor/models")
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default=os.path.join(base, "silero", "silero_vad_16k_op15.onnx"))
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = a.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, opts, providers=["CPUExecutionProvider"])
    xs = inputs(signal())  # 960000 / 512 = 1875 chunks, no padding needed

    one_pass(sess, xs)  # warm-up
    best = float("inf")
    for _ in range(a.reps):
        t0 = time.perf_counter()
        one_pass(sess, xs)
        best = min(best, time.perf_counter() - t0)

    print(json.dumps({
        "bench": "silero_ort", "onnxruntime": ort.__version__, "threads": a.threads,
        "chunks": len(xs), "best_ms": round(best * 1e3, 2),
        "chunks_per_s": round(len(xs) / best, 1), "realtime_x": round(SECONDS / best, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
