//! The tape against float64: chains of recorded ops (linear and matmul, broadcasting add
//! and mul, the activations, LayerNorm, convolution, max pooling, reshapes, sums and the
//! softmax cross-entropy) run forward and backward on every device, their parameter
//! gradients compared with central finite differences of the same chain written here in
//! float64; a value used twice accumulates; the by-hand backward ops give the same
//! gradients; constants record nothing; the errors.

use brotensor::autograd::{clip_grad_norm, Adam, Sgd, Var};
use brotensor::ops::{self, Conv2dSpec, Pool2dSpec};
use brotensor::{Device, Dtype, Error, Result, Tensor};
use brotensor_tests::reference::finite_differences;
use brotensor_tests::{assert_close, gpu_devices, read_f32, SplitMix64};

/// One input of a chain: dims, value range, and whether it is a parameter.
struct Leaf {
    dims: &'static [usize],
    lo: f32,
    hi: f32,
    parameter: bool,
}

const fn param(dims: &'static [usize], lo: f32, hi: f32) -> Leaf {
    Leaf {
        dims,
        lo,
        hi,
        parameter: true,
    }
}

const fn constant(dims: &'static [usize], lo: f32, hi: f32) -> Leaf {
    Leaf {
        dims,
        lo,
        hi,
        parameter: false,
    }
}

fn devices() -> Vec<Device> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("autograd: SKIPPED on GPU (no GPU device found)");
    }
    std::iter::once(Device::Cpu).chain(gpus).collect()
}

/// Runs `tape` on every device and compares the loss and every parameter's gradient with
/// `f64_loss` and its central finite differences.
fn check_chain(
    case: &str,
    seed: u64,
    leaves: &[Leaf],
    tape: impl Fn(&[Var]) -> Result<Var>,
    f64_loss: impl Fn(&[Vec<f64>]) -> f64,
) {
    let mut rng = SplitMix64::new(seed);
    let data: Vec<Vec<f32>> = leaves
        .iter()
        .map(|l| rng.uniform(l.dims.iter().product(), l.lo, l.hi))
        .collect();
    let wide: Vec<Vec<f64>> = data
        .iter()
        .map(|d| d.iter().map(|&x| f64::from(x)).collect())
        .collect();
    let which: Vec<usize> = (0..leaves.len()).filter(|&i| leaves[i].parameter).collect();
    let want_loss = f64_loss(&wide);
    let want = finite_differences(&wide, &[1.0], &which, |v| vec![f64_loss(v)]);
    for device in devices() {
        let vars: Vec<Var> = leaves
            .iter()
            .zip(&data)
            .map(|(l, d)| {
                let t = Tensor::from_slice_nd_on(device, d, l.dims).unwrap();
                if l.parameter {
                    Var::parameter(t)
                } else {
                    Var::constant(t)
                }
            })
            .collect();
        let loss = tape(&vars).unwrap_or_else(|e| panic!("{case} on {device}: {e}"));
        let got_loss = read_f32(&loss.value()).unwrap()[0];
        assert!(
            (f64::from(got_loss) - want_loss).abs() <= 1e-4 * want_loss.abs().max(1e-3),
            "{case} on {device}: loss {got_loss} vs {want_loss}"
        );
        loss.backward().unwrap();
        for (&k, want_k) in which.iter().zip(&want) {
            let g = vars[k]
                .grad()
                .unwrap()
                .expect("a parameter reached by the loss");
            let got = read_f32(&g).unwrap();
            let want_k: Vec<f32> = want_k.iter().map(|&x| x as f32).collect();
            assert_close(
                &format!("{case} on {device}: gradient of input {k}"),
                &want_k,
                &got,
                (2e-4, 2e-3),
            );
        }
    }
}

/// A 3x3 convolution, stride 1, padding 1, in `groups` groups.
fn same_3x3(groups: usize) -> Conv2dSpec {
    Conv2dSpec {
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups,
    }
}

// ---- float64 forwards, written from the definitions ----

