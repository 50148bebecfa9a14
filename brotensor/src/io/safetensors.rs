//! The safetensors format: an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`), then
//! the tensor bytes, offsets relative to the end of the header.
//!
//! [`SafeTensors::open`] maps the file and validates the whole header before returning:
//! sizes, JSON, dtype names, shapes (no overflow), offsets inside the data, no overlaps, and a
//! byte count equal to `shape x dtype size` for every tensor. Views borrow the mapped bytes;
//! nothing is copied until a tensor is uploaded. [`write()`] produces files the Python
//! `safetensors` package reads back.
//!
//! A mapped file must not be truncated or rewritten while its [`SafeTensors`] is alive: a
//! truncation kills the process with `SIGBUS` when a lost page is read, and bytes rewritten in
//! place change views that Rust treats as immutable (undefined behaviour). Where the file may
//! change, [`SafeTensors::read`] copies it into memory instead and validates it the same way
//! (see [`crate::io`] for the trade-off).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value};

use super::FileBytes;
use crate::runtime::{compute_dtype, default_device};
use crate::{ops, Device, Dtype, Error, Result, Tensor};

/// Largest header accepted (the Python package's own limit): anything larger is not a
/// safetensors file, and refusing it bounds the JSON parse.
const MAX_HEADER: u64 = 100_000_000;

/// The element types a safetensors file can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum StDtype {
    /// Booleans, one byte each.
    BOOL,
    /// Unsigned 8-bit.
    U8,
    /// Signed 8-bit.
    I8,
    /// 8-bit float, 4 exponent bits.
    F8_E4M3,
    /// 8-bit float, 5 exponent bits.
    F8_E5M2,
    /// Signed 16-bit.
    I16,
    /// Unsigned 16-bit.
    U16,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit.
    I32,
    /// Unsigned 32-bit.
    U32,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// Signed 64-bit.
    I64,
    /// Unsigned 64-bit.
    U64,
}

impl StDtype {
    const ALL: [StDtype; 15] = [
        StDtype::BOOL,
        StDtype::U8,
        StDtype::I8,
        StDtype::F8_E4M3,
        StDtype::F8_E5M2,
        StDtype::I16,
        StDtype::U16,
        StDtype::F16,
        StDtype::BF16,
        StDtype::I32,
        StDtype::U32,
        StDtype::F32,
        StDtype::F64,
        StDtype::I64,
        StDtype::U64,
    ];

    /// The name in the header (`"F32"`, `"BF16"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            StDtype::BOOL => "BOOL",
            StDtype::U8 => "U8",
            StDtype::I8 => "I8",
            StDtype::F8_E4M3 => "F8_E4M3",
            StDtype::F8_E5M2 => "F8_E5M2",
            StDtype::I16 => "I16",
            StDtype::U16 => "U16",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::I32 => "I32",
            StDtype::U32 => "U32",
            StDtype::F32 => "F32",
            StDtype::F64 => "F64",
            StDtype::I64 => "I64",
            StDtype::U64 => "U64",
        }
    }

    /// The dtype of a header name, if it is one.
    pub fn from_name(name: &str) -> Option<StDtype> {
        StDtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            StDtype::BOOL | StDtype::U8 | StDtype::I8 | StDtype::F8_E4M3 | StDtype::F8_E5M2 => 1,
            StDtype::I16 | StDtype::U16 | StDtype::F16 | StDtype::BF16 => 2,
            StDtype::I32 | StDtype::U32 | StDtype::F32 => 4,
            StDtype::F64 | StDtype::I64 | StDtype::U64 => 8,
        }
    }

    /// The tensor dtype that stores it unchanged, where brotensor has one.
    pub fn tensor_dtype(self) -> Option<Dtype> {
        match self {
            StDtype::F32 => Some(Dtype::F32),
            StDtype::F16 => Some(Dtype::F16),
            StDtype::BF16 => Some(Dtype::BF16),
            StDtype::I8 => Some(Dtype::I8),
            StDtype::I32 => Some(Dtype::I32),
            StDtype::F64 => Some(Dtype::F64),
            _ => None,
        }
    }
}

/// One tensor's entry, validated.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    dtype: StDtype,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

