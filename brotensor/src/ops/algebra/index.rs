//! StableHLO gather and scatter-add, with their index-vector checks.

use super::super::{checked_product, dispatch, input};
use crate::backend::IndexMap;
use crate::{Dtype, Error, Result, Tensor};

use super::*;

/// Reads a small index tensor (I32, I64, F32 or F64) to the host as integers. Float values
/// must be finite and integral (`1.5`, NaN and infinities are errors).
pub(super) fn read_indices(op: &'static str, t: &Tensor) -> Result<Vec<i64>> {
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
    // Zero components leave no elements, whatever the batch dims; their count must still
    // fit (the walk below visits each entry).
    let entries = crate::ops::checked_product(op, "the index batch dims", &batch)?;
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
        &[
            input("operand", operand),
            input("start_indices", start_indices),
        ],
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
            input("operand", operand),
            input("scatter_indices", scatter_indices),
            input("updates", updates),
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
    super::super::check_dtypes_match(OP, ("operand", operand), &[("updates", updates)])?;
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
