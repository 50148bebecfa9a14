//! A single-layer, single-direction LSTM over a sequence (C++ `ops/lstm.h`), PyTorch
//! `nn.LSTM`'s weight layout and gate order i | f | g | o:
//!
//! `z = W_ih x + b_ih + W_hh h_prev + b_hh`, `i, f, o = sigmoid`, `g = tanh` of its four
//! blocks, `c = f c_prev + i g`, `h = o tanh(c)`.
//!
//! The input projection of every step is one GEMM; each step is then one recurrent GEMM and
//! one fused gate kernel. `lstm_forward_train` caches the gates and cell states that
//! `lstm_backward` (full backpropagation through time) reads; `lstm_forward` and
//! `lstm_cell` are the inference forms without caches (a whole sequence, or one step of a
//! stream with its state updated in place). Row `t B + b` of a sequence tensor is step `t`
//! of batch entry `b`. FP32 on every device; bidirectional and stacked LSTMs are built by
//! the caller (reverse the sequence; feed one layer's output to the next).
//!
//! ```
//! # fn main() -> brotensor::Result<()> {
//! use brotensor::{ops, ops::LstmWeights, Tensor};
//! let (input, hidden) = (3, 2);
//! let w_ih = Tensor::from_slice(&[0.1f32; 24], 4 * hidden, input)?;
//! let w_hh = Tensor::from_slice(&[0.05f32; 16], 4 * hidden, hidden)?;
//! let weights = LstmWeights { w_ih: &w_ih, w_hh: &w_hh, b_ih: None, b_hh: None };
//! let x = Tensor::from_slice(&[1.0f32; 15], 5, input)?; // 5 steps of batch 1
//! let mut y = Tensor::default();
//! ops::lstm_forward(&x, &weights, (None, None), (5, 1), &mut y, None)?;
//! assert_eq!(y.dims(), [5, hidden]);
//! # Ok(())
//! # }
//! ```

use super::linear::gemm_accumulate_at_b;
use super::{
    add_inplace, check_dtype, checked_product, copy_into, dispatch, input, input_opt,
    linear_backward_batched, linear_forward_batched, matmul, updated, updated_opt, written,
    written_opt, Dispatched, Operand,
};
use crate::backend::{CellPrev, StepRows};
use crate::{Dtype, Error, Result, Tensor};

/// An LSTM layer's parameters: `w_ih (4H, I)`, `w_hh (4H, H)` (gate-row blocks i | f | g |
/// o) and optional biases of `4H` values each (`(4H)`, `(4H, 1)` or `(1, 4H)`). All F32.
#[derive(Clone, Copy)]
pub struct LstmWeights<'a> {
    /// Input-to-hidden weights `(4H, I)`.
    pub w_ih: &'a Tensor,
    /// Hidden-to-hidden weights `(4H, H)`.
    pub w_hh: &'a Tensor,
    /// Input-to-hidden bias (`4H` values), or none.
    pub b_ih: Option<&'a Tensor>,
    /// Hidden-to-hidden bias (`4H` values), or none.
    pub b_hh: Option<&'a Tensor>,
}

/// The caches of [`lstm_forward_train`]: hidden states `y (T B, H)`, gate activations
/// `gates (T B, 4H)` and cell states `c (T B, H)`.
pub struct LstmCache<'a> {
    /// Hidden states, one row per step and batch entry.
    pub y: &'a Tensor,
    /// Post-activation gates `[i | f | g | o]`.
    pub gates: &'a Tensor,
    /// Cell states.
    pub c: &'a Tensor,
}

/// The gradients [`lstm_backward`] writes: `dx (T B, I)` overwritten; `dw_ih (4H, I)`,
/// `dw_hh (4H, H)` and the optional bias gradients accumulate (sized by the caller, like
/// their parameters; `db_ih` and `db_hh` get the same gradient); the optional initial-state
/// gradients `dh0`, `dc0` (`(B, H)`) are overwritten.
pub struct LstmGrads<'a> {
    /// Input gradient, overwritten.
    pub dx: &'a mut Tensor,
    /// `W_ih` gradient, accumulated.
    pub dw_ih: &'a mut Tensor,
    /// `W_hh` gradient, accumulated.
    pub dw_hh: &'a mut Tensor,
    /// `b_ih` gradient, accumulated, or none.
    pub db_ih: Option<&'a mut Tensor>,
    /// `b_hh` gradient, accumulated, or none.
    pub db_hh: Option<&'a mut Tensor>,
    /// Initial hidden-state gradient, overwritten, or none.
    pub dh0: Option<&'a mut Tensor>,
    /// Initial cell-state gradient, overwritten, or none.
    pub dc0: Option<&'a mut Tensor>,
}