/// A borrowed view of one tensor in a mapped file.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: StDtype,
    /// Its shape, outermost first.
    pub shape: &'a [usize],
    /// Its bytes (row-major, little-endian), borrowed from the file.
    pub data: &'a [u8],
}

impl TensorView<'_> {
    /// Elements (the product of the shape; 1 for a scalar).
    pub fn numel(&self) -> usize {
        // Validated at open: the product fits and matches the byte count.
        self.shape.iter().product()
    }
}

/// An opened, validated safetensors file: a memory map of it ([`SafeTensors::open`]) or a
/// copy in memory ([`SafeTensors::read`], [`SafeTensors::from_bytes`]).
pub struct SafeTensors {
    bytes: FileBytes,
    data_start: usize,
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafeTensors")
            .field("tensors", &self.entries.len())
            .field("metadata", &self.metadata)
            .finish()
    }
}

const OP: &str = "safetensors";

fn bad(reason: impl Into<String>) -> Error {
    Error::format(OP, reason)
}

impl SafeTensors {
    /// Maps `path` and validates its header: the default, cheap whatever the file's size.
    ///
    /// The views borrow the mapped pages, so the file must stay unchanged while the returned
    /// value lives: truncating it can crash the process with `SIGBUS` and rewriting it in place
    /// is undefined behaviour (see the module docs). Use [`SafeTensors::read`] where another
    /// process may modify the file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        SafeTensors::parse(FileBytes::map(OP, path.as_ref())?)
    }

    /// Reads all of `path` into memory and validates it as [`SafeTensors::open`] does. It
    /// holds the whole file in RAM, and later changes to the file cannot affect it.
    pub fn read(path: impl AsRef<Path>) -> Result<SafeTensors> {
        SafeTensors::parse(FileBytes::read(OP, path.as_ref())?)
    }

    /// Validates a safetensors file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<SafeTensors> {
        SafeTensors::parse(FileBytes::Owned(bytes))
    }

    fn parse(bytes: FileBytes) -> Result<SafeTensors> {
        if bytes.len() < 8 {
            return Err(bad(format!(
                "{} bytes: too short for the 8-byte header length",
                bytes.len()
            )));
        }
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        if n > MAX_HEADER {
            return Err(bad(format!(
                "header length {n} exceeds the {MAX_HEADER}-byte limit"
            )));
        }
        let header_end = 8 + n as usize;
        if header_end > bytes.len() {
            return Err(bad(format!(
                "header length {n} runs past the end of the file ({} bytes)",
                bytes.len()
            )));
        }
        let text = std::str::from_utf8(&bytes[8..header_end])
            .map_err(|e| bad(format!("header is not UTF-8: {e}")))?;
        let json: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("header is not JSON: {e}")))?;
        let Value::Object(map) = json else {
            return Err(bad("header is not a JSON object"));
        };
        let data_len = bytes.len() - header_end;
        let mut entries = Vec::with_capacity(map.len());
        let mut metadata = BTreeMap::new();
        for (name, value) in map {
            if name == "__metadata__" {
                metadata = parse_metadata(value)?;
                continue;
            }
            entries.push(parse_entry(name, value, data_len)?);
        }
        // File order is data order; the ranges must not overlap.
        entries.sort_by_key(|e| (e.begin, e.end));
        for pair in entries.windows(2) {
            if pair[1].begin < pair[0].end {
                return Err(bad(format!(
                    "tensors `{}` [{}, {}) and `{}` [{}, {}) overlap",
                    pair[0].name,
                    pair[0].begin,
                    pair[0].end,
                    pair[1].name,
                    pair[1].begin,
                    pair[1].end
                )));
            }
        }
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        Ok(SafeTensors {
            bytes,
            data_start: header_end,
            entries,
            index,
            metadata,
        })
    }

    fn view<'a>(&'a self, e: &'a Entry) -> TensorView<'a> {
        TensorView {
            name: &e.name,
            dtype: e.dtype,
            shape: &e.shape,
            data: &self.bytes[self.data_start + e.begin..self.data_start + e.end],
        }
    }

    /// The tensor called `name`, if there is one.
    pub fn find(&self, name: &str) -> Option<TensorView<'_>> {
        self.index.get(name).map(|&i| self.view(&self.entries[i]))
    }

    /// The tensor called `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<TensorView<'_>> {
        self.find(name)
            .ok_or_else(|| Error::invalid("safetensors::get", format!("no tensor named `{name}`")))
    }

    /// Every tensor, in file (data) order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.entries.iter().map(|e| self.view(e))
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `__metadata__` strings.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }
}