fn linear64(
    x: &[f64],
    w: &[f64],
    b: Option<&[f64]>,
    (rows, n_in, n_out): (usize, usize, usize),
) -> Vec<f64> {
    let mut y = vec![0.0; rows * n_out];
    for r in 0..rows {
        for o in 0..n_out {
            let dot: f64 = (0..n_in).map(|i| x[r * n_in + i] * w[o * n_in + i]).sum();
            y[r * n_out + o] = dot + b.map_or(0.0, |b| b[o]);
        }
    }
    y
}

fn xent64(logits: &[f64], labels: &[usize], classes: usize) -> f64 {
    let mut total = 0.0;
    for (row, &c) in logits.chunks(classes).zip(labels) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        total += lse - row[c];
    }
    total / labels.len() as f64
}

fn layer_norm64(x: &[f64], gamma: &[f64], beta: &[f64], d: usize, eps: f64) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        y.extend(
            row.iter()
                .enumerate()
                .map(|(j, v)| (v - mean) * rstd * gamma[j] + beta[j]),
        );
    }
    y
}

fn gelu64(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

/// 3x3, stride 1, padding 1 convolution of `x (n, c, h, w)` with `wt (o, c, 3, 3)`.
fn conv3x3_64(
    x: &[f64],
    wt: &[f64],
    b: &[f64],
    (n, c, h, w): (usize, usize, usize, usize),
    o: usize,
) -> Vec<f64> {
    let mut y = vec![0.0; n * o * h * w];
    for ni in 0..n {
        for oi in 0..o {
            for i in 0..h {
                for j in 0..w {
                    let mut acc = b[oi];
                    for ci in 0..c {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let (yy, xx) =
                                    (i as isize + ky as isize - 1, j as isize + kx as isize - 1);
                                if yy < 0 || xx < 0 || yy >= h as isize || xx >= w as isize {
                                    continue;
                                }
                                acc += x[((ni * c + ci) * h + yy as usize) * w + xx as usize]
                                    * wt[((oi * c + ci) * 3 + ky) * 3 + kx];
                            }
                        }
                    }
                    y[((ni * o + oi) * h + i) * w + j] = acc;
                }
            }
        }
    }
    y
}

/// 2x2, stride 2 max pooling of `x (planes, h, w)`.
fn pool2_64(x: &[f64], planes: usize, h: usize, w: usize) -> Vec<f64> {
    let (ho, wo) = (h / 2, w / 2);
    let mut y = Vec::with_capacity(planes * ho * wo);
    for p in 0..planes {
        for i in 0..ho {
            for j in 0..wo {
                let at = |di: usize, dj: usize| x[(p * h + 2 * i + di) * w + 2 * j + dj];
                y.push(at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1)));
            }
        }
    }
    y
}

#[test]
fn an_mlp_chain_matches_finite_differences() {
    // x (4, 6) -> linear (5) -> tanh -> * gate (1, 5) -> + shift (5) -> LayerNorm ->
    // linear (3, no bias) -> gelu -> cross-entropy.
    let labels = [2usize, 0, 1, 2];
    let leaves = [
        constant(&[4, 6], -1.0, 1.0),
        param(&[5, 6], -0.6, 0.6),
        param(&[5], -0.3, 0.3),
        param(&[1, 5], 0.5, 1.5),
        param(&[5], -0.5, 0.5),
        param(&[5], 0.7, 1.3),
        param(&[5], -0.2, 0.2),
        param(&[3, 5], -0.8, 0.8),
    ];
    check_chain(
        "mlp",
        0xa17,
        &leaves,
        |v| {
            v[0].linear(&v[1], Some(&v[2]))?
                .tanh()?
                .mul(&v[3])?
                .add(&v[4])?
                .layer_norm(&v[5], &v[6], 1e-5)?
                .linear(&v[7], None)?
                .gelu()?
                .cross_entropy(&labels)
        },
        |v| {
            let h = linear64(&v[0], &v[1], Some(&v[2]), (4, 6, 5));
            let h: Vec<f64> = h
                .iter()
                .enumerate()
                .map(|(i, x)| x.tanh() * v[3][i % 5] + v[4][i % 5])
                .collect();
            let h = layer_norm64(&h, &v[5], &v[6], 5, 1e-5);
            let z: Vec<f64> = linear64(&h, &v[7], None, (4, 5, 3))
                .into_iter()
                .map(gelu64)
                .collect();
            xent64(&z, &labels, 3)
        },
    );
}

