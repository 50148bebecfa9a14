"""Name every weight of the adaptive-terrain-diffusion consistency UNet and write safetensors.

    python3 scripts/terrain_to_safetensors.py IN.onnx OUT.safetensors

IN.onnx is `terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx` from the
adaptive-terrain-diffusion 0.4.2 wheel (MIT): a guided-diffusion (ADM) UNetModel with EDM /
consistency preconditioning, exported by torch 2.11 at opset 18 (inputs noisy (B, 1, 128, 128),
sigma (B,), difficulty (B,); output denoised (B, 1, 128, 128)).

Needs `onnx` and numpy, like scripts/onnx_to_safetensors.py, whose safetensors writer and
reader it uses. What it does:

* Initializers named `network.*` keep their name without the `network.` prefix
  (`input_blocks.1.0.in_layers.2.weight`, `time_embed.0.weight`, `label_emb.2.bias`, ...).
* The anonymous ones (`val_*`) that are weights are the GroupNorm affines: the exporter wrote
  each GroupNorm as Reshape(N, G, -1) + InstanceNormalization (unit scale, zero shift) +
  Reshape back + Mul(gamma (C, 1, 1)) + Add(beta (C, 1, 1)). Each is named by following the
  norm's output to the convolution it feeds: `P.in_layers.2` -> `P.in_layers.0`,
  `P.out_layers.3` -> `P.out_layers.0`, `P.qkv` -> `P.norm`, `out.2` -> `out.0`.
* The other anonymous initializers are graph constants, not weights (the preconditioning
  scalars, the timestep frequencies, the attention scale, the clip bounds, shape vectors, the
  InstanceNormalization unit/zero vectors shared by every norm). Each is identified by its place
  in the graph, its value checked, and the values go into the metadata; none is stored.

Stored layouts (all float32): 3x3 convolutions [C_out, C_in, 3, 3]; every 1x1 convolution
(`skip_connection`, `qkv`, `proj_out`) [C_out, C_in]; Linear / Gemm weights [out, in] (every
Gemm has transB = 1, so the ONNX tensor already is [out, in]); biases and GroupNorm
weight / bias [C].

The header's `__metadata__` holds the hyperparameters (JSON values as strings): see
`hyperparameters`. The script checks itself: every initializer is classified exactly once,
every weight feeds exactly one node, the channel counts chain through the whole UNet (skip
concatenations included), and the file reads back identical. It prints the mapping.
"""
import hashlib
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_to_safetensors import read_safetensors, write_safetensors  # noqa: E402

PREFIX = "network."
# values that live in the package's generator.py, not in the graph
PACKAGE = {
    "package": "adaptive-terrain-diffusion==0.4.2",
    "sigma_max": 80.0,      # TerrainGenerator.sigma_max: the one-step sampling sigma
    "num_classes": 100,     # difficulty 1..100
    "height_range": 22.16864013671875,
    "asinh_scale": 0.1,
}


class Graph:
    """The main graph with producer / consumer lookups."""

    def __init__(self, model):
        self.model = model
        self.nodes = list(model.graph.node)
        self.inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        assert len(self.inits) == len(model.graph.initializer), "duplicate initializer names"
        self.producer = {}
        self.consumers = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                self.producer[o] = i
            for slot, name in enumerate(n.input):
                if name:
                    self.consumers.setdefault(name, []).append((i, slot))

    def attrs(self, i):
        return {a.name: onnx.helper.get_attribute_value(a) for a in self.nodes[i].attribute}

    def users(self, name, op=None):
        """Indices of the nodes reading `name` (of type `op` when given)."""
        return [i for i, _ in self.consumers.get(name, [])
                if op is None or self.nodes[i].op_type == op]

    def only_user(self, name, op):
        users = self.users(name)
        assert len(users) == 1 and self.nodes[users[0]].op_type == op, (name, op, users)
        return users[0]

    def other_input(self, i, name):
        """The input of node i that is not `name` (for two-input nodes)."""
        rest = [x for x in self.nodes[i].input if x != name]
        assert len(rest) == 1, (self.nodes[i].name, rest)
        return rest[0]

    def scalar(self, name):
        a = self.inits[name]
        assert a.size == 1, name
        return float(a.reshape(()))


