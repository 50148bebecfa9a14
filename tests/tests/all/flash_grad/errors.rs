//! Every error case of the flash_grad ops.

use super::*;

#[test]
fn backward_rejects_bad_arguments() {
    let op = "flash_attention_backward";
    let (q, k) = (zeros(4, 8), zeros(6, 8));
    let e = expect_err(
        "k columns",
        backward((&q, &zeros(6, 4), &zeros(6, 4), &q), None, 2, false),
        op,
        "need q, d_o (Lq, D)",
    );
    assert!(matches!(e, Error::Shape { .. }));
    expect_err(
        "v rows",
        backward((&q, &k, &zeros(5, 8), &q), None, 2, false),
        op,
        "need q",
    );
    expect_err(
        "d_o shape",
        backward((&q, &k, &k, &zeros(4, 6)), None, 2, false),
        op,
        "need q",
    );
    expect_err(
        "heads",
        backward((&q, &k, &k, &q), None, 3, false),
        op,
        "must divide D",
    );
    expect_err(
        "zero heads",
        backward((&q, &k, &k, &q), None, 0, false),
        op,
        "must divide D",
    );
    expect_err(
        "causal",
        backward((&q, &k, &k, &q), None, 2, true),
        op,
        "causal requires Lq == Lk",
    );
    expect_err(
        "mask length",
        backward((&q, &k, &k, &q), Some(&zeros(1, 5)), 2, false),
        op,
        "`mask` has 5 values",
    );
    let half_mask = Tensor::zeros(1, 6, Dtype::F16).unwrap();
    let e = expect_err(
        "mask dtype",
        backward((&q, &k, &k, &q), Some(&half_mask), 2, false),
        op,
        "mask",
    );
    assert!(matches!(e, Error::Dtype { .. }));
    let k16 = Tensor::zeros(6, 8, Dtype::F16).unwrap();
    let e = expect_err(
        "dtype mismatch",
        backward((&q, &k16, &k, &q), None, 2, false),
        op,
        "`k`",
    );
    assert!(matches!(e, Error::Dtype { .. }));
    let q16 = Tensor::zeros(4, 8, Dtype::F16).unwrap();
    // The CPU computes 16-bit gradients too (FP32 math, each output rounded once).
    backward((&q16, &k16, &k16, &q16), None, 2, false).expect("cpu f16");
    let idx = Tensor::zeros(4, 8, Dtype::I32).unwrap();
    let e = backward((&idx, &k, &k, &q), None, 2, false).expect_err("int q");
    assert!(matches!(e, Error::Dtype { .. }), "{e}");
}

fn varlen(
    (q, k): (&Tensor, &Tensor),
    cu: (&[i32], &[i32]),
    batch: usize,
    heads_hd: (usize, usize),
    max: usize,
) -> brotensor::Result<()> {
    let cu_q = Tensor::from_slice(cu.0, 1, cu.0.len()).unwrap();
    let cu_k = Tensor::from_slice(cu.1, 1, cu.1.len()).unwrap();
    let (mut dq, mut dk, mut dv) = Default::default();
    ops::flash_attention_varlen_backward(
        q,
        k,
        k,
        &Tensor::default(),
        q,
        &cu_q,
        &cu_k,
        batch,
        max,
        max,
        heads_hd.0,
        heads_hd.1,
        false,
        &mut dq,
        &mut dk,
        &mut dv,
    )
}

