//! The concat ops: row and channel concatenation, splits and strided device copies.
//!
//! Every op here is a block copy ([`copy_d2d_strided`]; the concats and splits are
//! composites of it, one block copy per part). Elements are copied as bits, so every dtype
//! with an element size works (F32, F16, BF16, I32, I8, and the 64-bit ones) on every
//! device; all operands of one call share the dtype. Tensors are flat buffers or `(rows,
//! cols)` views (leading dims folded) as each contract says.

use super::embedding::check_sized;
use super::{checked_product, dispatch, input, updated, written, Operand};
use crate::ops::Dispatched;
use brotensor_kernels::concat::Blocks;

use super::Nchw;
use crate::{Dtype, Error, Result, Tensor};

/// `out (total, 1)`: the parts' elements end to end, in order, `total` the sum of the
/// parts' element counts (each part read as a flat buffer, whatever its shape). The parts
/// share a dtype with an element size; `out` is resized and takes it (F32 for no parts).
pub fn concat_rows(parts: &[&Tensor], out: &mut Tensor) -> Result<()> {
    const OP: &str = "concat_rows";
    let be = dispatch_parts(OP, parts, out)?;
    let dtype = common_dtype(OP, parts)?;
    let total = checked_sum(OP, parts.iter().map(|p| p.numel()))?;
    be.out("out", out, &[total, 1], dtype)?;
    let mut off = 0;
    for p in parts {
        copy_flat(be, p, 0, out, off, p.numel())?;
        off += p.numel();
    }
    Ok(())
}

/// The inverse of [`concat_rows`]: part `i` is overwritten with the `parts[i].numel()`
/// elements of `input` that follow the earlier parts' (from offset 0). Parts keep their
/// shapes (pre-sized, never resized), share `input`'s dtype, and together hold at most
/// `input.numel()` elements.
pub fn split_rows(input: &Tensor, parts: &mut [&mut Tensor]) -> Result<()> {
    const OP: &str = "split_rows";
    let be = dispatch_split(OP, ("input", input), parts)?;
    check_sized(OP, "input", input)?;
    let total = checked_sum(OP, parts.iter().map(|p| p.numel()))?;
    if total > input.numel() {
        return Err(Error::shape(
            OP,
            format!(
                "the parts hold {total} elements but `input` only {}",
                input.numel()
            ),
        ));
    }
    check_parts_dtype(OP, input.dtype(), parts)?;
    let mut off = 0;
    for p in parts.iter_mut() {
        let n = p.numel();
        copy_flat(be, input, off, p, 0, n)?;
        off += n;
    }
    Ok(())
}

/// `out (b, sum_i d_i)`: `out[r, off_i + j] = parts[i][r, j]` for parts `(b, d_i)` with one
/// row count `b` (the column-block concat; `off_i = sum_{k<i} d_k`). At least one part; the
/// parts share a dtype with an element size; `out` is resized and takes it.
pub fn concat_batched_rows(parts: &[&Tensor], out: &mut Tensor) -> Result<()> {
    const OP: &str = "concat_batched_rows";
    let be = dispatch_parts(OP, parts, out)?;
    let dtype = common_dtype(OP, parts)?;
    let Some(first) = parts.first() else {
        return Err(Error::invalid(OP, "needs at least one part"));
    };
    let b = first.rows();
    if let Some((i, p)) = parts.iter().enumerate().find(|(_, p)| p.rows() != b) {
        return Err(Error::shape(
            OP,
            format!("part {i} has {} rows but part 0 has {b}", p.rows()),
        ));
    }
    let width = checked_sum(OP, parts.iter().map(|p| p.cols()))?;
    be.out("out", out, &[b, width], dtype)?;
    let mut off = 0;
    for p in parts {
        let d = p.cols();
        let blocks = Blocks {
            src_off: 0,
            src_pitch: d,
            dst_off: off,
            dst_pitch: width,
            width: d,
            height: b,
        };
        run_blocks(be, p, blocks, out)?;
        off += d;
    }
    Ok(())
}

