//! Tests of the rope ops: the float64 numpy fixtures of `tests/fixtures/rope.txt` (written by
//! `make_rope.py`: every op, both pair layouts, offsets, `freq_scale != 1`, YaRN, head dims
//! 6 to 128) replayed on every device in every dtype it computes; the backward ops checked as
//! transposes in f64 (`<dy, rope(x)> = <rope^T(dy), x>`); and every error case.

mod positions;

use std::collections::HashMap;

use brotensor::ops::{self, MropeTables, RopeLayout, RopeParams, RopeYarn};
use brotensor::{Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{
    assert_close_rows, gpu_devices, read_f32, round_through, tensor, tolerance, SplitMix64,
};

/// Every device with the float dtypes its ops claim: F32, F16 and BF16 on the CPU and GPUs.
fn runs() -> Vec<(Device, Dtype)> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("rope: SKIPPED on GPU (no GPU device found)");
    }
    // The CPU computes the 16-bit dtypes with FP32 math, like a GPU.
    let mut runs: Vec<(Device, Dtype)> = [Dtype::F32, Dtype::F16, Dtype::BF16]
        .map(|t| (Device::Cpu, t))
        .to_vec();
    for d in gpus {
        runs.extend([Dtype::F32, Dtype::F16, Dtype::BF16].map(|t| (d, t)));
    }
    runs
}

/// One fixture case: the op, its pairing, `(L, heads, hd)` and its named arrays.
struct Case {
    op: String,
    layout: RopeLayout,
    dims: [usize; 3],
    /// `(seq_offset, freq_base, freq_scale)` of the position-computed ops.
    freq: (usize, f32, f32),
    yarn: Option<RopeYarn>,
    sections: [usize; 3],
    maxpos: [usize; 3],
    arrays: HashMap<String, Vec<f64>>,
}

impl Case {
    fn f32s(&self, key: &str) -> Vec<f32> {
        self.arrays[key].iter().map(|&v| v as f32).collect()
    }
}

fn cases() -> Vec<Case> {
    let text = include_str!("../../fixtures/rope.txt");
    let mut cases: Vec<Case> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let key = words.next().expect("a keyword");
        let nums: Vec<f64> = if key == "case" {
            Vec::new()
        } else {
            words
                .clone()
                .map(|w| w.parse().expect("a number"))
                .collect()
        };
        let sizes = || -> [usize; 3] { [0, 1, 2].map(|i| nums[i] as usize) };
        match key {
            "case" => {
                let op = words.next().expect("an op").to_string();
                let layout = match words.next() {
                    Some("interleaved") => RopeLayout::Interleaved,
                    Some("halfsplit") => RopeLayout::HalfSplit,
                    other => panic!("unknown layout {other:?}"),
                };
                cases.push(Case {
                    op,
                    layout,
                    dims: [0; 3],
                    freq: (0, 0.0, 0.0),
                    yarn: None,
                    sections: [0; 3],
                    maxpos: [0; 3],
                    arrays: HashMap::new(),
                });
            }
            "dims" => cases.last_mut().unwrap().dims = sizes(),
            "sections" => cases.last_mut().unwrap().sections = sizes(),
            "maxpos" => cases.last_mut().unwrap().maxpos = sizes(),
            "yarn" => {
                cases.last_mut().unwrap().yarn = Some(RopeYarn {
                    orig_ctx: nums[0] as usize,
                    ext_factor: nums[1] as f32,
                    attn_factor: nums[2] as f32,
                    beta_fast: nums[3] as f32,
                    beta_slow: nums[4] as f32,
                })
            }
            "freq" => {
                cases.last_mut().unwrap().freq = (nums[0] as usize, nums[1] as f32, nums[2] as f32)
            }
            name => {
                cases
                    .last_mut()
                    .unwrap()
                    .arrays
                    .insert(name.to_string(), nums);
            }
        }
    }
    cases
}

