//! The terrain diffusion UNet against ONNX Runtime on the package's graph
//! (`tests/fixtures/models/terrain_*`, made by `make_terrain.py`, which also checks ORT against
//! a float64 numpy forward of the converted weights to 3.8e-6): one 128 x 128 evaluation on
//! the CPU; a batch of two 64 x 64 samples at different sigmas and difficulties, and four
//! Euler and DPM++ 2M steps, on the CPU and every GPU (software GPUs: DPM++ 2M only); the
//! height map against the package's own formula; the error cases.

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::files;
use brotensor_models::terrain::{height_map, karras_sigmas, Sampler, Terrain, SIGMA_MIN};
use serde_json::Value;

use crate::common::{self, devices, f32_fixture, floats, targets};

fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

fn max_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "element count");
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0f32, f32::max)
}

fn f32s(v: &Value) -> Vec<f32> {
    floats(v).into_iter().map(|x| x as f32).collect()
}

/// Runs one reference case on `device`: the max |denoised - ORT| and the output's scale.
fn run_case(model: &Terrain, case: &Value) -> (f32, f32) {
    let b = case["batch"].as_u64().unwrap() as usize;
    let (h, w) = (
        case["height"].as_u64().unwrap() as usize,
        case["width"].as_u64().unwrap() as usize,
    );
    let noisy = f32_fixture(case["files"]["noisy"].as_str().unwrap());
    let want = f32_fixture(case["files"]["ort"].as_str().unwrap());
    let x = Tensor::from_slice_nd_on(model.device(), &noisy, &[b, 1, h, w]).unwrap();
    let sigma = f32s(&case["sigma"]);
    let difficulty = f32s(&case["difficulty_input"]);
    let got = model.denoise(&x, &sigma, &difficulty).unwrap();
    assert_eq!(got.dims(), [b, 1, h, w]);
    (
        max_error(&got.to_vec::<f32>().unwrap(), &want),
        max_abs(&want),
    )
}

/// The bound on |denoised - ORT| for a dtype, relative to the output's scale. F32: ORT is
/// 1e-5 of the scale from float64; ours sums in another order over 10 M weights. BF16 keeps
/// 8 bits through 55 residual blocks whose stream grows to 3e10.
fn bound(dtype: Dtype) -> f32 {
    if dtype == Dtype::F32 {
        2e-4
    } else {
        0.12
    }
}

#[test]
fn terrain_matches_onnx_runtime() {
    let r = common::json("terrain_reference.json");
    let mut runs = 0;
    for (device, dtype) in targets("the terrain UNet", &[Dtype::F32, Dtype::BF16]) {
        let model = Terrain::load(&files::terrain_weights(), device, dtype).unwrap();
        // The full 128 x 128 size on the CPU; GPUs (lavapipe in CI) take the batch of two
        // 64 x 64 samples, which covers the batched scale-shift path.
        let cases: &[&str] = if device == Device::Cpu {
            &["case_a", "case_b"]
        } else {
            &["case_b"]
        };
        for name in cases {
            let (err, scale) = run_case(&model, &r[name]);
            // Denoised outputs span +-0.38 and +-0.63: zeros or halves fail.
            assert!(scale > 0.3, "{name}: reference scale {scale}");
            let limit = bound(dtype) * scale;
            assert!(
                err <= limit,
                "{device} {dtype} {name}: max |denoised - ORT| = {err:e}"
            );
            println!(
                "{device} {dtype} {name}: max |denoised - ORT| = {err:.1e} (scale {scale:.3})"
            );
            runs += 1;
        }
    }
    assert!(runs >= 3, "the terrain UNet ran only {runs} times");
}