/// `out (n, C h w)`: the channel-axis concat of NCHW tensors, part `i` holding
/// `n C_i h w` elements (`(n, C_i h w)` flat NCHW):
/// `out[s, (off_i + c) h w + p] = parts[i][s, c h w + p]`, `off_i = sum_{k<i} C_k`.
/// `dims` are the output's `(n, C, h, w)` ([`Nchw`] or a tuple); `c_per_part` has one count
/// per part, summing to `C`; the parts share a dtype with an element size; `out` is resized
/// and takes it (F32 for no parts).
pub fn concat_nchw_channels(
    parts: &[&Tensor],
    dims: impl Into<Nchw>,
    c_per_part: &[usize],
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "concat_nchw_channels";
    let be = dispatch_parts(OP, parts, out)?;
    let dtype = common_dtype(OP, parts)?;
    let dims = dims.into();
    let n = dims.n;
    let (hw, total) = channel_geometry(OP, parts.len(), dims, c_per_part)?;
    for (i, (p, &c)) in parts.iter().zip(c_per_part).enumerate() {
        let want = checked_product(OP, "n * C_i * h * w", &[n, c, hw])?;
        if p.numel() != want {
            return Err(Error::shape(
                OP,
                format!(
                    "part {i} holds {} elements but n * C_i * h * w = {want}",
                    p.numel()
                ),
            ));
        }
    }
    let row = checked_product(OP, "C * h * w", &[total, hw])?;
    be.out("out", out, &[n, row], dtype)?;
    let mut off = 0;
    for (p, &c) in parts.iter().zip(c_per_part) {
        let blocks = Blocks {
            src_off: 0,
            src_pitch: c * hw,
            dst_off: off * hw,
            dst_pitch: row,
            width: c * hw,
            height: n,
        };
        run_blocks(be, p, blocks, out)?;
        off += c;
    }
    Ok(())
}

/// The inverse (and gradient) of [`concat_nchw_channels`]: part `i` becomes
/// `(n, C_i h w)` holding channels `[off_i, off_i + C_i)` of every sample of `dy`
/// (`off_i = sum_{k<i} C_k`), overwritten. `dims` are `dy`'s `(n, C, h, w)`; `dy` holds
/// `n C h w` elements of a dtype with an element size; each part is resized and takes it;
/// `c_per_part` has one count per part, summing to `C`.
pub fn concat_nchw_channels_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    c_per_part: &[usize],
    parts: &mut [&mut Tensor],
) -> Result<()> {
    const OP: &str = "concat_nchw_channels_backward";
    let be = dispatch_split(OP, ("dy", dy), parts)?;
    check_sized(OP, "dy", dy)?;
    let dims = dims.into();
    let n = dims.n;
    let (hw, total) = channel_geometry(OP, parts.len(), dims, c_per_part)?;
    let row = checked_product(OP, "C * h * w", &[total, hw])?;
    let want = checked_product(OP, "n * C * h * w", &[n, row])?;
    if dy.numel() != want {
        return Err(Error::shape(
            OP,
            format!(
                "`dy` holds {} elements but n * sum(C_i) * h * w = {want}",
                dy.numel()
            ),
        ));
    }
    let mut off = 0;
    for (p, &c) in parts.iter_mut().zip(c_per_part) {
        be.out("parts", p, &[n, c * hw], dy.dtype())?;
        let blocks = Blocks {
            src_off: off * hw,
            src_pitch: row,
            dst_off: 0,
            dst_pitch: c * hw,
            width: c * hw,
            height: n,
        };
        run_blocks(be, dy, blocks, p)?;
        off += c;
    }
    Ok(())
}

/// Copies `height` rows of `width` elements: row `r` from element
/// `src_off + r src_pitch` of `src` to element `dst_off + r dst_pitch` of `dst`, both read
/// as flat buffers of one dtype with an element size (bits copied, so every such dtype
/// works); the rest of `dst` keeps its contents. With more than one row the pitches must be
/// at least `width`; both sides must lie inside their tensors. `dst` is written in place
/// and never resized. (The C++ argument order, outputs last.)
#[allow(clippy::too_many_arguments)]
pub fn copy_d2d_strided(
    src: &Tensor,
    src_off: usize,
    src_pitch: usize,
    dst_off: usize,
    dst_pitch: usize,
    width: usize,
    height: usize,
    dst: &mut Tensor,
) -> Result<()> {
    const OP: &str = "copy_d2d_strided";
    let be = super::dispatch(OP, &[updated("dst", dst), input("src", src)])?;
    check_sized(OP, "src", src)?;
    super::check_dtypes_match(OP, ("src", src), &[("dst", dst)])?;
    let blocks = Blocks {
        src_off,
        src_pitch,
        dst_off,
        dst_pitch,
        width,
        height,
    };
    if height > 1 && (src_pitch < width || dst_pitch < width) {
        return Err(Error::invalid(
            OP,
            format!("pitches ({src_pitch}, {dst_pitch}) must be at least the width {width}"),
        ));
    }
    run_blocks(be, src, blocks, dst)
}