/// Runs a fixture case on `device` with `x` in `dtype`.
fn run_case(c: &Case, device: Device, dtype: Dtype) -> Result<Tensor> {
    let [l, heads, hd] = c.dims;
    let x = tensor(device, &c.f32s("x"), l, heads * hd, dtype)?;
    let table = |key: &str, rows: usize, cols: usize| {
        Tensor::from_slice_on(device, &c.f32s(key), rows, cols)
    };
    let mut y = Tensor::default();
    match c.op.as_str() {
        "rope_forward" | "rope_backward" => {
            let (offset, base, scale) = c.freq;
            let mut p = RopeParams::new(base)
                .with_scale(scale)
                .with_layout(c.layout);
            p.yarn = c.yarn;
            if c.op == "rope_forward" {
                ops::rope_forward(&x, hd, heads, offset, &p, &mut y)?;
            } else {
                ops::rope_backward(&x, hd, heads, offset, &p, &mut y)?;
            }
        }
        "rope_apply" | "rope_apply_backward" | "rope_apply_perhead" => {
            let rows = if c.op == "rope_apply_perhead" {
                l * heads
            } else {
                l
            };
            let (cos, sin) = (table("cos", rows, hd / 2)?, table("sin", rows, hd / 2)?);
            let f = match c.op.as_str() {
                "rope_apply" => ops::rope_apply,
                "rope_apply_backward" => ops::rope_apply_backward,
                _ => ops::rope_apply_perhead,
            };
            f(&x, &cos, &sin, hd, heads, c.layout, &mut y)?;
        }
        "rope_apply_mrope" => {
            let mut tabs = Vec::new();
            let mut pos = Vec::new();
            for (a, axis) in ["t", "h", "w"].iter().enumerate() {
                let (m, d) = (c.maxpos[a], c.sections[a]);
                tabs.push((
                    table(&format!("cos_{axis}"), m, d)?,
                    table(&format!("sin_{axis}"), m, d)?,
                ));
                let p: Vec<i32> = c.arrays[&format!("pos_{axis}")]
                    .iter()
                    .map(|&v| v as i32)
                    .collect();
                pos.push(Tensor::from_slice_on(device, &p, l, 1)?);
            }
            let tables = [0, 1, 2].map(|a| MropeTables {
                cos: &tabs[a].0,
                sin: &tabs[a].1,
            });
            let positions = [&pos[0], &pos[1], &pos[2]];
            ops::rope_apply_mrope(
                &x, tables, positions, hd, heads, c.sections, c.layout, &mut y,
            )?;
        }
        other => panic!("unknown op {other}"),
    }
    Ok(y)
}

#[test]
fn rope_matches_numpy_fixtures() {
    let cases = cases();
    let mut seen: HashMap<(String, RopeLayout), usize> = HashMap::new();
    let mut yarn_runs = 0;
    let mut ran = Vec::new();
    for (device, dtype) in runs() {
        for (n, c) in cases.iter().enumerate() {
            let tag = format!(
                "case {n} {} {:?} {:?} on {device} {dtype}",
                c.op, c.layout, c.dims
            );
            let y = match run_case(c, device, dtype) {
                Ok(y) => y,
                Err(Error::UnsupportedDtype { .. })
                    if !brotensor::supports_dtype(device, dtype).unwrap() =>
                {
                    eprintln!("{tag}: refused ({dtype} unsupported, as reported)");
                    continue;
                }
                Err(e) => panic!("{tag}: {e}"),
            };
            assert_eq!((y.device(), y.dtype()), (device, dtype), "{tag}");
            assert_eq!(y.shape(), (c.dims[0], c.dims[1] * c.dims[2]), "{tag}");
            let want = round_through(dtype, &c.f32s("y"));
            let got = read_f32(&y).unwrap();
            assert_close_rows(&tag, &want, &got, c.dims[1] * c.dims[2], tolerance(dtype));
            *seen.entry((c.op.clone(), c.layout)).or_default() += 1;
            ran.push((c.op.clone(), c.layout, device, dtype));
            yarn_runs += usize::from(c.yarn.is_some());
        }
    }
    // Every op in both layouts came from the fixture.
    assert_eq!(seen.len(), 12, "ops x layouts covered: {:?}", seen.keys());
    assert!(yarn_runs >= 12, "YaRN cases ran {yarn_runs} times");
    // ... and on every device in every dtype it computes (F16 where supported), so that no
    // (op, layout) passes by running on the CPU alone.
    for (op, layout) in seen.keys() {
        for (device, dtype) in runs() {
            if dtype == Dtype::F16 && !brotensor::supports_dtype(device, dtype).unwrap() {
                continue;
            }
            assert!(
                ran.iter()
                    .any(|(o, l, d, t)| o == op && l == layout && *d == device && *t == dtype),
                "{op} {layout:?} never ran on {device} in {dtype}"
            );
        }
    }
}