#[test]
fn a_cnn_chain_matches_finite_differences() {
    // x (2, 2, 6, 6) (a parameter too: the input gradient) -> conv 3x3 pad 1 (3) -> ReLU ->
    // max pool 2x2 -> reshape (2, 27) -> linear (4) -> sigmoid -> cross-entropy.
    let labels = [3usize, 1];
    let leaves = [
        param(&[2, 2, 6, 6], -1.0, 1.0),
        param(&[3, 2, 3, 3], -0.5, 0.5),
        param(&[3], -0.1, 0.1),
        param(&[4, 27], -0.5, 0.5),
        param(&[4], -0.2, 0.2),
    ];
    let conv = same_3x3(1);
    let pool = Pool2dSpec {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
    };
    check_chain(
        "cnn",
        0xc44,
        &leaves,
        |v| {
            v[0].conv2d(&v[1], Some(&v[2]), &conv)?
                .relu()?
                .max_pool2d(&pool)?
                .reshape(&[2, 27])?
                .linear(&v[3], Some(&v[4]))?
                .sigmoid()?
                .cross_entropy(&labels)
        },
        |v| {
            let y = conv3x3_64(&v[0], &v[1], &v[2], (2, 2, 6, 6), 3);
            let y: Vec<f64> = y.into_iter().map(|x| x.max(0.0)).collect();
            let p = pool2_64(&y, 6, 6, 6);
            let z: Vec<f64> = linear64(&p, &v[3], Some(&v[4]), (2, 27, 4))
                .into_iter()
                .map(|x| 1.0 / (1.0 + (-x).exp()))
                .collect();
            xent64(&z, &labels, 4)
        },
    );
}

#[test]
fn a_value_used_twice_accumulates_both_paths() {
    // loss = mean(silu(x W) * (x W) + relu(x W)) + sum(0.5 b) with x W used three times and
    // b broadcast along rows: every path's gradient adds up.
    let leaves = [
        constant(&[3, 4], -1.0, 1.0),
        param(&[4, 5], -0.7, 0.7),
        param(&[1, 5], -0.5, 0.5),
    ];
    check_chain(
        "shared",
        0x5a4,
        &leaves,
        |v| {
            let h = v[0].matmul(&v[1])?;
            let body = h.silu()?.mul(&h)?.add(&h.relu()?)?.add(&v[2])?;
            body.mean()?.add(&v[2].scale(0.5)?.sum()?)
        },
        |v| {
            let mut total = 0.0;
            for r in 0..3 {
                for c in 0..5 {
                    let h: f64 = (0..4).map(|k| v[0][r * 4 + k] * v[1][k * 5 + c]).sum();
                    let silu = h / (1.0 + (-h).exp());
                    total += silu * h + h.max(0.0) + v[2][c];
                }
            }
            total / 15.0 + 0.5 * v[2].iter().sum::<f64>()
        },
    );
}

