//! The flash_grad ops: flash attention backward passes (recompute-based: the forward
//! softmax is recomputed from `Q`, `K`, `V`; no forward cache is read).
//!
//! Attention per head (`D = num_heads * head_dim` columns, head `h` in columns
//! `h head_dim ..`): `O_i = sum_j softmax_j(q_i . k_j / sqrt(head_dim)) v_j` over the kept
//! keys: a key whose mask value is `<= 0.5` is dropped, causal keeps key `j` for query `i`
//! only when `j <= i`, and a query row with no kept key has a zero output and a zero
//! gradient. Input gradients (`dQ`, `dK`, `dV`, `dX`, `dCtx`) are overwritten; parameter
//! gradients (`dW*`, `db*` of the qkvo form) accumulate. FP32 accumulation on every dtype.

use brotensor_cpu::flash_grad::FlashBwdGeometry;

use super::flash_attention::{check_key_mask, seqlens};
use super::{check_dtypes_match, check_float, declare, dispatch, input, input_opt, written};
use crate::{Dtype, Error, Result, Tensor};

mod qkvo;
pub use qkvo::{flash_attention_qkvo_backward, QkvoGrads};

/// Checks the shared contract of the attention core: `Q`, `dO (Lq, D)`, `K`, `V (Lk, D)` of
/// one float dtype, `num_heads` dividing `D`, the rows within I32 (the GPU's prefix sums).
/// Returns the head dimension.
fn check_core(
    op: &'static str,
    [q, k, v, d_o]: [&Tensor; 4],
    num_heads: usize,
    be: crate::ops::Dispatched,
) -> Result<usize> {
    check_float(op, "q", q, be)?;
    check_dtypes_match(op, ("q", q), &[("k", k), ("v", v), ("d_o", d_o)])?;
    let d = q.cols();
    if k.cols() != d || v.shape() != k.shape() || d_o.shape() != q.shape() {
        return Err(Error::shape(
            op,
            format!(
                "`q` {:?}, `k` {:?}, `v` {:?}, `d_o` {:?}: need q, d_o (Lq, D) and k, v (Lk, D)",
                q.dims(),
                k.dims(),
                v.dims(),
                d_o.dims()
            ),
        ));
    }
    if num_heads == 0 || d % num_heads != 0 {
        return Err(Error::invalid(
            op,
            format!("num_heads = {num_heads} must divide D = {d}"),
        ));
    }
    if q.rows().max(k.rows()) > i32::MAX as usize {
        return Err(Error::shape(op, "more rows than I32 prefix sums can hold"));
    }
    Ok(d / num_heads)
}

/// Sizes the gradients (`dq` like `q`, `dk`, `dv` like `k`) and zeroes them when there is
/// nothing to attend (no query or no key row); returns whether the kernels must run.
fn prepare_grads(
    be: crate::ops::Dispatched,
    (q, k): (&Tensor, &Tensor),
    [dq, dk, dv]: [&mut Tensor; 3],
) -> Result<bool> {
    be.out("dq", dq, &[q.rows(), q.cols()], q.dtype())?;
    be.out("dk", dk, &[k.rows(), k.cols()], q.dtype())?;
    be.out("dv", dv, &[k.rows(), k.cols()], q.dtype())?;
    if q.rows() == 0 || k.rows() == 0 || q.cols() == 0 {
        for t in [dq, dk, dv] {
            t.zero()?;
        }
        return Ok(false);
    }
    Ok(true)
}

/// The attention core's backward with the recomputed forward output `o_fwd (Lq, D)` also
/// written (the qkvo backward needs it for `dWo`).
#[allow(clippy::too_many_arguments)]
fn core_backward(
    op: &'static str,
    [q, k, v, d_o]: [&Tensor; 4],
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    o_fwd: &mut Tensor,
    [dq, dk, dv]: [&mut Tensor; 3],
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("q", q),
            input("k", k),
            input("v", v),
            input("d_o", d_o),
            input_opt("mask", mask),
            written("dq", dq),
            written("dk", dk),
            written("dv", dv),
        ],
    )?;
    let head_dim = check_core(op, [q, k, v, d_o], num_heads, be)?;
    if causal && q.rows() != k.rows() {
        return Err(Error::invalid(
            op,
            format!(
                "causal requires Lq == Lk, got Lq = {} and Lk = {}",
                q.rows(),
                k.rows()
            ),
        ));
    }
    check_key_mask(op, mask, k.rows())?;
    be.out("o_fwd", o_fwd, &[q.rows(), q.cols()], q.dtype())?;
    if !prepare_grads(be, (q, k), [dq, dk, dv])? {
        return o_fwd.zero();
    }
    let geometry = FlashBwdGeometry {
        heads: num_heads,
        head_dim,
        causal,
    };
    be.flash_attention_backward([q, k, v, d_o], mask, geometry, [o_fwd, dq, dk, dv])
}