/// `sum a_i b_i` in f64.
fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// The backward ops are the transposes of the forward ops: `<dy, rope(x)> = <rope^T(dy), x>`
/// in f64, on every device (F32), for both layouts, with an offset and scaling; and neither
/// is the identity.
#[test]
fn rope_backward_is_the_transpose() {
    let (l, heads, hd) = (7, 3, 20);
    let cols = heads * hd;
    let mut rng = SplitMix64::new(14);
    let xv = rng.uniform(l * cols, -1.0, 1.0);
    let dyv = rng.uniform(l * cols, -1.0, 1.0);
    let angles = rng.uniform(l * hd / 2, -3.0, 3.0);
    let cosv: Vec<f32> = angles.iter().map(|t| t.cos()).collect();
    let sinv: Vec<f32> = angles.iter().map(|t| t.sin()).collect();
    for (device, dtype) in runs().into_iter().filter(|r| r.1 == Dtype::F32) {
        let x = tensor(device, &xv, l, cols, dtype).unwrap();
        let dy = tensor(device, &dyv, l, cols, dtype).unwrap();
        let cos = Tensor::from_slice_on(device, &cosv, l, hd / 2).unwrap();
        let sin = Tensor::from_slice_on(device, &sinv, l, hd / 2).unwrap();
        for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
            let p = RopeParams::new(500.0).with_scale(0.75).with_layout(layout);
            let (mut y, mut dx) = (Tensor::default(), Tensor::default());
            ops::rope_forward(&x, hd, heads, 9, &p, &mut y).unwrap();
            ops::rope_backward(&dy, hd, heads, 9, &p, &mut dx).unwrap();
            let pairs = [(read_f32(&y).unwrap(), read_f32(&dx).unwrap())];
            let (mut ya, mut dxa) = (Tensor::default(), Tensor::default());
            ops::rope_apply(&x, &cos, &sin, hd, heads, layout, &mut ya).unwrap();
            ops::rope_apply_backward(&dy, &cos, &sin, hd, heads, layout, &mut dxa).unwrap();
            let apply = (read_f32(&ya).unwrap(), read_f32(&dxa).unwrap());
            for (what, (y, dx)) in [("rope", &pairs[0]), ("rope_apply", &apply)] {
                let (lhs, rhs) = (dot(&dyv, y), dot(dx, &xv));
                let scale = dot(&dyv, &dyv).sqrt() * dot(&xv, &xv).sqrt();
                assert!(
                    (lhs - rhs).abs() <= 1e-5 * scale,
                    "{what} {layout:?} on {device}: <dy, y> = {lhs} but <dx, x> = {rhs}"
                );
                // A rotation keeps norms: ||y|| = ||x||, and it moved the data.
                let (ny, nx) = (dot(y, y).sqrt(), dot(&xv, &xv).sqrt());
                assert!(
                    (ny - nx).abs() <= 1e-5 * nx,
                    "{what} {layout:?}: norm {ny} vs {nx}"
                );
                assert!(y.iter().zip(&xv).any(|(a, b)| (a - b).abs() > 0.1));
            }
        }
    }
}

/// A fixture-independent f64 check of the layouts: with head_dim 4, interleaved rotates
/// `(x0, x1)`, `(x2, x3)` and half-split `(x0, x2)`, `(x1, x3)`, by `pos` and `pos/100` at
/// base 10000 (`10000^(-2/4) = 1/100`), positions scaled by `freq_scale`.
#[test]
fn rope_layouts_pair_the_documented_elements() {
    let x = [1.0f32, 2.0, 3.0, 4.0, -1.0, 0.5, 0.25, 2.0];
    let (offset, scale) = (5usize, 0.5f64);
    for (device, _) in runs().into_iter().filter(|r| r.1 == Dtype::F32) {
        let xt = Tensor::from_slice_on(device, &x, 2, 4).unwrap();
        for (layout, pairs) in [
            (RopeLayout::Interleaved, [(0, 1), (2, 3)]),
            (RopeLayout::HalfSplit, [(0, 2), (1, 3)]),
        ] {
            let p = RopeParams::default().with_scale(0.5).with_layout(layout);
            let mut y = Tensor::default();
            ops::rope_forward(&xt, 4, 1, offset, &p, &mut y).unwrap();
            let mut want = vec![0.0f32; 8];
            for r in 0..2 {
                let pos = (r + offset) as f64 * scale;
                for (i, &(a, b)) in pairs.iter().enumerate() {
                    let t = pos * [1.0, 0.01][i];
                    let (xa, xb) = (x[r * 4 + a] as f64, x[r * 4 + b] as f64);
                    want[r * 4 + a] = (xa * t.cos() - xb * t.sin()) as f32;
                    want[r * 4 + b] = (xa * t.sin() + xb * t.cos()) as f32;
                }
            }
            let got = read_f32(&y).unwrap();
            let tag = format!("rope_forward {layout:?} on {device}");
            assert_close_rows(&tag, &want, &got, 4, tolerance(Dtype::F32));
        }
    }
}