#[test]
fn the_tape_gives_the_by_hand_backward_ops_gradients() {
    let mut rng = SplitMix64::new(0x4a4d);
    let (xv, wv, bv) = (
        rng.uniform(12, -1.0, 1.0),
        rng.uniform(20, -1.0, 1.0),
        rng.uniform(5, -0.5, 0.5),
    );
    let labels = [4usize, 0, 2];
    let x = Tensor::from_slice_nd_on(Device::Cpu, &xv, &[3, 4]).unwrap();
    let w = Tensor::from_slice_nd_on(Device::Cpu, &wv, &[5, 4]).unwrap();
    let b = Tensor::from_slice_nd_on(Device::Cpu, &bv, &[5]).unwrap();
    // By hand: linear, relu, softmax cross-entropy; then their backward ops in reverse.
    let mut h = Tensor::default();
    ops::linear_forward_batched(&w, Some(&b), &x, &mut h).unwrap();
    let a = ops::relu(&h).unwrap();
    let mut target = vec![0.0f32; 15];
    for (r, &c) in labels.iter().enumerate() {
        target[r * 5 + c] = 1.0;
    }
    let target = Tensor::from_slice(&target, 3, 5).unwrap();
    let (mut probs, mut dlogits, mut per_row) = Default::default();
    ops::softmax_xent_fused_batched(
        &a,
        &target,
        None,
        &[0, 5],
        &mut probs,
        &mut dlogits,
        &mut per_row,
    )
    .unwrap();
    ops::scale_inplace(&mut dlogits, 1.0 / 3.0).unwrap();
    let mut dh = Tensor::default();
    ops::relu_backward(&h, &dlogits, &mut dh).unwrap();
    let (mut dx, mut dw, mut db) = (
        Tensor::default(),
        Tensor::zeros(5, 4, Dtype::F32).unwrap(),
        Tensor::zeros(5, 1, Dtype::F32).unwrap(),
    );
    ops::linear_backward_batched(&w, &x, &dh, &mut dx, &mut dw, &mut db).unwrap();
    // The tape.
    let (vw, vb) = (
        Var::parameter(w.try_clone().unwrap()),
        Var::parameter(b.try_clone().unwrap()),
    );
    let loss = Var::constant(x)
        .linear(&vw, Some(&vb))
        .unwrap()
        .relu()
        .unwrap()
        .cross_entropy(&labels)
        .unwrap();
    loss.backward().unwrap();
    assert_eq!(
        read_f32(&vw.grad().unwrap().unwrap()).unwrap(),
        read_f32(&dw).unwrap()
    );
    assert_eq!(
        read_f32(&vb.grad().unwrap().unwrap()).unwrap(),
        read_f32(&db).unwrap()
    );
    // A second backward of a new graph accumulates into the same gradients.
    let x2 = Var::constant(Tensor::from_slice_nd_on(Device::Cpu, &xv, &[3, 4]).unwrap());
    x2.linear(&vw, Some(&vb))
        .unwrap()
        .relu()
        .unwrap()
        .cross_entropy(&labels)
        .unwrap()
        .backward()
        .unwrap();
    let twice: Vec<f32> = read_f32(&dw).unwrap().iter().map(|g| 2.0 * g).collect();
    assert_eq!(read_f32(&vw.grad().unwrap().unwrap()).unwrap(), twice);
    vw.zero_grad();
    assert!(vw.grad().unwrap().is_none());
}

#[test]
fn constants_record_nothing_and_errors_are_clear() {
    let t = |v: &[f32], d: &[usize]| Tensor::from_slice_nd_on(Device::Cpu, v, d).unwrap();
    let x = Var::constant(t(&[1.0, -2.0, 3.0, 0.5], &[2, 2]));
    let y = x.relu().unwrap().matmul(&x).unwrap().mean().unwrap();
    assert!(!y.requires_grad());
    assert!(matches!(y.backward(), Err(Error::InvalidArgument { .. })));
    // An op without a backward op: fine on constants, refused on tracked values.
    let w = Var::parameter(t(&[0.5, 0.25, -1.0, 2.0], &[2, 2]));
    assert!(x.forward_only("exp", ops::exp).is_ok());
    let e = w.forward_only("exp", ops::exp).unwrap_err();
    assert!(e.to_string().contains("no backward op"), "{e}");
    // A non-scalar loss needs an explicit seed.
    let h = x.matmul(&w).unwrap();
    assert!(h
        .backward()
        .unwrap_err()
        .to_string()
        .contains("single-element"));
    assert!(h.backward_with(t(&[1.0; 3], &[3])).is_err());
    h.backward_with(t(&[1.0; 4], &[2, 2])).unwrap();
    // The graph is freed: a second backward is refused.
    let e = h.backward_with(t(&[1.0; 4], &[2, 2])).unwrap_err();
    assert!(e.to_string().contains("already freed"), "{e}");
    // Bad labels.
    let logits = Var::parameter(t(&[0.0; 6], &[2, 3]));
    assert!(logits.cross_entropy(&[0]).is_err());
    assert!(logits.cross_entropy(&[0, 3]).is_err());
    assert!(clip_grad_norm(std::slice::from_ref(&w), 0.0).is_err());
}

