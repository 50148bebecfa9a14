//! Tensor algebra (StableHLO semantics, row-major): element-wise maps of F32/F64 and of the
//! complex dtypes C64/C128, structural and indexing ops over N-d tensors, and single-axis
//! reductions with keepdims. Every op runs on every device; F64, I64 and C128 where
//! [`supports_dtype`](crate::supports_dtype) says the device has 64-bit types.
//!
//! Shape contracts: element-wise operands have identical dims (broadcast explicitly with
//! [`broadcast_in_dim`]); structural ops take any rank 0 to 8 and any layout (views are read
//! where they lie). `add`, `sub`, `mul`, `div`, `exp`, `log`, `sin`, `cos` and `rsqrt` of
//! [`crate::ops::elementwise`] take F64, C64 and C128 too, through the same kernels.

use super::{checked_product, dispatch, resolve};
use crate::backend::{ComplexMap, FloatMap, IndexMap, PadSpec, ReduceOp};
use crate::layout::show_dims;
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

/// The dtypes of the structural ops (whole elements of 4, 8 or 16 bytes).
const STRUCTURAL: [Dtype; 6] = [
    Dtype::F32,
    Dtype::F64,
    Dtype::I32,
    Dtype::I64,
    Dtype::C64,
    Dtype::C128,
];

/// Errors unless `t`'s dtype is one of `allowed` and the backend computes it.
fn check_dtype(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    allowed: &[Dtype],
    be: Dispatched,
) -> Result<()> {
    if !allowed.contains(&t.dtype()) {
        let list: Vec<String> = allowed.iter().map(|d| d.to_string()).collect();
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: format!("expected one of {}", list.join(", ")),
            found: t.dtype(),
        });
    }
    if t.dtype() != Dtype::I32 && !be.supports(t.dtype()) {
        return Err(Error::UnsupportedDtype {
            op,
            dtype: t.dtype(),
            device: be.device(),
        });
    }
    Ok(())
}

/// Errors unless every operand has the first one's dims and dtype.
fn check_alike(op: &'static str, operands: &[(&'static str, &Tensor)]) -> Result<()> {
    let (first_name, first) = operands[0];
    for (name, t) in &operands[1..] {
        if t.dims() != first.dims() {
            return Err(Error::shape(
                op,
                format!(
                    "`{name}` is {} but `{first_name}` is {} (broadcast explicitly with broadcast_in_dim)",
                    show_dims(t.dims(), "x"),
                    show_dims(first.dims(), "x")
                ),
            ));
        }
        super::check_dtypes_match(op, (first_name, first), &[(name, t)])?;
    }
    Ok(())
}

/// An element-wise instruction of either kernel.
#[derive(Clone, Copy)]
enum MapInstr {
    Real(FloatMap),
    Complex(ComplexMap),
}

