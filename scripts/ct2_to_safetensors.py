#!/usr/bin/env python3
"""Converts a CTranslate2 `model.bin` into a safetensors file. Standard library only.

    python3 scripts/ct2_to_safetensors.py model.bin out.safetensors
    python3 scripts/ct2_to_safetensors.py model.bin --list

Every variable keeps its CTranslate2 name (e.g. `encoder/layer_0/self_attention/linear_0/weight`)
and its stored dtype and bytes (FP16 stays F16; scalars such as `encoder/num_heads` keep their
int16/int8/float32 type, as rank-0 tensors). Aliases are skipped, not copied: they are listed in
the safetensors metadata as `"aliases": "{alias: target}"` (JSON in a string). For Whisper the
one alias is `decoder/projection/weight -> decoder/embeddings/weight` (tied output projection;
a copy would add 40 MB). After writing, the file is read back and every tensor compared byte for
byte with model.bin; for a WhisperSpec the shapes are also checked against tiny.en's dimensions.
--list prints the records instead of converting.

The model.bin layout (all integers little-endian; this is what CTranslate2's
python/ctranslate2/specs/model_spec.py `_serialize` writes and src/models/model.cc reads):

    u32  binary_version             (6 for current converters; this reader handles >= 4)
    str  spec_name                  (binary_version >= 2), e.g. "WhisperSpec"
    u32  spec_revision              (binary_version >= 2), e.g. 3
    u32  num_variables
    num_variables times:
        str  name                   "/"-separated scope, e.g. "decoder/embeddings/weight"
        u8   rank                   0 for a scalar
        u32  dims[rank]             outermost first (row-major data)
        u8   dtype code             0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16
        u32  num_bytes              == prod(dims) * item size
        u8   data[num_bytes]        raw little-endian values, no padding or alignment
    u32  num_aliases                (binary_version >= 3)
    num_aliases times:
        str  alias_name
        str  target_name            a variable above (loader also aliases *_scale / *_zero)
    (end of file: no trailing config; config.json sits beside model.bin)

    str = u16 length including a terminating NUL, then that many bytes (UTF-8 + b"\\0").

Flags and enums are int8 scalars (e.g. decoder/activation = 3, GELU); int16 scalars hold counts
(encoder/num_heads = 6); string attributes (none in Whisper) are int8 arrays of UTF-8 bytes. Binary versions < 4 stored an item size instead of a dtype code (not handled).
"""
import json
import struct
import sys

DTYPES = {  # CTranslate2 DataType code -> (safetensors dtype, item size)
    0: ("F32", 4),
    1: ("I8", 1),
    2: ("I16", 2),
    3: ("I32", 4),
    4: ("F16", 2),
    5: ("BF16", 2),
}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"model.bin truncated: need {n} bytes at offset {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.u("H")
        raw = self.take(n)
        if n == 0 or raw[-1] != 0:
            raise ValueError(f"bad string at offset {self.pos - n}")
        return raw[:-1].decode("utf-8")


def read_model_bin(path):
    """Returns (header dict, [(name, dtype code, dims, bytes)], [(alias, target)])."""
    with open(path, "rb") as f:
        r = Reader(f.read())
    version = r.u("I")
    if version < 4:
        raise ValueError(f"binary version {version} < 4 is not supported")
    header = {"binary_version": version, "spec": r.string(), "revision": r.u("I")}
    variables = []
    for _ in range(r.u("I")):
        name = r.string()
        dims = [r.u("I") for _ in range(r.u("B"))]
        code = r.u("B")
        nbytes = r.u("I")
        count = 1
        for d in dims:
            count *= d
        if code not in DTYPES or count * DTYPES[code][1] != nbytes:
            raise ValueError(f"{name}: dtype code {code}, dims {dims}, {nbytes} bytes do not agree")
        variables.append((name, code, dims, r.take(nbytes)))
    aliases = [(r.string(), r.string()) for _ in range(r.u("I"))]
    if r.pos != len(r.data):
        raise ValueError(f"{len(r.data) - r.pos} unexpected trailing bytes")
    return header, variables, aliases


