"""Copy every initializer of an ONNX model into a safetensors file, names unchanged.

    python3 scripts/onnx_to_safetensors.py IN.onnx OUT.safetensors

Needs the `onnx` package (pinned with hashes in scripts/requirements-onnx.txt) and numpy; the
safetensors file is written by hand. Its layout: an 8-byte little-endian header length N, then
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}} (names sorted, offsets
relative to the end of the header, back to back), then the raw little-endian tensor bytes in the
same order. Nothing but the initializers is stored (no metadata). The file is read back and
compared with the model before the script says it is done.
"""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

# numpy dtype -> safetensors dtype name
DTYPES = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
    np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL",
}


def initializers(path):
    """{name: numpy array} for every initializer of the main graph."""
    graph = onnx.load(path).graph
    tensors = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    assert len(tensors) == len(graph.initializer), "duplicate initializer names"
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Write {name: numpy array} (names sorted); `metadata`, a {str: str} dict, becomes the
    header's `__metadata__` entry when given."""
    header, blobs, offset = {}, [], 0
    if metadata:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        a = tensors[name]
        if a.dtype not in DTYPES:
            sys.exit(f"{name}: dtype {a.dtype} has no safetensors name here")
        data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for data in blobs:
            f.write(data)


def read_safetensors(path, with_metadata=False):
    """The inverse of write_safetensors, for the check: {name: array}, and the `__metadata__`
    dict ({} when absent) as a second value when `with_metadata`."""
    names = {v: k for k, v in DTYPES.items()}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n])
    body = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = names[info["dtype"]].newbyteorder("<")
        out[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"])
    return (out, metadata) if with_metadata else out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1:]
    tensors = initializers(src)
    write_safetensors(dst, tensors)
    back = read_safetensors(dst)
    assert sorted(back) == sorted(tensors), "names differ after reading back"
    for name, a in tensors.items():
        b = back[name]
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b), name
    for name in sorted(tensors):
        print(f"{name:48s} {DTYPES[tensors[name].dtype]} {list(tensors[name].shape)}")
    print(f"{len(tensors)} tensors -> {dst} (read back and identical)")


if __name__ == "__main__":
    main()
