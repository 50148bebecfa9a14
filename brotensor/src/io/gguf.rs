//! The GGUF format (versions 2 and 3): a header, typed metadata, tensor infos, then tensor
//! data aligned to `general.alignment` (32 by default).
//!
//! [`GgufFile::open`] maps the file and validates everything it indexes before returning:
//! magic and version, every metadata value (array and string lengths are checked against the
//! bytes left, so a hostile length cannot cause a large allocation), the alignment (a power
//! of two), each tensor's dimensions, type and byte range. Tensor data is borrowed from the
//! map; [`upload_raw`] copies a tensor's blocks to a device without dequantizing, and
//! [`dequantize_tensor`] gives it as F32. Metadata reads go through typed accessors
//! ([`GgufFile::meta_u64`], [`GgufFile::meta_str`], [`Value::as_f64`], ...).
//!
//! GGUF lists a tensor's dimensions innermost first ([`TensorInfo::shape`]);
//! [`TensorInfo::dims`] and every tensor this module returns use numpy order, outermost first.
//!
//! ```no_run
//! use brotensor::io::gguf::{self, GgufFile};
//!
//! # fn main() -> brotensor::Result<()> {
//! let file = GgufFile::open("model.gguf")?;
//! let arch = file.meta_str("general.architecture")?;
//! let context = file.meta_u64(&format!("{arch}.context_length"))?;
//! let vocab = file.meta_str_array("tokenizer.ggml.tokens")?;
//! let info = file.get_tensor("token_embd.weight")?;
//! let raw = gguf::upload_raw(&file, info)?; // its blocks, dims `info.dims()?`
//! let weights = gguf::dequantize_tensor(&file, info)?; // F32, the same dims
//! assert_eq!(raw.dims(), weights.dims());
//! println!("{arch}: context {context}, {} tokens, {:?}", vocab.len(), weights.dims());
//! # Ok(())
//! # }
//! ```
//!
//! While a mapped [`GgufFile`] is alive its file must not be truncated (reading a lost page
//! raises `SIGBUS` and ends the process) or rewritten in place (borrowed tensor bytes would
//! change under Rust's feet: undefined behaviour). [`GgufFile::read`] copies the file into
//! memory instead, for files that may change while they are in use (see [`crate::io`]).

use std::path::Path;

use super::FileBytes;
use crate::runtime::default_device;
use crate::{Device, Dtype, Error, Result, Tensor};

const OP: &str = "gguf";
const MAGIC: u32 = 0x4655_4747; // "GGUF" little-endian
const DEFAULT_ALIGNMENT: u64 = 32;
/// Nesting depth accepted for arrays of arrays.
const MAX_DEPTH: usize = 8;

