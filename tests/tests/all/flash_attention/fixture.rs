//! The attention core against `tests/fixtures/attention.{txt,bin}` (float64 numpy references
//! written by `make_attention.py`), on every device and dtype.

use std::collections::HashMap;

use brotensor::{ops, Device, Dtype, Result, Tensor};
use brotensor_tests::{gpu_devices, tolerance, SplitMix64};

use super::{check, devices, t, DTYPES};

/// One fixture line: its `key=value` fields.
struct Case(HashMap<String, String>);

impl Case {
    fn get(&self, k: &str) -> usize {
        self.0[k].parse().unwrap_or_else(|_| panic!("field {k}"))
    }
    fn f(&self, k: &str) -> f32 {
        self.0[k].parse().unwrap_or_else(|_| panic!("field {k}"))
    }
    fn s(&self, k: &str) -> &str {
        &self.0[k]
    }
    fn list(&self, k: &str) -> Vec<i32> {
        self.0[k]
            .split(',')
            .map(|v| v.parse().expect("i32"))
            .collect()
    }
    fn tag(&self) -> String {
        let c = &self.0;
        format!(
            "{} seed {} lq {} lk {} heads {}/{} hd {} mask {}",
            c["op"], c["seed"], c["lq"], c["lk"], c["nq"], c["nkv"], c["hd"], c["mask"]
        )
    }
}

fn load() -> (Vec<Case>, Vec<f32>) {
    let text = include_str!("../../../fixtures/attention.txt");
    let bin = include_bytes!("../../../fixtures/attention.bin");
    let cases = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            Case(
                l.split_whitespace()
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("key=value");
                        (k.to_string(), v.to_string())
                    })
                    .collect(),
            )
        })
        .collect();
    let values = bin
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (cases, values)
}

/// The case's inputs from the harness stream: Q, K, V, then the mask (see the script).
fn inputs(c: &Case) -> (Vec<f32>, Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    let (lq, lk, nq, nkv, hd) = (
        c.get("lq"),
        c.get("lk"),
        c.get("nq"),
        c.get("nkv"),
        c.get("hd"),
    );
    let mut rng = SplitMix64::new(c.get("seed") as u64);
    let q = rng.uniform(lq * nq * hd, -1.0, 1.0);
    let k = rng.uniform(lk * nkv * hd, -1.0, 1.0);
    let v = rng.uniform(lk * nkv * hd, -1.0, 1.0);
    let mask = match c.s("mask") {
        "none" => None,
        kind => {
            let mut m = rng.uniform(lk, 0.0, 1.0);
            match kind {
                "rand0" => m[0] = 0.0,
                "zero" => m.iter_mut().for_each(|x| *x = 0.0),
                _ => {}
            }
            Some(m)
        }
    };
    (q, k, v, mask)
}

/// Runs the case's op on `device` in `dtype`.
fn run(c: &Case, device: Device, dtype: Dtype) -> Result<Tensor> {
    let (lq, lk, nq, nkv, hd) = (
        c.get("lq"),
        c.get("lk"),
        c.get("nq"),
        c.get("nkv"),
        c.get("hd"),
    );
    let (q, k, v, mask) = inputs(c);
    let q = t(device, &q, lq, nq * hd, dtype);
    let k = t(device, &k, lk, nkv * hd, dtype);
    let v = t(device, &v, lk, nkv * hd, dtype);
    let mask = mask.map(|m| t(device, &m, 1, lk, Dtype::F32));
    let mask = mask.as_ref();
    let causal = c.get("causal") == 1;
    // A stale committed output of another shape: the op must resize and overwrite it.
    let mut o = Tensor::zeros_on(device, 3, 5, dtype)?;
    match c.s("op") {
        "forward" => ops::flash_attention_forward(&q, &k, &v, mask, nq, causal, &mut o)?,
        "gqa" => ops::flash_attention_gqa_forward(&q, &k, &v, mask, nq, nkv, causal, &mut o)?,
        "windowed" => {
            ops::flash_attention_windowed_forward(&q, &k, &v, mask, nq, c.get("window"), &mut o)?
        }
        "decode" => ops::flash_attention_decode(
            &q,
            &k,
            &v,
            c.get("valid"),
            nq,
            nkv,
            c.f("softcap"),
            c.get("window"),
            &mut o,
        )?,
        "decode_masked" => ops::flash_attention_decode_masked(
            &q,
            &k,
            &v,
            mask.expect("decode_masked has a mask"),
            nq,
            nkv,
            c.f("softcap"),
            c.get("window"),
            &mut o,
        )?,
        "varlen" => {
            let (cq, ck) = (c.list("cuq"), c.list("cuk"));
            let cq = Tensor::from_slice_on(device, &cq, 1, cq.len())?;
            let ck = Tensor::from_slice_on(device, &ck, 1, ck.len())?;
            ops::flash_attention_varlen_forward(
                &q, &k, &v, &cq, &ck, lq, lk, nq, hd, causal, &mut o,
            )?
        }
        other => panic!("unknown fixture op {other}"),
    }
    Ok(o)
}

#[test]
fn attention_core_matches_numpy() {
    let (cases, values) = load();
    assert!(cases.len() >= 20, "fixture lost its cases");
    let mut ran = Vec::<(String, Device, Dtype)>::new();
    for device in devices() {
        for c in &cases {
            let n = c.get("lq") * c.get("nq") * c.get("hd");
            for (i, &dtype) in DTYPES.iter().enumerate() {
                let at = c.get("at") + i * n;
                let want = &values[at..at + n];
                let cols = c.get("nq") * c.get("hd");
                if check(
                    &c.tag(),
                    device,
                    dtype,
                    run(c, device, dtype),
                    want,
                    cols,
                    tolerance(dtype),
                ) {
                    ran.push((c.s("op").to_string(), device, dtype));
                }
            }
        }
    }
    for op in [
        "forward",
        "gqa",
        "windowed",
        "decode",
        "decode_masked",
        "varlen",
    ] {
        // The CPU in F32, and every GPU in every dtype it computes: no op may pass by
        // running on the CPU alone.
        let mut need = vec![(Device::Cpu, Dtype::F32)];
        for device in gpu_devices() {
            for dtype in DTYPES {
                if dtype != Dtype::F16 || brotensor::supports_dtype(device, dtype).unwrap() {
                    need.push((device, dtype));
                }
            }
        }
        for (device, dtype) in need {
            assert!(
                ran.iter()
                    .any(|(o, d, t)| o == op && *d == device && *t == dtype),
                "{op} never ran on {device} in {dtype}"
            );
        }
    }
}
