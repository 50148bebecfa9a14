//! `Display` and `Debug` of a [`Tensor`]: its values, nested by dims as numpy and torch print
//! them, then its dims, dtype and device. A tensor of more than `SUMMARY_THRESHOLD` elements
//! shows the first and last `EDGE_ITEMS` entries of every dim with `...` between (as
//! numpy's defaults). Printing reads the tensor back from its device (waiting for queued
//! writes); a failed read is printed in place of the values, never a panic.

use std::fmt::{self, Write};

use crate::{Dtype, Tensor};

/// Tensors with more elements than this are summarised.
const SUMMARY_THRESHOLD: usize = 1000;
/// How many entries a summarised dim shows at each end.
const EDGE_ITEMS: usize = 3;

/// One element, widened for printing.
#[derive(Clone, Copy)]
enum Value {
    Float(f64),
    Int(i64),
    Complex(f64, f64),
}

/// Reads element `i` of a dense row-major byte buffer of `dtype`.
fn value(dtype: Dtype, bytes: &[u8], i: usize) -> Value {
    fn arr<const N: usize>(bytes: &[u8], i: usize) -> [u8; N] {
        bytes[i * N..(i + 1) * N].try_into().expect("N bytes")
    }
    match dtype {
        Dtype::F32 => Value::Float(f32::from_le_bytes(arr(bytes, i)).into()),
        Dtype::F16 => Value::Float(half::f16::from_le_bytes(arr(bytes, i)).to_f64()),
        Dtype::BF16 => Value::Float(half::bf16::from_le_bytes(arr(bytes, i)).to_f64()),
        Dtype::F64 => Value::Float(f64::from_le_bytes(arr(bytes, i))),
        Dtype::I8 => Value::Int(i8::from_le_bytes(arr(bytes, i)).into()),
        Dtype::I32 => Value::Int(i32::from_le_bytes(arr(bytes, i)).into()),
        Dtype::I64 => Value::Int(i64::from_le_bytes(arr(bytes, i))),
        Dtype::C64 => {
            let [r0, r1, r2, r3, i0, i1, i2, i3] = arr::<8>(bytes, i);
            Value::Complex(
                f32::from_le_bytes([r0, r1, r2, r3]).into(),
                f32::from_le_bytes([i0, i1, i2, i3]).into(),
            )
        }
        Dtype::C128 => {
            let b = arr::<16>(bytes, i);
            Value::Complex(
                f64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                f64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
            )
        }
        // Block formats have no per-element bytes; `values` never reads them.
        _ => Value::Int(0),
    }
}

/// How the floats of one print-out are written: fixed with 4 decimals, or scientific when
/// the magnitudes call for it (as numpy switches).
#[derive(Clone, Copy)]
struct FloatStyle {
    scientific: bool,
}

impl FloatStyle {
    fn of(values: &[Value]) -> Self {
        let mags = values.iter().flat_map(|v| match *v {
            Value::Float(x) => vec![x],
            Value::Complex(re, im) => vec![re, im],
            Value::Int(_) => vec![],
        });
        let (mut max, mut min_nonzero) = (0.0f64, f64::INFINITY);
        for x in mags.filter(|x| x.is_finite()).map(f64::abs) {
            max = max.max(x);
            if x > 0.0 {
                min_nonzero = min_nonzero.min(x);
            }
        }
        FloatStyle {
            scientific: max >= 1e8 || (min_nonzero < 1e-4 && max > 0.0),
        }
    }

    fn float(self, x: f64) -> String {
        if x.is_nan() {
            "nan".into()
        } else if x.is_infinite() {
            if x > 0.0 { "inf" } else { "-inf" }.into()
        } else if self.scientific {
            format!("{x:.4e}")
        } else {
            format!("{x:.4}")
        }
    }

    fn write(self, v: Value) -> String {
        match v {
            Value::Float(x) => self.float(x),
            Value::Int(i) => i.to_string(),
            Value::Complex(re, im) => {
                let sign = if im.is_sign_negative() { '-' } else { '+' };
                format!("{}{sign}{}i", self.float(re), self.float(im.abs()))
            }
        }
    }
}