/// `out = instr(operands)`: real instructions take F32/F64, complex ones C64/C128.
fn map_op(
    op: &'static str,
    instr: MapInstr,
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Result<()> {
    let mut all = operands.to_vec();
    all.push(("out", &*out));
    let be = dispatch(op, &all)?;
    let (name, x) = operands[0];
    let dtypes = match instr {
        MapInstr::Real(_) => [Dtype::F32, Dtype::F64],
        MapInstr::Complex(_) => [Dtype::C64, Dtype::C128],
    };
    check_dtype(op, name, x, &dtypes, be)?;
    check_alike(op, operands)?;
    be.out("out", out, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let inputs: Vec<&Tensor> = operands.iter().map(|(_, t)| *t).collect();
    match instr {
        MapInstr::Real(f) => be.float_map(op, f, &inputs, out),
        MapInstr::Complex(c) => be.complex_map(op, c, &inputs, out),
    }
}

/// [`map_op`] with a real-float instruction.
fn float_op(
    op: &'static str,
    instr: FloatMap,
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Result<()> {
    map_op(op, MapInstr::Real(instr), operands, out)
}

/// [`map_op`] with a complex instruction.
fn complex_op(
    op: &'static str,
    instr: ComplexMap,
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Result<()> {
    map_op(op, MapInstr::Complex(instr), operands, out)
}

/// The element-wise route of the arithmetic and math ops for the wide dtypes: F64 through
/// the real-float kernel, C64/C128 through the complex one. `None` when `x`'s dtype is not
/// wide (the caller keeps its F32/F16/BF16 path).
pub(crate) fn wide_map(
    op: &'static str,
    (real, complex): (Option<FloatMap>, Option<ComplexMap>),
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Option<Result<()>> {
    let dtype = operands[0].1.dtype();
    match (dtype, real, complex) {
        (Dtype::F64, Some(f), _) => Some(float_op(op, f, operands, out)),
        (Dtype::C64 | Dtype::C128, _, Some(c)) => Some(complex_op(op, c, operands, out)),
        (Dtype::F64 | Dtype::I64 | Dtype::C64 | Dtype::C128, _, _) => Some(Err(Error::Dtype {
            op,
            operand: operands[0].0,
            expected: "a dtype this op computes (F32, F16, BF16; F64 or complex where listed)"
                .into(),
            found: dtype,
        })),
        _ => None,
    }
}

/// Defines the allocating, `_out` and in-place forms of a real-float map.
macro_rules! float_maps {
    ($($math:literal: $alloc:ident, $out:ident, $inplace:ident ($($arg:ident),+) => $instr:ident;)*) => {$(
        #[doc = concat!("`", $math, "` element-wise into a new tensor (F32 or F64; operands of one dims and dtype).")]
        pub fn $alloc($($arg: &Tensor),+) -> Result<Tensor> {
            let mut out = Tensor::default();
            $out($($arg,)+ &mut out)?;
            Ok(out)
        }

        #[doc = concat!("`", $math, "` element-wise into `out` (resized to the operands' dims and dtype; keeps its allocation when it fits).")]
        pub fn $out($($arg: &Tensor,)+ out: &mut Tensor) -> Result<()> {
            float_op(stringify!($alloc), FloatMap::$instr, &[$((stringify!($arg), $arg)),+], out)
        }

        impl Tensor {
            #[doc = concat!("`", $math, "` in place on `self` (the first operand).")]
            pub fn $inplace(&mut self $(, $arg: &Tensor)*) -> Result<()> {
                in_place(self, |x, out| float_op(stringify!($inplace), FloatMap::$instr, &[("x", x) $(, (stringify!($arg), $arg))*], out))
            }
        }
    )*};
}

/// Runs `f(self, tmp)` and copies `tmp` back into `self`'s storage (keeping its allocation).
pub(crate) fn in_place(
    x: &mut Tensor,
    f: impl FnOnce(&Tensor, &mut Tensor) -> Result<()>,
) -> Result<()> {
    x.check_writable("in_place", "self")?;
    let mut tmp = Tensor::default();
    f(x, &mut tmp)?;
    super::copy_into(&tmp, x)
}

float_maps! {
    "sqrt x": sqrt, sqrt_out, sqrt_(x) => Sqrt;
    "e^x - 1 (accurate near 0)": expm1, expm1_out, expm1_(x) => Expm1;
    "ln(1 + x) (accurate near 0)": log1p, log1p_out, log1p_(x) => Log1p;
    "|x|": abs, abs_out, abs_(x) => Abs;
    "sign x (-1, 0 with its sign, 1; NaN stays NaN)": sign, sign_out, sign_(x) => Sign;
    "max(x, y), NaN if either is": maximum, maximum_out, maximum_(x, y) => Maximum;
    "min(x, y), NaN if either is": minimum, minimum_out, minimum_(x, y) => Minimum;
    "x^y (numpy's rules: negative bases take integral exponents)": pow, pow_out, pow_(x, y) => Pow;
    "min(max(x, lower), upper), NaN propagating": clamp_between, clamp_between_out, clamp_between_(x, lower, upper) => Clamp;
}

/// `-x` element-wise into a new tensor (F32, F64, C64 or C128).
pub fn neg(x: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    neg_out(x, &mut out)?;
    Ok(out)
}

/// `-x` element-wise into `out` (resized to `x`).
pub fn neg_out(x: &Tensor, out: &mut Tensor) -> Result<()> {
    if x.dtype().is_complex() {
        complex_op("neg", ComplexMap::Neg, &[("x", x)], out)
    } else {
        float_op("neg", FloatMap::Neg, &[("x", x)], out)
    }
}

/// The complex conjugate of `x` (C64 or C128) into a new tensor.
pub fn conj(x: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    conj_out(x, &mut out)?;
    Ok(out)
}

/// The complex conjugate of `x` into `out` (resized to `x`).
pub fn conj_out(x: &Tensor, out: &mut Tensor) -> Result<()> {
    complex_op("conj", ComplexMap::Conj, &[("x", x)], out)
}

/// A comparison of [`compare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// `x == y`.
    Eq,
    /// `x != y` (true for NaN).
    Ne,
    /// `x < y`.
    Lt,
    /// `x <= y`.
    Le,
    /// `x > y`.
    Gt,
    /// `x >= y`.
    Ge,
}

/// `1` where `x <cmp> y` holds, else `0`, in `x`'s dtype (F32 or F64; one dims). NaN
/// compares false except under `Ne`.
pub fn compare(x: &Tensor, y: &Tensor, cmp: Comparison) -> Result<Tensor> {
    let mut out = Tensor::default();
    compare_out(x, y, cmp, &mut out)?;
    Ok(out)
}

/// [`compare`] into `out` (resized to `x`).
pub fn compare_out(x: &Tensor, y: &Tensor, cmp: Comparison, out: &mut Tensor) -> Result<()> {
    let instr = match cmp {
        Comparison::Eq => FloatMap::Eq,
        Comparison::Ne => FloatMap::Ne,
        Comparison::Lt => FloatMap::Lt,
        Comparison::Le => FloatMap::Le,
        Comparison::Gt => FloatMap::Gt,
        Comparison::Ge => FloatMap::Ge,
    };
    float_op("compare", instr, &[("x", x), ("y", y)], out)
}

/// `on_true` where `pred != 0` (NaN counts as non-zero), else `on_false`; all three of one
/// dims and dtype (F32 or F64).
pub fn select(pred: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    select_out(pred, on_true, on_false, &mut out)?;
    Ok(out)
}

/// [`select`] into `out` (resized to `pred`).
pub fn select_out(
    pred: &Tensor,
    on_true: &Tensor,
    on_false: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    float_op(
        "select",
        FloatMap::Select,
        &[("pred", pred), ("on_true", on_true), ("on_false", on_false)],
        out,
    )
}

/// A dense copy of the view `v` into a new tensor (never sharing `v`'s storage).
fn materialise(v: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    super::copy_into(v, &mut out)?;
    Ok(out)
}

/// Errors unless `axis < rank`.
fn check_axis(op: &'static str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(Error::shape(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(())
}

/// `y = transpose(x, perm)`: `y.dims[i] = x.dims[perm[i]]` (numpy's `np.transpose`). Errors
/// unless `perm` is a permutation of `0..rank`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    materialise(&x.permute(perm)?)
}

/// `y = reverse(x, axes)`: the order of each listed axis reversed (`np.flip`).
pub fn reverse(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    materialise(&x.flip(axes)?)
}

/// `y = x[start:limit:strides]` per dim (StableHLO slice: `start <= limit <= dim`, strides
/// at least 1); `y.dims[d] = ceil((limit - start) / stride)`.
pub fn slice(x: &Tensor, start: &[usize], limit: &[usize], strides: &[usize]) -> Result<Tensor> {
    const OP: &str = "slice";
    let r = x.rank();
    if start.len() != r || limit.len() != r || strides.len() != r {
        return Err(Error::shape(
            OP,
            format!("start, limit and strides need {r} values each"),
        ));
    }
    let mut v = x.view(*x.layout());
    for d in 0..r {
        if strides[d] == 0 {
            return Err(Error::invalid(OP, format!("stride of dim {d} is 0")));
        }
        let step =
            isize::try_from(strides[d]).map_err(|_| Error::invalid(OP, "stride too large"))?;
        v = v.slice(d, start[d], limit[d], step)?;
    }
    materialise(&v)
}

/// `y = broadcast_in_dim(x, dims, broadcast_dimensions)`: operand dim `i` becomes output dim
/// `broadcast_dimensions[i]` (where it must be 1 or equal); the other output dims repeat.
/// Errors on a wrong count, a repeated or out-of-range output dim, or a size mismatch.
pub fn broadcast_in_dim(
    x: &Tensor,
    dims: &[usize],
    broadcast_dimensions: &[usize],
) -> Result<Tensor> {
    const OP: &str = "broadcast_in_dim";
    if broadcast_dimensions.len() != x.rank() {
        return Err(Error::shape(
            OP,
            format!(
                "{} broadcast dimensions for an operand of rank {}",
                broadcast_dimensions.len(),
                x.rank()
            ),
        ));
    }
    let mut strides = vec![0isize; dims.len()];
    let mut seen = vec![false; dims.len()];
    let layout = x.layout();
    for (i, &d) in broadcast_dimensions.iter().enumerate() {
        if d >= dims.len() || seen[d] {
            return Err(Error::shape(
                OP,
                format!("broadcast dimension {d} is out of range or repeated"),
            ));
        }
        seen[d] = true;
        let n = x.dims()[i];
        if n != dims[d] && n != 1 {
            return Err(Error::shape(
                OP,
                format!(
                    "operand dim {i} ({n}) does not broadcast to output dim {d} ({})",
                    dims[d]
                ),
            ));
        }
        strides[d] = if n == dims[d] { layout.strides()[i] } else { 0 };
    }
    let view = layout.restrided(OP, dims, &strides, layout.offset())?;
    materialise(&x.view(view))
}

/// The diagonal of axes `a` and `b` (`a != b`): the output drops axis `max(a, b)` and axis
/// `min(a, b)` has length `min(d_a, d_b)`; `y[.. i ..] = x[.. i at a .. i at b ..]`.
pub fn extract_diagonal(x: &Tensor, a: usize, b: usize) -> Result<Tensor> {
    const OP: &str = "extract_diagonal";
    check_axis(OP, a.max(b), x.rank())?;
    if a == b {
        return Err(Error::invalid(
            OP,
            format!("the diagonal axes are equal ({a})"),
        ));
    }
    let (lo, hi) = (a.min(b), a.max(b));
    let l = x.layout();
    let mut dims = l.dims().to_vec();
    let mut strides = l.strides().to_vec();
    dims[lo] = dims[lo].min(dims[hi]);
    strides[lo] += strides[hi];
    dims.remove(hi);
    strides.remove(hi);
    let view = l.restrided(OP, &dims, &strides, l.offset())?;
    materialise(&x.view(view))
}

/// Row-major strides of `dims`.
fn row_major(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(dims[d + 1]);
    }
    s
}

/// The inverse of [`extract_diagonal`]: a new axis of length `d_a` inserted at position `b`
/// (`a < b <= rank`); `y[.. i at a .. j at b ..] = x[.. i at a ..]` where `i == j`, else 0.
pub fn embed_diagonal(x: &Tensor, a: usize, b: usize) -> Result<Tensor> {
    const OP: &str = "embed_diagonal";
    if !(a < b && b <= x.rank()) {
        return Err(Error::invalid(
            OP,
            format!("axes ({a}, {b}) need a < b <= rank {}", x.rank()),
        ));
    }
    let be = dispatch(OP, &[("x", x)])?;
    check_dtype(OP, "x", x, &STRUCTURAL, be)?;
    let mut dims = x.dims().to_vec();
    dims.insert(b, dims[a]);
    checked_product(OP, "output dims", &dims)?;
    let mut out = Tensor::zeros_nd_on(be.device(), &dims, x.dtype())?;
    if x.numel() == 0 {
        return Ok(out);
    }
    let full = row_major(&dims);
    let mut strides = full.clone();
    strides[a] += strides[b];
    strides.remove(b);
    be.place(OP, x, x.dims(), &strides, 0, &mut out)?;
    Ok(out)
}

/// `x`'s lower triangle relative to diagonal `k` (elements with `col - row <= k`) of every
/// matrix (the last two dims), zeros elsewhere (`np.tril`). Errors below rank 2.
pub fn tril(x: &Tensor, k: i64) -> Result<Tensor> {
    triangle("tril", x, k, true)
}

/// `x`'s upper triangle relative to diagonal `k` (elements with `col - row >= k`), zeros
/// elsewhere (`np.triu`). Errors below rank 2.
pub fn triu(x: &Tensor, k: i64) -> Result<Tensor> {
    triangle("triu", x, k, false)
}

fn triangle(op: &'static str, x: &Tensor, k: i64, lower: bool) -> Result<Tensor> {
    if x.rank() < 2 {
        return Err(Error::shape(
            op,
            format!("needs rank 2 or more, got rank {}", x.rank()),
        ));
    }
    let be = dispatch(op, &[("x", x)])?;
    check_dtype(op, "x", x, &STRUCTURAL, be)?;
    let mut out = Tensor::default();
    be.out("out", &mut out, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(out);
    }
    be.triangle(op, x, k, lower, &mut out)?;
    Ok(out)
}

/// The tensors joined along `axis`: every input has the first's rank, dtype and dims except
/// along `axis` (StableHLO concatenate). Errors on no inputs or a mismatch.
pub fn concatenate(inputs: &[&Tensor], axis: usize) -> Result<Tensor> {
    const OP: &str = "concatenate";
    let first = inputs
        .first()
        .ok_or_else(|| Error::invalid(OP, "no inputs"))?;
    check_axis(OP, axis, first.rank())?;
    let named: Vec<(&'static str, &Tensor)> = inputs.iter().map(|t| ("inputs", *t)).collect();
    let be = dispatch(OP, &named)?;
    check_dtype(OP, "inputs", first, &STRUCTURAL, be)?;
    let mut total = 0usize;
    for t in inputs {
        super::check_dtypes_match(OP, ("inputs[0]", first), &[("inputs", t)])?;
        let same = t.rank() == first.rank()
            && (0..t.rank()).all(|d| d == axis || t.dims()[d] == first.dims()[d]);
        if !same {
            return Err(Error::shape(
                OP,
                format!(
                    "an input is {} but the first is {}: dims must match except along axis {axis}",
                    show_dims(t.dims(), "x"),
                    show_dims(first.dims(), "x")
                ),
            ));
        }
        total = total
            .checked_add(t.dims()[axis])
            .ok_or_else(|| Error::shape(OP, "the joined axis overflows"))?;
    }
    let mut dims = first.dims().to_vec();
    dims[axis] = total;
    let mut out = Tensor::default();
    be.out("out", &mut out, &dims, first.dtype())?;
    // Each input is `outer` rows of `len inner` elements, landing `at inner` into rows of
    // `total inner`: the block copy of `copy_d2d_strided`. All sizes are at most the
    // output's element count, which `prepare_out` checked.
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let mut at = 0usize;
    for t in inputs {
        let width = t.dims()[axis] * inner;
        if t.numel() > 0 {
            let blocks = brotensor_kernels::concat::Blocks {
                src_off: 0,
                src_pitch: width,
                dst_off: at * inner,
                dst_pitch: total * inner,
                width,
                height: outer,
            };
            be.copy_d2d_strided(t, blocks, &mut out)?;
        }
        at += t.dims()[axis];
    }
    Ok(out)
}

/// `x` converted to `dtype` (F32, F64, I32, I64, C64, C128 in any pair): complex to real
/// keeps the real part, real to complex has a zero imaginary part, float to integer
/// truncates toward zero and errors on NaN, infinities and out-of-range values.
pub fn convert(x: &Tensor, dtype: Dtype) -> Result<Tensor> {
    const OP: &str = "convert";
    let be = dispatch(OP, &[("x", x)])?;
    check_dtype(OP, "x", x, &STRUCTURAL, be)?;
    if !STRUCTURAL.contains(&dtype) || (dtype != Dtype::I32 && !be.supports(dtype)) {
        return Err(Error::UnsupportedDtype {
            op: OP,
            dtype,
            device: be.device(),
        });
    }
    let mut out = Tensor::default();
    be.out("out", &mut out, x.dims(), dtype)?;
    if x.numel() == 0 {
        return Ok(out);
    }
    be.convert(x, &mut out)?;
    Ok(out)
}

/// Reads a small index tensor (I32, I64, F32 or F64) to the host as integers. Float values
/// must be finite and integral (`1.5`, NaN and infinities are errors).
fn read_indices(op: &'static str, t: &Tensor) -> Result<Vec<i64>> {
    let bad = |v: f64| Error::invalid(op, format!("index {v} is not a finite integer"));
    let check = |v: f64| {
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.2e18 {
            Ok(v as i64)
        } else {
            Err(bad(v))
        }
    };
    match t.dtype() {
        Dtype::I32 => Ok(t.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        Dtype::I64 => t.to_vec::<i64>(),
        Dtype::F32 => t
            .to_vec::<f32>()?
            .into_iter()
            .map(|v| check(v as f64))
            .collect(),
        Dtype::F64 => t.to_vec::<f64>()?.into_iter().map(check).collect(),
        other => Err(Error::Dtype {
            op,
            operand: "indices",
            expected: "expected I32, I64, F32 or F64 indices".into(),
            found: other,
        }),
    }
}

/// `x[s:s+sizes]` with the start indices `starts` (a tensor of `rank` integers, I32, I64,
/// F32 or F64) clamped per dim to `[0, dim - size]`, as XLA does.
pub fn dynamic_slice(x: &Tensor, starts: &Tensor, sizes: &[usize]) -> Result<Tensor> {
    const OP: &str = "dynamic_slice";
    resolve(OP, &[("x", x), ("starts", starts)])?;
    let r = x.rank();
    let s = read_indices(OP, starts)?;
    if s.len() != r || sizes.len() != r {
        return Err(Error::shape(
            OP,
            format!("{} starts and {} sizes for rank {r}", s.len(), sizes.len()),
        ));
    }
    let mut v = x.view(*x.layout());
    for d in 0..r {
        let n = x.dims()[d];
        if sizes[d] > n {
            return Err(Error::shape(
                OP,
                format!("size {} exceeds dim {d} ({n})", sizes[d]),
            ));
        }
        let at = s[d].clamp(0, (n - sizes[d]) as i64) as usize;
        v = v.narrow(d, at, sizes[d])?;
    }
    materialise(&v)
}

/// StableHLO pad with zeros: `low[d]` before and `high[d]` after each dim (negative values
/// crop), `interior[d]` zeros between neighbours. Errors when a padded dim would be
/// negative.
pub fn pad(x: &Tensor, low: &[i64], high: &[i64], interior: &[u64]) -> Result<Tensor> {
    const OP: &str = "pad";
    let r = x.rank();
    if low.len() != r || high.len() != r || interior.len() != r {
        return Err(Error::shape(
            OP,
            format!("low, high and interior need {r} values each"),
        ));
    }
    let be = dispatch(OP, &[("x", x)])?;
    check_dtype(OP, "x", x, &STRUCTURAL, be)?;
    let specs: Vec<PadSpec> = (0..r)
        .map(|d| PadSpec {
            low: low[d],
            high: high[d],
            interior: interior[d],
        })
        .collect();
    let dims = (0..r)
        .map(|d| {
            brotensor_cpu::algebra::pad_dim(x.dims()[d], specs[d]).ok_or_else(|| {
                Error::shape(
                    OP,
                    format!("dim {d} padded to a negative or overflowing size"),
                )
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let mut out = Tensor::default();
    be.out("out", &mut out, &dims, x.dtype())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if x.numel() == 0 {
        out.zero()?;
        return Ok(out);
    }
    be.pad(x, &specs, &mut out)?;
    Ok(out)
}

/// StableHLO gather dimension numbers (no batching dims).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatherDims {
    /// Output positions of the window dims, increasing.
    pub offset_dims: Vec<usize>,
    /// Operand dims the window drops (their slice size must be 1), increasing.
    pub collapsed_slice_dims: Vec<usize>,
    /// The operand dim each index-vector component starts.
    pub start_index_map: Vec<usize>,
    /// The dim of `start_indices` that holds the index vectors (its rank: one component).
    pub index_vector_dim: usize,
}

/// StableHLO scatter dimension numbers (no batching dims).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScatterDims {
    /// Update dims that are window dims, increasing.
    pub update_window_dims: Vec<usize>,
    /// Operand dims the window inserts with size 1, increasing.
    pub inserted_window_dims: Vec<usize>,
    /// The operand dim each index-vector component starts.
    pub scatter_dims_to_operand_dims: Vec<usize>,
    /// The dim of `scatter_indices` that holds the index vectors (its rank: one component).
    pub index_vector_dim: usize,
}

/// The index vectors of `indices`: the batch dims (every dim but `ivd`) and, per batch
/// entry in row-major order, its `components` values.
fn index_vectors(
    op: &'static str,
    indices: &Tensor,
    ivd: usize,
    components: usize,
) -> Result<(Vec<usize>, Vec<Vec<i64>>)> {
    let dims = indices.dims();
    if ivd > dims.len() {
        return Err(Error::shape(
            op,
            format!(
                "index_vector_dim {ivd} exceeds the indices' rank {}",
                dims.len()
            ),
        ));
    }
    let have = if ivd == dims.len() { 1 } else { dims[ivd] };
    if have != components {
        return Err(Error::shape(
            op,
            format!("index vectors have {have} components, the map names {components}"),
        ));
    }
    let values = read_indices(op, indices)?;
    let batch: Vec<usize> = dims
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != ivd)
        .map(|(_, &n)| n)
        .collect();
    let entries: usize = batch.iter().product();
    let strides = row_major(dims);
    let mut out = Vec::with_capacity(entries);
    let mut coords = vec![0usize; batch.len()];
    for e in 0..entries {
        let mut rest = e;
        for d in (0..batch.len()).rev() {
            coords[d] = rest % batch[d];
            rest /= batch[d];
        }
        let mut at = 0usize;
        let mut j = 0;
        for (d, s) in strides.iter().enumerate() {
            if d == ivd {
                continue;
            }
            at += coords[j] * s;
            j += 1;
        }
        let step = if ivd < dims.len() { strides[ivd] } else { 0 };
        out.push((0..components).map(|k| values[at + k * step]).collect());
    }
    Ok((batch, out))
}

/// Errors unless `v` is strictly increasing and below `bound`.
fn check_sorted(op: &'static str, what: &str, v: &[usize], bound: usize) -> Result<()> {
    if v.windows(2).any(|w| w[0] >= w[1]) || v.iter().any(|&d| d >= bound) {
        return Err(Error::invalid(
            op,
            format!("{what} {v:?} must increase and lie below {bound}"),
        ));
    }
    Ok(())
}

/// Errors unless `v` holds distinct values below `bound`.
fn check_distinct(op: &'static str, what: &str, v: &[usize], bound: usize) -> Result<()> {
    let mut s = v.to_vec();
    s.sort_unstable();
    check_sorted(op, what, &s, bound)
}

/// StableHLO gather: for each index vector of `start_indices`, the window of
/// `slice_sizes` from `operand` at the start it names (clamped to keep the window inside),
/// collapsed dims dropped, window dims at `offset_dims` of the output and batch dims in the
/// other positions.
pub fn gather(
    operand: &Tensor,
    start_indices: &Tensor,
    dnums: &GatherDims,
    slice_sizes: &[usize],
) -> Result<Tensor> {
    const OP: &str = "gather";
    let be = dispatch(
        OP,
        &[("operand", operand), ("start_indices", start_indices)],
    )?;
    check_dtype(OP, "operand", operand, &STRUCTURAL, be)?;
    let r = operand.rank();
    let od = operand.dims();
    if slice_sizes.len() != r || slice_sizes.iter().zip(od).any(|(s, n)| s > n) {
        return Err(Error::shape(
            OP,
            format!("slice_sizes {slice_sizes:?} must give one size per dim, within {od:?}"),
        ));
    }
    check_sorted(OP, "collapsed_slice_dims", &dnums.collapsed_slice_dims, r)?;
    if dnums
        .collapsed_slice_dims
        .iter()
        .any(|&d| slice_sizes[d] != 1)
    {
        return Err(Error::shape(OP, "a collapsed dim's slice size must be 1"));
    }
    check_distinct(OP, "start_index_map", &dnums.start_index_map, r)?;
    let (batch, vectors) = index_vectors(
        OP,
        start_indices,
        dnums.index_vector_dim,
        dnums.start_index_map.len(),
    )?;
    let window: Vec<usize> = (0..r)
        .filter(|d| !dnums.collapsed_slice_dims.contains(d))
        .collect();
    let out_rank = batch.len() + window.len();
    if dnums.offset_dims.len() != window.len() {
        return Err(Error::shape(
            OP,
            format!(
                "{} offset_dims for {} window dims",
                dnums.offset_dims.len(),
                window.len()
            ),
        ));
    }
    check_sorted(OP, "offset_dims", &dnums.offset_dims, out_rank)?;
    let op_strides = row_major(od);
    let batch_strides_in = row_major(&batch);
    let mut dims = Vec::with_capacity(out_rank);
    let mut bstr = Vec::with_capacity(out_rank);
    let mut wstr = Vec::with_capacity(out_rank);
    let (mut bi, mut wi) = (0, 0);
    for pos in 0..out_rank {
        if dnums.offset_dims.contains(&pos) {
            let d = window[wi];
            wi += 1;
            dims.push(slice_sizes[d]);
            bstr.push(0);
            wstr.push(op_strides[d]);
        } else {
            dims.push(batch[bi]);
            bstr.push(batch_strides_in[bi]);
            wstr.push(0);
            bi += 1;
        }
    }
    checked_product(OP, "output dims", &dims)?;
    let bases: Vec<Option<usize>> = vectors
        .iter()
        .map(|v| {
            let mut base = 0usize;
            for (k, &d) in dnums.start_index_map.iter().enumerate() {
                let hi = (od[d] - slice_sizes[d]) as i64;
                base += v[k].clamp(0, hi) as usize * op_strides[d];
            }
            Some(base)
        })
        .collect();
    let mut out = Tensor::default();
    be.out("out", &mut out, &dims, operand.dtype())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let map = IndexMap {
        dims: &dims,
        batch_strides: &bstr,
        window_strides: &wstr,
        bases: &bases,
        exclusive: false,
    };
    be.gather(operand, &map, &mut out)?;
    Ok(out)
}

/// StableHLO scatter with addition: `operand` plus, for each index vector of
/// `scatter_indices`, its update window added at the start it names. A window that would
/// reach outside the operand is skipped whole; overlapping windows accumulate.
pub fn scatter_add(
    operand: &Tensor,
    scatter_indices: &Tensor,
    updates: &Tensor,
    dnums: &ScatterDims,
) -> Result<Tensor> {
    const OP: &str = "scatter_add";
    let be = dispatch(
        OP,
        &[
            ("operand", operand),
            ("scatter_indices", scatter_indices),
            ("updates", updates),
        ],
    )?;
    check_dtype(OP, "operand", operand, &STRUCTURAL, be)?;
    if operand.dtype() == Dtype::I32 {
        return Err(Error::UnsupportedDtype {
            op: OP,
            dtype: Dtype::I32,
            device: be.device(),
        });
    }
    super::check_dtypes_match(OP, ("operand", operand), &[("updates", updates)])?;
    let r = operand.rank();
    let od = operand.dims();
    let ud = updates.dims();
    check_sorted(
        OP,
        "update_window_dims",
        &dnums.update_window_dims,
        ud.len(),
    )?;
    check_sorted(OP, "inserted_window_dims", &dnums.inserted_window_dims, r)?;
    check_distinct(
        OP,
        "scatter_dims_to_operand_dims",
        &dnums.scatter_dims_to_operand_dims,
        r,
    )?;
    let (batch, vectors) = index_vectors(
        OP,
        scatter_indices,
        dnums.index_vector_dim,
        dnums.scatter_dims_to_operand_dims.len(),
    )?;
    let window_ops: Vec<usize> = (0..r)
        .filter(|d| !dnums.inserted_window_dims.contains(d))
        .collect();
    if window_ops.len() != dnums.update_window_dims.len() {
        return Err(Error::shape(
            OP,
            "update_window_dims must name one update dim per operand dim not inserted",
        ));
    }
    let scatter_pos: Vec<usize> = (0..ud.len())
        .filter(|d| !dnums.update_window_dims.contains(d))
        .collect();
    if scatter_pos.iter().map(|&p| ud[p]).collect::<Vec<_>>() != batch {
        return Err(Error::shape(
            OP,
            format!("the updates' scatter dims must equal the indices' batch dims {batch:?}"),
        ));
    }
    let mut wsize = vec![1usize; r];
    for (k, &d) in window_ops.iter().enumerate() {
        wsize[d] = ud[dnums.update_window_dims[k]];
        if wsize[d] > od[d] {
            return Err(Error::shape(
                OP,
                format!("the window along operand dim {d} exceeds it"),
            ));
        }
    }
    let op_strides = row_major(od);
    let batch_strides_in = row_major(&batch);
    let (mut bstr, mut wstr) = (vec![0usize; ud.len()], vec![0usize; ud.len()]);
    for (k, &p) in scatter_pos.iter().enumerate() {
        bstr[p] = batch_strides_in[k];
    }
    for (k, &p) in dnums.update_window_dims.iter().enumerate() {
        wstr[p] = op_strides[window_ops[k]];
    }
    let bases: Vec<Option<usize>> = vectors
        .iter()
        .map(|v| {
            let mut base = 0usize;
            for (k, &d) in dnums.scatter_dims_to_operand_dims.iter().enumerate() {
                let s = v[k];
                if s < 0 || s as i128 + wsize[d] as i128 > od[d] as i128 {
                    return None;
                }
                base += s as usize * op_strides[d];
            }
            Some(base)
        })
        .collect();
    let exclusive = dnums
        .scatter_dims_to_operand_dims
        .iter()
        .all(|&d| wsize[d] == 1);
    let mut out = materialise(operand)?;
    if updates.numel() == 0 || out.numel() == 0 {
        return Ok(out);
    }
    let map = IndexMap {
        dims: ud,
        batch_strides: &bstr,
        window_strides: &wstr,
        bases: &bases,
        exclusive,
    };
    be.scatter_add(updates, &map, &mut out)?;
    Ok(out)
}

/// Defines a single-axis reduction with keepdims.
macro_rules! reductions {
    ($($doc:literal: $name:ident, $out:ident => $op:ident, [$($dtype:ident),*];)*) => {$(
        #[doc = concat!($doc, " over `axis`, keeping it with length 1 (dtypes: ", $(stringify!($dtype), " ",)* ").")]
        pub fn $name(x: &Tensor, axis: usize) -> Result<Tensor> {
            let mut out = Tensor::default();
            $out(x, axis, &mut out)?;
            Ok(out)
        }

        #[doc = concat!("[`", stringify!($name), "`] into `out` (resized; keeps its allocation when it fits).")]
        pub fn $out(x: &Tensor, axis: usize, out: &mut Tensor) -> Result<()> {
            reduce(stringify!($name), ReduceOp::$op, &[$(Dtype::$dtype),*], x, axis, out)
        }
    )*};
}

reductions! {
    "The sum (integers wrap)": reduce_sum, reduce_sum_out => Sum, [F32, F64, I64, C64, C128];
    "The product (integers wrap)": reduce_prod, reduce_prod_out => Prod, [F32, F64, I64, C64, C128];
    "The largest element, NaN if any is (-inf over an empty axis)": reduce_max, reduce_max_out => Max, [F32, F64];
    "The smallest element, NaN if any is (+inf over an empty axis)": reduce_min, reduce_min_out => Min, [F32, F64];
}

fn reduce(
    op: &'static str,
    rop: ReduceOp,
    allowed: &[Dtype],
    x: &Tensor,
    axis: usize,
    out: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[("x", x), ("out", out)])?;
    check_dtype(op, "x", x, allowed, be)?;
    check_axis(op, axis, x.rank())?;
    let d = x.dims();
    let outer: usize = d[..axis].iter().product();
    let inner: usize = d[axis + 1..].iter().product();
    let n = d[axis];
    let mut dims = d.to_vec();
    dims[axis] = 1;
    be.out("out", out, &dims, x.dtype())?;
    if out.numel() == 0 {
        return Ok(());
    }
    if n == 0 {
        return fill_identity(rop, out);
    }
    be.reduce_axis(op, rop, x, (outer, n, inner), out)
}

/// Writes a reduction's identity into every element of `out` (the result over an empty
/// axis): 0, 1, -inf or +inf.
fn fill_identity(op: ReduceOp, out: &mut Tensor) -> Result<()> {
    let v = match op {
        ReduceOp::Sum => 0.0f64,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
    };
    let n = out.numel();
    let dims = out.dims().to_vec();
    let device = out.device();
    let filled = match out.dtype() {
        Dtype::F32 => Tensor::from_slice_nd_on(device, &vec![v as f32; n], &dims)?,
        Dtype::F64 => Tensor::from_slice_nd_on(device, &vec![v; n], &dims)?,
        Dtype::I64 => Tensor::from_slice_nd_on(device, &vec![v as i64; n], &dims)?,
        Dtype::C64 => {
            Tensor::from_slice_nd_on(device, &vec![crate::Complex::new(v as f32, 0.0); n], &dims)?
        }
        _ => Tensor::from_slice_nd_on(device, &vec![crate::Complex::new(v, 0.0); n], &dims)?,
    };
    super::copy_into(&filled, out)
}