fn bad(reason: impl Into<String>) -> Error {
    Error::format(OP, reason)
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// A boolean (stored as a byte that must be 0 or 1).
    Bool(bool),
    /// A UTF-8 string.
    String(String),
    /// An array of values of one type.
    Array(Vec<Value>),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl Value {
    /// The variant's name as GGUF calls the type (`"U32"`, `"String"`, `"Array"`, ...), for
    /// messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "U8",
            Value::I8(_) => "I8",
            Value::U16(_) => "U16",
            Value::I16(_) => "I16",
            Value::U32(_) => "U32",
            Value::I32(_) => "I32",
            Value::F32(_) => "F32",
            Value::Bool(_) => "Bool",
            Value::String(_) => "String",
            Value::Array(_) => "Array",
            Value::U64(_) => "U64",
            Value::I64(_) => "I64",
            Value::F64(_) => "F64",
        }
    }

    /// An integer of any width and signedness as `u64`: `None` for a negative value or a
    /// non-integer (floats and bools are not converted).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(u64::from(v)),
            Value::U16(v) => Some(u64::from(v)),
            Value::U32(v) => Some(u64::from(v)),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// An integer of any width and signedness as `i64`: `None` for a `U64` above `i64::MAX`
    /// or a non-integer (floats and bools are not converted).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(i64::from(v)),
            Value::I16(v) => Some(i64::from(v)),
            Value::I32(v) => Some(i64::from(v)),
            Value::I64(v) => Some(v),
            Value::U8(v) => Some(i64::from(v)),
            Value::U16(v) => Some(i64::from(v)),
            Value::U32(v) => Some(i64::from(v)),
            Value::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A number as `f64`: `F32` and `F64` always (an `F32` widens exactly), and an integer
    /// when `f64` holds it exactly (magnitude at most 2^53), since writers sometimes store a
    /// whole-number setting as an integer. `None` for bools, strings, arrays and larger
    /// integers.
    pub fn as_f64(&self) -> Option<f64> {
        const EXACT: u64 = 1 << f64::MANTISSA_DIGITS;
        match *self {
            Value::F32(v) => Some(f64::from(v)),
            Value::F64(v) => Some(v),
            Value::Bool(_) | Value::String(_) | Value::Array(_) => None,
            // Every integer that f64 holds exactly also fits i64.
            _ => self
                .as_i64()
                .filter(|v| v.unsigned_abs() <= EXACT)
                .map(|v| v as f64),
        }
    }

    /// A `Bool` value; `None` for every other variant (integers are not read as bools).
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A `String` value, borrowed; `None` for every other variant.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An `Array`'s elements, borrowed; `None` for every other variant.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// An `Array` whose every element passes [`Value::as_u64`], converted; `None` otherwise
    /// (a scalar, or any element that is not a non-negative integer).
    pub fn as_u64_array(&self) -> Option<Vec<u64>> {
        self.as_array()?.iter().map(Value::as_u64).collect()
    }

    /// An `Array` whose every element passes [`Value::as_i64`], converted; `None` otherwise.
    pub fn as_i64_array(&self) -> Option<Vec<i64>> {
        self.as_array()?.iter().map(Value::as_i64).collect()
    }

    /// An `Array` whose every element passes [`Value::as_f64`], converted; `None` otherwise.
    pub fn as_f64_array(&self) -> Option<Vec<f64>> {
        self.as_array()?.iter().map(Value::as_f64).collect()
    }

    /// An `Array` of strings, borrowed (a tokenizer's vocabulary, say); `None` for a scalar
    /// or when any element is not a `String`.
    pub fn as_str_array(&self) -> Option<Vec<&str>> {
        self.as_array()?.iter().map(Value::as_str).collect()
    }

    /// A short description for error messages: the type, and the value for a number or bool
    /// (strings and arrays, which may be long, give their length).
    fn describe(&self) -> String {
        match self {
            Value::String(s) => format!("a String of {} bytes", s.len()),
            Value::Array(items) => format!("an Array of {} elements", items.len()),
            Value::U8(v) => format!("U8 {v}"),
            Value::I8(v) => format!("I8 {v}"),
            Value::U16(v) => format!("U16 {v}"),
            Value::I16(v) => format!("I16 {v}"),
            Value::U32(v) => format!("U32 {v}"),
            Value::I32(v) => format!("I32 {v}"),
            Value::U64(v) => format!("U64 {v}"),
            Value::I64(v) => format!("I64 {v}"),
            Value::F32(v) => format!("F32 {v}"),
            Value::F64(v) => format!("F64 {v}"),
            Value::Bool(v) => format!("Bool {v}"),
        }
    }
}

/// A ggml tensor type: its id, its name, the brotensor dtype that carries it unchanged where
/// there is one, and its block size and block bytes.
struct GgmlType {
    id: u32,
    name: &'static str,
    carrier: Option<Dtype>,
    block: usize,
    block_bytes: usize,
}

/// A ggml type that a brotensor dtype carries: its layout is the dtype's (one block table).
const fn carried(id: u32, name: &'static str, dtype: Dtype) -> GgmlType {
    GgmlType {
        id,
        name,
        carrier: Some(dtype),
        block: dtype.block_size(),
        block_bytes: dtype.block_bytes(),
    }
}

/// A ggml type no brotensor dtype carries (its bytes are sized, never read as a tensor).
const fn raw(id: u32, name: &'static str, block: usize, block_bytes: usize) -> GgmlType {
    GgmlType {
        id,
        name,
        carrier: None,
        block,
        block_bytes,
    }
}