/// Runs `blocks` after checking that both sides lie inside their tensors.
fn run_blocks(be: Dispatched, src: &Tensor, blocks: Blocks, dst: &mut Tensor) -> Result<()> {
    const OP: &str = "copy_d2d_strided";
    let reach = |src_side: bool| {
        blocks
            .reach(src_side)
            .map_err(|_| Error::shape(OP, "offset + (height - 1) * pitch + width overflows"))
    };
    let (src_end, dst_end) = (reach(true)?, reach(false)?);
    for (name, end, t) in [("src", src_end, src.numel()), ("dst", dst_end, dst.numel())] {
        if end > t {
            return Err(Error::shape(
                OP,
                format!("the copy reaches element {end} of `{name}`, which holds {t}"),
            ));
        }
    }
    if src_end == 0 {
        return Ok(());
    }
    be.copy_d2d_strided(src, blocks, dst)
}

/// One flat run of `n` elements from `src[src_off..]` to `dst[dst_off..]`.
fn copy_flat(
    be: Dispatched,
    src: &Tensor,
    src_off: usize,
    dst: &mut Tensor,
    dst_off: usize,
    n: usize,
) -> Result<()> {
    let blocks = Blocks {
        src_off,
        src_pitch: n,
        dst_off,
        dst_pitch: n,
        width: n,
        height: 1,
    };
    run_blocks(be, src, blocks, dst)
}

/// The backend of a concat: the parts, then the output.
fn dispatch_parts(op: &'static str, parts: &[&Tensor], out: &Tensor) -> Result<Dispatched> {
    let mut operands: Vec<Operand<'_>> = parts.iter().map(|p| input("parts", p)).collect();
    operands.push(written("out", out));
    dispatch(op, &operands)
}

/// The backend of a split of `from` into pre-sized parts, each overwritten.
fn dispatch_split(
    op: &'static str,
    (name, from): (&'static str, &Tensor),
    parts: &[&mut Tensor],
) -> Result<Dispatched> {
    let mut operands = vec![input(name, from)];
    operands.extend(parts.iter().map(|p| written("parts", p)));
    dispatch(op, &operands)
}

/// The parts' one dtype (F32 for no parts), which must have an element size.
fn common_dtype(op: &'static str, parts: &[&Tensor]) -> Result<Dtype> {
    let Some(first) = parts.first() else {
        return Ok(Dtype::F32);
    };
    check_sized(op, "parts", first)?;
    match parts.iter().find(|p| p.dtype() != first.dtype()) {
        Some(p) => Err(Error::Dtype {
            op,
            operand: "parts",
            expected: format!("every part must be {} (part 0's dtype)", first.dtype()),
            found: p.dtype(),
        }),
        None => Ok(first.dtype()),
    }
}

/// Checks that every part is `dtype`.
fn check_parts_dtype(op: &'static str, dtype: Dtype, parts: &[&mut Tensor]) -> Result<()> {
    match parts.iter().find(|p| p.dtype() != dtype) {
        Some(p) => Err(Error::Dtype {
            op,
            operand: "parts",
            expected: format!("must match `input` ({dtype})"),
            found: p.dtype(),
        }),
        None => Ok(()),
    }
}

/// `h w` and the total channel count, after checking one count per part and the sizes.
fn channel_geometry(
    op: &'static str,
    parts: usize,
    dims: Nchw,
    c_per_part: &[usize],
) -> Result<(usize, usize)> {
    if c_per_part.len() != parts {
        return Err(Error::invalid(
            op,
            format!(
                "{parts} parts but {} channel counts in `c_per_part`",
                c_per_part.len()
            ),
        ));
    }
    let hw = dims.plane().map_err(|e| Error::shape(op, e))?;
    let total = checked_sum(op, c_per_part.iter().copied())?;
    if total != dims.c {
        return Err(Error::shape(
            op,
            format!(
                "`c_per_part` {c_per_part:?} sums to {total} channels but `dims` has C = {}",
                dims.c
            ),
        ));
    }
    dims.numel().map_err(|e| Error::shape(op, e))?;
    Ok((hw, total))
}

/// The sum of `sizes`, or a shape error when it overflows.
fn checked_sum(op: &'static str, mut sizes: impl Iterator<Item = usize>) -> Result<usize> {
    sizes
        .try_fold(0usize, |acc, s| acc.checked_add(s))
        .ok_or_else(|| Error::shape(op, "the sizes add up past usize"))
}