fn parse_metadata(value: Value) -> Result<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        return Err(bad("`__metadata__` is not an object"));
    };
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => Err(bad(format!(
                "`__metadata__`.`{k}` is not a string: {other}"
            ))),
        })
        .collect()
}

fn parse_entry(name: String, value: Value, data_len: usize) -> Result<Entry> {
    let Value::Object(fields) = value else {
        return Err(bad(format!("`{name}` is not an object")));
    };
    let field = |key: &str| -> Result<&Value> {
        fields
            .get(key)
            .ok_or_else(|| bad(format!("`{name}` has no `{key}`")))
    };
    let dtype = match field("dtype")? {
        Value::String(s) => {
            StDtype::from_name(s).ok_or_else(|| bad(format!("`{name}` has unknown dtype `{s}`")))?
        }
        other => return Err(bad(format!("`{name}`.dtype is not a string: {other}"))),
    };
    let shape = unsigned_list(&name, "shape", field("shape")?)?;
    let offsets = unsigned_list(&name, "data_offsets", field("data_offsets")?)?;
    let [begin, end] = offsets[..] else {
        return Err(bad(format!(
            "`{name}`.data_offsets must hold two values, has {}",
            offsets.len()
        )));
    };
    if begin > end || end > data_len {
        return Err(bad(format!(
            "`{name}` data [{begin}, {end}) is not inside the {data_len} data bytes"
        )));
    }
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("`{name}` shape {shape:?} overflows")))?;
    let bytes = numel
        .checked_mul(dtype.size_bytes())
        .ok_or_else(|| bad(format!("`{name}` shape {shape:?} overflows")))?;
    if bytes != end - begin {
        return Err(bad(format!(
            "`{name}`: nbytes/shape mismatch: {shape:?} of {} takes {bytes} bytes, data_offsets span {}",
            dtype.name(),
            end - begin
        )));
    }
    Ok(Entry {
        name,
        dtype,
        shape,
        begin,
        end,
    })
}

fn unsigned_list(name: &str, key: &str, value: &Value) -> Result<Vec<usize>> {
    let Value::Array(items) = value else {
        return Err(bad(format!("`{name}`.{key} is not an array")));
    };
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|u| usize::try_from(u).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "`{name}`.{key} holds {v}, not a non-negative integer"
                    ))
                })
        })
        .collect()
}

/// Checks a view against a requested 2-D shape.
fn check_2d(op: &'static str, view: &TensorView<'_>, rows: usize, cols: usize) -> Result<()> {
    if rows.checked_mul(cols) != Some(view.numel()) {
        return Err(Error::shape(
            op,
            format!(
                "`{}` has {} elements, not {rows} x {cols}",
                view.name,
                view.numel()
            ),
        ));
    }
    Ok(())
}

/// `view` as a `rows x cols` tensor on the default device, dtype unchanged (F32, F16 or BF16;
/// other dtypes are refused).
pub fn upload(view: &TensorView<'_>, rows: usize, cols: usize) -> Result<Tensor> {
    upload_on(default_device(), view, rows, cols)
}

/// [`upload`] onto `device`.
pub fn upload_on(
    device: Device,
    view: &TensorView<'_>,
    rows: usize,
    cols: usize,
) -> Result<Tensor> {
    let op = "safetensors::upload";
    check_2d(op, view, rows, cols)?;
    match view.dtype.tensor_dtype() {
        Some(d) if d.is_float() => Tensor::from_raw_bytes_on(device, view.data, rows, cols, d),
        _ => Err(Error::invalid(
            op,
            format!(
                "`{}` is {}; upload takes F32, F16 or BF16",
                view.name,
                view.dtype.name()
            ),
        )),
    }
}

/// `view` as a `rows x cols` tensor of `want` (F32, F16 or BF16) on the default device. The
/// file's bytes are uploaded as they are and converted where the tensor lives (on a GPU, by
/// the device), rounding to nearest even.
pub fn upload_as(view: &TensorView<'_>, rows: usize, cols: usize, want: Dtype) -> Result<Tensor> {
    upload_as_on(default_device(), view, rows, cols, want)
}