/// Four Euler and four DPM++ 2M steps on the Karras schedule of the fixture, from its start
/// noise, against the same samplers driving ONNX Runtime (their final latents); software
/// GPUs take DPM++ 2M only.
#[test]
fn terrain_samplers_match_onnx_runtime() {
    let r = &common::json("terrain_reference.json")["sampler"];
    let sched = &r["schedule"];
    let sigmas = karras_sigmas(
        sched["n"].as_u64().unwrap() as usize,
        sched["sigma_min"].as_f64().unwrap(),
        sched["sigma_max"].as_f64().unwrap(),
        sched["rho"].as_f64().unwrap(),
    );
    assert_eq!(sigmas, f32s(&r["sigmas_f32"]), "the schedule");
    let side = r["height"].as_u64().unwrap() as usize;
    let start = f32_fixture(r["files"]["x_start"].as_str().unwrap());
    let difficulty = [r["difficulty_input"].as_f64().unwrap() as f32];
    for device in devices() {
        let model = Terrain::load(&files::terrain_weights(), device, Dtype::F32).unwrap();
        // A software GPU (lavapipe in CI) drives DPM++ 2M only: Euler's step is the same
        // UNet and one more sampler op, whose kernel the diffusion parity tests run there.
        let samplers: &[(Sampler, &str)] = if brotensor::is_software(device).unwrap_or(false) {
            eprintln!("note: {device} is a software device: DPM++ 2M only there");
            &[(Sampler::Dpmpp2m, "dpmpp_2m")]
        } else {
            &[(Sampler::Euler, "euler"), (Sampler::Dpmpp2m, "dpmpp_2m")]
        };
        for &(sampler, file) in samplers {
            let want = f32_fixture(r["files"][file].as_str().unwrap());
            let x = Tensor::from_slice_nd_on(device, &start, &[1, 1, side, side]).unwrap();
            let mut steps = Vec::new();
            let got = model
                .sample(x, &sigmas, &difficulty, sampler, |i, n| steps.push((i, n)))
                .unwrap();
            assert_eq!(steps, (1..=4).map(|i| (i, 4)).collect::<Vec<_>>());
            let got = got.to_vec::<f32>().unwrap();
            let (err, scale) = (max_error(&got, &want), max_abs(&want));
            assert!(scale > 0.5, "{file}: reference scale {scale}");
            assert!(
                err <= 1e-3 * scale,
                "{device} {sampler:?}: max |x - ORT| = {err:e}"
            );
            println!("{device} {sampler:?}: max |x - ORT| = {err:.1e} (scale {scale:.3})");
        }
    }
}

/// The height map of case A's ORT output against the package's formula (the reference
/// JSON's statistics and first row).
#[test]
fn terrain_height_map_follows_the_package() {
    let r = &common::json("terrain_reference.json")["case_a"];
    let hm = &r["height_map"];
    let want_row = floats(&hm["first_row_8"]);
    let heights = height_map(&f32_fixture(r["files"]["ort"].as_str().unwrap()));
    for (g, w) in heights.iter().zip(&want_row) {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{g} vs {w}"
        );
    }
    let max = heights.iter().copied().fold(0f32, f32::max);
    let mean = heights.iter().map(|&v| f64::from(v)).sum::<f64>() / heights.len() as f64;
    let min = heights.iter().copied().fold(f32::INFINITY, f32::min);
    assert_eq!(min, 0.0);
    assert!((f64::from(max) - hm["max"].as_f64().unwrap()).abs() < 1e-6);
    assert!((mean - hm["mean"].as_f64().unwrap()).abs() < 1e-5);
}

#[test]
fn terrain_refuses_bad_inputs() {
    let path = files::terrain_weights();
    let Err(f16) = Terrain::load(&path, Device::Cpu, Dtype::F16) else {
        panic!("the terrain UNet loaded in F16");
    };
    assert!(f16.to_string().contains("F16"), "{f16}");
    let model = Terrain::load(&path, Device::Cpu, Dtype::F32).unwrap();
    let x = |dims: &[usize]| Tensor::zeros_nd_on(Device::Cpu, dims, Dtype::F32).unwrap();
    let cases: [(Tensor, Vec<f32>, Vec<f32>, &str); 5] = [
        (x(&[1, 1, 40, 48]), vec![1.0], vec![0.5], "multiples of 16"),
        (x(&[1, 2, 32, 32]), vec![1.0], vec![0.5], "[B, 1, H, W]"),
        (x(&[2, 1, 32, 32]), vec![1.0], vec![0.5, 0.5], "2 sigmas"),
        (x(&[1, 1, 32, 32]), vec![0.0], vec![0.5], "positive"),
        (x(&[1, 1, 32, 32]), vec![1.0], vec![f32::NAN], "finite"),
    ];
    for (noisy, sigma, difficulty, needle) in cases {
        let err = model
            .denoise(&noisy, &sigma, &difficulty)
            .expect_err("refused");
        assert!(
            err.to_string().contains(needle),
            "{err} (wanted {needle:?})"
        );
    }
    let err = model
        .sample(
            x(&[1, 1, 32, 32]),
            &[1.0, 2.0],
            &[0.5],
            Sampler::Euler,
            |_, _| {},
        )
        .expect_err("increasing sigmas refused");
    assert!(err.to_string().contains("decrease"), "{err}");
    assert!(Terrain::difficulty_input(0).is_err() && Terrain::difficulty_input(101).is_err());
    assert_eq!(Terrain::difficulty_input(100).unwrap(), 1.0);
    // At sigma_min the model is the identity up to the clip.
    let v: Vec<f32> = (0..1024).map(|i| (i as f32 / 512.0) - 1.0 + 0.3).collect();
    let noisy = Tensor::from_slice_nd_on(Device::Cpu, &v, &[1, 1, 32, 32]).unwrap();
    let out = model
        .denoise(&noisy, &[SIGMA_MIN], &[0.5])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (o, i) in out.iter().zip(&v) {
        assert!((o - i.clamp(-1.0, 1.0)).abs() < 1e-6, "{o} vs {i}");
    }
}
