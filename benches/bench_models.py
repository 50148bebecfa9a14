#!/usr/bin/env python3
"""The real models against their peers, in one run, round by round (issue 16).

SmolLM2-135M-Instruct Q4_1 on the CPU: prefill of 5 and 128 tokens and 64 greedy decode
steps, tokens/s, for brotensor, candle-transformers' quantized_llama (both from
`bench_models`, built with `--features candle`) and llama.cpp (llama-cpp-python, in this
process). MiniLM sentences/s at batch 1 and 32 for brotensor and candle-transformers' bert.
Contenders alternate within each round (this machine's memory bandwidth drifts); the table
gives each one's best round and the ratios. brotensor runs once per CPU vector tier this
machine has (BROTENSOR_CPU_TIER caps it: scalar, then avx2, then avx512), or only the tiers
`--tiers` names; the tables name the CPU.

    python3 benches/bench_models.py [--rounds 3] [--threads 2] [--no-llama] [--tiers avx2,scalar]

llama-cpp-python 0.3.36 is built from source by pip (about 15 minutes on 2 cores) into
$BROTENSOR_LLAMA_VENV (default /tmp/brotensor-llama-venv) the first time; this script
re-executes itself with that venv's python.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "bench_models")
VENV = os.environ.get("BROTENSOR_LLAMA_VENV", "/tmp/brotensor-llama-venv")
MODELS = os.environ.get("BROTENSOR_MODELS", os.path.expanduser("~/.cache/brotensor/models"))
GGUF = os.path.join(MODELS, "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
DECODE = 64


def ensure_venv():
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    ok = subprocess.call([py, "-c", "import llama_cpp, numpy"], stderr=subprocess.DEVNULL) == 0
    if not ok:
        print("bench_models: building llama-cpp-python 0.3.36 (about 15 minutes)", flush=True)
        subprocess.check_call([py, "-m", "pip", "install", "-q", "llama-cpp-python==0.3.36", "numpy==2.4.6"])
    return py


def ensure_protoc():
    """candle-onnx, one of the candle bench dependencies, runs `protoc` when it builds:
    installed here when root with apt-get (Debian's protobuf-compiler), else a clear stop."""
    if os.environ.get("PROTOC") or shutil.which("protoc"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench_models: installing protobuf-compiler (candle-onnx builds with protoc)", flush=True)
        subprocess.check_call(["apt-get", "update", "-qq"])
        subprocess.check_call(["apt-get", "install", "-y", "-qq", "protobuf-compiler"],
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        return
    sys.exit("bench_models: the candle bench build needs protoc: install protobuf-compiler "
             "or set PROTOC to a protoc binary")


def run_bin(*args, tier=None):
    env = dict(os.environ)
    env.pop("BROTENSOR_CPU_TIER", None)
    if tier:
        env["BROTENSOR_CPU_TIER"] = tier
    out = subprocess.run([BIN, *args], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine_tiers():
    """The CPU tiers this machine runs, narrowest first (x86-64: scalar, avx2, avx512)."""
    widest = run_bin("tier")["tier"]
    order = ["scalar", "avx2", "avx512"] if widest != "neon" else ["scalar", "neon"]
    return order[: order.index(widest) + 1] if widest in order else [widest]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = next(l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name"))
        flags = next(l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags"))
        fam = next(l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("cpu family"))
        model = next(l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model\t"))
        ext = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16") if f in flags]
        return f"{name} (family {fam} model {model}; {', '.join(ext)}), {os.cpu_count()} threads"
    except (OSError, StopIteration):
        return "unknown CPU"


def llama_smollm2(short, long, threads):
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=GGUF, n_ctx=512, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    assert llm.tokenize(b"The capital of France is", add_bos=False, special=False) == short, \
        "llama.cpp tokenizes the prompt differently"

    n_vocab = llm.n_vocab()

    def last_logits():
        # llama-cpp-python 0.3.36 keeps `scores` only with logits_all; read the context's.
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))

    def prefill(ids):
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        return time.perf_counter() - t

    prefill(short)
    p5 = min(prefill(short) for _ in range(5))
    p128 = min(prefill(long) for _ in range(3))
    best, tokens = float("inf"), []
    for _ in range(3):
        llm.reset()
        llm.eval(short)
        out = []
        t = time.perf_counter()
        for _ in range(DECODE):
            tok = int(np.argmax(last_logits()))
            out.append(tok)
            llm.eval([tok])
        best = min(best, time.perf_counter() - t)
        tokens = out
    return {"impl": "llama.cpp", "prefill5": len(short) / p5, "prefill128": 128 / p128,
            "decode": DECODE / best, "tokens": tokens}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--tiers", default="", help="comma-separated CPU tiers (default: every tier this machine has)")
    args = ap.parse_args()
    if not args.no_llama and os.environ.get("BROTENSOR_IN_VENV") != "1":
        py = ensure_venv()
        os.environ["BROTENSOR_IN_VENV"] = "1"
        os.execv(py, [py, *sys.argv])
    ensure_protoc()
    subprocess.check_call(["cargo", "build", "--release", "-q", "-p", "brotensor-benches",
                           "--features", "candle", "--bin", "bench_models"], cwd=ROOT)
    tiers = [t for t in args.tiers.split(",") if t] or machine_tiers()
    best = {}

    def keep(key, res, fields):
        b = best.setdefault(key, {"tokens": res.get("tokens")})
        for f in fields:
            b[f] = max(b.get(f, 0.0), res[f])

    ours_names = [f"brotensor {t}" for t in tiers]
    for r in range(args.rounds):
        for t in tiers:
            ours = run_bin("smollm2", "brotensor", tier=t)
            keep(f"brotensor {t}", ours, ["prefill5", "prefill128", "decode"])
        keep("candle", run_bin("smollm2", "candle"), ["prefill5", "prefill128", "decode"])
        if not args.no_llama:
            keep("llama.cpp", llama_smollm2(ours["short_ids"], ours["long_ids"], args.threads),
                 ["prefill5", "prefill128", "decode"])
        for t in tiers:
            keep(f"minilm brotensor {t}", run_bin("minilm", "brotensor", tier=t), ["batch1", "batch32"])
        keep("minilm candle", run_bin("minilm", "candle"), ["batch1", "batch32"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    print(f"CPU: {cpu_name()}")
    print()
    print("| SmolLM2-135M Q4_1, CPU | prefill 5 tok/s | prefill 128 tok/s | decode tok/s | same 64 greedy tokens as brotensor |")
    print("|---|---|---|---|---|")
    ref = best[ours_names[-1]]["tokens"]
    for name in (*ours_names, "llama.cpp", "candle"):
        if name in best:
            b = best[name]
            same = "yes" if b["tokens"] == ref else f"first {next((i for i, (a, c) in enumerate(zip(b['tokens'], ref)) if a != c), len(ref))}"
            print(f"| {name} | {b['prefill5']:.1f} | {b['prefill128']:.1f} | {b['decode']:.1f} | {same} |")
    for mine in ours_names:
        ours = best[mine]
        for name in ("llama.cpp", "candle"):
            if name in best:
                b = best[name]
                print(f"| {mine} / {name} | {ours['prefill5'] / b['prefill5']:.2f}x | "
                      f"{ours['prefill128'] / b['prefill128']:.2f}x | {ours['decode'] / b['decode']:.2f}x | |")
    print()
    print("| MiniLM-L6, CPU | batch 1 sentences/s | batch 32 sentences/s |")
    print("|---|---|---|")
    for name in (*(f"minilm {n}" for n in ours_names), "minilm candle"):
        b = best[name]
        print(f"| {name.split(' ', 1)[1]} | {b['batch1']:.1f} | {b['batch32']:.1f} |")
    c = best["minilm candle"]
    for mine in ours_names:
        a = best[f"minilm {mine}"]
        print(f"| {mine} / candle | {a['batch1'] / c['batch1']:.2f}x | {a['batch32'] / c['batch32']:.2f}x |")


if __name__ == "__main__":
    main()