/// Checks the parameters against `x` (`rows x I`); `(H, I)`.
fn check_weights(op: &'static str, x: &Tensor, w: &LstmWeights<'_>) -> Result<(usize, usize)> {
    for (name, t) in [("x", x), ("w_ih", w.w_ih), ("w_hh", w.w_hh)] {
        check_dtype(op, name, t, Dtype::F32)?;
    }
    let (rows4, inp) = match w.w_ih.dims() {
        &[r, i] if r % 4 == 0 && r > 0 => (r, i),
        dims => {
            return Err(Error::shape(
                op,
                format!("w_ih must be (4H, I) with H >= 1, got dims {dims:?}"),
            ))
        }
    };
    let h = rows4 / 4;
    if w.w_hh.dims() != [rows4, h] {
        return Err(Error::shape(
            op,
            format!(
                "w_hh must be (4H, H) = [{rows4}, {h}] to match w_ih {:?}, got dims {:?}",
                w.w_ih.dims(),
                w.w_hh.dims()
            ),
        ));
    }
    if x.dims().len() != 2 || x.cols() != inp {
        return Err(Error::shape(
            op,
            format!(
                "x must be (T B, I) with I = {inp} (w_ih's columns), got dims {:?}",
                x.dims()
            ),
        ));
    }
    for (name, b) in [("b_ih", w.b_ih), ("b_hh", w.b_hh)] {
        if let Some(b) = b {
            check_dtype(op, name, b, Dtype::F32)?;
            let ok = matches!(b.dims(), [n] | [n, 1] | [1, n] if *n == rows4);
            if !ok {
                return Err(Error::shape(
                    op,
                    format!(
                        "{name} must hold 4H = {rows4} values, got dims {:?}",
                        b.dims()
                    ),
                ));
            }
        }
    }
    Ok((h, inp))
}

/// Checks an optional `(B, H)` F32 state or state gradient.
fn check_state(
    op: &'static str,
    name: &'static str,
    t: Option<&Tensor>,
    bh: [usize; 2],
) -> Result<()> {
    if let Some(t) = t {
        check_dtype(op, name, t, Dtype::F32)?;
        if t.dims() != bh {
            return Err(Error::shape(
                op,
                format!("{name} must be (B, H) = {bh:?}, got dims {:?}", t.dims()),
            ));
        }
    }
    Ok(())
}

/// `(T, B)` checked against `x`'s rows.
fn check_steps(op: &'static str, x: &Tensor, (t, b): (usize, usize)) -> Result<usize> {
    let rows = checked_product(op, "T * B", &[t, b])?;
    if x.rows() != rows {
        return Err(Error::shape(
            op,
            format!("x has {} rows but T * B = {t} * {b} = {rows}", x.rows()),
        ));
    }
    Ok(rows)
}

/// The input projection of every step: `x W_ih^T + b_ih + b_hh`, `(T B, 4H)`.
fn project(x: &Tensor, w: &LstmWeights<'_>) -> Result<Tensor> {
    let flat = |b: &Tensor| b.reshape(&[b.numel()]);
    let bias = match (w.b_ih, w.b_hh) {
        (Some(a), Some(b)) => Some(flat(a)?.add(&flat(b)?)?),
        (Some(a), None) | (None, Some(a)) => Some(flat(a)?),
        (None, None) => None,
    };
    let mut p = Tensor::default();
    linear_forward_batched(w.w_ih, bias.as_ref(), x, &mut p)?;
    Ok(p)
}

/// `z = h W_hh^T`, `(B, 4H)` (`z` keeps its allocation from step to step).
fn recurrent(h: &Tensor, w: &LstmWeights<'_>, z: &mut Tensor) -> Result<()> {
    linear_forward_batched(w.w_hh, None, h, z)
}

/// The operands both sequence forwards read, in their declaration order.
fn forward_inputs<'a>(
    x: &'a Tensor,
    w: &LstmWeights<'a>,
    (h0, c0): (Option<&'a Tensor>, Option<&'a Tensor>),
) -> Vec<Operand<'a>> {
    vec![
        input("x", x),
        input("w_ih", w.w_ih),
        input("w_hh", w.w_hh),
        input_opt("b_ih", w.b_ih),
        input_opt("b_hh", w.b_hh),
        input_opt("h0", h0),
        input_opt("c0", c0),
    ]
}

