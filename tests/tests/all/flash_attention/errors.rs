//! Error cases of the contracts: each must be a clean `Error` naming the op.

use brotensor::{ops, Dtype, Error, Result, Tensor};

fn z(rows: usize, cols: usize) -> Tensor {
    Tensor::zeros(rows, cols, Dtype::F32).expect("zeros")
}

/// Asserts `r` failed with a message naming `op` and containing `what`.
fn fails(r: Result<()>, op: &str, what: &str) {
    match r {
        Ok(()) => panic!("{op}: accepted a bad call ({what})"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(op) && msg.contains(what),
                "{op}: `{msg}` lacks `{what}`"
            );
        }
    }
}

#[test]
fn core_shape_and_dtype_errors() {
    let op = "flash_attention_forward";
    let mut o = Tensor::default();
    let (q, k) = (z(4, 12), z(6, 12));
    fails(
        ops::flash_attention_forward(&q, &k, &k, None, 5, false, &mut o),
        op,
        "does not divide",
    );
    fails(
        ops::flash_attention_forward(&q, &k, &k, None, 0, false, &mut o),
        op,
        ">= 1",
    );
    fails(
        ops::flash_attention_forward(&q, &k, &k, None, 2, true, &mut o),
        op,
        "Lq == Lk",
    );
    fails(
        ops::flash_attention_forward(&q, &k, &z(5, 12), None, 2, false, &mut o),
        op,
        "`v`",
    );
    fails(
        ops::flash_attention_forward(&q, &z(6, 8), &z(6, 8), None, 2, false, &mut o),
        op,
        "columns",
    );
    let k16 = Tensor::zeros(6, 12, Dtype::F16).unwrap();
    fails(
        ops::flash_attention_forward(&q, &k16, &k16, None, 2, false, &mut o),
        op,
        "k",
    );
    fails(
        ops::flash_attention_forward(&q, &k, &k, Some(&z(1, 5)), 2, false, &mut o),
        op,
        "mask",
    );
    let m16 = Tensor::zeros(1, 6, Dtype::F16).unwrap();
    fails(
        ops::flash_attention_forward(&q, &k, &k, Some(&m16), 2, false, &mut o),
        op,
        "mask",
    );
    let ints = Tensor::zeros(4, 12, Dtype::I32).unwrap();
    fails(
        ops::flash_attention_forward(&ints, &k, &k, None, 2, false, &mut o),
        op,
        "q",
    );
    // 16-bit attention runs on the CPU too (FP32 math, the output rounded once).
    let q16 = Tensor::zeros(4, 12, Dtype::F16).unwrap();
    ops::flash_attention_forward(&q16, &k16, &k16, None, 2, false, &mut o).unwrap();
    assert_eq!((o.dtype(), o.shape()), (Dtype::F16, (4, 12)));

    let op = "flash_attention_gqa_forward";
    fails(
        ops::flash_attention_gqa_forward(&z(4, 12), &z(6, 4), &z(6, 4), None, 6, 4, false, &mut o),
        op,
        "does not divide",
    );
    fails(
        ops::flash_attention_gqa_forward(&z(7, 12), &z(6, 4), &z(6, 4), None, 6, 2, false, &mut o),
        op,
        "Lk >= Lq",
    );
    fails(
        ops::flash_attention_gqa_forward(&z(4, 12), &z(6, 4), &z(6, 4), None, 6, 2, true, &mut o),
        op,
        "Lq == Lk",
    );
    fails(
        ops::flash_attention_gqa_forward(&z(4, 12), &z(6, 6), &z(6, 6), None, 6, 2, false, &mut o),
        op,
        "columns",
    );

    let op = "flash_attention_windowed_forward";
    fails(
        ops::flash_attention_windowed_forward(&z(7, 12), &z(6, 12), &z(6, 12), None, 2, 3, &mut o),
        op,
        "Lk >= Lq",
    );
    fails(
        ops::flash_attention_windowed_forward(&z(4, 12), &z(6, 12), &z(6, 12), None, 5, 3, &mut o),
        op,
        "does not divide",
    );
}

#[test]
fn varlen_errors() {
    let op = "flash_attention_varlen_forward";
    let mut o = Tensor::default();
    let (q, k) = (z(10, 8), z(12, 8));
    let cu = |v: &[i32]| Tensor::from_slice(v, 1, v.len()).unwrap();
    let good_q = cu(&[0, 4, 10]);
    let good_k = cu(&[0, 5, 12]);
    let run = |cq: &Tensor, ck: &Tensor, mq: usize, hd: usize, o: &mut Tensor| {
        ops::flash_attention_varlen_forward(&q, &k, &k, cq, ck, mq, 7, 2, hd, false, o)
    };
    assert!(run(&good_q, &good_k, 6, 4, &mut o).is_ok());
    fails(
        run(&cu(&[0, 6, 4, 10]), &cu(&[0, 5, 6, 12]), 6, 4, &mut o),
        op,
        "monotone",
    );
    fails(run(&cu(&[0, 4, 9]), &good_k, 6, 4, &mut o), op, "ends at 9");
    fails(
        run(&cu(&[1, 4, 10]), &good_k, 6, 4, &mut o),
        op,
        "start at 0",
    );
    fails(run(&good_q, &cu(&[0, 12]), 6, 4, &mut o), op, "values");
    fails(run(&good_q, &good_k, 5, 4, &mut o), op, "max_seqlen");
    fails(run(&good_q, &good_k, 6, 3, &mut o), op, "head_dim");
    let f = Tensor::from_slice(&[0.0f32, 4.0, 10.0], 1, 3).unwrap();
    fails(run(&f, &good_k, 6, 4, &mut o), op, "I32");
}