#[test]
fn varlen_backward_rejects_bad_arguments() {
    let op = "flash_attention_varlen_backward";
    let (q, k) = (zeros(5, 8), zeros(7, 8));
    let good_q: &[i32] = &[0, 2, 5];
    let good_k: &[i32] = &[0, 3, 7];
    varlen((&q, &k), (good_q, good_k), 2, (2, 4), 8).expect("valid");
    for (tag, cu_q, what) in [
        ("start", &[1, 2, 5][..], "must start at 0"),
        ("decrease", &[0, 3, 2, 5][..], "not monotone"),
        ("end", &[0, 2, 4][..], "ends at 4"),
        ("length", &[0, 5][..], "batch_size + 1"),
    ] {
        let batch = if tag == "decrease" { 3 } else { 2 };
        let cu_k: &[i32] = if tag == "decrease" {
            &[0, 3, 5, 7]
        } else {
            good_k
        };
        expect_err(
            tag,
            varlen((&q, &k), (cu_q, cu_k), batch, (2, 4), 8),
            op,
            what,
        );
    }
    expect_err(
        "max_seqlen",
        varlen((&q, &k), (good_q, good_k), 2, (2, 4), 3),
        op,
        "more than the max_seqlen 3",
    );
    expect_err(
        "head_dim",
        varlen((&q, &k), (good_q, good_k), 2, (2, 3), 8),
        op,
        "num_heads * head_dim",
    );
    let f32_cu = Tensor::from_slice(&[0.0f32, 2.0, 5.0], 1, 3).unwrap();
    let cu_k = Tensor::from_slice(good_k, 1, 3).unwrap();
    let (mut dq, mut dk, mut dv) = Default::default();
    let e = ops::flash_attention_varlen_backward(
        &q,
        &k,
        &k,
        &Tensor::default(),
        &q,
        &f32_cu,
        &cu_k,
        2,
        8,
        8,
        2,
        4,
        false,
        &mut dq,
        &mut dk,
        &mut dv,
    )
    .expect_err("f32 prefix sums");
    assert!(matches!(e, Error::Dtype { .. }), "{e}");
}

#[test]
fn qkvo_backward_rejects_bad_arguments() {
    let op = "flash_attention_qkvo_backward";
    let (lq, d) = (3, 4);
    let x = zeros(lq, d);
    let w = zeros(d, d);
    let b = zeros(d, 1);
    let run = |ctx: Option<&Tensor>,
               bq: Option<&Tensor>,
               heads: usize,
               causal: bool,
               with_dctx: bool,
               with_dbq: bool,
               dwq: Tensor| {
        let (mut dx, mut dctx) = (Tensor::default(), Tensor::default());
        let (mut dwq, mut dwk, mut dwv, mut dwo) = (dwq, zeros(d, d), zeros(d, d), zeros(d, d));
        let mut dbq = zeros(d, 1);
        ops::flash_attention_qkvo_backward(
            &x,
            ctx,
            &w,
            bq,
            &w,
            None,
            &w,
            None,
            &w,
            None,
            None,
            heads,
            causal,
            &x,
            ops::QkvoGrads {
                dx: &mut dx,
                dctx: with_dctx.then_some(&mut dctx),
                dwq: &mut dwq,
                dbq: with_dbq.then_some(&mut dbq),
                dwk: &mut dwk,
                dbk: None,
                dwv: &mut dwv,
                dbv: None,
                dwo: &mut dwo,
                dbo: None,
            },
        )
    };
    run(None, Some(&b), 2, true, false, true, zeros(d, d)).expect("valid");
    expect_err(
        "dctx without ctx",
        run(None, None, 2, false, true, false, zeros(d, d)),
        op,
        "`dctx` must be given exactly when `ctx` is",
    );
    expect_err(
        "bias without grad",
        run(None, Some(&b), 2, false, false, false, zeros(d, d)),
        op,
        "`dbq` must be given exactly when `bq` is",
    );
    expect_err(
        "grad without bias",
        run(None, None, 2, false, false, true, zeros(d, d)),
        op,
        "`dbq` must be given exactly when `bq` is",
    );
    expect_err(
        "heads",
        run(None, None, 3, false, false, false, zeros(d, d)),
        op,
        "must divide D",
    );
    let ctx = zeros(5, d);
    expect_err(
        "causal cross",
        run(Some(&ctx), None, 2, true, true, false, zeros(d, d)),
        op,
        "causal requires Lq == Lk",
    );
    expect_err(
        "dwq not pre-sized",
        run(None, None, 2, false, false, false, Tensor::default()),
        op,
        "`dwq` must be pre-sized",
    );
    expect_err(
        "dwq shape",
        run(None, None, 2, false, false, false, zeros(d, 2)),
        op,
        "`dwq` is [4, 2]",
    );
    expect_err(
        "ctx width",
        run(Some(&zeros(5, 3)), None, 2, false, true, false, zeros(d, d)),
        op,
        "`wk` is [4, 4], 4x3 needed",
    );
}