/// The checks both sequence forwards make; `(H, T B)`, with `y` sized `(T B, H)`.
fn check_forward(
    (be, op): (Dispatched, &'static str),
    x: &Tensor,
    w: &LstmWeights<'_>,
    (h0, c0): (Option<&Tensor>, Option<&Tensor>),
    (t, b): (usize, usize),
    y: &mut Tensor,
) -> Result<(usize, usize)> {
    let (h, _) = check_weights(op, x, w)?;
    let rows = check_steps(op, x, (t, b))?;
    check_state(op, "h0", h0, [b, h])?;
    check_state(op, "c0", c0, [b, h])?;
    be.out("y", y, &[rows, h], Dtype::F32)?;
    Ok((h, rows))
}

/// The forward steps over `x`: hidden states into `y`; gates and cells into `gates` and `c`
/// at rows `cache(t)` (all steps for training, two alternating blocks for inference).
#[allow(clippy::too_many_arguments)]
fn run_steps(
    be: Dispatched,
    op: &'static str,
    (x, w, h0, c0): (&Tensor, &LstmWeights<'_>, Option<&Tensor>, Option<&Tensor>),
    (steps, b, h): (usize, usize, usize),
    (y, gates, c): (&mut Tensor, &mut Tensor, &mut Tensor),
    cache: impl Fn(usize) -> usize,
) -> Result<()> {
    let p = project(x, w)?;
    let mut z = Tensor::default();
    for t in 0..steps {
        let zrec = match (t, h0) {
            (0, None) => None,
            (0, Some(h0)) => {
                recurrent(h0, w, &mut z)?;
                Some(&z)
            }
            _ => {
                recurrent(&y.narrow(0, (t - 1) * b, b)?, w, &mut z)?;
                Some(&z)
            }
        };
        let prev = match (t, c0) {
            (0, None) => CellPrev::Zero,
            (0, Some(c0)) => CellPrev::Initial(c0),
            _ => CellPrev::Rows(cache(t - 1)),
        };
        let rows = StepRows {
            p: t * b,
            y: t * b,
            cache: cache(t),
        };
        be.lstm_step(op, (&p, zrec), prev, (y, gates, c), rows, (b, h))?;
    }
    Ok(())
}

/// Writes the final states `(h_T, c_T)` from `y` and `c` rows `y_row`, `c_row`, or the
/// initial states (zeros when absent) for an empty sequence.
fn final_states(
    (y, c): (&Tensor, &Tensor),
    (y_row, c_row, b, h): (usize, usize, usize, usize),
    steps: usize,
    (h0, c0): (Option<&Tensor>, Option<&Tensor>),
    (h_t, c_t): (&mut Tensor, &mut Tensor),
) -> Result<()> {
    if steps == 0 {
        let zeros = Tensor::zeros_on(y.device(), b, h, Dtype::F32)?;
        copy_into(h0.unwrap_or(&zeros), h_t)?;
        return copy_into(c0.unwrap_or(&zeros), c_t);
    }
    copy_into(&y.narrow(0, y_row, b)?, h_t)?;
    copy_into(&c.narrow(0, c_row, b)?, c_t)
}

/// The training forward of an LSTM over `T` steps of batch `B` (C++ `lstm_forward_train`):
/// `x (T B, I)`; optional initial states `h0`, `c0` `(B, H)` (absent: zero). `y (T B, H)`
/// gets the hidden states, `gates (T B, 4H)` the activations `[i | f | g | o]` and `c (T B,
/// H)` the cell states (all resized; pass them to [`lstm_backward`] unchanged); with
/// `final_state` its `(h_T, c_T)` are written `(B, H)`.
pub fn lstm_forward_train(
    x: &Tensor,
    w: &LstmWeights<'_>,
    (h0, c0): (Option<&Tensor>, Option<&Tensor>),
    (t, b): (usize, usize),
    (y, gates, c): (&mut Tensor, &mut Tensor, &mut Tensor),
    final_state: Option<(&mut Tensor, &mut Tensor)>,
) -> Result<()> {
    let op = "lstm_forward_train";
    let (h_t, c_t) = match final_state {
        Some((h, c)) => (Some(h), Some(c)),
        None => (None, None),
    };
    let mut operands = forward_inputs(x, w, (h0, c0));
    operands.extend([
        written("y", y),
        written("gates", gates),
        written("c", c),
        written_opt("h_t", h_t.as_deref()),
        written_opt("c_t", c_t.as_deref()),
    ]);
    let be = dispatch(op, &operands)?;
    let (h, rows) = check_forward((be, op), x, w, (h0, c0), (t, b), y)?;
    be.out("gates", gates, &[rows, 4 * h], Dtype::F32)?;
    be.out("c", c, &[rows, h], Dtype::F32)?;
    if rows > 0 {
        run_steps(be, op, (x, w, h0, c0), (t, b, h), (y, gates, c), |s| s * b)?;
    }
    if let (Some(h_t), Some(c_t)) = (h_t, c_t) {
        let last = t.saturating_sub(1) * b;
        final_states((y, c), (last, last, b, h), rows, (h0, c0), (h_t, c_t))?;
    }
    Ok(())
}

/// The inference forward of an LSTM over `T` steps of batch `B`: as [`lstm_forward_train`]
/// without the caches (the gates and cells of two steps at a time live in scratch). `y`
/// gets the hidden states `(T B, H)`; with `final_state` its `(h_T, c_T)` are written.
pub fn lstm_forward(
    x: &Tensor,
    w: &LstmWeights<'_>,
    (h0, c0): (Option<&Tensor>, Option<&Tensor>),
    (t, b): (usize, usize),
    y: &mut Tensor,
    final_state: Option<(&mut Tensor, &mut Tensor)>,
) -> Result<()> {
    let op = "lstm_forward";
    let (h_t, c_t) = match final_state {
        Some((h, c)) => (Some(h), Some(c)),
        None => (None, None),
    };
    let mut operands = forward_inputs(x, w, (h0, c0));
    operands.extend([
        written("y", y),
        written_opt("h_t", h_t.as_deref()),
        written_opt("c_t", c_t.as_deref()),
    ]);
    let be = dispatch(op, &operands)?;
    let (h, rows) = check_forward((be, op), x, w, (h0, c0), (t, b), y)?;
    let device = x.device();
    let two = checked_product(op, "2 * B", &[2, b])?;
    let mut gates = Tensor::zeros_on(device, two, 4 * h, Dtype::F32)?;
    let mut c = Tensor::zeros_on(device, two, h, Dtype::F32)?;
    if rows > 0 {
        run_steps(
            be,
            op,
            (x, w, h0, c0),
            (t, b, h),
            (y, &mut gates, &mut c),
            |s| (s % 2) * b,
        )?;
    }
    if let (Some(h_t), Some(c_t)) = (h_t, c_t) {
        let last = t.saturating_sub(1);
        final_states(
            (y, &c),
            (last * b, (last % 2) * b, b, h),
            rows,
            (h0, c0),
            (h_t, c_t),
        )?;
    }
    Ok(())
}

/// One LSTM step of a stream, the state updated in place: `x (B, I)`; `h`, `c` `(B, H)` F32
/// (zeros for a new stream) become the step's hidden and cell states.
pub fn lstm_cell(x: &Tensor, w: &LstmWeights<'_>, h: &mut Tensor, c: &mut Tensor) -> Result<()> {
    let op = "lstm_cell";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("w_ih", w.w_ih),
            input("w_hh", w.w_hh),
            input_opt("b_ih", w.b_ih),
            input_opt("b_hh", w.b_hh),
            updated("h", h),
            updated("c", c),
        ],
    )?;
    let (hid, _) = check_weights(op, x, w)?;
    let b = x.rows();
    check_state(op, "h", Some(h), [b, hid])?;
    check_state(op, "c", Some(c), [b, hid])?;
    if b == 0 {
        return Ok(());
    }
    let p = project(x, w)?;
    let mut zrec = Tensor::default();
    recurrent(h, w, &mut zrec)?;
    let mut gates = Tensor::zeros_on(x.device(), b, 4 * hid, Dtype::F32)?;
    let rows = StepRows {
        p: 0,
        y: 0,
        cache: 0,
    };
    be.lstm_step(
        op,
        (&p, Some(&zrec)),
        CellPrev::Rows(0),
        (h, &mut gates, c),
        rows,
        (b, hid),
    )
}