#[test]
fn decode_errors() {
    let op = "flash_attention_decode";
    let mut o = Tensor::default();
    let (q, c) = (z(2, 16), z(8, 8));
    fails(
        ops::flash_attention_decode(&q, &c, &c, 9, 4, 2, 0.0, 0, &mut o),
        op,
        "exceeds",
    );
    fails(
        ops::flash_attention_decode(&q, &c, &c, 1, 4, 2, 0.0, 0, &mut o),
        op,
        "below Lq",
    );
    fails(
        ops::flash_attention_decode(&q, &c, &c, 5, 4, 3, 0.0, 0, &mut o),
        op,
        "does not divide",
    );
    fails(
        ops::flash_attention_decode(&q, &c, &c, 5, 4, 2, -1.0, 0, &mut o),
        op,
        "attn_softcap",
    );
    fails(
        ops::flash_attention_decode(&q, &c, &c, 5, 4, 2, f32::NAN, 0, &mut o),
        op,
        "attn_softcap",
    );

    let op = "flash_attention_decode_masked";
    let m = z(1, 8);
    fails(
        ops::flash_attention_decode_masked(&q, &c, &c, &m, 4, 2, 0.0, 0, &mut o),
        op,
        "one query row",
    );
    fails(
        ops::flash_attention_decode_masked(&z(1, 16), &c, &c, &z(1, 7), 4, 2, 0.0, 0, &mut o),
        op,
        "mask",
    );
}

#[test]
fn kv_cache_append_errors() {
    let op = "kv_cache_append";
    let (kn, vn) = (z(3, 8), z(3, 8));
    let (mut kc, mut vc) = (z(10, 8), z(10, 8));
    fails(
        ops::kv_cache_append(&kn, &vn, 8, &mut kc, &mut vc),
        op,
        "overflows",
    );
    fails(
        ops::kv_cache_append(&kn, &vn, usize::MAX, &mut kc, &mut vc),
        op,
        "overflows",
    );
    fails(
        ops::kv_cache_append(&z(3, 6), &z(3, 6), 0, &mut kc, &mut vc),
        op,
        "columns",
    );
    fails(
        ops::kv_cache_append(&kn, &z(2, 8), 0, &mut kc, &mut vc),
        op,
        "shape",
    );
    let mut bad = z(10, 6);
    fails(
        ops::kv_cache_append(&kn, &vn, 0, &mut kc, &mut bad),
        op,
        "shape",
    );
    let mut empty = Tensor::default();
    fails(
        ops::kv_cache_append(&kn, &vn, 0, &mut empty, &mut vc),
        op,
        "pre-sized",
    );
    let mut half = Tensor::zeros(10, 8, Dtype::F16).unwrap();
    fails(
        ops::kv_cache_append(&kn, &vn, 0, &mut kc, &mut half),
        op,
        "v_cache",
    );
}

#[test]
fn projected_errors() {
    let mut o = Tensor::default();
    let (x, w) = (z(4, 8), z(8, 8));
    let op = "flash_attention_qkvo_forward";
    let bad = z(8, 7);
    let r = ops::flash_attention_qkvo_forward(
        &x,
        None,
        (&bad, None),
        (&w, None),
        (&w, None),
        (&w, None),
        None,
        2,
        false,
        &mut o,
    );
    fails(r, op, "`wq`");
    let r = ops::flash_attention_qkvo_forward(
        &x,
        Some(&z(5, 6)),
        (&w, None),
        (&w, None),
        (&w, None),
        (&w, None),
        None,
        2,
        false,
        &mut o,
    );
    fails(r, op, "`wk`");
    let op = "flash_attention_project_kv";
    let (mut k, mut v) = (Tensor::default(), Tensor::default());
    fails(
        ops::flash_attention_project_kv(&x, &w, None, &z(4, 8), None, &mut k, &mut v),
        op,
        "`wv`",
    );
    let op = "flash_attention_q_with_kv_cached_forward";
    let r = ops::flash_attention_q_with_kv_cached_forward(
        &x,
        &z(5, 8),
        &z(5, 8),
        &w,
        None,
        &z(8, 4),
        None,
        None,
        2,
        false,
        &mut o,
    );
    fails(r, op, "`wo`");
    // INT8 variants: the weight must be I8.
    let s = z(8, 1);
    let x16 = Tensor::zeros(4, 8, Dtype::F16).unwrap();
    let r = ops::flash_attention_project_kv_int8w_fp16(
        &x16,
        (&w, &s, None),
        (&w, &s, None),
        &mut k,
        &mut v,
    );
    assert!(matches!(r, Err(Error::Dtype { .. })), "{r:?}");
}

/// Head dims past the GPU kernel's tiles are refused there (the CPU takes any).
#[test]
fn gpu_refuses_huge_head_dim() {
    for device in brotensor_tests::gpu_devices() {
        let q = Tensor::zeros_on(device, 2, 520, Dtype::F32).unwrap();
        let mut o = Tensor::default();
        fails(
            ops::flash_attention_forward(&q, &q, &q, None, 1, false, &mut o),
            "flash_attention",
            "head_dim",
        );
    }
    let q = z(2, 520);
    let mut o = Tensor::default();
    ops::flash_attention_forward(&q, &q, &q, None, 1, false, &mut o)
        .expect("CPU takes any head dim");
}
