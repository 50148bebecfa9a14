//! The DCGAN face generator against ONNX Runtime on a graph built from the same checkpoint
//! (`tests/fixtures/models/dcgan_*`, made by `make_dcgan.py`, which also checks ORT against a
//! float64 numpy forward to 8.5e-7), on the CPU and on every GPU in every dtype it has.

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::dcgan::{grid, DcGan, LATENT, SIDE};
use brotensor_models::files;

use crate::common::{self, devices, f32_fixture, targets};

#[test]
fn dcgan_matches_onnx_runtime() {
    let r = common::json("dcgan_reference.json");
    let batch = r["batch"].as_u64().unwrap() as usize;
    let z = f32_fixture("dcgan_z.bin");
    let want = f32_fixture("dcgan_faces.bin");
    assert_eq!(z.len(), batch * LATENT);
    assert_eq!(want.len(), batch * 3 * SIDE * SIDE);
    // Faces span most of [-1, 1]: a zeroed or halved output is far outside the bounds below.
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.9, "reference scale {scale}");
    let mut runs = 0;
    for (device, dtype) in targets("the DCGAN", &[Dtype::F32, Dtype::F16, Dtype::BF16]) {
        let model = DcGan::load(&files::dcgan_weights(), device, dtype).unwrap();
        let zt = Tensor::from_slice_nd_on(device, &z, &[batch, LATENT]).unwrap();
        let got = model.generate(&zt).unwrap();
        assert_eq!(got.dims(), [batch, 3, SIDE, SIDE]);
        let got = got.to_vec::<f32>().unwrap();
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        // F32: five products of up to 8192 terms; ORT is 8.5e-7 from float64. 16-bit
        // weights and activations move pixels by about 1e-2 (BF16 more).
        let bound = match dtype {
            Dtype::F32 => 1e-4,
            Dtype::F16 => 3e-2,
            _ => 8e-2,
        } * scale;
        assert!(err <= bound, "{device} {dtype}: max |face - ORT| = {err:e}");
        println!("{device} {dtype}: max |face - ORT| = {err:.1e}");
        runs += 1;
    }
    assert!(runs >= 2, "the DCGAN ran in only {runs} device/dtype pairs");
}

/// A seed draws the same latent vectors on every device, the grid holds every face (mapped
/// from `[-1, 1]` to `[0, 1]`) inside white borders, and bad inputs are refused.
#[test]
fn dcgan_noise_grid_and_errors() {
    let mut first: Option<Vec<f32>> = None;
    for device in devices() {
        let model = DcGan::load(&files::dcgan_weights(), device, Dtype::F32).unwrap();
        let z = model.noise(3, 11).unwrap().to_vec::<f32>().unwrap();
        let mean = z.iter().map(|&v| f64::from(v)).sum::<f64>() / z.len() as f64;
        assert!(mean.abs() < 0.2, "{device}: noise mean {mean}");
        match &first {
            None => first = Some(z),
            Some(cpu) => assert_eq!(&z, cpu, "{device}: noise differs from the CPU's"),
        }
        let bad = Tensor::zeros_nd_on(device, &[2, LATENT + 1], Dtype::F32).unwrap();
        let err = model
            .generate(&bad)
            .expect_err("a [2, 101] latent is refused");
        assert!(err.to_string().contains("[B, 100]"), "{err}");
    }
    let faces: Vec<f32> = (0..2 * 3 * SIDE * SIDE)
        .map(|i| if i < 3 * SIDE * SIDE { -1.0 } else { 1.0 })
        .collect();
    let t = Tensor::from_slice_nd_on(Device::Cpu, &faces, &[2, 3, SIDE, SIDE]).unwrap();
    let g = grid(&t, 8).unwrap();
    let (h, w) = (SIDE + 4, 2 * SIDE + 6);
    assert_eq!(g.dims(), [3, h, w]);
    let px = g.to_vec::<f32>().unwrap();
    let at = |c: usize, y: usize, x: usize| px[(c * h + y) * w + x];
    assert_eq!(at(0, 0, 0), 1.0, "border");
    assert_eq!(at(1, 2, 2), 0.0, "first face, -1 -> 0");
    assert_eq!(at(2, 2 + SIDE - 1, 4 + SIDE), 1.0, "second face, 1 -> 1");
    assert_eq!(at(0, 2, 2 + SIDE), 1.0, "border between faces");
    let not_faces = Tensor::zeros_nd_on(Device::Cpu, &[2, 3, 32, 32], Dtype::F32).unwrap();
    assert!(grid(&not_faces, 8).is_err());
    let missing = DcGan::load(
        std::path::Path::new("/nonexistent/generator.safetensors"),
        Device::Cpu,
        Dtype::F32,
    );
    assert!(missing.is_err());
}
