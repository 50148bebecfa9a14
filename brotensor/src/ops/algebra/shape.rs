//! Structural ops over N-d tensors: transposes, reversals, slices, broadcasts, diagonals,
//! triangles, concatenation and padding (views are read where they lie).

use super::super::{checked_product, declare, dispatch, input, Operand};
use crate::backend::PadSpec;
use crate::layout::show_dims;
use crate::{Error, Result, Tensor};

use super::*;

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
    let be = dispatch(OP, &[input("x", x)])?;
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
    let be = dispatch(op, &[input("x", x)])?;
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
    let named: Vec<Operand<'_>> = inputs.iter().map(|t| input("inputs", t)).collect();
    let be = dispatch(OP, &named)?;
    let first = inputs
        .first()
        .ok_or_else(|| Error::invalid(OP, "no inputs"))?;
    check_axis(OP, axis, first.rank())?;
    check_dtype(OP, "inputs", first, &STRUCTURAL, be)?;
    let mut total = 0usize;
    for t in inputs {
        super::super::check_dtypes_match(OP, ("inputs[0]", first), &[("inputs", t)])?;
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

/// `x[s:s+sizes]` with the start indices `starts` (a tensor of `rank` integers, I32, I64,
/// F32 or F64) clamped per dim to `[0, dim - size]`, as XLA does.
pub fn dynamic_slice(x: &Tensor, starts: &Tensor, sizes: &[usize]) -> Result<Tensor> {
    const OP: &str = "dynamic_slice";
    declare(OP, &[input("x", x), input("starts", starts)])?;
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
    let be = dispatch(OP, &[input("x", x)])?;
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