fn is_invalid(r: Result<()>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

fn is_shape(r: Result<()>) -> bool {
    matches!(r, Err(Error::Shape { .. }))
}

/// The error cases of the contract, on every device.
#[test]
fn rope_rejects_bad_arguments() {
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = Tensor::zeros_on(device, 3, 8, Dtype::F32).unwrap();
        let cos = Tensor::zeros_on(device, 3, 2, Dtype::F32).unwrap();
        let p = RopeParams::default();
        let mut y = Tensor::default();
        // head_dim odd or zero, num_heads zero, cols != heads * hd.
        for (hd, nh, shape) in [(3, 2, false), (0, 2, false), (4, 0, false), (4, 3, true)] {
            let check = |r: Result<()>| assert!(if shape { is_shape(r) } else { is_invalid(r) });
            check(ops::rope_forward(&x, hd, nh, 0, &p, &mut y));
            check(ops::rope_backward(&x, hd, nh, 0, &p, &mut y));
            let t = Tensor::zeros_on(device, 3, hd / 2, Dtype::F32).unwrap();
            check(ops::rope_apply(
                &x,
                &t,
                &t,
                hd,
                nh,
                RopeLayout::Interleaved,
                &mut y,
            ));
            check(ops::rope_apply_backward(
                &x,
                &t,
                &t,
                hd,
                nh,
                RopeLayout::Interleaved,
                &mut y,
            ));
            let ph = Tensor::zeros_on(device, 3 * nh, hd / 2, Dtype::F32).unwrap();
            check(ops::rope_apply_perhead(
                &x,
                &ph,
                &ph,
                hd,
                nh,
                RopeLayout::Interleaved,
                &mut y,
            ));
        }
        // Frequencies: base and scale finite and > 0.
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let r = ops::rope_forward(&x, 4, 2, 0, &RopeParams::new(bad), &mut y);
            assert!(is_invalid(r));
            let scaled = RopeParams::default().with_scale(bad);
            assert!(is_invalid(ops::rope_backward(&x, 4, 2, 0, &scaled, &mut y)));
        }
        let r = ops::rope_forward(&x, 4, 2, usize::MAX, &p, &mut y);
        assert!(is_shape(r));
        // YaRN: a zero original context, non-positive betas, non-finite factors.
        let yarn = RopeYarn::new(4096);
        for bad in [
            RopeYarn {
                orig_ctx: 0,
                ..yarn
            },
            RopeYarn {
                beta_fast: 0.0,
                ..yarn
            },
            RopeYarn {
                beta_slow: f32::NAN,
                ..yarn
            },
            RopeYarn {
                ext_factor: f32::INFINITY,
                ..yarn
            },
            RopeYarn {
                attn_factor: f32::NAN,
                ..yarn
            },
        ] {
            let py = p.with_scale(0.25).with_yarn(bad);
            assert!(is_invalid(ops::rope_forward(&x, 4, 2, 0, &py, &mut y)));
        }
        let py = p.with_scale(0.25).with_yarn(yarn);
        ops::rope_forward(&x, 4, 2, 0, &py, &mut y).unwrap();
        // Tables: wrong shapes (rows, columns, per-head rows) and a non-F32 dtype.
        let il = RopeLayout::Interleaved;
        let short = Tensor::zeros_on(device, 2, 2, Dtype::F32).unwrap();
        let wide = Tensor::zeros_on(device, 3, 4, Dtype::F32).unwrap();
        assert!(is_shape(ops::rope_apply(
            &x, &short, &cos, 4, 2, il, &mut y
        )));
        assert!(is_shape(ops::rope_apply(&x, &cos, &wide, 4, 2, il, &mut y)));
        assert!(is_shape(ops::rope_apply_backward(
            &x, &wide, &cos, 4, 2, il, &mut y
        )));
        assert!(is_shape(ops::rope_apply_perhead(
            &x, &cos, &cos, 4, 2, il, &mut y
        )));
        let per_head = Tensor::zeros_on(device, 6, 2, Dtype::F32).unwrap();
        ops::rope_apply_perhead(&x, &per_head, &per_head, 4, 2, il, &mut y).unwrap();
        if brotensor::supports_dtype(device, Dtype::F16).unwrap() {
            let half = Tensor::zeros_on(device, 3, 2, Dtype::F16).unwrap();
            let r = ops::rope_apply(&x, &half, &cos, 4, 2, il, &mut y);
            assert!(
                matches!(
                    r,
                    Err(Error::Dtype {
                        operand: "cos_tbl",
                        ..
                    })
                ),
                "{r:?}"
            );
        }
        // A non-float input.
        let xi = Tensor::zeros_on(device, 3, 8, Dtype::I32).unwrap();
        let r = ops::rope_forward(&xi, 4, 2, 0, &p, &mut y);
        assert!(matches!(r, Err(Error::Dtype { .. })), "{r:?}");
        mrope_errors(device, &x);
    }
    // The CPU computes 16-bit rope too, keeping the dtype.
    let h = Tensor::zeros_on(Device::Cpu, 3, 8, Dtype::F16).unwrap();
    let mut y = Tensor::default();
    ops::rope_forward(&h, 4, 2, 0, &RopeParams::default(), &mut y).unwrap();
    assert_eq!(y.dtype(), Dtype::F16);
}