/// The ggml tensor types.
const GGML_TYPES: &[GgmlType] = &[
    carried(0, "F32", Dtype::F32),
    carried(1, "F16", Dtype::F16),
    carried(2, "Q4_0", Dtype::Q4_0),
    carried(3, "Q4_1", Dtype::Q4_1),
    carried(6, "Q5_0", Dtype::Q5_0),
    carried(7, "Q5_1", Dtype::Q5_1),
    carried(8, "Q8_0", Dtype::Q8_0),
    carried(9, "Q8_1", Dtype::Q8_1),
    carried(10, "Q2_K", Dtype::Q2_K),
    carried(11, "Q3_K", Dtype::Q3_K),
    carried(12, "Q4_K", Dtype::Q4_K),
    carried(13, "Q5_K", Dtype::Q5_K),
    carried(14, "Q6_K", Dtype::Q6_K),
    carried(15, "Q8_K", Dtype::Q8_K),
    raw(16, "IQ2_XXS", 256, 66),
    raw(17, "IQ2_XS", 256, 74),
    raw(18, "IQ3_XXS", 256, 98),
    raw(19, "IQ1_S", 256, 50),
    carried(20, "IQ4_NL", Dtype::IQ4_NL),
    raw(21, "IQ3_S", 256, 110),
    raw(22, "IQ2_S", 256, 82),
    carried(23, "IQ4_XS", Dtype::IQ4_XS),
    carried(24, "I8", Dtype::I8),
    raw(25, "I16", 1, 2),
    carried(26, "I32", Dtype::I32),
    raw(27, "I64", 1, 8),
    carried(28, "F64", Dtype::F64),
    raw(29, "IQ1_M", 256, 56),
    carried(30, "BF16", Dtype::BF16),
    raw(34, "TQ1_0", 256, 54),
    raw(35, "TQ2_0", 256, 66),
    carried(39, "MXFP4", Dtype::MXFP4),
];

/// One tensor's entry.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// Its dimensions in ggml order, **innermost (contiguous) first**, as GGUF stores them:
    /// a 2 x 3 row-major matrix (numpy shape `(2, 3)`) is `[3, 2]` here. [`TensorInfo::dims`]
    /// gives the reverse, numpy order that [`Tensor::dims`] uses.
    pub shape: Vec<u64>,
    /// The ggml type id.
    pub ggml_type: u32,
    /// The ggml type's name (`"Q4_K"`, `"IQ2_XS"`, ...; `"unknown(N)"` for an unknown id).
    pub type_name: String,
    /// The brotensor dtype that carries it, or `None` when brotensor has none yet.
    pub dtype: Option<Dtype>,
    /// Elements.
    pub numel: u64,
    /// Offset of its data from the start of the file.
    pub offset: usize,
    /// Bytes of data (0 for an unknown type).
    pub nbytes: usize,
}

impl TensorInfo {
    /// Its dimensions in numpy (row-major) order, **outermost first**, as [`Tensor::dims`]
    /// gives them: [`TensorInfo::shape`] reversed, so a numpy `(2, 3)` array that GGUF stores
    /// as `[3, 2]` gives `[2, 3]`. The tensors that [`upload_raw`] and [`dequantize_tensor`]
    /// return have these dims. Errors when a dimension does not fit `usize` (possible only
    /// on a 32-bit target, or for an info edited by hand).
    pub fn dims(&self) -> Result<Vec<usize>> {
        self.shape
            .iter()
            .rev()
            .map(|&d| {
                usize::try_from(d).map_err(|_| {
                    Error::invalid(
                        "gguf::dims",
                        format!(
                            "`{}`: dimension {d} of {:?} does not fit usize",
                            self.name, self.shape
                        ),
                    )
                })
            })
            .collect()
    }
}

