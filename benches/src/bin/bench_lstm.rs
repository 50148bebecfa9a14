//! The LSTM inference forward (`ops::lstm_forward`) on each selected device
//! (`BROTENSOR_BENCH_DEVICES`), F32, T = 256 steps, input size = hidden size H, for H = 128
//! and 512 and batch B = 1 and 32: GFLOP/s of the nominal `2 T B 4H (I + H)`, and (with
//! `--features candle`, on the CPU) candle-nn's `LSTM::seq` on the same weights, timed in
//! interleaved batches. The training pair (`lstm_forward_train` + `lstm_backward`) is timed
//! too.
//!
//! `cargo run --release -p brotensor-benches [--features candle] --bin bench_lstm`

use brotensor::ops::{self, LstmCache, LstmGrads, LstmWeights};
use brotensor::{Device, Dtype, Tensor};
use brotensor_benches::{best_secs, selected_devices};

const T: usize = 256;
const SHAPES: [(usize, usize); 4] = [(128, 1), (128, 32), (512, 1), (512, 32)];

/// Deterministic values in [-scale, scale).
fn values(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    brotensor_benches::lcg_values(len, seed)
        .into_iter()
        .map(|v| v * scale)
        .collect()
}

/// candle-nn's LSTM over the same weights and inputs.
#[cfg(feature = "candle")]
mod peer {
    use candle_core::{DType, Device, Tensor};
    use candle_nn::rnn::{LSTMConfig, LSTM, RNN};
    use std::collections::HashMap;

    pub struct Peer {
        lstm: LSTM,
        x: Tensor,
    }

    impl Peer {
        /// `w_ih (4H, I)`, `w_hh (4H, H)`, `b_ih`, `b_hh` and `x (T B, I)` (step-major).
        pub fn new(w: [&[f32]; 4], x: &[f32], (t, b, i, h): (usize, usize, usize, usize)) -> Self {
            let dev = Device::Cpu;
            let ten = |v: &[f32], shape: &[usize]| {
                Tensor::from_slice(v, shape, &dev).expect("candle tensor")
            };
            let mut map = HashMap::new();
            map.insert("weight_ih_l0".to_string(), ten(w[0], &[4 * h, i]));
            map.insert("weight_hh_l0".to_string(), ten(w[1], &[4 * h, h]));
            map.insert("bias_ih_l0".to_string(), ten(w[2], &[4 * h]));
            map.insert("bias_hh_l0".to_string(), ten(w[3], &[4 * h]));
            let vb = candle_nn::VarBuilder::from_tensors(map, DType::F32, &dev);
            let lstm = candle_nn::rnn::lstm(i, h, LSTMConfig::default(), vb).expect("candle lstm");
            // candle takes (B, T, I).
            let x = ten(x, &[t, b, i])
                .transpose(0, 1)
                .and_then(|x| x.contiguous())
                .expect("layout");
            Peer { lstm, x }
        }

        pub fn run(&self) {
            let states = self.lstm.seq(&self.x).expect("candle seq");
            std::hint::black_box(states);
        }
    }
}

fn bench(device: Device) -> brotensor::Result<()> {
    for (h, b) in SHAPES {
        let i = h;
        let w_ih = values(4 * h * i, 1, 0.1);
        let w_hh = values(4 * h * h, 2, 0.1);
        let (b_ih, b_hh) = (values(4 * h, 3, 0.1), values(4 * h, 4, 0.1));
        let x = values(T * b * i, 5, 1.0);
        let t = |v: &[f32], r: usize, c: usize| Tensor::from_slice_on(device, v, r, c);
        let (wi, wh, bi, bh, xt) = (
            t(&w_ih, 4 * h, i)?,
            t(&w_hh, 4 * h, h)?,
            t(&b_ih, 4 * h, 1)?,
            t(&b_hh, 4 * h, 1)?,
            t(&x, T * b, i)?,
        );
        let w = LstmWeights {
            w_ih: &wi,
            w_hh: &wh,
            b_ih: Some(&bi),
            b_hh: Some(&bh),
        };
        let flop = 2.0 * (T * b * 4 * h * (i + h)) as f64;
        let mut y = Tensor::default();
        let run = |y: &mut Tensor| {
            ops::lstm_forward(&xt, &w, (None, None), (T, b), y, None).expect("lstm")
        };
        #[cfg(feature = "candle")]
        let (ms, candle) = if device == Device::Cpu {
            let peer = peer::Peer::new([&w_ih, &w_hh, &b_ih, &b_hh], &x, (T, b, i, h));
            let (ours, theirs) =
                brotensor_benches::best_secs_paired(device, 1, || run(&mut y), || peer.run());
            (ours * 1e3, Some(theirs * 1e3))
        } else {
            (best_secs(device, 1, || run(&mut y)) * 1e3, None)
        };
        #[cfg(not(feature = "candle"))]
        let (ms, candle): (f64, Option<f64>) = (best_secs(device, 1, || run(&mut y)) * 1e3, None);

        // Training: the forward with caches and the full backward.
        let (mut yt, mut gates, mut c) = (Tensor::default(), Tensor::default(), Tensor::default());
        let dy = t(&values(T * b * h, 6, 1.0), T * b, h)?;
        let mut dx = Tensor::default();
        let mut dw_ih = Tensor::zeros_on(device, 4 * h, i, Dtype::F32)?;
        let mut dw_hh = Tensor::zeros_on(device, 4 * h, h, Dtype::F32)?;
        let train = best_secs(device, 1, || {
            ops::lstm_forward_train(
                &xt,
                &w,
                (None, None),
                (T, b),
                (&mut yt, &mut gates, &mut c),
                None,
            )
            .expect("train");
            let cache = LstmCache {
                y: &yt,
                gates: &gates,
                c: &c,
            };
            let grads = LstmGrads {
                dx: &mut dx,
                dw_ih: &mut dw_ih,
                dw_hh: &mut dw_hh,
                db_ih: None,
                db_hh: None,
                dh0: None,
                dc0: None,
            };
            ops::lstm_backward(&xt, &w, (None, None), &cache, &dy, (T, b), grads)
                .expect("backward");
        }) * 1e3;
        let peer = candle.map_or("-".into(), |c| format!("{c:.2}"));
        let ratio = candle.map_or("-".into(), |c| format!("{:.2}x", c / ms));
        println!(
            "| H {h}, B {b} | {ms:.2} | {:.1} | {peer} | {ratio} | {train:.2} | {:.1} |",
            flop / ms / 1e6,
            3.0 * flop / train / 1e6
        );
    }
    Ok(())
}

fn main() {
    for device in selected_devices() {
        let name = brotensor::device_name(device).unwrap_or_else(|_| device.to_string());
        println!(
            "\n# bench_lstm on {name}: {} rayon threads, T = {T}, I = H",
            rayon::current_num_threads()
        );
        println!("| shape | forward ms | GFLOP/s | candle-nn ms | vs candle | train fwd+bwd ms | train GFLOP/s |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        if let Err(e) = bench(device) {
            println!("| failed: {e} | | | | | | |");
        }
    }
}