/// The row-major indices along one dim of `n` entries that a print-out shows (`None` marks
/// the `...` gap).
fn shown(n: usize, summarise: bool) -> Vec<Option<usize>> {
    if summarise && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((n - EDGE_ITEMS..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    }
}

/// Writes the nested lists of the dims from `axis` on, starting at flat element `base`.
/// `indent` is the column the opening bracket of this level stands in.
#[allow(clippy::too_many_arguments)]
fn nest(
    out: &mut String,
    dims: &[usize],
    strides: &[usize],
    axis: usize,
    base: usize,
    cells: &dyn Fn(usize) -> String,
    width: usize,
    summarise: bool,
    indent: usize,
) {
    out.push('[');
    let entries = shown(dims[axis], summarise);
    let last_axis = axis + 1 == dims.len();
    for (k, entry) in entries.iter().enumerate() {
        if k > 0 {
            if last_axis {
                out.push_str(", ");
            } else {
                // One blank line between blocks of a 3-d or deeper tensor, as numpy.
                out.push(',');
                let blank = dims.len() - axis - 1;
                for _ in 0..blank {
                    out.push('\n');
                }
                out.extend(std::iter::repeat_n(' ', indent + 1));
            }
        }
        match entry {
            None => out.push_str("..."),
            Some(i) => {
                let at = base + i * strides[axis];
                if last_axis {
                    let _ = write!(out, "{:>width$}", cells(at));
                } else {
                    nest(
                        out,
                        dims,
                        strides,
                        axis + 1,
                        at,
                        cells,
                        width,
                        summarise,
                        indent + 1,
                    );
                }
            }
        }
    }
    out.push(']');
}

/// The values part of the print-out, starting at column `indent`.
fn values(t: &Tensor, indent: usize) -> String {
    if !t.is_committed() {
        return "<uncommitted>".into();
    }
    let dtype = t.dtype();
    if dtype.size_bytes().is_none() {
        return format!("<{dtype} blocks: dequantize to read values>");
    }
    let bytes = match t.to_bytes() {
        Ok(b) => b,
        Err(e) => return format!("<values unreadable: {e}>"),
    };
    let dims = t.dims();
    let numel = t.numel();
    if dims.is_empty() {
        return FloatStyle { scientific: false }.write(value(dtype, &bytes, 0));
    }
    let summarise = numel > SUMMARY_THRESHOLD;
    let mut strides = vec![1usize; dims.len()];
    for a in (0..dims.len() - 1).rev() {
        strides[a] = strides[a + 1] * dims[a + 1];
    }
    // The shown elements first, so widths and the float style follow from them alone.
    let mut picked = Vec::new();
    collect(dims, &strides, 0, 0, summarise, &mut picked);
    let vals: Vec<Value> = picked.iter().map(|&i| value(dtype, &bytes, i)).collect();
    let style = FloatStyle::of(&vals);
    let width = vals
        .iter()
        .map(|&v| style.write(v).len())
        .max()
        .unwrap_or(0);
    let cells = |i: usize| style.write(value(dtype, &bytes, i));
    let mut out = String::new();
    nest(
        &mut out, dims, &strides, 0, 0, &cells, width, summarise, indent,
    );
    out
}

/// The flat indices of every element a print-out shows.
fn collect(
    dims: &[usize],
    strides: &[usize],
    axis: usize,
    base: usize,
    summarise: bool,
    out: &mut Vec<usize>,
) {
    for i in shown(dims[axis], summarise).into_iter().flatten() {
        let at = base + i * strides[axis];
        if axis + 1 == dims.len() {
            out.push(at);
        } else {
            collect(dims, strides, axis + 1, at, summarise, out);
        }
    }
}

/// `tensor(<values>, dims=[..], dtype=.., device=..)`, the values nested by dims; past 1000
/// elements each dim shows its first and last 3 entries around `...` (numpy's defaults).
/// Reads the tensor back from its device; a failed read is printed in place of the values.
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const OPEN: &str = "tensor(";
        write!(
            f,
            "{OPEN}{}, dims={:?}, dtype={}, device={})",
            values(self, OPEN.len()),
            self.dims(),
            self.dtype(),
            self.device()
        )
    }
}

/// The same as [`Display`](fmt::Display), with whether the tensor is a strided view.
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)?;
        if !self.layout().is_dense() {
            f.write_str(" (strided view)")?;
        }
        Ok(())
    }
}

#[cfg(feature = "internals")]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
    use super::*;
    use crate::Device;

    fn t(v: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_slice_nd_on(Device::Cpu, v, dims).unwrap()
    }

    pub fn a_matrix_prints_its_values_aligned_under_each_other() {
        let x = t(&[1.0, -2.5, 3.0, 0.25, 10.0, -0.5], &[2, 3]);
        assert_eq!(
            x.to_string(),
            "tensor([[ 1.0000, -2.5000,  3.0000],\n        \
             [ 0.2500, 10.0000, -0.5000]], dims=[2, 3], dtype=F32, device=cpu)"
        );
    }

    pub fn large_tensors_show_three_entries_at_each_end() {
        let v: Vec<f32> = (0..2000).map(|i| i as f32).collect();
        let s = t(&v, &[2000]).to_string();
        assert!(
            s.starts_with(
                "tensor([   0.0000,    1.0000,    2.0000, ..., 1997.0000, 1998.0000, 1999.0000]"
            ),
            "{s}"
        );
        let s = t(&v, &[40, 50]).to_string();
        assert_eq!(s.matches("...").count(), 7, "{s}");
        assert!(
            s.contains("[1950.0000, 1951.0000, 1952.0000, ..., 1997.0000, 1998.0000, 1999.0000]]"),
            "{s}"
        );
        // Small tensors are printed in full.
        let s = t(&v[..1000], &[1000]).to_string();
        assert!(!s.contains("...") && s.contains("999.0000"), "{s}");
    }

    pub fn magnitudes_integers_and_special_values() {
        let s = t(&[1e-6, 2.0, f32::NAN, f32::NEG_INFINITY], &[4]).to_string();
        assert!(
            s.starts_with("tensor([1.0000e-6,  2.0000e0,       nan,      -inf]"),
            "{s}"
        );
        let i = Tensor::from_slice_nd_on(Device::Cpu, &[7i32, -12, 3], &[3]).unwrap();
        assert!(
            i.to_string()
                .starts_with("tensor([  7, -12,   3], dims=[3], dtype=I32"),
            "{i}"
        );
        assert!(Tensor::default()
            .to_string()
            .starts_with("tensor(<uncommitted>"));
        // Debug carries the values too.
        assert!(format!("{:?}", t(&[0.5], &[1])).contains("[0.5000]"));
    }

    pub fn sixteen_bit_and_three_d_tensors() {
        let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2])
            .to_dtype(Dtype::BF16)
            .unwrap();
        assert_eq!(
            x.to_string(),
            "tensor([[[1.0000, 2.0000],\n         [3.0000, 4.0000]],\n\n        \
             [[5.0000, 6.0000],\n         [7.0000, 8.0000]]], dims=[2, 2, 2], dtype=BF16, device=cpu)"
        );
    }
}