/// M-RoPE's own error cases, with `x (3, 8)` as one head of 8, sections `[1, 2, 1]`.
fn mrope_errors(device: Device, x: &Tensor) {
    let zeros = |r, c| Tensor::zeros_on(device, r, c, Dtype::F32).unwrap();
    let pos = |v: &[i32]| Tensor::from_slice_on(device, v, v.len(), 1).unwrap();
    let tabs = [zeros(4, 1), zeros(5, 2), zeros(2, 1)];
    fn tables(t: &[Tensor; 3]) -> [MropeTables<'_>; 3] {
        [0, 1, 2].map(|a| MropeTables {
            cos: &t[a],
            sin: &t[a],
        })
    }
    let (pt, ph, pw) = (pos(&[0, 1, 3]), pos(&[4, 0, 2]), pos(&[1, 1, 0]));
    let il = RopeLayout::Interleaved;
    let run = |t: [MropeTables<'_>; 3], p: [&Tensor; 3], sections: [usize; 3]| {
        ops::rope_apply_mrope(x, t, p, 8, 1, sections, il, &mut Tensor::default())
    };
    run(tables(&tabs), [&pt, &ph, &pw], [1, 2, 1]).unwrap();
    // Sections not adding up to hd / 2.
    assert!(is_invalid(run(tables(&tabs), [&pt, &ph, &pw], [1, 2, 2])));
    // A position at or past its table's end, or negative.
    for bad in [pos(&[0, 4, 0]), pos(&[0, -1, 0])] {
        assert!(is_invalid(run(tables(&tabs), [&bad, &ph, &pw], [1, 2, 1])));
    }
    assert!(is_invalid(run(
        tables(&tabs),
        [&pt, &ph, &pos(&[0, 2, 0])],
        [1, 2, 1]
    )));
    // A wrong count or dtype of positions.
    assert!(is_shape(run(
        tables(&tabs),
        [&pt, &pos(&[0, 1]), &pw],
        [1, 2, 1]
    )));
    let fpos = zeros(3, 1);
    let r = run(tables(&tabs), [&pt, &ph, &fpos], [1, 2, 1]);
    assert!(
        matches!(
            r,
            Err(Error::Dtype {
                operand: "pos_w",
                ..
            })
        ),
        "{r:?}"
    );
    // A table whose columns are not its section, and sin shaped unlike cos.
    let bad = [zeros(4, 2), zeros(5, 2), zeros(2, 1)];
    assert!(is_shape(run(tables(&bad), [&pt, &ph, &pw], [1, 2, 1])));
    let mut t = tables(&tabs);
    let other = zeros(3, 2);
    t[1].sin = &other;
    assert!(is_shape(run(t, [&pt, &ph, &pw], [1, 2, 1])));
    // An axis without pairs reads nothing: its positions are not checked.
    let far = pos(&[99, -5, 7]);
    run(
        tables(&[zeros(4, 2), zeros(5, 2), zeros(0, 0)]),
        [&pt, &ph, &far],
        [2, 2, 0],
    )
    .unwrap();
}