#[test]
fn optimizers_step_parameters_in_place_and_clip_by_global_norm() {
    for device in devices() {
        let p =
            Var::parameter(Tensor::from_slice_nd_on(device, &[1.0f32, -2.0, 3.0], &[3]).unwrap());
        let q = Var::parameter(Tensor::from_slice_nd_on(device, &[4.0f32], &[1]).unwrap());
        // loss = sum(3 p) + sum(4 q): gradients 3 and 4, global norm sqrt(27 + 16).
        let loss = p
            .scale(3.0)
            .unwrap()
            .sum()
            .unwrap()
            .add(&q.scale(4.0).unwrap().sum().unwrap())
            .unwrap();
        loss.backward().unwrap();
        let norm = clip_grad_norm(&[p.clone(), q.clone()], 1.0).unwrap();
        assert!((f64::from(norm) - 43f64.sqrt()).abs() < 1e-5, "{norm}");
        let gp = read_f32(&p.grad().unwrap().unwrap()).unwrap();
        let gq = read_f32(&q.grad().unwrap().unwrap()).unwrap();
        let clipped = (gp.iter().map(|g| g * g).sum::<f32>() + gq[0] * gq[0]).sqrt();
        assert!((clipped - 1.0).abs() < 1e-4, "{clipped}");
        let id = p.value().allocation_id();
        let mut sgd = Sgd::new(vec![p.clone(), q.clone()], 0.5, 0.0);
        sgd.step().unwrap();
        assert_eq!(p.value().allocation_id(), id, "{device}: updated in place");
        let want: Vec<f32> = [1.0f32, -2.0, 3.0]
            .iter()
            .zip(&gp)
            .map(|(x, g)| x - 0.5 * g)
            .collect();
        assert_close(
            &format!("sgd on {device}"),
            &want,
            &read_f32(&p.value()).unwrap(),
            (1e-6, 1e-6),
        );
        // Adam's first step moves each parameter by lr against its gradient's sign.
        let mut adam = Adam::new(vec![p.clone(), q.clone()], ops::AdamParams::new(0.1));
        let before = read_f32(&q.value()).unwrap()[0];
        adam.step().unwrap();
        let after = read_f32(&q.value()).unwrap()[0];
        assert!(
            (before - after - 0.1).abs() < 1e-5,
            "{device}: {before} -> {after}"
        );
        adam.zero_grad();
        assert!(p.grad().unwrap().is_none() && q.grad().unwrap().is_none());
    }
}

/// One op of a random chain over `(4, 6)` rows: its tape form and its float64 form, with the
/// index of the parameter it reads (if any).
#[derive(Clone, Copy, Debug)]
enum Link {
    Tanh,
    Sigmoid,
    Silu,
    Gelu,
    Scale(f32),
    /// `* p` with `p (1, 6)` broadcast along rows.
    MulRow,
    /// `+ p` with `p (6)` broadcast along rows.
    AddRow,
    /// `x . p^T` with `p (6, 6)` (a square linear layer without bias).
    Linear,
    /// LayerNorm with `gamma`, `beta` (6 each).
    LayerNorm,
}

const ROWS: usize = 4;
const D: usize = 6;

impl Link {
    fn params(self) -> Vec<Leaf> {
        match self {
            Link::MulRow => vec![param(&[1, D], 0.5, 1.5)],
            Link::AddRow => vec![param(&[D], -0.5, 0.5)],
            Link::Linear => vec![param(&[D, D], -0.6, 0.6)],
            Link::LayerNorm => vec![param(&[D], 0.7, 1.3), param(&[D], -0.2, 0.2)],
            _ => vec![],
        }
    }

    fn tape(self, x: &Var, p: &[Var]) -> Result<Var> {
        match self {
            Link::Tanh => x.tanh(),
            Link::Sigmoid => x.sigmoid(),
            Link::Silu => x.silu(),
            Link::Gelu => x.gelu(),
            Link::Scale(s) => x.scale(s),
            Link::MulRow => x.mul(&p[0]),
            Link::AddRow => x.add(&p[0]),
            Link::Linear => x.linear(&p[0], None),
            Link::LayerNorm => x.layer_norm(&p[0], &p[1], 1e-5),
        }
    }