/// Backpropagation through time for [`lstm_forward_train`] (C++ `lstm_backward`): `x`, the
/// weights, the initial states and `(T, B)` as in the forward call, its caches, and `dy (T
/// B, H)` the gradient of the hidden states (for a loss on the last step only, zero the
/// other rows). See [`LstmGrads`] for what is written and what accumulates.
pub fn lstm_backward(
    x: &Tensor,
    w: &LstmWeights<'_>,
    (h0, c0): (Option<&Tensor>, Option<&Tensor>),
    cache: &LstmCache<'_>,
    dy: &Tensor,
    (t, b): (usize, usize),
    grads: LstmGrads<'_>,
) -> Result<()> {
    let op = "lstm_backward";
    let LstmGrads {
        dx,
        dw_ih,
        dw_hh,
        db_ih,
        db_hh,
        dh0,
        dc0,
    } = grads;
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("w_ih", w.w_ih),
            input("w_hh", w.w_hh),
            input_opt("h0", h0),
            input_opt("c0", c0),
            input("y", cache.y),
            input("gates", cache.gates),
            input("c", cache.c),
            input("dy", dy),
            written("dx", dx),
            updated("dw_ih", dw_ih),
            updated("dw_hh", dw_hh),
            updated_opt("db_ih", db_ih.as_deref()),
            updated_opt("db_hh", db_hh.as_deref()),
            written_opt("dh0", dh0.as_deref()),
            written_opt("dc0", dc0.as_deref()),
        ],
    )?;
    let no_bias = LstmWeights {
        b_ih: None,
        b_hh: None,
        ..*w
    };
    let (h, inp) = check_weights(op, x, &no_bias)?;
    let rows = check_steps(op, x, (t, b))?;
    check_state(op, "h0", h0, [b, h])?;
    check_state(op, "c0", c0, [b, h])?;
    for (name, tensor, cols) in [
        ("y", cache.y, h),
        ("gates", cache.gates, 4 * h),
        ("c", cache.c, h),
        ("dy", dy, h),
    ] {
        check_dtype(op, name, tensor, Dtype::F32)?;
        if tensor.dims() != [rows, cols] {
            return Err(Error::shape(
                op,
                format!(
                    "{name} must be (T B, {cols}) = [{rows}, {cols}], got dims {:?}",
                    tensor.dims()
                ),
            ));
        }
    }
    for (name, g, dims) in [
        ("dw_ih", Some(&*dw_ih), w.w_ih.dims()),
        ("dw_hh", Some(&*dw_hh), w.w_hh.dims()),
        ("db_ih", db_ih.as_deref(), &[4 * h][..]),
        ("db_hh", db_hh.as_deref(), &[4 * h][..]),
    ] {
        if let Some(g) = g {
            check_dtype(op, name, g, Dtype::F32)?;
            let fits = g.dims() == dims
                || (dims.len() == 1 && g.numel() == dims[0] && g.dims().len() <= 2);
            if !g.is_committed() || !fits {
                return Err(Error::shape(
                    op,
                    format!("{name} must be pre-sized like its parameter {dims:?} (it accumulates), got dims {:?}", g.dims()),
                ));
            }
        }
    }
    let device = x.device();
    let mut dz = Tensor::zeros_on(device, rows, 4 * h, Dtype::F32)?;
    let mut dc = Tensor::zeros_on(device, b, h, Dtype::F32)?;
    let mut dh_rec: Option<Tensor> = None;
    for s in (0..t).rev() {
        let prev = match (s, c0) {
            (0, None) => CellPrev::Zero,
            (0, Some(c0)) => CellPrev::Initial(c0),
            _ => CellPrev::Rows((s - 1) * b),
        };
        be.lstm_step_backward(
            op,
            (cache.gates, cache.c),
            prev,
            (dy, dh_rec.as_ref()),
            (&mut dc, &mut dz),
            s * b,
            (b, h),
        )?;
        let mut next = Tensor::default();
        matmul(&dz.narrow(0, s * b, b)?, w.w_hh, &mut next)?;
        dh_rec = Some(next);
    }
    if let Some(dh0) = dh0 {
        match &dh_rec {
            Some(d) => copy_into(d, dh0)?,
            None => copy_into(&Tensor::zeros_on(device, b, h, Dtype::F32)?, dh0)?,
        }
    }
    if let Some(dc0) = dc0 {
        copy_into(&dc, dc0)?;
    }
    // dX = dZ W_ih (overwritten), dW_ih += dZ^T X, db = the column sums of dZ.
    let mut db = Tensor::zeros_on(device, 4 * h, 1, Dtype::F32)?;
    if rows == 0 {
        copy_into(&Tensor::zeros_on(device, 0, inp, Dtype::F32)?, dx)?;
        return Ok(());
    }
    linear_backward_batched(w.w_ih, x, &dz, dx, dw_ih, &mut db)?;
    // dW_hh += sum_t dZ_t^T h_{t-1}: the steps after the first against y, the first
    // against h0.
    if t > 1 {
        let later = dz.narrow(0, b, rows - b)?;
        let earlier = cache.y.narrow(0, 0, rows - b)?;
        gemm_accumulate_at_b(be, op, &later, &earlier, dw_hh)?;
    }
    if let Some(h0) = h0 {
        gemm_accumulate_at_b(be, op, &dz.narrow(0, 0, b)?, h0, dw_hh)?;
    }
    for g in [db_ih, db_hh].into_iter().flatten() {
        let dims = g.dims().to_vec();
        add_inplace(g, &db.reshape(&dims)?)?;
    }
    Ok(())
}
