//! The public op API driven by arbitrary bytes on the CPU backend: arbitrary ops, dims
//! (small ones, and ones near `2^32`, `2^63` and `usize::MAX`), strides, dtypes, scalars and
//! reuse of outputs as inputs. Every call must return `Ok` with a consistent result or an
//! `Err`, never panic or touch memory out of bounds (the fuzz build runs under
//! AddressSanitizer).
#![no_main]

use brotensor::ops::{self, AbtSpec, Act};
use brotensor::{Device, Dtype, Result, Tensor};
use libfuzzer_sys::fuzz_target;

/// Reads the fuzz input as a stream of choices; an exhausted input reads as zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// A size: mostly small, sometimes one that overflows products.
    fn dim(&mut self) -> usize {
        const HUGE: [usize; 8] = [
            1 << 32,
            (1 << 32) + 1,
            1 << 62,
            (1 << 62) + 1,
            1 << 63,
            (1 << 63) + 1,
            usize::MAX - 1,
            usize::MAX,
        ];
        let b = self.byte();
        match b {
            0..=239 => (b % 40) as usize,
            _ => HUGE[(b - 240) as usize % HUGE.len()],
        }
    }

    fn scalar(&mut self) -> f32 {
        const SPECIAL: [f32; 8] = [0.0, -0.0, 1e-30, 1e30, f32::INFINITY, f32::NAN, -1.0, 1e-6];
        let b = self.byte();
        if b >= 248 {
            SPECIAL[(b - 248) as usize]
        } else {
            (b as f32 - 124.0) / 16.0
        }
    }

    fn dtype(&mut self) -> Dtype {
        match self.byte() % 16 {
            0 => Dtype::F16,
            1 => Dtype::BF16,
            2 => Dtype::I32,
            3 => Dtype::I8,
            4 => Dtype::Q8_0,
            _ => Dtype::F32,
        }
    }
}

/// Tensors the program works on; outputs are stored back so later ops read them.
const SLOTS: usize = 6;

fn make(b: &mut Bytes, rows: usize, cols: usize) -> Result<Tensor> {
    let dtype = b.dtype();
    let numel = rows.checked_mul(cols);
    match numel {
        Some(n) if n <= 4096 && dtype.is_float() => {
            let v: Vec<f32> = (0..n).map(|_| b.scalar()).collect();
            Tensor::from_slice_on(Device::Cpu, &v, rows, cols)?.to_dtype(dtype)
        }
        Some(n) if n <= 4096 => Tensor::zeros_on(Device::Cpu, rows, cols, dtype),
        // Zero-element tensors with huge dims are legal; anything else must be refused.
        _ => Tensor::zeros_on(Device::Cpu, rows, cols, dtype),
    }
}

/// Checks what every successful output must satisfy: its bytes read back in full.
fn consistent(t: &Tensor) {
    if t.is_committed() {
        let bytes = t.to_bytes().expect("a committed tensor reads back");
        assert_eq!(bytes.len(), t.storage_bytes());
        assert!(t.capacity_bytes() >= t.storage_bytes());
    }
}