/// [`upload_as`] onto `device`.
pub fn upload_as_on(
    device: Device,
    view: &TensorView<'_>,
    rows: usize,
    cols: usize,
    want: Dtype,
) -> Result<Tensor> {
    if !want.is_float() {
        return Err(Error::invalid(
            "safetensors::upload_as",
            format!("can convert to F32, F16 or BF16, not {want}"),
        ));
    }
    let raw = upload_on(device, view, rows, cols)?;
    if raw.dtype() == want {
        return Ok(raw);
    }
    let mut out = Tensor::default();
    ops::cast(&raw, &mut out, want)?;
    Ok(out)
}

/// [`upload_as`] at the default device's compute dtype ([`crate::compute_dtype`]).
pub fn upload_compute(view: &TensorView<'_>, rows: usize, cols: usize) -> Result<Tensor> {
    upload_as(view, rows, cols, compute_dtype()?)
}

/// [`upload_compute`] of the tensor called `name`, with errors that name it.
pub fn upload_compute_checked(
    file: &SafeTensors,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Tensor> {
    let view = file.get(name)?;
    upload_compute(&view, rows, cols).map_err(|e| match e {
        Error::Shape { reason, .. } | Error::InvalidArgument { reason, .. } => Error::invalid(
            "safetensors::upload_compute_checked",
            format!("tensor `{name}`: {reason}"),
        ),
        other => other,
    })
}

/// One tensor to write.
#[derive(Debug, Clone, Copy)]
pub struct WriteEntry<'a> {
    /// Its name (non-empty, unique, not `__metadata__`).
    pub name: &'a str,
    /// Its element type.
    pub dtype: StDtype,
    /// Its shape.
    pub shape: &'a [usize],
    /// Its bytes: exactly `shape x dtype size`.
    pub data: &'a [u8],
}

/// The bytes of a safetensors file holding `entries` (in that order) and `metadata`.
pub fn serialize(
    entries: &[WriteEntry<'_>],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let op = "safetensors::write";
    let mut header = Map::new();
    if !metadata.is_empty() {
        let m = metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        header.insert("__metadata__".into(), Value::Object(m));
    }
    let mut offset = 0usize;
    for e in entries {
        if e.name.is_empty() || e.name == "__metadata__" {
            return Err(Error::invalid(op, format!("bad tensor name `{}`", e.name)));
        }
        if header.contains_key(e.name) {
            return Err(Error::invalid(
                op,
                format!("duplicate tensor name `{}`", e.name),
            ));
        }
        let bytes = e
            .shape
            .iter()
            .try_fold(e.dtype.size_bytes(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                Error::invalid(op, format!("`{}`: shape {:?} overflows", e.name, e.shape))
            })?;
        if bytes != e.data.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "`{}`: shape {:?} of {} takes {bytes} bytes, {} given",
                    e.name,
                    e.shape,
                    e.dtype.name(),
                    e.data.len()
                ),
            ));
        }
        let mut fields = Map::new();
        fields.insert("dtype".into(), Value::String(e.dtype.name().into()));
        fields.insert("shape".into(), Value::from(e.shape.to_vec()));
        fields.insert(
            "data_offsets".into(),
            Value::from(vec![offset, offset + bytes]),
        );
        header.insert(e.name.to_string(), Value::Object(fields));
        offset += bytes;
    }
    let mut json = serde_json::to_string(&Value::Object(header)).expect("a JSON value serializes");
    // Pad with spaces so the data starts 8-byte aligned.
    while !json.len().is_multiple_of(8) {
        json.push(' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + offset);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    for e in entries {
        out.extend_from_slice(e.data);
    }
    Ok(out)
}

/// Writes a safetensors file holding `entries` (in that order) and `metadata` to `path`.
pub fn write(
    path: impl AsRef<Path>,
    entries: &[WriteEntry<'_>],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let bytes = serialize(entries, metadata)?;
    let io = |e: std::io::Error| Error::Io {
        op: "safetensors::write",
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(&bytes).map_err(io)?;
    f.sync_all().map_err(io)
}
