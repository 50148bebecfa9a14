//! The three backward passes (plain, causal, masked, empty, varlen) on every device and dtype
//! against the float64 reference.

use super::*;

/// Runs `flash_attention_backward` (or the varlen form when `varlen`) for `a` on every
/// device and dtype against [`attention_grads`].
fn check_backward(case: &str, seed: u64, a: &Attn, varlen: bool) {
    let w = a.width();
    let (lq, lk) = (a.rows_q(), a.rows_k());
    let inputs = [
        Input::new(lq, w, -2.0, 2.0),
        Input::new(lk, w, -2.0, 2.0),
        Input::new(lk, w, -1.0, 1.0),
        Input::new(lq, w, -1.0, 1.0),
    ];
    let check = Check {
        dtypes: ALL,
        tol: Some(grad_tol),
        ..Check::default()
    };
    let op = |t: &[Tensor]| {
        let device = t[0].device();
        // Stale values in the outputs must not survive: they are overwritten.
        let junk = |rows| tensor(device, &vec![7.0; rows * w], rows, w, t[0].dtype());
        let (mut dq, mut dk, mut dv) = (junk(lq)?, junk(lk)?, junk(lk)?);
        if varlen {
            let cu = |c: &[usize]| {
                let c: Vec<i32> = c.iter().map(|&v| v as i32).collect();
                Tensor::from_slice_on(device, &c, 1, c.len())
            };
            let longest = |c: &[usize]| c.windows(2).map(|p| p[1] - p[0]).max().unwrap_or(0);
            ops::flash_attention_varlen_backward(
                &t[0],
                &t[1],
                &t[2],
                &Tensor::default(),
                &t[3],
                &cu(&a.cu_q)?,
                &cu(&a.cu_k)?,
                a.cu_q.len() - 1,
                longest(&a.cu_q),
                longest(&a.cu_k),
                a.heads,
                a.hd,
                a.causal,
                &mut dq,
                &mut dk,
                &mut dv,
            )?;
        } else {
            let mask = mask_on(device, &a.mask);
            ops::flash_attention_backward(
                &t[0],
                &t[1],
                &t[2],
                &Tensor::default(),
                &t[3],
                mask.as_ref(),
                a.heads,
                a.causal,
                &mut dq,
                &mut dk,
                &mut dv,
            )?;
        }
        stacked(&t[0], &[&dq, &dk, &dv])
    };
    reference_with(case, seed, &inputs, check, op, |x| {
        let [_, dq, dk, dv] = attention_grads(a, &x[0], &x[1], &x[2], &x[3]);
        [dq, dk, dv].concat()
    });
}

#[test]
fn backward_rectangular_head_dims() {
    for (i, (lq, lk, heads, hd)) in [(20, 33, 2, 40), (9, 40, 2, 64), (24, 17, 1, 128)]
        .into_iter()
        .enumerate()
    {
        let a = Attn::dense(lq, lk, heads, hd, false);
        check_backward(
            &format!("flash_attention_backward {lq}x{lk} h{heads} hd{hd}"),
            0xF1A0 + i as u64,
            &a,
            false,
        );
    }
}

#[test]
fn backward_causal() {
    for (i, (l, heads, hd)) in [(17, 2, 64), (30, 1, 40), (12, 1, 128)]
        .into_iter()
        .enumerate()
    {
        let a = Attn::dense(l, l, heads, hd, true);
        check_backward(
            &format!("flash_attention_backward causal {l} h{heads} hd{hd}"),
            0xF1B0 + i as u64,
            &a,
            false,
        );
    }
}

#[test]
fn backward_masked_keys_and_rows() {
    // Some keys hidden (including values at and near the 0.5 threshold).
    let mut a = Attn::dense(14, 26, 2, 64, false);
    a.mask = Some(
        (0..26)
            .map(|j| match j % 5 {
                0 => 0.0,
                1 => 0.5,
                2 => 0.51,
                _ => 1.0,
            })
            .collect(),
    );
    check_backward("flash_attention_backward masked keys", 0xF1C0, &a, false);
    // Causal with keys 0 and 1 hidden: query rows 0 and 1 keep no key (zero gradient rows).
    let mut a = Attn::dense(19, 19, 2, 40, true);
    a.mask = Some(
        (0..19)
            .map(|j| if j < 2 || j == 7 { 0.0 } else { 1.0 })
            .collect(),
    );
    check_backward("flash_attention_backward masked rows", 0xF1C1, &a, false);
    // Every key hidden: every gradient is zero.
    let mut a = Attn::dense(6, 9, 1, 64, false);
    a.mask = Some(vec![0.0; 9]);
    check_backward("flash_attention_backward all masked", 0xF1C2, &a, false);
}

#[test]
fn backward_without_queries_or_keys() {
    // No key: every query row is empty (zero dQ); no query: zero dK, dV.
    for (i, (lq, lk)) in [(5, 0), (0, 6)].into_iter().enumerate() {
        let a = Attn::dense(lq, lk, 2, 40, false);
        check_backward(
            &format!("flash_attention_backward {lq}x{lk}"),
            0xF1C8 + i as u64,
            &a,
            false,
        );
    }
}

#[test]
fn gpu_backward_refuses_head_dims_past_the_kernel_limit() {
    // The GPU kernels hold one head row per cube (256 columns); the CPU has no limit.
    let (l, hd) = (3, 264);
    for device in brotensor_tests::gpu_devices() {
        let t = Tensor::zeros_on(device, l, hd, Dtype::F32).unwrap();
        let (mut dq, mut dk, mut dv) = Default::default();
        let r = ops::flash_attention_backward(
            &t,
            &t,
            &t,
            &Tensor::default(),
            &t,
            None,
            1,
            false,
            &mut dq,
            &mut dk,
            &mut dv,
        );
        expect_err(
            "head_dim 264",
            r,
            "flash_attention_backward",
            "exceeds the GPU kernels' 256",
        );
    }
    let t = zeros(l, hd);
    backward((&t, &t, &t, &t), None, 1, false).expect("the CPU takes any head_dim");
}

#[test]
fn varlen_backward_three_sequences() {
    let mut a = Attn::dense(0, 0, 2, 64, false);
    a.cu_q = vec![0, 5, 14, 17];
    a.cu_k = vec![0, 7, 11, 17];
    check_backward("flash_attention_varlen_backward", 0xF1D0, &a, true);
    let mut a = Attn::dense(0, 0, 2, 40, true);
    a.cu_q = vec![0, 6, 16, 19];
    a.cu_k = a.cu_q.clone();
    check_backward("flash_attention_varlen_backward causal", 0xF1D1, &a, true);
    // A sequence with no keys, and one with no queries: zero gradients there.
    let mut a = Attn::dense(0, 0, 1, 128, false);
    a.cu_q = vec![0, 4, 4, 9];
    a.cu_k = vec![0, 3, 8, 8];
    check_backward("flash_attention_varlen_backward empty", 0xF1D2, &a, true);
}