# ----------------------------------------------------------------------------------------------
# named weights
# ----------------------------------------------------------------------------------------------

def named_weights(g):
    """{new name: (onnx name, array in the stored layout)} for the `network.*` initializers."""
    out = {}
    for name, a in g.inits.items():
        if not name.startswith(PREFIX):
            continue
        new = name[len(PREFIX):]
        uses = g.consumers.get(name, [])
        assert len(uses) == 1, f"{name} feeds {len(uses)} nodes"
        i, slot = uses[0]
        op = g.nodes[i].op_type
        if op == "Conv":
            at = g.attrs(i)
            w = g.inits[g.nodes[i].input[1]]
            k = w.shape[2]
            assert at.get("group", 1) == 1 and list(at.get("dilations", [1, 1])) == [1, 1], name
            assert list(at.get("strides", [1, 1])) == [1, 1], name
            assert list(at.get("pads", [0] * 4)) == [k // 2] * 4 and w.shape[2] == w.shape[3], name
            if slot == 1 and k == 1:
                a = a.reshape(a.shape[0], a.shape[1])
        elif op == "Gemm":
            at = g.attrs(i)
            assert at.get("transA", 0) == 0 and at.get("transB", 0) == 1, name
            assert at.get("alpha", 1.0) == 1.0 and at.get("beta", 1.0) == 1.0, name
        else:
            raise AssertionError(f"{name} feeds a {op}")
        assert slot in (1, 2), name
        out[new] = (name, np.ascontiguousarray(a))
    return out


# ----------------------------------------------------------------------------------------------
# GroupNorm affines (anonymous)
# ----------------------------------------------------------------------------------------------

PASS_THROUGH = {"Sigmoid", "Mul", "Add", "AveragePool", "Resize"}


def conv_fed_by(g, name):
    """The one Conv reached from tensor `name` through element-wise ops, pooling and resizes."""
    seen, todo, convs = set(), [name], set()
    while todo:
        t = todo.pop()
        for i in g.users(t):
            if i in seen:
                continue
            seen.add(i)
            op = g.nodes[i].op_type
            if op == "Conv":
                convs.add(i)
            elif op in PASS_THROUGH:
                todo.extend(g.nodes[i].output)
            else:
                raise AssertionError(f"norm output {name} reaches a {op}")
    assert len(convs) == 1, (name, convs)
    return convs.pop()


def norm_name(conv_weight):
    """The guided-diffusion name of the GroupNorm in front of a convolution."""
    w = conv_weight[len(PREFIX):]
    for tail, norm in ((".in_layers.2.weight", ".in_layers.0"),
                       (".out_layers.3.weight", ".out_layers.0"),
                       (".qkv.weight", ".norm")):
        if w.endswith(tail):
            return w[: -len(tail)] + norm
    if w == "out.2.weight":
        return "out.0"
    raise AssertionError(f"no GroupNorm name for the input of {conv_weight}")


def group_norms(g):
    """(weights {name: (onnx name, array [C])}, facts {groups, eps, unit, zero, reshape}) for
    every InstanceNormalization-based GroupNorm."""
    out, facts = {}, {"groups": set(), "eps": set(), "unit": set(), "zero": set(), "reshape": set()}
    for i, n in enumerate(g.nodes):
        if n.op_type != "InstanceNormalization":
            continue
        x, unit, zero = n.input
        pre = g.nodes[g.producer[x]]
        assert pre.op_type == "Reshape" and pre.input[1] in g.inits, n.name
        shape = g.inits[pre.input[1]].tolist()
        assert shape[0] == 0 and shape[2] == -1, shape
        facts["groups"].add(shape[1])
        facts["reshape"].add(pre.input[1])
        facts["eps"].add(g.attrs(i)["epsilon"])
        assert np.all(g.inits[unit] == 1) and np.all(g.inits[zero] == 0), n.name
        assert g.inits[unit].shape == (shape[1],), n.name
        facts["unit"].add(unit)
        facts["zero"].add(zero)
        back = g.only_user(n.output[0], "Reshape")
        mul = g.only_user(g.nodes[back].output[0], "Mul")
        gamma = g.other_input(mul, g.nodes[back].output[0])
        add = g.only_user(g.nodes[mul].output[0], "Add")
        beta = g.other_input(add, g.nodes[mul].output[0])
        conv = conv_fed_by(g, g.nodes[add].output[0])
        base = norm_name(g.nodes[conv].input[1])
        c = g.inits[gamma].shape[0]
        for onnx_name, suffix in ((gamma, ".weight"), (beta, ".bias")):
            a = g.inits[onnx_name]
            assert a.shape == (c, 1, 1), (onnx_name, a.shape)
            assert len(g.consumers[onnx_name]) == 1, f"{onnx_name} is shared"
            assert base + suffix not in out, base
            out[base + suffix] = (onnx_name, np.ascontiguousarray(a.reshape(c)))
    for k in ("groups", "eps", "unit", "zero", "reshape"):
        assert len(facts[k]) == 1, (k, facts[k])
        facts[k] = facts[k].pop()
    return out, facts


# ----------------------------------------------------------------------------------------------
# graph constants
# ----------------------------------------------------------------------------------------------

def f32(x):
    """A float32 constant as the shortest decimal that rounds back to it (0.002, not
    0.0020000000949949026)."""
    return float(str(np.float32(x)))


def find(g, op, pred):
    hits = [i for i, n in enumerate(g.nodes) if n.op_type == op and pred(n)]
    assert len(hits) == 1, (op, hits)
    return hits[0]


def constants(g, norm_facts):
    """{onnx name: role} for every anonymous non-weight initializer, and the values read."""
    roles, vals = {}, {}

    def mark(name, role):
        assert name in g.inits and not name.startswith(PREFIX), name
        assert roles.get(name, role) == role, (name, roles[name], role)
        roles[name] = role

    # preconditioning: sub = sigma - sigma_min; c_skip = sd2 / (sub^2 + sd2);
    # c_out = sub * sd / sqrt(sigma^2 + sd2); c_in = 1 / sqrt(sigma^2 + sd2)
    sub = find(g, "Sub", lambda n: n.input[0] == "sigma")
    mark(g.nodes[sub].input[1], "sigma_min (sigma - sigma_min in c_skip and c_out)")
    vals["sigma_min"] = f32(g.scalar(g.nodes[sub].input[1]))
    pows = [i for i, n in enumerate(g.nodes) if n.op_type == "Pow"]
    assert sorted(g.nodes[i].input[0] for i in pows) == sorted(["sigma", g.nodes[sub].output[0]])
    for i in pows:
        mark(g.nodes[i].input[1], "exponent 2 of the squares in the preconditioning")
        assert g.scalar(g.nodes[i].input[1]) == 2.0
    sd2_names = {g.other_input(g.only_user(g.nodes[i].output[0], "Add"), g.nodes[i].output[0])
                 for i in pows}
    assert len(sd2_names) == 1
    sd2 = sd2_names.pop()
    mark(sd2, "sigma_data^2 (c_skip numerator, both denominators)")
    mul_sd = [i for i in g.users(g.nodes[sub].output[0], "Mul")]
    assert len(mul_sd) == 1
    sd = g.other_input(mul_sd[0], g.nodes[sub].output[0])
    mark(sd, "sigma_data (c_out numerator)")
    vals["sigma_data"] = f32(g.scalar(sd))
    assert np.float32(vals["sigma_data"]) ** 2 == np.float32(g.scalar(sd2))
    # c_noise = scale * ln(sigma); args = c_noise[:, None] * freqs; emb = cat(cos, sin)
    log = find(g, "Log", lambda n: n.input[0] == "sigma")
    mul_t = g.only_user(g.nodes[log].output[0], "Mul")
    scale = g.other_input(mul_t, g.nodes[log].output[0])
    mark(scale, "c_noise scale: the timestep is scale * ln(sigma)")
    vals["c_noise_scale"] = f32(g.scalar(scale))
    unsq = g.only_user(g.nodes[mul_t].output[0], "Unsqueeze")
    mark(g.nodes[unsq].input[1], "shape constant")
    mul_f = g.only_user(g.nodes[unsq].output[0], "Mul")
    freqs = g.other_input(mul_f, g.nodes[unsq].output[0])
    mark(freqs, "timestep frequencies exp(-ln(10000) j / half) (float32)")
    vals["freqs"] = g.inits[freqs].reshape(-1)
    trig = {g.nodes[i].op_type: g.nodes[i].output[0] for i in g.users(g.nodes[mul_f].output[0])}
    assert sorted(trig) == ["Cos", "Sin"], trig
    cat = find(g, "Concat", lambda n: set(n.input) == set(trig.values()))
    assert g.attrs(cat)["axis"] == -1
    vals["timestep_order"] = ",".join(
        g.nodes[g.producer[x]].op_type.lower() for x in g.nodes[cat].input)
    # attention scale: q and k are each multiplied by it after the qkv split
    att = set()
    for i, n in enumerate(g.nodes):
        if n.op_type == "Split" and g.nodes[g.producer[n.input[0]]].op_type == "Reshape":
            for o in n.output[:2]:
                m = g.only_user(o, "Mul")
                att.add(g.other_input(m, o))
    assert len(att) == 1
    att = att.pop()
    mark(att, "attention scale d^-1/4, applied to q and to k")
    vals["attention_scale"] = f32(g.scalar(att))
    # scale-shift norm: h * (1 + scale) + shift; the same 1.0 is the Clip maximum
    clip = find(g, "Clip", lambda n: True)
    lo, hi = g.nodes[clip].input[1:3]
    mark(lo, "Clip minimum of denoised")
    vals["clip"] = [f32(g.scalar(lo)), f32(g.scalar(hi))]
    for i in g.users(hi):
        n = g.nodes[i]
        assert n.op_type == "Clip" or (n.op_type == "Add" and
                                       g.nodes[g.producer[n.input[0]]].op_type == "Split")
    mark(hi, "1.0: the 1 of (1 + scale) in every scale-shift norm, and the Clip maximum")
    # Resize scales of the nearest 2x upsampling
    for i, n in enumerate(g.nodes):
        if n.op_type == "Resize":
            at = g.attrs(i)
            assert at["mode"] == b"nearest"
            assert at["coordinate_transformation_mode"] == b"asymmetric"
            assert at["nearest_mode"] == b"floor" and g.inits[n.input[2]].tolist() == [1, 1, 2, 2]
            mark(n.input[2], "Resize scales [1, 1, 2, 2] (nearest, 2x)")
        if n.op_type == "AveragePool":
            at = g.attrs(i)
            assert list(at["kernel_shape"]) == [2, 2] and list(at["strides"]) == [2, 2]
            assert list(at.get("pads", [0] * 4)) == [0] * 4 and at.get("ceil_mode", 0) == 0
    # GroupNorm helpers
    mark(norm_facts["unit"], "InstanceNormalization unit scale (ones), shared by every norm")
    mark(norm_facts["zero"], "InstanceNormalization zero shift (zeros), shared by every norm")
    mark(norm_facts["reshape"], "GroupNorm reshape [0, G, -1], shared by every norm")
    # integer shape vectors; the attention reshapes bake in the 128x128 geometry
    for name, a in g.inits.items():
        if name in roles or name.startswith(PREFIX) or a.dtype != np.int64:
            continue
        uses = set()
        for i, slot in g.consumers[name]:
            n = g.nodes[i]
            assert n.op_type in {"Reshape", "Concat", "Unsqueeze", "Mul"}, (name, n.op_type)
            if n.op_type == "Concat" and len(n.input) == 3 and slot == 2 and a.reshape(-1)[0] > 0:
                uses.add("attention tokens T = H W (fixed for a 128x128 input)")
            elif n.op_type == "Concat" and len(n.input) == 3 and slot == 1 and a.reshape(-1)[0] > 0:
                uses.add("attention head channels")
            elif n.op_type == "Concat" and len(n.input) == 4 and slot >= 2:
                uses.add("attention output H = W (fixed for a 128x128 input)")
            elif n.op_type == "Mul":
                uses.add("attention heads (batch * heads)")
        mark(name, "; ".join(sorted(uses)) if uses else "shape constant")
    return roles, vals


def attention_geometry(g):
    """[(qkv conv weight, heads, head channels, tokens baked into the graph)] per attention."""
    out = []
    for i, n in enumerate(g.nodes):
        if n.op_type != "Conv" or not n.input[1].endswith(".qkv.weight"):
            continue
        view = g.only_user(n.output[0], "Reshape")
        split = g.only_user(g.nodes[view].output[0], "Split")
        assert g.attrs(split)["axis"] == 1 and len(g.nodes[split].output) == 3
        # QKVAttention order: the (B, 3C, T) tensor is split into q | k | v first; a legacy
        # block would reshape to (B * heads, 3 * ch, T) before splitting
        shape_of = g.nodes[g.producer[g.nodes[view].input[1]]]
        assert shape_of.op_type == "Concat" and len(shape_of.input) == 3
        assert g.nodes[g.producer[shape_of.input[0]]].op_type == "Shape", "expected (B, -1, T)"
        tokens = int(g.inits[shape_of.input[2]].reshape(()))
        q = g.only_user(g.nodes[split].output[0], "Mul")
        qview = g.only_user(g.nodes[q].output[0], "Reshape")
        qshape = g.nodes[g.producer[g.nodes[qview].input[1]]]
        ch = int(g.inits[qshape.input[1]].reshape(()))
        heads_mul = g.nodes[g.producer[g.nodes[g.producer[qshape.input[0]]].input[0]]]
        assert heads_mul.op_type == "Mul"
        heads = int(g.inits[heads_mul.input[1]].reshape(()))
        c = g.inits[n.input[1]].shape[1]
        assert heads * ch == c, (n.input[1], heads, ch, c)
        out.append((n.input[1][len(PREFIX):], heads, ch, tokens))
    return out


# ----------------------------------------------------------------------------------------------
# structure and checks
# ----------------------------------------------------------------------------------------------

def layer_kinds(g, tensors):
    """{'input_blocks.5.0': 'down', ...}: every layer of the UNet's Sequential blocks."""
    kinds = {}
    for name in tensors:
        m = re.match(r"((?:input_blocks|output_blocks)\.\d+\.\d+|middle_block\.\d+)\.(\w+)", name)
        if not m:
            continue
        prefix, part = m.groups()
        if part in ("qkv", "proj_out", "norm"):
            kind = "attn"
        elif part in ("in_layers", "emb_layers", "out_layers", "skip_connection"):
            kind = "res"
        else:
            kind = "conv"
        assert kinds.get(prefix, kind) == kind, prefix
        kinds[prefix] = kind
    # a ResBlock whose first conv reads an AveragePool / Resize is a down / up block
    for i, n in enumerate(g.nodes):
        if n.op_type == "Conv" and n.input[1].endswith(".in_layers.2.weight"):
            prefix = n.input[1][len(PREFIX): -len(".in_layers.2.weight")]
            src = g.nodes[g.producer[n.input[0]]].op_type
            if src == "AveragePool":
                kinds[prefix] = "down"
            elif src == "Resize":
                kinds[prefix] = "up"
    return kinds


def blocks(kinds, prefix):
    """[[(layer prefix, kind), ...] per block] of input_blocks / output_blocks / middle_block."""
    idx = {}
    for p, k in kinds.items():
        parts = p.split(".")
        if parts[0] != prefix:
            continue
        if prefix == "middle_block":
            idx.setdefault(0, []).append((int(parts[1]), p, k))
        else:
            idx.setdefault(int(parts[1]), []).append((int(parts[2]), p, k))
    assert sorted(idx) == list(range(len(idx))), prefix
    out = []
    for b in range(len(idx)):
        layers = sorted(idx[b])
        assert [j for j, _, _ in layers] == list(range(len(layers))), (prefix, b)
        out.append([(p, k) for _, p, k in layers])
    return out


def check_res(t, p, c_in, emb_dim):
    """Shapes of one ResBlock; returns C_out."""
    c_out = t[p + ".in_layers.2.weight"].shape[0]
    want = {
        ".in_layers.0.weight": (c_in,), ".in_layers.0.bias": (c_in,),
        ".in_layers.2.weight": (c_out, c_in, 3, 3), ".in_layers.2.bias": (c_out,),
        ".emb_layers.1.weight": (2 * c_out, emb_dim), ".emb_layers.1.bias": (2 * c_out,),
        ".out_layers.0.weight": (c_out,), ".out_layers.0.bias": (c_out,),
        ".out_layers.3.weight": (c_out, c_out, 3, 3), ".out_layers.3.bias": (c_out,),
    }
    if c_in != c_out:
        want[".skip_connection.weight"] = (c_out, c_in)
        want[".skip_connection.bias"] = (c_out,)
    have = {k[len(p):] for k in t if k.startswith(p + ".")}
    assert have == set(want), (p, sorted(have ^ set(want)))
    for k, s in want.items():
        assert t[p + k].shape == s, (p + k, t[p + k].shape, s)
    return c_out


def check_attn(t, p, c):
    want = {".norm.weight": (c,), ".norm.bias": (c,), ".qkv.weight": (3 * c, c),
            ".qkv.bias": (3 * c,), ".proj_out.weight": (c, c), ".proj_out.bias": (c,)}
    have = {k[len(p):] for k in t if k.startswith(p + ".")}
    assert have == set(want), (p, sorted(have ^ set(want)))
    for k, s in want.items():
        assert t[p + k].shape == s, (p + k, t[p + k].shape, s)


def hyperparameters(t, kinds, vals, norm_facts, heads):
    """Walks the UNet's channels (checking every shape on the way) and returns the metadata."""
    emb_dim = t["time_embed.0.weight"].shape[0]
    tdim = t["time_embed.0.weight"].shape[1]
    assert t["time_embed.2.weight"].shape == (emb_dim, emb_dim)
    assert t["label_emb.0.weight"].shape == (emb_dim, 1)
    assert t["label_emb.2.weight"].shape == (emb_dim, emb_dim)
    assert vals["freqs"].shape == (tdim // 2,)
    mc = t["input_blocks.0.0.weight"].shape[0]
    in_ch = t["input_blocks.0.0.weight"].shape[1]
    head_of = {p[: -len(".qkv.weight")]: (h, ch) for p, h, ch, _ in heads}

    ds, ch = 1, mc
    stack = []
    levels, attn_ds, down_blocks, up_blocks, table = [], set(), [], [], []
    level = {"ch": ch, "res": 0}
    for b, layers in enumerate(blocks(kinds, "input_blocks")):
        for p, k in layers:
            if k == "conv":
                assert b == 0 and t[p + ".weight"].shape == (mc, in_ch, 3, 3)
            elif k == "res":
                ch = check_res(t, p, ch, emb_dim)
                if level["res"] == 0:
                    level["ch"] = ch
                assert ch == level["ch"], p
                level["res"] += 1
            elif k == "down":
                assert check_res(t, p, ch, emb_dim) == ch
                levels.append(level)
                ds *= 2
                level = {"ch": ch, "res": 0}
                down_blocks.append(p)
            elif k == "attn":
                check_attn(t, p, ch)
                attn_ds.add(ds)
                assert head_of[p][0] * head_of[p][1] == ch
            table.append((p, k, ch, ds))
        stack.append((ch, ds))
    levels.append(level)
    assert len({lv["res"] for lv in levels}) == 1, levels
    mid = blocks(kinds, "middle_block")
    assert len(mid) == 1 and [k for _, k in mid[0]] == ["res", "attn", "res"]
    for p, k in mid[0]:
        if k == "res":
            assert check_res(t, p, ch, emb_dim) == ch
        else:
            check_attn(t, p, ch)
        table.append((p, k, ch, ds))
    for b, layers in enumerate(blocks(kinds, "output_blocks")):
        skip_ch, skip_ds = stack.pop()
        assert skip_ds == ds, (b, skip_ds, ds)
        ch += skip_ch
        for p, k in layers:
            if k == "res":
                ch = check_res(t, p, ch, emb_dim)
            elif k == "up":
                assert check_res(t, p, ch, emb_dim) == ch
                ds //= 2
                up_blocks.append(p)
            elif k == "attn":
                check_attn(t, p, ch)
                assert ds in attn_ds
            else:
                raise AssertionError(p)
            table.append((p, k, ch, ds))
    assert not stack and ds == 1, (stack, ds, up_blocks, down_blocks)
    assert t["out.0.weight"].shape == (ch,) and t["out.2.weight"].shape[1:] == (ch, 3, 3)
    out_ch = t["out.2.weight"].shape[0]
    head_ch = {hc for _, hc in head_of.values()}
    assert len(head_ch) == 1
    head_ch = head_ch.pop()
    assert abs(vals["attention_scale"] - head_ch ** -0.25) < 1e-7
    freqs64 = np.exp(-np.log(10000.0) * np.arange(tdim // 2) / (tdim // 2))
    assert np.max(np.abs(vals["freqs"] - freqs64)) < 1e-7
    native = int(np.sqrt(heads[0][3])) * min(d for d in attn_ds)

    meta = {
        "architecture": "guided-diffusion UNetModel (ADM) with consistency-model "
                        "preconditioning (openai/consistency_models layout)",
        "in_channels": in_ch,
        "out_channels": out_ch,
        "model_channels": mc,
        "channel_mult": [lv["ch"] // mc for lv in levels],
        "num_res_blocks": levels[0]["res"],
        "attention_ds": sorted(attn_ds),
        "num_head_channels": head_ch,
        "num_heads": -1,
        "heads_per_attention": {p: h for p, (h, _) in sorted(head_of.items())},
        "attention_split": "QKVAttention: qkv (B, 3C, T) splits into q = channels [0, C), "
                           "k = [C, 2C), v = [2C, 3C); then each into heads of "
                           "num_head_channels consecutive channels; q and k both times "
                           "attention_scale; softmax over keys",
        "attention_scale": vals["attention_scale"],
        "resblock_updown": True,
        "down_blocks": down_blocks,
        "up_blocks": up_blocks,
        "downsample": "ResBlock down: AveragePool 2x2 stride 2 of silu(GN(x)) and of x",
        "upsample": "ResBlock up: nearest 2x (asymmetric, floor) of silu(GN(x)) and of x",
        "use_scale_shift_norm": True,
        "scale_shift": "emb_layers.1 output (B, 2C): scale = [:, :C], shift = [:, C:]; "
                       "h = GN(h) * (1 + scale) + shift",
        "group_norm_groups": norm_facts["groups"],
        "group_norm_eps": f32(norm_facts["eps"]),
        "time_embed_dim": emb_dim,
        "timestep_dim": tdim,
        "timestep_max_period": 10000,
        "timestep_order": vals["timestep_order"],
        "timestep_freqs_f32": [f32(f) for f in vals["freqs"]],
        "c_noise": f"{vals['c_noise_scale']} * ln(sigma)",
        "c_noise_scale": vals["c_noise_scale"],
        "label_emb": "mlp: Linear(1, 128) -> SiLU -> Linear(128, 128) of the continuous "
                     "difficulty input; emb = time_embed(t) + label_emb(difficulty)",
        "difficulty_input": "(d - 1) / (num_classes - 1) as float32 for an integer "
                            "difficulty d in 1..num_classes (generator.py)",
        "num_classes": PACKAGE["num_classes"],
        "sigma_data": vals["sigma_data"],
        "sigma_min": vals["sigma_min"],
        "sigma_max": PACKAGE["sigma_max"],
        "precond": "c_skip = sd^2 / ((sigma - sigma_min)^2 + sd^2); c_out = (sigma - "
                   "sigma_min) sd / sqrt(sigma^2 + sd^2); c_in = 1 / sqrt(sigma^2 + sd^2); "
                   "denoised = clip(c_out F(c_in x, c_noise, d) + c_skip x, clip)",
        "clip": vals["clip"],
        "native_size": native,
        "height_range": PACKAGE["height_range"],
        "asinh_scale": PACKAGE["asinh_scale"],
        "layouts": "conv3x3 [C_out, C_in, 3, 3]; conv1x1 (skip_connection, qkv, proj_out) "
                   "[C_out, C_in]; linear [out, in]; norms and biases [C]",
        "source": PACKAGE["package"],
    }
    return meta, table


def convert(src, dst, verbose=True):
    """Converts src (ONNX) into dst; returns (tensors, metadata)."""
    model = onnx.load(src)
    g = Graph(model)
    named = named_weights(g)
    norms, norm_facts = group_norms(g)
    assert not set(named) & set(norms)
    weights = {**named, **norms}
    roles, vals = constants(g, norm_facts)
    used = {o for o, _ in weights.values()}
    assert not used & set(roles), used & set(roles)
    missing = set(g.inits) - used - set(roles)
    assert not missing, f"unclassified initializers: {sorted(missing)}"
    assert len(used) == len(weights)
    tensors = {k: a for k, (_, a) in weights.items()}
    heads = attention_geometry(g)
    kinds = layer_kinds(g, tensors)
    meta, table = hyperparameters(tensors, kinds, vals, norm_facts, heads)
    meta["onnx_sha256"] = hashlib.sha256(open(src, "rb").read()).hexdigest()
    for p in model.metadata_props:
        meta["onnx." + p.key] = p.value
    metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}

    write_safetensors(dst, tensors, metadata)
    back, back_meta = read_safetensors(dst, with_metadata=True)
    assert sorted(back) == sorted(tensors) and back_meta == metadata
    for k, a in tensors.items():
        b = back[k]
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(b, a), k

    if verbose:
        print("# weights: onnx name -> stored name [shape]")
        for k in sorted(weights, key=sort_key):
            print(f"{weights[k][0]:54s} -> {k:44s} {list(tensors[k].shape)}")
        print("\n# graph constants (not stored)")
        shared = []
        for name in sorted(roles):
            n_use = len(g.consumers.get(name, []))
            value = g.inits[name]
            shown = value.tolist() if value.size <= 4 else f"{list(value.shape)} {value.dtype}"
            print(f"{name:28s} x{n_use:<4d} {roles[name]}: {shown}")
            if n_use > 1:
                shared.append(name)
        print("\n# blocks: layer, kind, channels out, downsample factor")
        for p, k, c, d in table:
            print(f"{p:20s} {k:5s} {c:4d} /{d}")
        print("\n# metadata")
        for k in sorted(metadata):
            print(f"{k}: {metadata[k]}")
        print(f"\n{len(tensors)} weights ({len(named)} named, {len(norms)} GroupNorm affines) "
              f"of {len(g.inits)} initializers, each feeding one node; {len(roles)} graph "
              f"constants not stored ({len(shared)} shared: {', '.join(shared)}) -> {dst} "
              f"(read back and identical)")
    return tensors, metadata


def sort_key(name):
    return [int(p) if p.isdigit() else p for p in name.split(".")]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    convert(*sys.argv[1:])


if __name__ == "__main__":
    main()
