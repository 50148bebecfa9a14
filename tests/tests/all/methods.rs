//! The peer-style allocating methods (and `clamp_`) against float64 formulas written here, on
//! every device, N-d inputs included.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::{assert_close, gpu_devices, tolerance};

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// `(2, 3, 8)` values in [-3, 3), no ties within a row.
fn input() -> (Vec<f64>, Vec<usize>) {
    let dims = vec![2, 3, 8];
    let v = (0..48)
        .map(|i| ((i * 29 % 48) as f64 - 24.0) / 8.0)
        .collect();
    (v, dims)
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn check(device: Device, name: &str, want: &[f64], got: &Tensor, dims: &[usize]) {
    assert_eq!(got.dims(), dims, "{device} {name}: dims");
    let tag = format!("{device} {name}");
    assert_close(
        &tag,
        &f32s(want),
        &got.to_vec::<f32>().unwrap(),
        tolerance(Dtype::F32),
    );
}

#[test]
fn elementwise_methods_match_f64() {
    let (x, dims) = input();
    for device in devices() {
        let t = Tensor::from_slice_nd_on(device, &f32s(&x), &dims).unwrap();
        let map = |f: fn(f64) -> f64| x.iter().map(|&v| f(v)).collect::<Vec<_>>();
        check(device, "tanh", &map(f64::tanh), &t.tanh().unwrap(), &dims);
        check(
            device,
            "clamp",
            &map(|v| v.clamp(-1.0, 0.5)),
            &t.clamp(-1.0, 0.5).unwrap(),
            &dims,
        );
        let mut c = t.try_clone().unwrap();
        c.clamp_(-0.25, 2.0).unwrap();
        check(device, "clamp_", &map(|v| v.clamp(-0.25, 2.0)), &c, &dims);
        let elu = map(|v| if v > 0.0 { v } else { 0.7 * (v.exp() - 1.0) });
        check(device, "elu", &elu, &t.elu(0.7).unwrap(), &dims);
        let leaky = map(|v| if v > 0.0 { v } else { 0.1 * v });
        check(
            device,
            "leaky_relu",
            &leaky,
            &t.leaky_relu(0.1).unwrap(),
            &dims,
        );
        // Row softmax, allocating form: each row of 8 sums to 1.
        let soft: Vec<f64> = x
            .chunks(8)
            .flat_map(|r| {
                let m = r.iter().cloned().fold(f64::MIN, f64::max);
                let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
                r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
            })
            .collect();
        check(
            device,
            "softmax_rows",
            &soft,
            &ops::softmax_rows(&t).unwrap(),
            &dims,
        );
    }
}

#[test]
fn row_methods_match_f64() {
    let (x, dims) = input();
    let gamma: Vec<f64> = (0..8).map(|i| 0.5 + i as f64 / 8.0).collect();
    let beta: Vec<f64> = (0..8).map(|i| i as f64 / 16.0 - 0.25).collect();
    for device in devices() {
        let t = Tensor::from_slice_nd_on(device, &f32s(&x), &dims).unwrap();
        let g = Tensor::from_slice_nd_on(device, &f32s(&gamma), &[8]).unwrap();
        let b = Tensor::from_slice_nd_on(device, &f32s(&beta), &[8]).unwrap();
        let eps = 1e-5;
        let rms: Vec<f64> = x
            .chunks(8)
            .flat_map(|r| {
                let ms = r.iter().map(|v| v * v).sum::<f64>() / 8.0;
                let s = 1.0 / (ms + eps).sqrt();
                r.iter()
                    .zip(&gamma)
                    .map(move |(v, g)| v * s * g)
                    .collect::<Vec<_>>()
            })
            .collect();
        check(
            device,
            "rms_norm",
            &rms,
            &t.rms_norm(&g, eps as f32).unwrap(),
            &dims,
        );
        let ln: Vec<f64> = x
            .chunks(8)
            .flat_map(|r| {
                let mean = r.iter().sum::<f64>() / 8.0;
                let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 8.0;
                let s = 1.0 / (var + eps).sqrt();
                r.iter()
                    .zip(gamma.iter().zip(&beta))
                    .map(move |(v, (g, b))| (v - mean) * s * g + b)
                    .collect::<Vec<_>>()
            })
            .collect();
        check(
            device,
            "layer_norm",
            &ln,
            &t.layer_norm(&g, &b, eps as f32).unwrap(),
            &dims,
        );
        // GLUs halve the last dim: [a | g] with a, g of 4.
        let half = [2, 3, 4];
        let silu = |v: f64| v / (1.0 + (-v).exp());
        let gelu = |v: f64| {
            0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        };
        let sw: Vec<f64> = x
            .chunks(8)
            .flat_map(|r| (0..4).map(move |i| silu(r[i]) * r[4 + i]))
            .collect();
        check(device, "swiglu", &sw, &t.swiglu().unwrap(), &half);
        let ge: Vec<f64> = x
            .chunks(8)
            .flat_map(|r| (0..4).map(move |i| r[i] * gelu(r[4 + i])))
            .collect();
        check(device, "geglu", &ge, &t.geglu().unwrap(), &half);
        // argmax along each dim, as I32, the dim removed.
        let am = t.argmax(2).unwrap();
        assert_eq!(
            (am.dims(), am.dtype()),
            (&[2, 3][..], Dtype::I32),
            "{device}"
        );
        let want: Vec<i32> = x
            .chunks(8)
            .map(|r| (0..8).fold(0, |best, i| if r[i] > r[best] { i } else { best }) as i32)
            .collect();
        assert_eq!(am.to_vec::<i32>().unwrap(), want, "{device} argmax(2)");
        let am0 = t.argmax(0).unwrap();
        let want0: Vec<i32> = (0..24).map(|j| i32::from(x[24 + j] > x[j])).collect();
        assert_eq!(am0.to_vec::<i32>().unwrap(), want0, "{device} argmax(0)");
    }
}

/// `a (.., M, K) . b (.., K, N)` in float64 with numpy's batch broadcasting, written here
/// from the index rule: output batch index `i` reads each operand at `i` with its size-1 (or
/// missing) batch dims pinned to 0.
fn matmul_f64(a: &[f64], ad: &[usize], b: &[f64], bd: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let (m, k, n) = (ad[ad.len() - 2], ad[ad.len() - 1], bd[bd.len() - 1]);
    let (ab, bb) = (&ad[..ad.len() - 2], &bd[..bd.len() - 2]);
    let rank = ab.len().max(bb.len());
    let dim = |d: &[usize], i: usize| (i + d.len()).checked_sub(rank).map_or(1, |j| d[j]);
    // numpy: a dim of 1 takes the other's size (0 included).
    let batch: Vec<usize> = (0..rank)
        .map(|i| match (dim(ab, i), dim(bb, i)) {
            (1, y) => y,
            (x, _) => x,
        })
        .collect();
    let count: usize = batch.iter().product();
    // The flat batch entry of an operand for output entry `e`.
    let entry = |d: &[usize], mut e: usize| {
        let (mut flat, mut stride) = (0, 1);
        for i in (0..rank).rev() {
            let idx = e % batch[i];
            e /= batch[i];
            let size = dim(d, i);
            flat += if size == 1 { 0 } else { idx * stride };
            stride *= size;
        }
        flat
    };
    let mut out = vec![0.0; count * m * n];
    for e in 0..count {
        let (ea, eb) = (entry(ab, e), entry(bb, e));
        for r in 0..m {
            for c in 0..n {
                out[(e * m + r) * n + c] = (0..k)
                    .map(|p| a[(ea * m + r) * k + p] * b[(eb * k + p) * n + c])
                    .sum();
            }
        }
    }
    let mut dims = batch;
    dims.extend([m, n]);
    (out, dims)
}

#[test]
fn matmul_broadcasts_batch_dims_on_both_sides() {
    let cases: [(&[usize], &[usize]); 7] = [
        (&[2, 3, 4], &[2, 4, 5]),       // the same batch on both sides
        (&[2, 1, 3, 4], &[5, 4, 6]),    // both broadcast: [2, 5, 3, 6]
        (&[3, 4], &[2, 4, 5]),          // a shared by every batch entry
        (&[1, 3, 4], &[2, 4, 5]),       // a's batch of one, shared
        (&[2, 3, 4], &[1, 4, 5]),       // b's batch of one, shared
        (&[3, 1, 2, 7], &[1, 2, 7, 3]), // both copied out along a dim: [3, 2, 2, 3]
        (&[0, 3, 4], &[1, 4, 5]),       // an empty batch
    ];
    let values = |n: usize, seed: usize| -> Vec<f64> {
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 23) as f64 - 11.0) / 7.0)
            .collect()
    };
    for device in devices() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype).unwrap()
                || (device == Device::Cpu && dtype != Dtype::F32)
            {
                continue;
            }
            for (ad, bd) in cases {
                let a = values(ad.iter().product(), 1);
                let b = values(bd.iter().product(), 2);
                // The inputs as stored (rounded to the dtype), so the check measures the product.
                let a = brotensor_tests::round_through(dtype, &f32s(&a));
                let b = brotensor_tests::round_through(dtype, &f32s(&b));
                let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
                let (want, dims) = matmul_f64(&wide(&a), ad, &wide(&b), bd);
                let at = Tensor::from_slice_nd_on(device, &a, ad).unwrap();
                let bt = Tensor::from_slice_nd_on(device, &b, bd).unwrap();
                let (at, bt) = (at.to_dtype(dtype).unwrap(), bt.to_dtype(dtype).unwrap());
                let got = at.matmul(&bt).unwrap();
                let tag = format!("{device} {dtype} {ad:?} . {bd:?}");
                assert_eq!(got.dims(), dims, "{tag}: dims");
                assert_eq!(got.dtype(), dtype, "{tag}: dtype");
                let got = brotensor_tests::read_f32(&got).unwrap();
                let n = *dims.last().unwrap();
                brotensor_tests::assert_close_rows(&tag, &f32s(&want), &got, n, tolerance(dtype));
            }
        }
    }
}

