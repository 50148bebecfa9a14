"""Copy one state dict out of a PyTorch zip checkpoint into a safetensors file, without torch.

    python3 scripts/torch_zip_to_safetensors.py CHECKPOINT KEY OUT.safetensors

CHECKPOINT is a file written by `torch.save` in the zip format (PyTorch >= 1.6): a zip holding
`<root>/data.pkl` (the pickled object), `<root>/byteorder` and one raw file per storage,
`<root>/data/<key>`. KEY names the state dict inside the pickled top-level dict (for example
`netG_state_dict`); an empty KEY takes the top-level object itself as the state dict.

Standard library only. The pickle is read by a restricted unpickler that knows exactly four
globals (collections.OrderedDict, torch._utils._rebuild_tensor_v2 and the Float and Long
storage classes) and refuses every other one, so the checkpoint cannot run code. A tensor is
rebuilt from its storage key, storage offset, size and stride; only contiguous tensors are
accepted (what `torch.save` of a module's state dict gives). Storages must be little-endian.

The safetensors file is written by hand: an 8-byte little-endian header length, the JSON header
{name: {"dtype", "shape", "data_offsets"}} (names sorted) and the raw tensor bytes in the same
order. It is read back and compared with the checkpoint before the script says it is done.
"""
import collections
import json
import pickle
import struct
import sys
import zipfile

# storage class -> (safetensors dtype, bytes per element)
STORAGES = {
    "FloatStorage": ("F32", 4),
    "LongStorage": ("I64", 8),
}


class StorageRef:
    """A storage named by the pickle's persistent id: its file key and element type."""

    def __init__(self, kind, key):
        self.kind, self.key = kind, key


class TensorRef:
    """A tensor as the pickle describes it: a view into a storage."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, offset
        self.size, self.stride = tuple(size), tuple(stride)


def rebuild_tensor_v2(storage, offset, size, stride, *_rest):
    return TensorRef(storage, offset, size, stride)


class StorageType:
    def __init__(self, name):
        self.name = name


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals a state dict needs; anything else is an error."""

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return rebuild_tensor_v2
        if module == "torch" and name in STORAGES:
            return StorageType(name)
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")

    def persistent_load(self, pid):
        # ('storage', storage_type, key, location, numel)
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        kind = pid[1]
        if not isinstance(kind, StorageType):
            raise pickle.UnpicklingError(f"unexpected storage type {kind!r}")
        return StorageRef(kind.name, str(pid[2]))


def contiguous_strides(size):
    strides, step = [], 1
    for d in reversed(size):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def load_state_dict(path, key):
    """{name: (dtype, shape, bytes)} of the state dict `key` in the checkpoint at `path`."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            sys.exit(f"{path}: expected one */data.pkl, found {pkl}")
        root = pkl[0][: -len("data.pkl")]
        order = z.read(root + "byteorder").decode().strip() if root + "byteorder" in names else "little"
        if order != "little":
            sys.exit(f"{path}: storages are {order}-endian; only little-endian is handled")
        obj = RestrictedUnpickler(z.open(pkl[0])).load()
        if key and (not isinstance(obj, dict) or key not in obj):
            found = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            sys.exit(f"{path}: no `{key}` in the checkpoint (it holds {found})")
        state = obj[key] if key else obj
        out = {}
        for name, t in state.items():
            if not isinstance(t, TensorRef):
                sys.exit(f"{name}: not a tensor ({type(t).__name__})")
            if t.stride != contiguous_strides(t.size):
                sys.exit(f"{name}: stride {t.stride} is not contiguous for size {t.size}")
            dtype, width = STORAGES[t.storage.kind]
            numel = 1
            for d in t.size:
                numel *= d
            raw = z.read(root + "data/" + t.storage.key)
            begin, end = t.offset * width, (t.offset + numel) * width
            if end > len(raw):
                sys.exit(f"{name}: needs bytes {begin}..{end} of a {len(raw)}-byte storage")
            out[name] = (dtype, list(t.size), raw[begin:end])
        return out


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for name in sorted(tensors):
            f.write(tensors[name][2])


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n])
    body = raw[8 + n:]
    return {name: (info["dtype"], info["shape"], body[info["data_offsets"][0]: info["data_offsets"][1]])
            for name, info in header.items()}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, key, dst = sys.argv[1:]
    tensors = load_state_dict(src, key)
    write_safetensors(dst, tensors)
    if read_safetensors(dst) != tensors:
        sys.exit(f"{dst}: reads back different from {src}")
    for name in sorted(tensors):
        dtype, shape, _ = tensors[name]
        print(f"{name:40s} {dtype} {shape}")
    print(f"{len(tensors)} tensors -> {dst} (read back and identical)")


if __name__ == "__main__":
    main()
