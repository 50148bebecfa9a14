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