/// Backward of `flash_attention_forward` (the bare attention core): `Q (Lq, D)`,
/// `K`, `V (Lk, D)`, upstream `d_o (Lq, D)`, an optional F32 key `mask` of `Lk` values
/// (`<= 0.5` drops the key), `num_heads` dividing `D`, `causal` (requires `Lq == Lk`).
/// Writes `dq (Lq, D)`, `dk`, `dv (Lk, D)` (overwritten, resized to `Q`'s dtype). `o` (the
/// forward output) is unused, kept for the C++ signature: the forward is recomputed.
/// CPU: F32; GPU: F32, F16, BF16.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    o: &Tensor,
    d_o: &Tensor,
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    dq: &mut Tensor,
    dk: &mut Tensor,
    dv: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_backward";
    // `o` takes part in device resolution only.
    declare(
        op,
        &[
            input("q", q),
            input("k", k),
            input("v", v),
            input("o", o),
            input("d_o", d_o),
            input_opt("mask", mask),
            written("dq", dq),
            written("dk", dk),
            written("dv", dv),
        ],
    )?;
    let mut o_fwd = Tensor::default();
    core_backward(
        op,
        [q, k, v, d_o],
        mask,
        num_heads,
        causal,
        &mut o_fwd,
        [dq, dk, dv],
    )
}

/// Reads and validates prefix sums: I32, `batch + 1` values, starting at 0, nondecreasing,
/// ending at `rows`, no sequence longer than `max_len`.
fn read_cu(
    op: &'static str,
    name: &'static str,
    cu: &Tensor,
    batch: usize,
    rows: usize,
    max_len: usize,
) -> Result<Vec<usize>> {
    let want = batch
        .checked_add(1)
        .ok_or_else(|| Error::invalid(op, "batch_size overflows"))?;
    if cu.dtype() == Dtype::I32 && cu.numel() != want {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` has {} values, batch_size + 1 = {want} needed",
                cu.numel()
            ),
        ));
    }
    // Start, monotonicity and end: the forward's checks.
    let (values, longest) = seqlens(op, name, cu, rows)?;
    if longest > max_len {
        return Err(Error::invalid(
            op,
            format!(
                "`{name}` holds a sequence of {longest} rows, more than the max_seqlen {max_len}"
            ),
        ));
    }
    Ok(values.into_iter().map(|v| v as usize).collect())
}

/// Backward of `flash_attention_varlen_forward`: packed sequences, sequence `b` holding query
/// rows `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]` of `Q`, `d_o (total_q, num_heads *
/// head_dim)` and key rows `cu_seqlens_k[b] ..` of `K`, `V (total_k, ...)`, with no
/// attention across sequences. `cu_seqlens_*` are I32 tensors of `batch_size + 1` prefix
/// sums (from 0, nondecreasing, ending at the row counts); no sequence may be longer than
/// `max_seqlen_q` / `max_seqlen_k`. Causal is per sequence: key `j` serves query `i` when
/// `j - cu_seqlens_k[b] <= i - cu_seqlens_q[b]`. No GQA, no mask. Writes `dq (total_q, D)`,
/// `dk`, `dv (total_k, D)` (overwritten); `o` is unused (the forward is recomputed).
/// CPU: F32; GPU: F32, F16, BF16.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_varlen_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    o: &Tensor,
    d_o: &Tensor,
    cu_seqlens_q: &Tensor,
    cu_seqlens_k: &Tensor,
    batch_size: usize,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    num_heads: usize,
    head_dim: usize,
    causal: bool,
    dq: &mut Tensor,
    dk: &mut Tensor,
    dv: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_varlen_backward";
    let be = dispatch(
        op,
        &[
            input("q", q),
            input("k", k),
            input("v", v),
            input("o", o),
            input("d_o", d_o),
            input("cu_seqlens_q", cu_seqlens_q),
            input("cu_seqlens_k", cu_seqlens_k),
            written("dq", dq),
            written("dk", dk),
            written("dv", dv),
        ],
    )?;
    let hd = check_core(op, [q, k, v, d_o], num_heads, be)?;
    if hd != head_dim {
        return Err(Error::shape(
            op,
            format!(
                "D = {} is not num_heads * head_dim = {num_heads} * {head_dim}",
                q.cols()
            ),
        ));
    }
    let cu_q = read_cu(
        op,
        "cu_seqlens_q",
        cu_seqlens_q,
        batch_size,
        q.rows(),
        max_seqlen_q,
    )?;
    let cu_k = read_cu(
        op,
        "cu_seqlens_k",
        cu_seqlens_k,
        batch_size,
        k.rows(),
        max_seqlen_k,
    )?;
    if !prepare_grads(be, (q, k), [dq, dk, dv])? {
        return Ok(());
    }
    let geometry = FlashBwdGeometry {
        heads: num_heads,
        head_dim,
        causal,
    };
    be.flash_attention_varlen_backward(
        [q, k, v, d_o],
        [cu_seqlens_q, cu_seqlens_k],
        [&cu_q, &cu_k],
        geometry,
        [dq, dk, dv],
    )
}
