#!/usr/bin/env python3
"""Float64 numpy reference for the digits training example (a small CNN trained with Adam).

Usage:
    python3 scripts/digits_reference.py PATH/TO/digits.csv [--epochs N] [--check-grad] [--lr LR]
                                        [--split-seed S] [--no-fixture]

digits.csv is scikit-learn's bundled 8x8 digits, as scripts/fetch-models.sh leaves it in
${BROTENSOR_MODELS:-~/.cache/brotensor/models}/digits/digits.csv: 1797 rows of 64 pixels (0..16,
the 8x8 image row by row) and a label (0..9).

Written from the math (no torch): forward, hand-written backward and Adam, all in float64, so the
Rust example can be checked against it. Without options it writes
tests/fixtures/digits/first_steps.json (the init checksums, the losses of steps 1..20 and the test
accuracy after them). --epochs N also trains N full epochs from the same init and data order and
prints the test accuracy after each. --check-grad compares the backward pass with central
differences on random parameter entries.

The exact spec, which the Rust side implements identically:
  data     x = pixels / 16 (float32, then float64), shape (N, 1, 8, 8). The 1797 rows are first
           reordered by a Fisher-Yates shuffle with a splitmix64 state of 123 (--split-seed): for
           i = 1796 down to 1: j = next() % (i + 1), swap rows i and j; then train = rows
           0..1500, test = rows 1500..1797. (The file's last rows come from other writers: an
           unshuffled split caps the test accuracy near 95%.)
  rng      splitmix64 on uint64 with wrap-around arithmetic.
  init     one rng, state 42, consumed by conv1.w (16,1,3,3), conv2.w (32,16,3,3), fc.w (10,128),
           each in row-major order. Xavier uniform: fan_out = d0, fan_in = numel / d0,
           a = sqrt(6 / (fan_in + fan_out)); per element f01 = (next() >> 40) / 2^24,
           value = float32(a * (2 f01 - 1)). Biases zero.
  batches  a second rng, state 7, kept across epochs. Each epoch: perm = 0..1500, Fisher-Yates
           for i = 1499 down to 1: j = next() % (i + 1), swap perm[i], perm[j]; batches are
           perm[k*64:(k+1)*64] for k = 0..22 (the last 28 are dropped). Steps are numbered
           globally from 1.
  network  conv1 16x1x3x3 pad 1 + b -> ReLU -> maxpool 2x2/2 -> (B,16,4,4) ->
           conv2 32x16x3x3 pad 1 + b -> ReLU -> maxpool 2x2/2 -> (B,32,2,2) -> flatten (C,H,W)
           -> (B,128) -> logits = h W^T + b, W (10,128). Loss = mean cross-entropy (stable
           log-softmax). ReLU'(0) = 0; max pool sends the gradient to the first maximum of each
           window in row-major window order.
  adam     on all six parameters, lr 3e-3, b1 0.9, b2 0.999, eps 1e-8, t 1-based:
           m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
           p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

MASK = (1 << 64) - 1
N_TRAIN = 1500
BATCH = 64
STEPS_PER_EPOCH = N_TRAIN // BATCH  # 23
INIT_SEED = 42
DATA_SEED = 7
LR = 3e-3
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
FIXTURE_STEPS = 20
PARAM_NAMES = ["conv1.w", "conv1.b", "conv2.w", "conv2.b", "fc.w", "fc.b"]
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                       "digits", "first_steps.json")


class SplitMix64:
    def __init__(self, state):
        self.state = state & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def load_digits(path):
    raw = np.loadtxt(path, delimiter=",", dtype=np.int64)
    if raw.shape != (1797, 65):
        sys.exit(f"{path}: shape {raw.shape}, expected (1797, 65)")
    x = (raw[:, :64].astype(np.float32) / np.float32(16)).astype(np.float64).reshape(-1, 1, 8, 8)
    y = raw[:, 64].astype(np.int64)
    return x, y


def xavier(rng, shape):
    numel = int(np.prod(shape))
    fan_out = shape[0]
    fan_in = numel // fan_out
    a = np.sqrt(6.0 / (fan_in + fan_out))
    vals = np.empty(numel, dtype=np.float32)
    for i in range(numel):
        f01 = (rng.next() >> 40) / float(1 << 24)
        vals[i] = np.float32(a * (2.0 * f01 - 1.0))
    return vals.astype(np.float64).reshape(shape)


def init_params():
    rng = SplitMix64(INIT_SEED)
    p = {}
    p["conv1.w"] = xavier(rng, (16, 1, 3, 3))
    p["conv2.w"] = xavier(rng, (32, 16, 3, 3))
    p["fc.w"] = xavier(rng, (10, 128))
    p["conv1.b"] = np.zeros(16)
    p["conv2.b"] = np.zeros(32)
    p["fc.b"] = np.zeros(10)
    return p


def epoch_batches(rng):
    perm = list(range(N_TRAIN))
    for i in range(N_TRAIN - 1, 0, -1):
        j = rng.next() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return [np.array(perm[k * BATCH:(k + 1) * BATCH]) for k in range(STEPS_PER_EPOCH)]


# ---- layers (3x3, stride 1, padding 1 convolution via im2col) ----

def im2col(x):
    b, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((b, c, 3, 3, h, w))
    for ky in range(3):
        for kx in range(3):
            cols[:, :, ky, kx] = xp[:, :, ky:ky + h, kx:kx + w]
    return cols.reshape(b, c * 9, h * w)


def col2im(dcols, shape):
    b, c, h, w = shape
    dcols = dcols.reshape(b, c, 3, 3, h, w)
    dxp = np.zeros((b, c, h + 2, w + 2))
    for ky in range(3):
        for kx in range(3):
            dxp[:, :, ky:ky + h, kx:kx + w] += dcols[:, :, ky, kx]
    return dxp[:, :, 1:h + 1, 1:w + 1]


def conv_fwd(x, w, bias):
    b, _, h, wd = x.shape
    o = w.shape[0]
    cols = im2col(x)
    out = np.einsum("ok,bkp->bop", w.reshape(o, -1), cols) + bias[None, :, None]
    return out.reshape(b, o, h, wd), cols


def conv_bwd(dout, x_shape, cols, w):
    b, o, h, wd = dout.shape
    d = dout.reshape(b, o, h * wd)
    dw = np.einsum("bop,bkp->ok", d, cols).reshape(w.shape)
    db = d.sum(axis=(0, 2))
    dcols = np.einsum("ok,bop->bkp", w.reshape(o, -1), d)
    return col2im(dcols, x_shape), dw, db


def pool_fwd(x):
    b, c, h, w = x.shape
    win = x.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        b, c, h // 2, w // 2, 4)
    idx = np.argmax(win, axis=-1)  # first maximum in (dy, dx) row-major order
    return np.take_along_axis(win, idx[..., None], axis=-1)[..., 0], idx


def pool_bwd(dout, idx, x_shape):
    b, c, h, w = x_shape
    dwin = np.zeros((b, c, h // 2, w // 2, 4))
    np.put_along_axis(dwin, idx[..., None], dout[..., None], axis=-1)
    return dwin.reshape(b, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(x_shape)


def forward(p, x):
    z1, cols1 = conv_fwd(x, p["conv1.w"], p["conv1.b"])
    a1 = np.maximum(z1, 0.0)
    h1, idx1 = pool_fwd(a1)
    z2, cols2 = conv_fwd(h1, p["conv2.w"], p["conv2.b"])
    a2 = np.maximum(z2, 0.0)
    h2, idx2 = pool_fwd(a2)
    flat = h2.reshape(x.shape[0], -1)
    logits = flat @ p["fc.w"].T + p["fc.b"]
    cache = (x, z1, cols1, a1, idx1, h1, z2, cols2, a2, idx2, h2, flat)
    return logits, cache


def log_softmax(logits):
    m = logits.max(axis=1, keepdims=True)
    s = logits - m
    return s - np.log(np.exp(s).sum(axis=1, keepdims=True))


def loss_and_grads(p, x, y):
    logits, cache = forward(p, x)
    x, z1, cols1, a1, idx1, h1, z2, cols2, a2, idx2, h2, flat = cache
    b = x.shape[0]
    lsm = log_softmax(logits)
    loss = -lsm[np.arange(b), y].mean()
    dlogits = np.exp(lsm)
    dlogits[np.arange(b), y] -= 1.0
    dlogits /= b
    g = {}
    g["fc.w"] = dlogits.T @ flat
    g["fc.b"] = dlogits.sum(axis=0)
    dh2 = (dlogits @ p["fc.w"]).reshape(h2.shape)
    da2 = pool_bwd(dh2, idx2, a2.shape)
    dz2 = da2 * (z2 > 0)
    dh1, g["conv2.w"], g["conv2.b"] = conv_bwd(dz2, h1.shape, cols2, p["conv2.w"])
    da1 = pool_bwd(dh1, idx1, a1.shape)
    dz1 = da1 * (z1 > 0)
    _, g["conv1.w"], g["conv1.b"] = conv_bwd(dz1, x.shape, cols1, p["conv1.w"])
    return loss, g


def loss_only(p, x, y):
    logits, _ = forward(p, x)
    return -log_softmax(logits)[np.arange(x.shape[0]), y].mean()


class Adam:
    def __init__(self, params, lr):
        self.lr = lr
        self.t = 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params, grads):
        self.t += 1
        c1 = 1.0 - BETA1 ** self.t
        c2 = 1.0 - BETA2 ** self.t
        for k in PARAM_NAMES:
            g = grads[k]
            self.m[k] = BETA1 * self.m[k] + (1.0 - BETA1) * g
            self.v[k] = BETA2 * self.v[k] + (1.0 - BETA2) * g * g
            params[k] -= self.lr * (self.m[k] / c1) / (np.sqrt(self.v[k] / c2) + EPS)


def accuracy(p, x, y):
    logits, _ = forward(p, x)
    return float((np.argmax(logits, axis=1) == y).mean())


def check_grad(x, y, lr):
    # Checks at the init (weights only) and after 5 Adam steps (all parameters). At the init
    # every bias is 0, so each all-zero input patch (the digits' background) gives a
    # pre-activation of exactly 0, on the ReLU's kink: there a bias's loss is not
    # differentiable (central differences average the two one-sided slopes, the backward pass
    # uses ReLU'(0) = 0), so the biases are only checked once the first steps moved them.
    p = init_params()
    opt = Adam(p, lr)
    data_rng = SplitMix64(DATA_SEED)
    batches = epoch_batches(data_rng)
    rs = np.random.default_rng(0)
    # h = 1e-6: larger steps start crossing ReLU / max-pool kinks (many pre-activations sit
    # near 0); the rounding noise of a float64 central difference is then about 1e-10 absolute,
    # so only entries whose gradient is at least 1e-3 are sampled (relative error ~1e-7 there).
    h = 1e-6
    worst = 0.0
    for stage in range(2):
        if stage == 1:
            for k in range(5):
                _, g = loss_and_grads(p, x[batches[k]], y[batches[k]])
                opt.step(p, g)
        xb, yb = x[batches[5]], y[batches[5]]
        _, g = loss_and_grads(p, xb, yb)
        for name in PARAM_NAMES:
            if stage == 0 and name.endswith(".b"):
                continue
            flat_p = p[name].reshape(-1)
            flat_g = g[name].reshape(-1)
            nz = np.flatnonzero(np.abs(flat_g) >= 1e-3)
            pool = nz if len(nz) >= 6 else np.arange(flat_p.size)
            for i in rs.choice(pool, size=min(6, len(pool)), replace=False):
                old = flat_p[i]
                flat_p[i] = old + h
                lp = loss_only(p, xb, yb)
                flat_p[i] = old - h
                lm = loss_only(p, xb, yb)
                flat_p[i] = old
                num = (lp - lm) / (2 * h)
                ana = flat_g[i]
                rel = abs(num - ana) / max(abs(num), abs(ana), 1e-12)
                worst = max(worst, rel)
                print(f"  stage {stage} {name:8s}[{i:4d}] analytic {ana:+.10e} "
                      f"numeric {num:+.10e} rel {rel:.2e}")
    print(f"max relative error: {worst:.2e}")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--check-grad", action="store_true")
    ap.add_argument("--split-seed", type=int, default=123,
                    help="shuffle the 1797 rows (splitmix64 Fisher-Yates) before splitting")
    ap.add_argument("--no-fixture", action="store_true",
                    help="do not write tests/fixtures/digits/first_steps.json")
    args = ap.parse_args()

    x, y = load_digits(args.csv)
    if args.split_seed is not None:
        rng = SplitMix64(args.split_seed)
        order = list(range(len(y)))
        for i in range(len(y) - 1, 0, -1):
            j = rng.next() % (i + 1)
            order[i], order[j] = order[j], order[i]
        x, y = x[order], y[order]
    xtr, ytr = x[:N_TRAIN], y[:N_TRAIN]
    xte, yte = x[N_TRAIN:], y[N_TRAIN:]

    if args.check_grad:
        worst = check_grad(xtr, ytr, args.lr)
        if worst > 1e-6:
            sys.exit("gradient check FAILED")

    if not args.no_fixture:
        p = init_params()
        init_sums = {k: float(p[k].sum()) for k in ("conv1.w", "conv2.w", "fc.w")}
        init_first = {k: [float(v) for v in p[k].reshape(-1)[:4]]
                      for k in ("conv1.w", "conv2.w", "fc.w")}
        opt = Adam(p, args.lr)
        data_rng = SplitMix64(DATA_SEED)
        losses = []
        batches = []
        while len(losses) < FIXTURE_STEPS:
            if not batches:
                batches = epoch_batches(data_rng)
            idx = batches.pop(0)
            loss, g = loss_and_grads(p, xtr[idx], ytr[idx])
            losses.append(float(loss))
            opt.step(p, g)
        acc = accuracy(p, xte, yte)
        fixture = {
            "description": "Digits CNN (conv16-relu-pool-conv32-relu-pool-fc10) trained with "
                           "Adam in float64: init checksums, the mean cross-entropy of steps "
                           "1..20 (each on its batch before that step's update) and the test "
                           "accuracy (rows 1500..1797) after step 20. See the script for the "
                           "exact spec.",
            "script": "scripts/digits_reference.py",
            "lr": args.lr,
            "beta1": BETA1,
            "beta2": BETA2,
            "eps": EPS,
            "batch": BATCH,
            "init_seed": INIT_SEED,
            "data_seed": DATA_SEED,
            "split_seed": args.split_seed,
            "init_sums": init_sums,
            "init_first": init_first,
            "losses": losses,
            "test_accuracy_after_20_steps": acc,
        }
        os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
        with open(FIXTURE, "w") as f:
            json.dump(fixture, f, indent=2)
            f.write("\n")
        print(f"wrote {os.path.normpath(FIXTURE)}")
        print(f"losses[0..3] = {losses[:3]}; test accuracy after {FIXTURE_STEPS} steps = {acc:.4f}")

    if args.epochs:
        p = init_params()
        opt = Adam(p, args.lr)
        data_rng = SplitMix64(DATA_SEED)
        for epoch in range(1, args.epochs + 1):
            t0 = time.perf_counter()
            total = 0.0
            for idx in epoch_batches(data_rng):
                loss, g = loss_and_grads(p, xtr[idx], ytr[idx])
                total += loss
                opt.step(p, g)
            dt = time.perf_counter() - t0
            acc = accuracy(p, xte, yte)
            print(f"epoch {epoch:2d}  mean train loss {total / STEPS_PER_EPOCH:.4f}  "
                  f"test accuracy {acc:.4f} ({int(round(acc * len(yte)))}/{len(yte)})  "
                  f"{dt:.3f}s", flush=True)


if __name__ == "__main__":
    main()