/// An opened, validated GGUF file: a memory map of it ([`GgufFile::open`]) or a copy in
/// memory ([`GgufFile::read`], [`GgufFile::from_bytes`]).
pub struct GgufFile {
    bytes: FileBytes,
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// A bounds-checked little-endian reader.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(bad(format!(
                "truncated: {what} needs {n} bytes at offset {}, {left} left",
                self.at
            )));
        }
        let s = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| bad(format!("{what} is not UTF-8")))
    }

    fn value(&mut self, ty: u32, what: &str, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(what)?[0]),
            1 => Value::I8(self.array::<1>(what)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            7 => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(bad(format!("{what}: bool byte {b} is neither 0 nor 1"))),
            },
            8 => Value::String(self.string(what)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(bad(format!(
                        "{what}: arrays nested deeper than {MAX_DEPTH}"
                    )));
                }
                let elem = self.u32(what)?;
                let n = self.u64(what)?;
                // Every element takes at least its type's encoded size: a count beyond what the
                // bytes left can hold is a lie, refused before anything is allocated.
                let left = (self.bytes.len() - self.at) as u64;
                let least = min_encoded_size(elem);
                if n > left / least {
                    return Err(bad(format!(
                        "{what}: array of {n} elements of at least {least} bytes but {left} bytes left"
                    )));
                }
                // Reserve no more than a small head start: the vector grows with the elements
                // actually parsed, so memory follows the file's real contents, not its claims.
                let mut items = Vec::with_capacity(n.min(ARRAY_RESERVE) as usize);
                for _ in 0..n {
                    items.push(self.value(elem, what, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            other => return Err(bad(format!("{what}: unknown value type {other}"))),
        })
    }
}

/// Array elements reserved up front, before any is parsed.
const ARRAY_RESERVE: u64 = 4096;

/// The fewest bytes a metadata value of type `ty` takes in the file (an unknown type takes at
/// least its first byte; parsing it then fails).
fn min_encoded_size(ty: u32) -> u64 {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8, // a string is at least its u64 length
        9 => 12,          // an array is at least its u32 type and u64 count
        _ => 1,
    }
}

