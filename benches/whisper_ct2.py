#!/usr/bin/env python3
"""faster-whisper on CTranslate2 (CPU, compute_type float32), the peer of brotensor's Whisper
tiny.en: the real-time factor of a 30 s clip, mel + encode + greedy decode (beam 1,
temperature 0, no VAD, timestamps on), best of `--reps` runs after a warm-up. The clip is
tests/fixtures/audio/speech.wav followed by its own start, cut to exactly 480000 samples.
Prints one JSON line: seconds, rtf (seconds / 30), windows decoded, text, peak RSS in MiB.

Usage: whisper_ct2.py [--threads 2] [--reps 3] [--model DIR]
  (needs ctranslate2==4.8.5 faster-whisper==1.2.1 numpy; DIR defaults to
  ${BROTENSOR_MODELS:-~/.cache/brotensor/models}/whisper/ct2, see
  tests/fixtures/models/make_whisper.py)
"""
import argparse
import json
import os
import resource
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
WAV = os.path.join(HERE, "..", "tests", "fixtures", "audio", "speech.wav")
SECONDS, RATE = 30, 16000


def clip():
    with wave.open(WAV) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    return np.concatenate([x, x])[: SECONDS * RATE]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    models = os.environ.get("BROTENSOR_MODELS", os.path.expanduser("~/.cache/brotensor/models"))
    ap.add_argument("--model", default=os.path.join(models, "whisper", "ct2"))
    args = ap.parse_args()

    from faster_whisper import WhisperModel

    model = WhisperModel(args.model, device="cpu", compute_type="float32", cpu_threads=args.threads)
    audio = clip()

    def run():
        segs, _ = model.transcribe(audio, beam_size=1, temperature=0.0, vad_filter=False,
                                   word_timestamps=False)
        return list(segs)

    segs = run()  # warm-up
    best = float("inf")
    for _ in range(args.reps):
        t0 = time.perf_counter()
        segs = run()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({
        "bench": "faster-whisper tiny.en ct2 float32 cpu",
        "threads": args.threads,
        "seconds": round(best, 4),
        "rtf": round(best / SECONDS, 5),
        "windows": len({s.seek for s in segs}),
        "text": "".join(s.text for s in segs),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
