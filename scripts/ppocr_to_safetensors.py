"""Store the weights of a PP-OCR ONNX graph under structured names, for a hand-written forward.

    python3 scripts/ppocr_to_safetensors.py IN.onnx OUT.safetensors

IN.onnx is one of the three graphs that rapidocr-onnxruntime 1.4.4 ships in
rapidocr_onnxruntime/models/ (paddle2onnx exports; their weights are Constant nodes, there are no
initializers):

    ch_PP-OCRv4_det_infer.onnx            -> "det": PP-LCNetV3 backbone, RSE-FPN neck, DB head
    ch_ppocr_mobile_v2.0_cls_infer.onnx   -> "cls": MobileNetV3-small, 2-way (0 / 180 degrees)
    ch_PP-OCRv4_rec_infer.onnx            -> "rec": PP-LCNetV3 backbone, SVTR neck, CTC head

The kind is recognised from the graph. Needs only the `onnx` package and numpy (pinned with hashes
in scripts/requirements-onnx.txt); the file is written by `write_safetensors` of
scripts/onnx_to_safetensors.py, read back and compared before the script says it is done.

How it works: the graph is walked along its data flow from the input `x`, layer by layer, in the
order the network is built (a walker per kind below). Every non-Constant node must be visited
exactly once and every Constant must be taken exactly once, either as (part of) a stored weight or
as a structural constant whose value is checked (hardswish's 3 and 6, clip bounds, resize scales,
reshape/slice index vectors, LayerNorm eps, the attention scale, ...). Anything left over stops the
script, so the stored names and the walk are a complete description of the graph.

Names (all float32; a conv without a stored `.bias` has none):

  * `X.weight` / `X.bias`: a Conv (OIHW, `group` in the layer table) or ConvTranspose (IOHW).
    BatchNormalization directly after a conv (after its bias Add, for the det head's
    ConvTranspose) is folded in float64 and rounded to float32 once:
    s = gamma / sqrt(var + eps), W' = W * s (per output channel), b' = (b - mean) * s + beta.
    Every BN of the three graphs is foldable this way, so none is stored separately.
  * `X.lab.scale` / `X.lab.bias` (shape [1]): PP-LCNetV3's "learnable affine block" y = s * x + b
    right after a rep conv; `X.act_lab.scale` / `X.act_lab.bias`: the same after the conv's
    hardswish. A rep conv without `act_lab` has no activation (PP-LCNetV3: stride exactly 2).
  * `X.se.conv1`, `X.se.conv2`: squeeze-excite, GAP -> 1x1 conv -> ReLU -> 1x1 conv ->
    HardSigmoid(alpha, beta from the layer table) -> multiply. In the det neck (RSE layers) the
    result is added back: y + y * se(y).
  * `X.weight` [in, out] / `X.bias` [out] of a MatMul: y = x @ W + b (Paddle layout, not torch's).
  * `X.weight` / `X.bias` of a LayerNorm: gamma / beta over the last axis (eps in the metadata).

det:  backbone.conv1, backbone.blocks.{0..13}.{dw,se,pw}, backbone.out_convs.{0..3} (the 1x1
      convs on the stride 4/8/16/32 taps), neck.ins_conv.{0..3}.{conv,se}, neck.inp_conv.{0..3}.
      {conv,se} (index 0 = stride 4 ... 3 = stride 32), head.conv1 (3x3 + BN), head.conv2
      (ConvTranspose 2x2 s2 + bias + BN), head.conv3 (ConvTranspose 2x2 s2 + bias, then sigmoid)
rec:  backbone.conv1, backbone.blocks.{0..13}.{dw,se,pw}, neck.conv1 .. neck.conv2,
      neck.blocks.{0,1}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}, neck.norm, neck.conv3,
      neck.conv4, neck.conv1x1, head.fc
cls:  backbone.conv1, backbone.blocks.{0..10}.{expand,dw,se,linear}, backbone.conv2, head.fc

`__metadata__` (all values strings): "kind", "source" (file name), "source_sha256", "format"
("brotensor-ppocr-1"), "bn_folding" (the rule above), "layers" (JSON: per conv/pool/norm/act
name its hyperparameters: kernel, stride, pads [top, left, bottom, right], group, dilation,
channels, activation, folded BN), "structure" (JSON: kind-specific facts the forward needs:
taps, heads, eps values, the order of concatenations ...). For rec also "character": the graph's
own `character` metadata string unchanged (6623 entries separated by "\\n", no trailing newline;
this is where rapidocr 1.4.4 takes the character list from, it has no keys file). Class ids of the
6625-way output: 0 = CTC blank, 1..6623 = entry id-1 of that list, 6624 = " " (the space that
PaddleOCR's CTC decoder appends).
"""
import hashlib
import json
import os
import sys
from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_to_safetensors import DTYPES, read_safetensors, write_safetensors  # noqa: E402