impl GgufFile {
    /// Maps `path` and validates it: the default, cheap whatever the file's size.
    ///
    /// Tensor data is borrowed from the mapped pages, so the file must stay unchanged while
    /// the returned value lives: truncating it can crash the process with `SIGBUS` and
    /// rewriting it in place is undefined behaviour (see the module docs). Use
    /// [`GgufFile::read`] where another process may modify the file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        GgufFile::parse(FileBytes::map(OP, path.as_ref())?)
    }

    /// Reads all of `path` into memory and validates it as [`GgufFile::open`] does. It holds
    /// the whole file in RAM, and later changes to the file cannot affect it.
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile> {
        GgufFile::parse(FileBytes::read(OP, path.as_ref())?)
    }

    /// Validates a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        GgufFile::parse(FileBytes::Owned(bytes))
    }

    fn parse(bytes: FileBytes) -> Result<GgufFile> {
        let mut c = Cursor {
            bytes: &bytes,
            at: 0,
        };
        let magic = c.u32("magic")?;
        if magic != MAGIC {
            return Err(bad(format!("bad magic {magic:#010x}: not a GGUF file")));
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(bad(format!("version {version} is not supported (2 or 3)")));
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        let mut metadata = Vec::new();
        for i in 0..n_kv {
            let key = c.string(&format!("metadata key #{i}"))?;
            let ty = c.u32(&format!("type of `{key}`"))?;
            let value = c.value(ty, &format!("`{key}`"), 0)?;
            metadata.push((key, value));
        }
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
            Some((_, v)) => {
                return Err(bad(format!(
                    "general.alignment must be a power-of-two U32, is {v:?}"
                )))
            }
        };
        // Each tensor info takes at least 8 + 4 + 4 + 8 bytes.
        let left = (bytes.len() - c.at) as u64;
        if n_tensors > left / 24 {
            return Err(bad(format!(
                "{n_tensors} tensors cannot fit in the {left} bytes left"
            )));
        }
        let mut infos = Vec::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = c.string(&format!("tensor #{i} name"))?;
            let n_dims = c.u32(&format!("`{name}` n_dims"))?;
            if !(1..=8).contains(&n_dims) {
                return Err(bad(format!("`{name}`: n_dims {n_dims} is not in 1..=8")));
            }
            let mut shape = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = c.u64(&format!("`{name}` dims"))?;
                if d == 0 || d > i64::MAX as u64 {
                    return Err(bad(format!("`{name}`: dimension {d} must be positive")));
                }
                shape.push(d);
            }
            let ggml_type = c.u32(&format!("`{name}` type"))?;
            let offset = c.u64(&format!("`{name}` offset"))?;
            infos.push((name, shape, ggml_type, offset));
        }
        let data_start = (c.at as u64).div_ceil(alignment) * alignment;
        if data_start > bytes.len() as u64 {
            return Err(bad(format!(
                "data starts at {data_start}, past the end of the file ({} bytes)",
                bytes.len()
            )));
        }
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, shape, ggml_type, offset) in infos {
            tensors.push(tensor_info(
                name,
                shape,
                ggml_type,
                offset,
                data_start,
                bytes.len() as u64,
            )?);
        }
        Ok(GgufFile {
            bytes,
            version,
            alignment,
            metadata,
            tensors,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The metadata value under `key`, if any.
    pub fn find_meta(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The metadata value under `key`, or an error naming the key when there is none.
    pub fn meta(&self, key: &str) -> Result<&Value> {
        self.find_meta(key)
            .ok_or_else(|| Error::invalid(OP, format!("`{key}`: no such metadata key")))
    }

    /// The value under `key` read by `read`, or an error naming the key and saying what it
    /// holds instead of `wanted`.
    fn meta_as<'a, T>(
        &'a self,
        key: &str,
        wanted: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T> {
        let value = self.meta(key)?;
        read(value).ok_or_else(|| {
            Error::invalid(OP, format!("`{key}` is {}, not {wanted}", value.describe()))
        })
    }

    /// The integer under `key` as `u64` (any integer variant, see [`Value::as_u64`]). Errors
    /// (`brotensor: gguf: `key` ...`) when the key is missing, or its value is negative or
    /// not an integer.
    pub fn meta_u64(&self, key: &str) -> Result<u64> {
        self.meta_as(key, "a non-negative integer", Value::as_u64)
    }

    /// The integer under `key` as `i64` (any integer variant that fits, see
    /// [`Value::as_i64`]); errors when the key is missing or holds something else.
    pub fn meta_i64(&self, key: &str) -> Result<i64> {
        self.meta_as(key, "an integer in the i64 range", Value::as_i64)
    }

    /// The number under `key` as `f64` (a float, or an integer `f64` holds exactly, see
    /// [`Value::as_f64`]); errors when the key is missing or holds something else.
    pub fn meta_f64(&self, key: &str) -> Result<f64> {
        self.meta_as(key, "a number", Value::as_f64)
    }

    /// The `Bool` under `key`; errors when the key is missing or holds something else.
    pub fn meta_bool(&self, key: &str) -> Result<bool> {
        self.meta_as(key, "a Bool", Value::as_bool)
    }

    /// The `String` under `key`, borrowed; errors when the key is missing or holds something
    /// else.
    pub fn meta_str(&self, key: &str) -> Result<&str> {
        self.meta_as(key, "a String", Value::as_str)
    }

    /// The `Array` under `key`, borrowed; errors when the key is missing or holds something
    /// else.
    pub fn meta_array(&self, key: &str) -> Result<&[Value]> {
        self.meta_as(key, "an Array", Value::as_array)
    }

    /// The array of non-negative integers under `key` (see [`Value::as_u64_array`]); errors
    /// when the key is missing or any element does not convert.
    pub fn meta_u64_array(&self, key: &str) -> Result<Vec<u64>> {
        self.meta_as(
            key,
            "an Array of non-negative integers",
            Value::as_u64_array,
        )
    }

    /// The array of integers under `key` as `i64` (see [`Value::as_i64_array`]); errors
    /// when the key is missing or any element does not convert.
    pub fn meta_i64_array(&self, key: &str) -> Result<Vec<i64>> {
        self.meta_as(key, "an Array of i64-range integers", Value::as_i64_array)
    }

    /// The array of numbers under `key` as `f64` (see [`Value::as_f64_array`]); errors when
    /// the key is missing or any element does not convert.
    pub fn meta_f64_array(&self, key: &str) -> Result<Vec<f64>> {
        self.meta_as(key, "an Array of numbers", Value::as_f64_array)
    }

    /// The array of strings under `key`, borrowed (see [`Value::as_str_array`]); errors when
    /// the key is missing or any element is not a `String`.
    pub fn meta_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.meta_as(key, "an Array of Strings", Value::as_str_array)
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`, if any.
    pub fn find_tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The tensor called `name`, or an error naming it.
    pub fn get_tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.find_tensor(name)
            .ok_or_else(|| Error::invalid("gguf::get_tensor", format!("no tensor named `{name}`")))
    }

    /// A tensor's bytes, borrowed from the file.
    pub fn data(&self, info: &TensorInfo) -> &[u8] {
        &self.bytes[info.offset..info.offset + info.nbytes]
    }
}

fn tensor_info(
    name: String,
    shape: Vec<u64>,
    ggml_type: u32,
    offset: u64,
    data_start: u64,
    file_len: u64,
) -> Result<TensorInfo> {
    let numel = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(format!("`{name}`: element count of {shape:?} overflows")))?;
    let known = GGML_TYPES.iter().find(|t| t.id == ggml_type);
    let type_name = known.map_or_else(|| format!("unknown({ggml_type})"), |t| t.name.to_string());
    let nbytes = match known {
        None => 0,
        Some(&GgmlType {
            name: tname,
            block,
            block_bytes,
            ..
        }) => {
            if numel % block as u64 != 0 {
                return Err(bad(format!(
                    "`{name}`: {numel} elements is not a whole number of {tname} blocks of {block}"
                )));
            }
            (numel / block as u64)
                .checked_mul(block_bytes as u64)
                .ok_or_else(|| bad(format!("`{name}`: byte size overflows")))?
        }
    };
    let begin = data_start
        .checked_add(offset)
        .ok_or_else(|| bad(format!("`{name}`: offset {offset} overflows")))?;
    let end = begin
        .checked_add(nbytes)
        .ok_or_else(|| bad(format!("`{name}`: offset {offset} overflows")))?;
    if end > file_len {
        return Err(bad(format!(
            "`{name}`: data [{begin}, {end}) runs past the end of the file ({file_len} bytes)"
        )));
    }
    Ok(TensorInfo {
        name,
        shape,
        ggml_type,
        type_name,
        dtype: known.and_then(|t| t.carrier),
        numel,
        offset: begin as usize,
        nbytes: nbytes as usize,
    })
}

/// `(rows, cols)` of a GGUF shape (innermost first): the matrix view, with `cols = shape[0]`
/// and `rows` the product of the rest (leading dims folded; `(n, 1)` for a 1-D shape, as in
/// the C++ original). It sizes a tensor before anything is uploaded; an uploaded tensor's
/// [`Tensor::rows`] and [`Tensor::cols`] agree with it except for 1-D shapes, which upload as
/// rank 1 (`rows() == 1`). Use [`TensorInfo::dims`] for the full shape.
pub fn shape_to_2d(shape: &[u64]) -> Result<(usize, usize)> {
    let op = "gguf::shape_to_2d";
    let (&first, rest) = shape
        .split_first()
        .ok_or_else(|| Error::invalid(op, "empty shape"))?;
    if shape.iter().any(|&d| d == 0 || d > i64::MAX as u64) {
        return Err(Error::invalid(
            op,
            format!("shape {shape:?} has a zero or out-of-range dimension"),
        ));
    }
    let to_usize = |v: u64| {
        usize::try_from(v).map_err(|_| Error::invalid(op, format!("shape {shape:?} is too large")))
    };
    if rest.is_empty() {
        return Ok((to_usize(first)?, 1));
    }
    let rows = rest
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::invalid(op, format!("shape {shape:?} overflows")))?;
    Ok((to_usize(rows)?, to_usize(first)?))
}

/// A tensor's raw data as a tensor of its own dtype and of dims [`TensorInfo::dims`] (numpy
/// order), on the default device, with no dequantization: a Q4_K tensor stays Q4_K blocks.
/// A block dtype needs its innermost dim to hold whole blocks, as ggml's row layout does;
/// [`Tensor::reshape`] gives another view of the same elements (e.g. the matrix of
/// [`shape_to_2d`]).
pub fn upload_raw(file: &GgufFile, info: &TensorInfo) -> Result<Tensor> {
    upload_raw_on(default_device(), file, info)
}

/// [`upload_raw`] onto `device`. Errors (`brotensor: gguf::upload_raw: ...`) for a ggml type
/// that brotensor cannot carry yet (the message names it) or dims that do not fit.
pub fn upload_raw_on(device: Device, file: &GgufFile, info: &TensorInfo) -> Result<Tensor> {
    let op = "gguf::upload_raw";
    let dtype = info.dtype.ok_or_else(|| {
        Error::invalid(
            op,
            format!(
                "`{}` is {}, which brotensor cannot carry yet",
                info.name, info.type_name
            ),
        )
    })?;
    Tensor::from_raw_bytes_nd_on(device, file.data(info), &info.dims()?, dtype)
}

/// A tensor dequantized to an F32 tensor of dims [`TensorInfo::dims`] (numpy order) on the
/// default device; [`dequantize`] does the arithmetic on the host.
pub fn dequantize_tensor(file: &GgufFile, info: &TensorInfo) -> Result<Tensor> {
    dequantize_tensor_on(default_device(), file, info)
}

/// [`dequantize_tensor`] onto `device`. Errors (`brotensor: gguf::dequantize_tensor: ...`)
/// for a ggml type brotensor cannot carry, and as [`dequantize`] does for a carried type that
/// is neither a float nor a block format (I8, I32, F64).
pub fn dequantize_tensor_on(device: Device, file: &GgufFile, info: &TensorInfo) -> Result<Tensor> {
    let op = "gguf::dequantize_tensor";
    let dtype = info.dtype.ok_or_else(|| {
        Error::invalid(
            op,
            format!(
                "`{}` is {}, which brotensor cannot dequantize yet",
                info.name, info.type_name
            ),
        )
    })?;
    let dims = info.dims()?;
    let values = dequantize(dtype, file.data(info))?;
    Tensor::from_slice_nd_on(device, &values, &dims)
}

/// Dequantizes `bytes` of `dtype` to F32 on the host: every GGUF block carrier (Q4_0 ...
/// Q8_K, IQ4_NL, IQ4_XS, MXFP4) with ggml's reference arithmetic, and F16 / BF16 / F32 by conversion. `bytes` must
/// be a whole number of blocks.
pub fn dequantize(dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>> {
    use brotensor_cpu::quant;
    let op = "gguf::dequantize";
    let kind = match (dtype.block(), dtype) {
        (Some(kind), _) => kind,
        (None, Dtype::F32 | Dtype::F16 | Dtype::BF16) => {
            let size = dtype.block_bytes();
            if !bytes.len().is_multiple_of(size) {
                return Err(Error::invalid(
                    op,
                    format!("{} bytes is not a whole number of {dtype}", bytes.len()),
                ));
            }
            let t = Tensor::from_raw_bytes_on(Device::Cpu, bytes, bytes.len() / size, 1, dtype)?;
            return t.to_dtype(Dtype::F32)?.to_vec::<f32>();
        }
        (None, other) => {
            return Err(Error::invalid(
                op,
                format!("{other} is not a float or block format"),
            ))
        }
    };
    let (elems, size) = kind.size();
    if !bytes.len().is_multiple_of(size) {
        return Err(Error::invalid(
            op,
            format!(
                "{} bytes is not a whole number of {dtype} blocks of {size}",
                bytes.len()
            ),
        ));
    }
    let mut out = vec![0.0f32; bytes.len() / size * elems];
    quant::dequantize(kind, bytes, &mut out);
    Ok(out)
}