    fn f64(self, x: &[f64], p: &[&Vec<f64>]) -> Vec<f64> {
        let map = |f: &dyn Fn(f64) -> f64| x.iter().map(|&v| f(v)).collect();
        match self {
            Link::Tanh => map(&f64::tanh),
            Link::Sigmoid => map(&|v| 1.0 / (1.0 + (-v).exp())),
            Link::Silu => map(&|v| v / (1.0 + (-v).exp())),
            Link::Gelu => map(&gelu64),
            Link::Scale(s) => map(&|v| v * f64::from(s)),
            Link::MulRow => x.iter().enumerate().map(|(i, v)| v * p[0][i % D]).collect(),
            Link::AddRow => x.iter().enumerate().map(|(i, v)| v + p[0][i % D]).collect(),
            Link::Linear => linear64(x, p[0], None, (ROWS, D, D)),
            Link::LayerNorm => layer_norm64(x, p[0], p[1], D, 1e-5),
        }
    }
}

#[test]
fn random_chains_match_finite_differences() {
    let pool = [
        Link::Tanh,
        Link::Sigmoid,
        Link::Silu,
        Link::Gelu,
        Link::Scale(-1.5),
        Link::MulRow,
        Link::AddRow,
        Link::Linear,
        Link::LayerNorm,
    ];
    let labels = [1usize, 5, 0, 3];
    for seed in 0..6u64 {
        // 3 to 5 links drawn from the pool, then the cross-entropy of the rows.
        let mut rng = SplitMix64::new(0xc4a1 + seed);
        let len = 3 + (rng.next_u64() % 3) as usize;
        let chain: Vec<Link> = (0..len)
            .map(|_| pool[(rng.next_u64() % pool.len() as u64) as usize])
            .collect();
        let mut leaves = vec![param(&[ROWS, D], -1.0, 1.0)];
        let mut slots = Vec::new();
        for link in &chain {
            let first = leaves.len();
            leaves.extend(link.params());
            slots.push(first..leaves.len());
        }
        let case = format!("chain {chain:?}");
        check_chain(
            &case,
            0x7a9e + seed,
            &leaves,
            |v| {
                let mut x = v[0].clone();
                for (link, slot) in chain.iter().zip(&slots) {
                    x = link.tape(&x, &v[slot.clone()])?;
                }
                x.cross_entropy(&labels)
            },
            |v| {
                let mut x = v[0].clone();
                for (link, slot) in chain.iter().zip(&slots) {
                    let p: Vec<&Vec<f64>> = v[slot.clone()].iter().collect();
                    x = link.f64(&x, &p);
                }
                xent64(&x, &labels, D)
            },
        );
    }
}

#[test]
fn a_value_twice_in_one_op_and_frozen_weights() {
    // loss = mean((x * x) W^T) + sum(conv(x4, k) grouped, no bias), with W and k constants:
    // only the input's gradient flows, through both operands of one mul.
    let leaves = [
        param(&[3, 4], -1.0, 1.0),
        constant(&[5, 4], -0.7, 0.7),
        param(&[1, 4, 4, 4], -1.0, 1.0),
        constant(&[2, 2, 3, 3], -0.5, 0.5),
    ];
    let grouped = same_3x3(2);
    check_chain(
        "shared operand, frozen weights",
        0x5e1f,
        &leaves,
        |v| {
            let a = v[0].mul(&v[0])?.linear(&v[1], None)?.mean()?;
            let b = v[2].conv2d(&v[3], None, &grouped)?.tanh()?.sum()?;
            a.add(&b)
        },
        |v| {
            let sq: Vec<f64> = v[0].iter().map(|x| x * x).collect();
            let a = linear64(&sq, &v[1], None, (3, 4, 5)).iter().sum::<f64>() / 15.0;
            // Two groups of two input channels, one output channel each: output o reads
            // input channels 2o and 2o + 1 with its own 2 x 3 x 3 taps.
            let mut b = 0.0;
            for o in 0..2 {
                let x: Vec<f64> = v[2][o * 32..(o + 1) * 32].to_vec();
                let w: Vec<f64> = v[3][o * 18..(o + 1) * 18].to_vec();
                b += conv3x3_64(&x, &w, &[0.0], (1, 2, 4, 4), 1)
                    .iter()
                    .map(|y| y.tanh())
                    .sum::<f64>();
            }
            a + b
        },
    );
}