#[test]
fn matmul_shape_errors_name_the_dims_passed() {
    let t = |dims: &[usize]| Tensor::zeros_nd_on(Device::Cpu, dims, Dtype::F32).unwrap();
    let err = t(&[2, 3, 4])
        .matmul(&t(&[3, 4, 5]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[2, 3, 4]") && err.contains("[3, 4, 5]") && err.contains("broadcast"),
        "{err}"
    );
    let err = t(&[2, 3, 4])
        .matmul(&t(&[2, 5, 6]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("inner dimensions differ (4 vs 5)"), "{err}");
    let err = t(&[2, 3, 4]).matmul(&t(&[5, 6])).unwrap_err().to_string();
    assert!(err.contains("[2, 3, 4]") && err.contains("[5, 6]"), "{err}");
    // Element-wise shape errors report the dims, not the folded matrix (6x4).
    let err = ops::add(&t(&[2, 3, 4]), &t(&[4, 6]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("2x3x4") && err.contains("4x6"), "{err}");
    let mut dx = Tensor::default();
    let err = ops::gelu_backward(&t(&[2, 3, 4]), &t(&[4, 6]), &mut dx)
        .unwrap_err()
        .to_string();
    assert!(err.contains("[2, 3, 4]") || err.contains("[4, 6]"), "{err}");
    assert!(t(&[3]).matmul(&t(&[3, 2])).is_err());
}
