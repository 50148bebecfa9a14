//! Cross-device parity of the attention core on shapes the fixture does not hold: odd and
//! extreme head dims (72, 512: the GPU kernel's smallest tile), many query blocks, and the
//! split-KV path at head dim 256.

use brotensor::{ops, Tensor};
use brotensor_tests::{parity, Input, SplitMix64};

/// A key mask of `n` values, about a third dropped.
fn mask_on(like: &Tensor, n: usize) -> brotensor::Result<Tensor> {
    let m = SplitMix64::new(7).uniform(n, 0.1, 1.6);
    Tensor::from_slice_on(like.device(), &m, 1, n)
}

#[test]
fn gqa_causal_masked_hd72() {
    let (l, nq, nkv, hd) = (150, 6, 3, 72);
    parity(
        "flash_attention_gqa_forward hd72 causal masked",
        0xF2A0,
        &[
            Input::new(l, nq * hd, -1.0, 1.0),
            Input::new(l, nkv * hd, -1.0, 1.0),
            Input::new(l, nkv * hd, -1.0, 1.0),
        ],
        |t| {
            let m = mask_on(&t[0], l)?;
            let mut o = Tensor::default();
            ops::flash_attention_gqa_forward(&t[0], &t[1], &t[2], Some(&m), nq, nkv, true, &mut o)?;
            Ok(o)
        },
    );
}

#[test]
fn forward_hd512() {
    let (lq, lk, nh, hd) = (5, 40, 2, 512);
    parity(
        "flash_attention_forward hd512",
        0xF2A1,
        &[
            Input::new(lq, nh * hd, -0.5, 0.5),
            Input::new(lk, nh * hd, -0.5, 0.5),
            Input::new(lk, nh * hd, -1.0, 1.0),
        ],
        |t| {
            let mut o = Tensor::default();
            ops::flash_attention_forward(&t[0], &t[1], &t[2], None, nh, false, &mut o)?;
            Ok(o)
        },
    );
}

#[test]
fn decode_split_kv_hd256() {
    let (lq, lmax, valid, nq, nkv, hd) = (2, 1600, 1500, 4, 1, 256);
    parity(
        "flash_attention_decode hd256 split-KV window softcap",
        0xF2A2,
        &[
            Input::new(lq, nq * hd, -0.5, 0.5),
            Input::new(lmax, nkv * hd, -0.5, 0.5),
            Input::new(lmax, nkv * hd, -1.0, 1.0),
        ],
        |t| {
            let mut o = Tensor::default();
            ops::flash_attention_decode(&t[0], &t[1], &t[2], valid, nq, nkv, 0.5, 700, &mut o)?;
            Ok(o)
        },
    );
}

/// A window reaching past every position is unbounded on every device: `usize::MAX` and
/// `u32::MAX` (which a 32-bit `j + window` would wrap) give the `window = 0` output, bit for
/// bit, and one position short of unbounded still drops keys.
#[test]
fn windows_past_every_position_are_unbounded() {
    let (lq, lk, nh, hd) = (5, 23, 2, 8);
    let mut rng = SplitMix64::new(0xF2A7);
    let (q, k, v) = (
        rng.uniform(lq * nh * hd, -1.0, 1.0),
        rng.uniform(lk * nh * hd, -1.0, 1.0),
        rng.uniform(lk * nh * hd, -1.0, 1.0),
    );
    for device in super::devices() {
        let run = |window: usize| {
            let t = |x: &[f32], rows| Tensor::from_slice_on(device, x, rows, nh * hd).unwrap();
            let mut o = Tensor::default();
            ops::flash_attention_windowed_forward(
                &t(&q, lq),
                &t(&k, lk),
                &t(&v, lk),
                None,
                nh,
                window,
                &mut o,
            )
            .unwrap();
            o.to_vec::<f32>().unwrap()
        };
        let unbounded = run(0);
        for window in [usize::MAX, u32::MAX as usize, lk] {
            assert_eq!(run(window), unbounded, "on {device}, window {window}");
        }
        assert_ne!(
            run(lk - 1),
            unbounded,
            "on {device}: a window of Lk - 1 drops key 0"
        );
    }
}