fn run(b: &mut Bytes, slots: &mut [Tensor]) -> Result<()> {
    let pick = |b: &mut Bytes| b.byte() as usize % SLOTS;
    let (i, j, k) = (pick(b), pick(b), pick(b));
    // Copies, so the op may also write a slot that is one of its operands.
    let (x, y, z) = (
        &slots[i].try_clone()?,
        &slots[j].try_clone()?,
        &slots[k].try_clone()?,
    );
    let (s1, s2) = (b.scalar(), b.scalar());
    let (d1, d2, d3, d4) = (b.dim(), b.dim(), b.dim(), b.dim());
    let mut out = Tensor::default();
    let mut out2 = Tensor::default();
    let mut out3 = Tensor::default();
    let op = b.byte();
    match op % 56 {
        0 => slots[i] = make(b, d1, d2)?,
        1 => out = ops::add(x, y)?,
        2 => ops::div_out(x, y, &mut out)?,
        3 => {
            let mut t = x.try_clone()?;
            t.mul_(y)?;
            out = t;
        }
        4 => ops::exp_forward(x, &mut out)?,
        5 => ops::gelu_backward(x, y, &mut out)?,
        6 => ops::elu_backward(x, y, s1, &mut out)?,
        7 => ops::swiglu_forward(x, &mut out)?,
        8 => ops::geglu_backward(x, y, &mut out)?,
        9 => ops::clamp_out(x, s1, s2, &mut out)?,
        10 => ops::cast(x, &mut out, b.dtype())?,
        11 => {
            let mut t = x.try_clone()?;
            ops::add_channel_bias_inplace(&mut t, y, d1, d2)?;
            out = t;
        }
        12 => ops::threshold_u8(x, s1, &mut out)?,
        13 => ops::sum_rows(x, &mut out)?,
        14 => ops::sum_cols(x, &mut out)?,
        15 => ops::argmax_rows(x, &mut out)?,
        16 => ops::top_k_rows(x, d1, &mut out, &mut out2)?,
        17 => ops::rows_count_above(x, s1, s2, &mut out)?,
        18 => ops::matmul(x, y, &mut out)?,
        19 => {
            let (mut da, mut db) = (x.try_clone()?, y.try_clone()?);
            ops::matmul_backward(x, y, z, &mut da, &mut db)?;
            out = da;
        }
        20 => ops::linear_forward(x, y, z, &mut out)?,
        21 => ops::linear_forward_batched(x, Some(y), z, &mut out)?,
        22 => {
            let (mut dw, mut db) = (
                x.try_clone()?,
                Tensor::zeros_on(Device::Cpu, x.rows(), 1, x.dtype())?,
            );
            ops::linear_backward_batched(x, y, z, &mut out, &mut dw, &mut db)?;
        }
        23 => {
            let spec = AbtSpec {
                batch: b.dim(),
                m: d1,
                n: d2,
                k: d3,
                stride_a: d4,
                stride_b: b.dim(),
                stride_c: b.dim(),
            };
            let mut c = z.try_clone()?;
            ops::matmul_abt(
                x,
                y,
                &mut c,
                spec,
                None,
                Act::from_code(b.byte() as u32 % 6),
            )?;
            out = c;
        }
        24 => ops::linear_forward_batched_fp16(x, None, y, &mut out)?,
        25 => {
            let w: Vec<f32> = (0..(d1 % 8) * (d2 % 8)).map(|_| b.scalar()).collect();
            let _ = ops::quantize_int8_per_row_host(&w, d1 % 8, d2 % 8)?;
            let _ = ops::quantize_int8_per_row_host(&w, d1, d2);
        }
        26 => ops::linear_forward_batched_int8w_fp16(x, y, None, z, &mut out)?,
        27 => ops::softmax_rows_forward(x, &mut out)?,
        28 => ops::softmax_forward(x, Some(y), &mut out)?,
        29 => ops::softmax_backward(x, y, &mut out)?,
        30 => {
            let offsets = [0, d1, d2];
            ops::softmax_xent_fused_batched(x, y, None, &offsets, &mut out, &mut out2, &mut out3)?;
        }
        31 => {
            ops::bce_with_logits_fused_batched(x, y, Some(z), s1, &mut out, &mut out2, &mut out3)?
        }
        32 => {
            let _ = ops::mse_vec_forward(x, y)?;
            ops::mse_vec_per_sample(x, y, &mut out, &mut out2)?;
        }
        33 => ops::layernorm_forward_batched_with_caches(
            x,
            y,
            z,
            s1,
            &mut out,
            &mut out2,
            &mut out3,
            &mut Tensor::default(),
        )?,
        34 => {
            let (mut dg, mut db) = (y.try_clone()?, y.try_clone()?);
            ops::layernorm_backward_batched_with_caches(x, z, y, y, &mut out, &mut dg, &mut db)?;
        }
        35 => ops::rms_norm_forward(x, y, s1, &mut out)?,
        36 => {
            let mut dg = y.try_clone()?;
            ops::rms_norm_backward(x, y, z, s1, &mut out, &mut dg)?;
        }
        37 => ops::l2_norm_forward(x, d1, d2, s1, &mut out)?,
        38 => ops::l2_norm_backward(x, y, d1, d2, s1, &mut out)?,
        39 => ops::group_norm_forward(x, y, z, (d1, d2, d3, d4), b.dim(), s1, &mut out)?,
        40 => {
            let (mut dg, mut db) = (y.try_clone()?, y.try_clone()?);
            ops::group_norm_backward(
                x,
                y,
                z,
                (d1, d2, d3, d4),
                b.dim(),
                s1,
                &mut out,
                &mut dg,
                &mut db,
            )?;
        }
        41 => ops::batch_norm_inference(x, y, z, y, z, (d1, d2, d3, d4), s1, &mut out)?,
        42 => {
            let (mut rm, mut rv) = (y.try_clone()?, z.try_clone()?);
            ops::batch_norm_forward(
                x,
                y,
                z,
                (d1, d2, d3, d4),
                s1,
                s2,
                &mut rm,
                &mut rv,
                &mut out,
                &mut out2,
                &mut out3,
            )?;
        }
        43 => ops::l2_normalize_nchw_forward(x, (d1, d2, d3, d4), s1, &mut out)?,
        44 => {
            let alpha = Tensor::from_slice_on(Device::Cpu, &vec![s1; d2.min(64)], d2.min(64), 1)?;
            ops::snake_forward(x, &alpha, None, (d1, d2, d3), &mut out)?;
        }
        45 => slots[i].reshape_(&[d1, d2])?,
        46 => out = x.reshaped(d1, d2)?.try_clone()?,
        // Views: made from fuzzed arguments, materialised, kept in slots (so later ops read
        // views and try to write through them), and fed to broadcasting arithmetic.
        47 => {
            let rank = x.rank();
            let mut perm: Vec<usize> = (0..rank).collect();
            for r in 0..rank {
                perm.swap(r, b.byte() as usize % rank.max(1));
            }
            if b.byte() % 8 == 0 {
                perm.push(d1); // an invalid permutation now and then
            }
            out = x.permute(&perm)?.contiguous()?;
        }
        48 => {
            let step = b.byte() as i8 as isize;
            out = x.slice(d1 % 4, d2, d3, step)?.contiguous()?;
        }
        49 => {
            let dims = [d1 % 5, x.rows(), x.cols()];
            out = x.broadcast_to(&dims)?.contiguous()?;
        }
        50 => out = x.flip(&[d1 % 3, d2 % 3])?.contiguous()?,
        51 => out = x.reshape(&[d1, d2, d3])?.contiguous()?,
        52 => slots[k] = slots[i].transpose(0, d1 % 3)?,
        53 => slots[i].add_(y)?,
        54 => {
            let row = y.narrow(0, d1, d2 % 3)?;
            out = ops::mul(x, &row)?;
            let mut into = Tensor::default();
            ops::copy_into(&row.unsqueeze(d3 % 4)?, &mut into)?;
        }
        _ => slots[i].resize(d1 % 64, d2 % 64, b.dtype())?,
    }
    for t in [&out, &out2, &out3] {
        consistent(t);
    }
    if out.is_committed() {
        slots[k] = out;
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mut slots: Vec<Tensor> = (0..SLOTS)
        .map(|_| {
            let (r, c) = (b.dim() % 16, b.dim() % 16);
            make(&mut b, r, c).unwrap_or_default()
        })
        .collect();
    for _ in 0..8 {
        if b.0.is_empty() {
            break;
        }
        let _ = run(&mut b, &mut slots);
        for t in &slots {
            consistent(t);
        }
    }
});