def write_safetensors(path, tensors, metadata):
    """tensors: [(name, safetensors dtype, shape, bytes)] in file order."""
    head, offset = {"__metadata__": metadata}, 0
    for name, dtype, shape, raw in tensors:
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    blob = json.dumps(head, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, _, _, raw in tensors:
            f.write(raw)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    header, variables, aliases = read_model_bin(argv[0])
    if "--list" in argv:
        print(json.dumps(header))
        for name, code, dims, raw in variables:
            extra = ""
            if not dims:  # scalar: show its value
                fmt = {0: "f", 1: "b", 2: "h", 3: "i"}.get(code)
                extra = f" = {struct.unpack('<' + fmt, raw)[0]}" if fmt else ""
            elif code == 1 and len(dims) == 1:  # int8 vector, maybe a string
                extra = f" = {raw!r}"
            print(f"{name}\t{DTYPES[code][0]}\t{dims}{extra}")
        for alias, target in aliases:
            print(f"alias {alias} -> {target}")
        return
    tensors = [(n, DTYPES[c][0], d, raw) for n, c, d, raw in variables]
    metadata = {
        "format": "ctranslate2",
        "spec": header["spec"],
        "revision": str(header["revision"]),
        "binary_version": str(header["binary_version"]),
        "aliases": json.dumps(dict(aliases)),
    }
    write_safetensors(argv[1], tensors, metadata)
    back = read_safetensors(argv[1])
    assert list(back) == [t[0] for t in tensors], "names or order differ after reading back"
    for name, dtype, shape, raw in tensors:
        assert back[name] == (dtype, shape, raw), f"{name} differs after reading back"
    if header["spec"] == "WhisperSpec":
        check_whisper_tiny_en({n: s for n, (_, s, _) in back.items()}, dict(aliases))
    print(f"{argv[1]}: {len(variables)} variables, {len(aliases)} aliases skipped "
          f"({header['spec']} rev {header['revision']}, binary v{header['binary_version']}), "
          "read back and checked")


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} in file order."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}


def check_whisper_tiny_en(shapes, aliases):
    """Shapes of whisper tiny.en: d 384, 6 heads, 4 + 4 layers, vocab 51864, 80 mels,
    1500 audio and 448 text positions, FFN 1536."""
    d, f, n_mels, vocab = 384, 1536, 80, 51864
    want = {
        "encoder/conv1/weight": [d, n_mels, 3], "encoder/conv1/bias": [d],
        "encoder/conv2/weight": [d, d, 3], "encoder/conv2/bias": [d],
        "encoder/position_encodings/encodings": [1500, d],
        "encoder/layer_norm/gamma": [d], "encoder/layer_norm/beta": [d],
        "encoder/num_heads": [], "decoder/num_heads": [],
        "decoder/embeddings/weight": [vocab, d],
        "decoder/position_encodings/encodings": [448, d],
        "decoder/layer_norm/gamma": [d], "decoder/layer_norm/beta": [d],
    }
    blocks = {"self_attention": {"linear_0": 3 * d, "linear_1": d}, "ffn": {"linear_0": f, "linear_1": d}}
    cross = {"attention": {"linear_0": d, "linear_1": 2 * d, "linear_2": d}}
    for side, parts in (("encoder", blocks), ("decoder", {**blocks, **cross})):
        for i in range(4):
            for part, linears in parts.items():
                p = f"{side}/layer_{i}/{part}"
                want[p + "/layer_norm/gamma"] = want[p + "/layer_norm/beta"] = [d]
                for lin, out in linears.items():
                    inp = f if (part, lin) == ("ffn", "linear_1") else d
                    want[f"{p}/{lin}/weight"], want[f"{p}/{lin}/bias"] = [out, inp], [out]
    missing = [k for k in want if k not in shapes]
    wrong = [f"{k}: {shapes[k]} != {v}" for k, v in want.items() if k in shapes and shapes[k] != v]
    assert not missing and not wrong, f"missing {missing}, wrong {wrong}"
    assert aliases.get("decoder/projection/weight") == "decoder/embeddings/weight", aliases
    extra = sorted(k for k in shapes if k not in want)
    assert all(shapes[k] == [] for k in extra), f"unexpected tensors {extra}"


if __name__ == "__main__":
    main(sys.argv[1:])