BN_RULE = ("every BatchNormalization follows a conv (for the det head's ConvTranspose: conv, "
           "bias Add, BN) and is folded in float64 then rounded to float32: s = gamma / "
           "sqrt(var + eps), W' = W * s per output channel (axis 0 of OIHW, axis 1 of a "
           "ConvTranspose's IOHW), b' = (b - mean) * s + beta (b = 0 without a bias)")


def _attrs(node):
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


class Walker:
    """Follows the data flow of a paddle2onnx graph and hands out its Constant nodes."""

    def __init__(self, model):
        g = model.graph
        if len(g.initializer):
            sys.exit("expected no initializers (weights as Constant nodes)")
        self.const = {}
        self.nodes = []
        for n in g.node:
            if n.op_type == "Constant":
                assert len(n.attribute) == 1 and n.attribute[0].name == "value", n.name
                self.const[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
            else:
                self.nodes.append(n)
        self.users = defaultdict(list)
        self.producer = {}
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.users[i].append(n)
            for o in n.output:
                self.producer[o] = n
        for name in self.const:
            assert len(self.users[name]) == 1, f"constant {name} has {len(self.users[name])} users"
        self.graph_inputs = [i.name for i in g.input]
        self.graph_outputs = [o.name for o in g.output]
        self.seen = set()          # names of visited nodes
        self.claims = {}           # constant tensor -> what it became
        self.weights = {}          # stored name -> float32 array
        self.sources = {}          # stored name -> description of where it came from
        self.layers = {}           # layer name -> hyperparameters
        self.structural = []       # (constant, role, value) of checked non-weight constants

    # -- plumbing ------------------------------------------------------------------------------
    def visit(self, node):
        assert node.name not in self.seen, f"node {node.name} visited twice"
        self.seen.add(node.name)
        return node

    def next(self, x, op, pred=None):
        """The one not yet visited user of tensor x with op type `op` (and pred), visited."""
        c = [n for n in self.users[x] if n.op_type == op and n.name not in self.seen
             and (pred is None or pred(n))]
        assert len(c) == 1, f"{len(c)} candidate {op} users of {x}"
        return self.visit(c[0])

    def peek(self, x, op, pred=None):
        return [n for n in self.users[x] if n.op_type == op and n.name not in self.seen
                and (pred is None or pred(n))]

    def other(self, node, x):
        ins = [i for i in node.input if i != x]
        assert len(ins) == 1 and len(node.input) == 2, node.name
        return ins[0]

    def is_const(self, t, size=None):
        return t in self.const and (size is None or self.const[t].size == size)

    def take(self, t, what):
        assert t in self.const, f"{t} is not a Constant"
        assert t not in self.claims, f"constant {t} taken twice ({self.claims[t]}, {what})"
        self.claims[t] = what
        return self.const[t]

    def struct(self, t, role, expect=None):
        """Take a structural constant, checking its value against `expect` when given."""
        v = self.take(t, "structural: " + role)
        if expect is not None:
            assert np.allclose(np.asarray(v, np.float64).ravel(),
                               np.asarray(expect, np.float64).ravel(), rtol=1e-6, atol=0), \
                f"{role}: {v} != {expect}"
        self.structural.append((t, role, np.asarray(v).tolist()))
        return v

    def store(self, name, array, source):
        assert name not in self.weights, f"name {name} stored twice"
        self.weights[name] = np.asarray(array, dtype=np.float64).astype(np.float32)
        self.sources[name] = source

    def shape_subgraph(self, t):
        """Visit the nodes that compute the shape tensor t (Shape/Cast/Slice/Concat/...),
        stopping at the data input of each Shape node; their constants are structural. Returns
        the static entries of t where it is a Concat of constants (None where dynamic)."""
        stack, static = [t], None
        if t in self.const:
            v = self.struct(t, "reshape target shape")
            return [int(a) for a in np.ravel(v)]
        p = self.producer[t]
        if p.op_type == "Concat":
            static = []
            for i in p.input:
                q = self.producer.get(i)
                if i in self.const:
                    static.append(int(np.ravel(self.const[i])[0]))
                elif q is not None and q.op_type == "Cast" and q.input[0] in self.const:
                    static.append(int(np.ravel(self.const[q.input[0]])[0]))
                else:
                    static.append(None)
        while stack:
            t = stack.pop()
            if t in self.const:
                if t not in self.claims:
                    self.struct(t, "shape arithmetic")
                continue
            p = self.producer[t]
            if p.name in self.seen:
                continue
            self.visit(p)
            if p.op_type == "Shape":
                continue
            stack.extend(i for i in p.input if i)
        return static

    # -- layer patterns ------------------------------------------------------------------------
    def conv(self, x, name, pred=None, op="Conv"):
        """Conv/ConvTranspose on x, with its bias (input, or a following Add of a constant or of
        a Reshape of constants) and a following BatchNormalization folded in. Returns output."""
        n = self.next(x, op, pred)
        a = _attrs(n)
        w = self.take(n.input[1], f"{name}.weight").astype(np.float64)
        src = [f"{op} {n.name} W"]
        b = None
        if len(n.input) > 2 and n.input[2]:
            b = self.take(n.input[2], f"{name}.bias").astype(np.float64)
            src.append("B")
        y = n.output[0]
        out_axis = 1 if op == "ConvTranspose" else 0
        cout = w.shape[out_axis] * (a.get("group", 1) if op == "ConvTranspose" else 1)
        u = self.users[y]
        if b is None and len(u) == 1 and u[0].op_type == "Add":
            add = u[0]
            t = self.other(add, y)
            if self.is_const(t, cout):
                self.visit(add)
                b = self.take(t, f"{name}.bias (Add)").astype(np.float64).reshape(cout)
                src.append(f"bias Add {add.name}")
                y = add.output[0]
            elif t in self.producer and self.producer[t].op_type == "Reshape" and \
                    all(self.is_const(i) for i in self.producer[t].input):
                r = self.producer[t]
                self.visit(add)
                self.visit(r)
                b = self.take(r.input[0], f"{name}.bias (Reshape+Add)").astype(np.float64)
                b = b.reshape(cout)
                self.struct(r.input[1], "bias reshape target", [1, cout, 1, 1])
                src.append(f"bias Reshape+Add {add.name}")
                y = add.output[0]
        u = self.users[y]
        folded = False
        if len(u) == 1 and u[0].op_type == "BatchNormalization":
            bn = self.visit(u[0])
            eps = np.float64(np.float32(_attrs(bn)["epsilon"]))
            gamma, beta, mean, var = (self.take(t, f"{name} (folded BN {bn.name})")
                                      .astype(np.float64) for t in bn.input[1:5])
            s = gamma / np.sqrt(var + eps)
            shape = [1] * w.ndim
            shape[out_axis] = cout
            w = w * s.reshape(shape)
            b = ((b if b is not None else 0.0) - mean) * s + beta
            src.append(f"BN {bn.name} eps={float(np.float32(eps)):.9g} folded")
            y = bn.output[0]
            folded = True
        self.store(name + ".weight", w, ", ".join(src))
        if b is not None:
            self.store(name + ".bias", b, ", ".join(src))
        k = a.get("kernel_shape", list(w.shape[2:]))
        self.layers[name] = {
            "op": op, "kernel": list(k), "stride": list(a.get("strides", [1, 1])),
            "pads": list(a.get("pads", [0, 0, 0, 0])), "group": a.get("group", 1),
            "dilation": list(a.get("dilations", [1, 1])),
            "in": w.shape[1] * a.get("group", 1) if op == "Conv" else w.shape[0],
            "out": cout, "bias": b is not None, "bn_folded": folded}
        if op == "ConvTranspose":
            for key in ("output_padding", "output_shape", "auto_pad"):
                assert key not in a or not a[key] or a[key] == "NOTSET", (name, key, a[key])
        assert self.layers[name]["dilation"] == [1, 1], name
        return y

    def affine(self, x, name):
        """y = x * scale + bias with one-element constants (PP-LCNetV3 learnable affine)."""
        m = self.next(x, "Mul", lambda n: self.is_const(self.other(n, x), 1))
        s = self.take(self.other(m, x), name + ".scale")
        a = self.next(m.output[0], "Add", lambda n: self.is_const(self.other(n, m.output[0]), 1))
        b = self.take(self.other(a, m.output[0]), name + ".bias")
        self.store(name + ".scale", np.reshape(s, [1]), f"Mul {m.name}")
        self.store(name + ".bias", np.reshape(b, [1]), f"Add {a.name}")
        return a.output[0]

    def hardswish_follows(self, x):
        return bool(self.peek(x, "Add", lambda n: self.is_const(self.other(n, x), 1)
                              and float(np.ravel(self.const[self.other(n, x)])[0]) == 3.0))

    def hardswish(self, x):
        """x * clip(x + 3, 0, 6) / 6, as Add, Clip, Mul, Div."""
        a = self.next(x, "Add", lambda n: self.is_const(self.other(n, x), 1))
        self.struct(self.other(a, x), "hardswish +3", [3.0])
        c = self.next(a.output[0], "Clip")
        self.struct(c.input[1], "hardswish clip min", [0.0])
        self.struct(c.input[2], "hardswish clip max", [6.0])
        m = self.next(c.output[0], "Mul", lambda n: x in n.input)
        d = self.next(m.output[0], "Div")
        self.struct(d.input[1], "hardswish /6", [6.0])
        return d.output[0]

    def swish(self, x):
        """x * sigmoid(1.0 * x), as Mul, Sigmoid, Mul."""
        m = self.next(x, "Mul", lambda n: self.is_const(self.other(n, x), 1))
        self.struct(self.other(m, x), "swish beta", [1.0])
        s = self.next(m.output[0], "Sigmoid")
        return self.next(s.output[0], "Mul", lambda n: x in n.input).output[0]

    def act(self, x, name):
        """Relu or hardswish on x if one follows; records it in the layer table."""
        if self.peek(x, "Relu"):
            self.layers[name]["act"] = "relu"
            return self.next(x, "Relu").output[0]
        if self.hardswish_follows(x):
            self.layers[name]["act"] = "hardswish"
            return self.hardswish(x)
        self.layers[name]["act"] = None
        return x

    def se(self, x, name, residual=False):
        """Squeeze-excite on x: x * hardsigmoid(conv2(relu(conv1(gap(x))))) (+ x if residual)."""
        g = self.next(x, "GlobalAveragePool")
        y = self.conv(g.output[0], name + ".conv1")
        y = self.next(y, "Relu").output[0]
        y = self.conv(y, name + ".conv2")
        h = self.next(y, "HardSigmoid")
        ha = _attrs(h)
        self.layers[name] = {"op": "SE", "hardsigmoid_alpha": float(np.float32(ha["alpha"])),
                             "hardsigmoid_beta": float(np.float32(ha["beta"])),
                             "residual": residual}
        m = self.next(h.output[0], "Mul", lambda n: x in n.input)
        y = m.output[0]
        if residual:
            y = self.next(y, "Add", lambda n: x in n.input).output[0]
        return y

    def rep_conv(self, x, name, pred):
        """PP-LCNetV3 rep layer: conv (+bias), affine, then hardswish + affine unless none."""
        y = self.conv(x, name, pred)
        y = self.affine(y, name + ".lab")
        if self.hardswish_follows(y):
            y = self.affine(self.hardswish(y), name + ".act_lab")
            self.layers[name]["act"] = "hardswish+affine"
        else:
            self.layers[name]["act"] = None
        # PP-LCNetV3 skips the activation exactly when the stride is 2 (not [2, 1] or [1, 2])
        assert (self.layers[name]["act"] is None) == (self.layers[name]["stride"] == [2, 2]), name
        return y

    def linear(self, x, name):
        m = self.next(x, "MatMul", lambda n: self.is_const(n.input[1]) and n.input[0] == x)
        w = self.take(m.input[1], name + ".weight")
        a = self.next(m.output[0], "Add", lambda n: self.is_const(self.other(n, m.output[0])))
        b = self.take(self.other(a, m.output[0]), name + ".bias")
        assert w.ndim == 2 and b.shape == (w.shape[1],), name
        self.store(name + ".weight", w, f"MatMul {m.name} ([in, out])")
        self.store(name + ".bias", b, f"Add {a.name}")
        self.layers[name] = {"op": "Linear", "in": int(w.shape[0]), "out": int(w.shape[1])}
        return a.output[0]

    def layernorm(self, x, name):
        """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
        r1 = self.next(x, "ReduceMean")
        assert _attrs(r1)["axes"] == [-1] and _attrs(r1).get("keepdims", 1) == 1
        sub = self.next(x, "Sub", lambda n: list(n.input) == [x, r1.output[0]])
        p = self.next(sub.output[0], "Pow")
        self.struct(p.input[1], "layernorm square", [2.0])
        r2 = self.next(p.output[0], "ReduceMean")
        assert _attrs(r2)["axes"] == [-1]
        ae = self.next(r2.output[0], "Add")
        eps = float(np.ravel(self.struct(self.other(ae, r2.output[0]), f"{name} eps"))[0])
        sq = self.next(ae.output[0], "Sqrt")
        d = self.next(sub.output[0], "Div", lambda n: list(n.input) == [sub.output[0],
                                                                       sq.output[0]])
        mg = self.next(d.output[0], "Mul")
        gamma = self.take(self.other(mg, d.output[0]), name + ".weight")
        ab = self.next(mg.output[0], "Add")
        beta = self.take(self.other(ab, mg.output[0]), name + ".bias")
        self.store(name + ".weight", gamma, f"LayerNorm Mul {mg.name}")
        self.store(name + ".bias", beta, f"LayerNorm Add {ab.name}")
        self.layers[name] = {"op": "LayerNorm", "eps": eps, "dim": int(gamma.size)}
        return ab.output[0]

    def resize(self, x, factor):
        r = self.next(x, "Resize")
        a = _attrs(r)
        assert (a["mode"], a["coordinate_transformation_mode"], a["nearest_mode"]) == \
            ("nearest", "asymmetric", "floor"), a
        self.struct(r.input[1], "resize roi (empty)", [])
        self.struct(r.input[2], f"resize scales x{factor}", [1, 1, factor, factor])
        assert len(r.input) == 3
        return r.output[0]

    def transpose(self, x, perm):
        t = self.next(x, "Transpose")
        assert _attrs(t)["perm"] == perm, (_attrs(t)["perm"], perm)
        return t.output[0]

    def finish(self):
        left = [n.name + " " + n.op_type for n in self.nodes if n.name not in self.seen]
        assert not left, f"{len(left)} nodes not visited: {left[:8]}"
        free = [c for c in self.const if c not in self.claims]
        assert not free, f"{len(free)} constants not taken: {free[:8]}"


def is_dw(n):
    a = _attrs(n)
    return a.get("group", 1) > 1


def is_1x1(n):
    a = _attrs(n)
    return a.get("group", 1) == 1 and list(a["kernel_shape"]) == [1, 1]


def lcnet_blocks(w, y):
    """PP-LCNetV3 blocks from tensor y: depthwise rep conv, optional SE, pointwise rep conv.
    Returns the output tensor of each block."""
    outs = []
    while w.peek(y, "Conv", is_dw):
        p = f"backbone.blocks.{len(outs)}"
        y = w.rep_conv(y, p + ".dw", is_dw)
        if w.peek(y, "GlobalAveragePool"):
            y = w.se(y, p + ".se")
        y = w.rep_conv(y, p + ".pw", is_1x1)
        outs.append(y)
    return outs


def walk_det(w):
    y = w.conv("x", "backbone.conv1")
    w.layers["backbone.conv1"]["act"] = None
    outs = lcnet_blocks(w, y)
    taps = [i for i, t in enumerate(outs) if w.peek(t, "Conv")]
    assert taps == [2, 4, 9, 13], taps
    ins = []
    for k, i in enumerate(taps):
        t = w.conv(outs[i], f"backbone.out_convs.{k}", is_1x1)
        ins.append(w.conv(t, f"neck.ins_conv.{k}.conv"))
        ins[-1] = w.se(ins[-1], f"neck.ins_conv.{k}.se", residual=True)
    # top-down: out_k = in_k + up2(out_{k+1}), out_3 = in_3
    tops = [None, None, None, ins[3]]
    for k in (2, 1, 0):
        up = w.resize(tops[k + 1], 2)
        tops[k] = w.next(ins[k], "Add", lambda n: up in n.input).output[0]
    ps = [None] * 4
    for k in (3, 2, 1, 0):
        p = w.conv(tops[k], f"neck.inp_conv.{k}.conv")
        ps[k] = w.se(p, f"neck.inp_conv.{k}.se", residual=True)
    ups = [ps[0], w.resize(ps[1], 2), w.resize(ps[2], 4), w.resize(ps[3], 8)]
    cat = w.next(ups[3], "Concat")
    assert list(cat.input) == [ups[3], ups[2], ups[1], ups[0]] and _attrs(cat)["axis"] == 1
    y = w.conv(cat.output[0], "head.conv1")
    y = w.act(y, "head.conv1")
    y = w.conv(y, "head.conv2", op="ConvTranspose")
    y = w.act(y, "head.conv2")
    y = w.conv(y, "head.conv3", op="ConvTranspose")
    s = w.next(y, "Sigmoid")
    w.layers["head.conv3"]["act"] = "sigmoid"
    assert w.graph_outputs == [s.output[0]]
    return {"taps": {"blocks": taps, "strides": [4, 8, 16, 32]},
            "neck": "RSE-FPN: in_k = SE_res(conv1x1_k(out_convs_k(tap_k))); top-down "
                    "t3 = in3, t_k = in_k + nearest_up2(t_{k+1}); p_k = SE_res(conv3x3_k(t_k)); "
                    "concat([up8(p3), up4(p2), up2(p1), p0]) on channels",
            "concat_order": ["neck.inp_conv.3 x8", "neck.inp_conv.2 x4", "neck.inp_conv.1 x2",
                             "neck.inp_conv.0"],
            "resize": "nearest, asymmetric, floor: out[i, j] = in[i // f, j // f]",
            "output": "sigmoid probability map, 1 channel, same H, W as the input"}


def walk_rec(w, model):
    y = w.conv("x", "backbone.conv1")
    w.layers["backbone.conv1"]["act"] = None
    y = lcnet_blocks(w, y)[-1]
    pool = w.next(y, "AveragePool")
    pa = _attrs(pool)
    w.layers["neck.pool"] = {"op": "AveragePool", "kernel": pa["kernel_shape"],
                             "stride": pa["strides"], "pads": pa.get("pads", [0, 0, 0, 0]),
                             "ceil_mode": pa.get("ceil_mode", 0),
                             "count_include_pad": pa.get("count_include_pad", 0)}
    h = pool.output[0]
    y = w.conv(h, "neck.conv1")
    y = w.swish(y)
    w.layers["neck.conv1"]["act"] = "swish"
    y = w.conv(y, "neck.conv2")
    y = w.swish(y)
    w.layers["neck.conv2"]["act"] = "swish"
    # (B, C, H, W) -> (B, H*W, C)
    r = w.next(y, "Reshape")
    assert w.shape_subgraph(r.input[1]) == [None, -1]  # concat(shape[0:2], [-1])
    t = w.transpose(r.output[0], [0, 2, 1])
    heads = head_dim = None
    scale = None
    i = 0
    while True:
        ln = w.layernorm(t, f"neck.blocks.{i}.norm1")
        q = w.peek(ln, "MatMul", lambda n: w.is_const(n.input[1])
                   and w.const[n.input[1]].shape[1] == 3 * w.const[n.input[1]].shape[0])
        if not q:
            break
        p = f"neck.blocks.{i}"
        qkv = w.linear(ln, p + ".attn.qkv")
        r = w.next(qkv, "Reshape")
        static = w.shape_subgraph(r.input[1])
        assert static[0] == 0 and static[1] is None and static[2] == 3, static
        heads, head_dim = static[3], static[4]
        tq = w.transpose(r.output[0], [2, 0, 3, 1, 4])      # (3, B, heads, N, head_dim)
        parts = []
        for s in w.peek(tq, "Slice"):
            w.visit(s)
            k = int(np.ravel(w.struct(s.input[1], "qkv slice start"))[0])
            w.struct(s.input[2], "qkv slice end", [k + 1])
            w.struct(s.input[3], "qkv slice axis", [0])
            if len(s.input) > 4:
                w.struct(s.input[4], "qkv slice step", [1])
            sq = w.next(s.output[0], "Squeeze")
            assert _attrs(sq)["axes"] == [0]
            parts.append((k, sq.output[0]))
        parts = dict(parts)
        assert sorted(parts) == [0, 1, 2]
        mq = w.next(parts[0], "Mul")
        scale = float(np.ravel(w.struct(w.other(mq, parts[0]), "attention scale head_dim^-0.5",
                                        [head_dim ** -0.5]))[0])
        kt = w.transpose(parts[1], [0, 1, 3, 2])
        s = w.next(mq.output[0], "MatMul", lambda n: list(n.input) == [mq.output[0], kt])
        sm = w.next(s.output[0], "Softmax")
        assert _attrs(sm)["axis"] in (3, -1)
        o = w.next(sm.output[0], "MatMul", lambda n: list(n.input) == [sm.output[0], parts[2]])
        o = w.transpose(o.output[0], [0, 2, 1, 3])            # (B, N, heads, head_dim)
        r = w.next(o, "Reshape")
        assert w.shape_subgraph(r.input[1]) == [0, None, heads * head_dim]
        a = w.linear(r.output[0], p + ".attn.proj")
        t = w.next(t, "Add", lambda n: a in n.input).output[0]
        ln2 = w.layernorm(t, p + ".norm2")
        m = w.linear(ln2, p + ".mlp.fc1")
        m = w.swish(m)
        w.layers[p + ".mlp.fc1"]["act"] = "swish"
        m = w.linear(m, p + ".mlp.fc2")
        t = w.next(t, "Add", lambda n: m in n.input).output[0]
        i += 1
    depth = i
    # the last LayerNorm was taken as norm1 of a block that does not exist: rename it
    for t, what in w.claims.items():
        w.claims[t] = what.replace(f"neck.blocks.{depth}.norm1", "neck.norm")
    for suffix in (".weight", ".bias"):
        w.weights["neck.norm" + suffix] = w.weights.pop(f"neck.blocks.{depth}.norm1" + suffix)
        w.sources["neck.norm" + suffix] = w.sources.pop(f"neck.blocks.{depth}.norm1" + suffix)
    w.layers["neck.norm"] = w.layers.pop(f"neck.blocks.{depth}.norm1")
    r = w.next(ln, "Reshape")
    assert w.shape_subgraph(r.input[1]) == [0, 1, None, 120]
    z = w.transpose(r.output[0], [0, 3, 1, 2])                # (B, C, 1, W)
    z = w.conv(z, "neck.conv3")
    z = w.swish(z)
    w.layers["neck.conv3"]["act"] = "swish"
    cat = w.next(h, "Concat")
    assert list(cat.input) == [h, z] and _attrs(cat)["axis"] == 1
    z = w.conv(cat.output[0], "neck.conv4")
    z = w.swish(z)
    w.layers["neck.conv4"]["act"] = "swish"
    z = w.conv(z, "neck.conv1x1")
    z = w.swish(z)
    w.layers["neck.conv1x1"]["act"] = "swish"
    sq = w.next(z, "Squeeze")
    assert _attrs(sq)["axes"] == [2]
    z = w.transpose(sq.output[0], [0, 2, 1])                  # (B, W, C)
    z = w.linear(z, "head.fc")
    sm = w.next(z, "Softmax")
    assert _attrs(sm)["axis"] in (2, -1) and w.graph_outputs == [sm.output[0]]
    ln_eps = {k: v["eps"] for k, v in w.layers.items() if v["op"] == "LayerNorm"}
    return {"depth": depth, "num_heads": heads, "head_dim": head_dim, "attn_scale": scale,
            "layernorm_eps": ln_eps,
            "tokens": "after neck.conv2 the (B, C=120, H=1, W) map is flattened to (B, H*W, C) "
                      "(row-major over H, W); after neck.norm it is reshaped to (B, 1, W, C) and "
                      "transposed to (B, C, 1, W); the graph hard-codes H = 1 there, so the input "
                      "height must be 48",
            "qkv": "qkv (B, N, 360) -> reshape (B, N, 3, heads, head_dim) -> q, k, v = [:, :, 0], "
                   "[:, :, 1], [:, :, 2]; attn = softmax(q * scale @ k^T) over keys; out = attn @ "
                   "v, heads concatenated back in head order",
            "concat_order": ["neck.pool output (480 ch)", "neck.conv3 output (480 ch)"],
            "output": "softmax over 6625 classes per time step, (B, T, 6625)",
            "num_classes": int(w.weights["head.fc.weight"].shape[1])}


def walk_cls(w):
    y = w.conv("x", "backbone.conv1")
    y = w.act(y, "backbone.conv1")
    i = 0

    def starts_block(t):
        # a block starts with a 1x1 expand conv whose (BN, act) output feeds a depthwise conv
        c = w.peek(t, "Conv", is_1x1)
        if len(c) != 1:
            return False
        frontier, depth = [c[0].output[0]], 0
        while frontier and depth < 8:
            nxt = []
            for f in frontier:
                for n in w.users[f]:
                    if n.op_type == "Conv":
                        if is_dw(n):
                            return True
                        continue
                    if n.op_type == "MaxPool":
                        return False
                    nxt.extend(n.output)
            frontier, depth = nxt, depth + 1
        return False

    while starts_block(y):
        p = f"backbone.blocks.{i}"
        x = y
        y = w.conv(x, p + ".expand", is_1x1)
        y = w.act(y, p + ".expand")
        y = w.conv(y, p + ".dw", is_dw)
        y = w.act(y, p + ".dw")
        if w.peek(y, "GlobalAveragePool"):
            y = w.se(y, p + ".se")
        y = w.conv(y, p + ".linear", is_1x1)
        w.layers[p + ".linear"]["act"] = None
        res = w.peek(x, "Add", lambda n: y in n.input)
        w.layers[p + ".linear"]["residual"] = bool(res)
        if res:
            y = w.next(x, "Add", lambda n: y in n.input).output[0]
        i += 1
    y = w.conv(y, "backbone.conv2", is_1x1)
    y = w.act(y, "backbone.conv2")
    mp = w.next(y, "MaxPool")
    a = _attrs(mp)
    w.layers["backbone.pool"] = {"op": "MaxPool", "kernel": a["kernel_shape"],
                                 "stride": a["strides"], "pads": a.get("pads", [0, 0, 0, 0]),
                                 "ceil_mode": a.get("ceil_mode", 0)}
    g = w.next(mp.output[0], "GlobalAveragePool")
    r = w.next(g.output[0], "Reshape")
    assert w.shape_subgraph(r.input[1]) == [None, 200]
    y = w.linear(r.output[0], "head.fc")
    sm = w.next(y, "Softmax")
    assert _attrs(sm)["axis"] in (1, -1)
    ident = w.next(sm.output[0], "Identity")
    assert w.graph_outputs == [ident.output[0]]
    return {"blocks": i, "labels": ["0", "180"],
            "output": "softmax over 2 classes: P(upright), P(rotated by 180 degrees)",
            "head": "MaxPool 2x2 s2 -> global average pool -> flatten -> head.fc -> softmax"}


def kind_of(model):
    ops = {n.op_type for n in model.graph.node}
    if "ConvTranspose" in ops:
        return "det"
    if "LayerNormalization" in ops or "ReduceMean" in ops:
        return "rec"
    if "MaxPool" in ops:
        return "cls"
    sys.exit("not a PP-OCR det/rec/cls graph")


def convert(src):
    """(tensors, metadata, walker) for the graph at src."""
    model = onnx.load(src)
    kind = kind_of(model)
    w = Walker(model)
    assert w.graph_inputs == ["x"], w.graph_inputs
    if kind == "det":
        structure = walk_det(w)
    elif kind == "rec":
        structure = walk_rec(w, model)
    else:
        structure = walk_cls(w)
    w.finish()
    with open(src, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    meta = {"format": "brotensor-ppocr-1", "kind": kind, "source": os.path.basename(src),
            "source_sha256": sha, "bn_folding": BN_RULE,
            "layers": json.dumps(w.layers, separators=(",", ":")),
            "structure": json.dumps(structure, separators=(",", ":"))}
    props = {p.key: p.value for p in model.metadata_props}
    if kind == "rec":
        chars = props["character"]
        entries = chars.split("\n")
        assert entries == chars.splitlines() and all(len(c) == 1 for c in entries)
        assert len(entries) + 2 == structure["num_classes"], len(entries)
        meta["character"] = chars
    return w.weights, meta, w


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1:]
    tensors, meta, w = convert(src)
    write_safetensors(dst, tensors, meta)
    back, back_meta = read_safetensors(dst, with_metadata=True)
    assert sorted(back) == sorted(tensors) and back_meta == meta, "differs after reading back"
    for name, a in tensors.items():
        b = back[name]
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b), name
    natural = lambda s: [int(p) if p.isdigit() else p for p in s.split(".")]  # noqa: E731
    for name in sorted(tensors, key=natural):
        print(f"{name:40s} {DTYPES[tensors[name].dtype]} {str(list(tensors[name].shape)):18s} "
              f"<- {w.sources[name]}")
    n_weight = sum(1 for v in w.claims.values() if not v.startswith("structural"))
    print(f"{meta['kind']}: {len(w.seen)} nodes visited (all), {len(w.const)} constants taken "
          f"exactly once ({n_weight} into weights, {len(w.structural)} structural, checked)")
    print(f"{len(tensors)} tensors, {sum(a.size for a in tensors.values())} floats -> {dst} "
          f"(read back and identical)")


if __name__ == "__main__":
    main()