#[test]
fn the_optimizers_follow_their_formulas_over_steps() {
    // loss_k = sum(c_k * p): the gradient of step k is c_k, known in float64.
    let grads = [[0.5f32, -1.0, 2.0], [-0.25, 0.75, 1.5], [1.0, 0.1, -3.0]];
    let p0 = [1.0f32, -2.0, 0.5];
    for device in devices() {
        let p = Var::parameter(Tensor::from_slice_nd_on(device, &p0, &[3]).unwrap());
        let r = Var::parameter(Tensor::from_slice_nd_on(device, &p0, &[3]).unwrap());
        // `p` listed twice: stepped once per step.
        let mut adam = Adam::new(
            vec![p.clone(), p.clone()],
            ops::AdamParams::adamw(0.1, 0.05),
        );
        let mut sgd = Sgd::new(vec![r.clone()], 0.2, 0.9);
        for g in &grads {
            let c = Var::constant(Tensor::from_slice_nd_on(device, g, &[3]).unwrap());
            p.mul(&c).unwrap().sum().unwrap().backward().unwrap();
            r.mul(&c).unwrap().sum().unwrap().backward().unwrap();
            adam.step().unwrap();
            sgd.step().unwrap();
            adam.zero_grad();
            sgd.zero_grad();
        }
        let (mut pw, mut m, mut v) = (p0.map(f64::from), [0.0f64; 3], [0.0f64; 3]);
        let (mut rw, mut u) = (p0.map(f64::from), [0.0f64; 3]);
        for (t, g) in grads.iter().enumerate() {
            let t = t as i32 + 1;
            for i in 0..3 {
                let gi = f64::from(g[i]);
                m[i] = 0.9 * m[i] + 0.1 * gi;
                v[i] = 0.999 * v[i] + 0.001 * gi * gi;
                let upd = 0.1 * (m[i] / (1.0 - 0.9f64.powi(t)))
                    / ((v[i] / (1.0 - 0.999f64.powi(t))).sqrt() + 1e-8);
                pw[i] = pw[i] * (1.0 - 0.1 * 0.05) - upd;
                u[i] = 0.9 * u[i] + gi;
                rw[i] -= 0.2 * u[i];
            }
        }
        let moved = |now: &[f32]| -> Vec<f32> { now.iter().zip(&p0).map(|(a, b)| a - b).collect() };
        let want = |w: [f64; 3]| moved(&w.map(|x| x as f32));
        assert_close(
            &format!("Adam over 3 steps on {device}"),
            &want(pw),
            &moved(&read_f32(&p.value()).unwrap()),
            (1e-5, 1e-4),
        );
        assert_close(
            &format!("SGD with momentum over 3 steps on {device}"),
            &want(rw),
            &moved(&read_f32(&r.value()).unwrap()),
            (1e-5, 1e-4),
        );
    }
}

#[test]
fn a_borrowed_value_refuses_the_step_instead_of_deadlocking() {
    let p = Var::parameter(Tensor::from_slice_nd_on(Device::Cpu, &[1.0f32, 2.0], &[2]).unwrap());
    p.sum().unwrap().backward().unwrap();
    let mut sgd = Sgd::new(vec![p.clone()], 0.1, 0.0);
    {
        let _guard = p.value();
        let e = sgd.step().unwrap_err();
        assert!(e.to_string().contains("borrowed"), "{e}");
    }
    // A detached copy does not hold the parameter: the step runs.
    let frozen = p.detach().unwrap();
    sgd.step().unwrap();
    assert_eq!(read_f32(&p.value()).unwrap(), [0.9, 1.9]);
    assert_eq!(read_f32(&frozen.value()).unwrap(), [1.0, 2.0]);
    // A refused Adam step does not count: the next one is still step 1 (moves by lr).
    let q = Var::parameter(Tensor::from_slice_nd_on(Device::Cpu, &[0.0f32], &[1]).unwrap());
    q.sum().unwrap().backward().unwrap();
    let mut adam = Adam::new(vec![q.clone()], ops::AdamParams::new(0.5));
    {
        let _guard = q.value();
        assert!(adam.step().is_err());
    }
    adam.step().unwrap();
    assert!((read_f32(&q.value()).unwrap()[0] + 0.5).abs() < 1e-6);
}
