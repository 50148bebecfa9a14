//! A backward whose GPU threads loop past lavapipe's limit (a thread ends after 65535 loop
//! iterations, nested loops counted): every device against the CPU reference.

use super::*;
use brotensor_tests::{assert_close_rows, gpu_devices, SplitMix64};

/// `dq`, `dk`, `dv` of `flash_attention_backward` on `device` (one head, not causal).
fn grads(
    device: Device,
    data: &[Vec<f32>; 4],
    (lq, lk, hd): (usize, usize, usize),
) -> [Vec<f32>; 3] {
    let t = |x: &[f32], rows| Tensor::from_slice_on(device, x, rows, hd).unwrap();
    let (q, k, v, d_o) = (
        t(&data[0], lq),
        t(&data[1], lk),
        t(&data[2], lk),
        t(&data[3], lq),
    );
    let (mut dq, mut dk, mut dv) = Default::default();
    ops::flash_attention_backward(
        &q,
        &k,
        &v,
        &Tensor::default(),
        &d_o,
        None,
        1,
        false,
        &mut dq,
        &mut dk,
        &mut dv,
    )
    .unwrap();
    [dq, dk, dv].map(|g| read_f32(&g).unwrap())
}

/// Whether `device` is the software Vulkan device, whose loop limit the backward kernels
/// cannot meet at this length yet: there the op must refuse, never return cut-short sums.
fn refuses_long_loops(device: Device) -> bool {
    brotensor::is_software(device).unwrap()
}

#[test]
fn backward_over_a_long_key_range_matches_the_cpu_or_is_refused() {
    // The stats and dQ kernels walk the keys in tiles of 256 per thread: each tile costs a
    // 64-step dot and a 256-step sum, so 53248 keys are 208 * 320 = 66560 iterations.
    let (lq, lk, hd) = (2, 53_248, 64);
    let mut rng = SplitMix64::new(0x10A6);
    let data = [
        rng.uniform(lq * hd, -0.5, 0.5),
        rng.uniform(lk * hd, -0.5, 0.5),
        rng.uniform(lk * hd, -1.0, 1.0),
        rng.uniform(lq * hd, -1.0, 1.0),
    ];
    let cpu = grads(Device::Cpu, &data, (lq, lk, hd));
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("flash_grad long: SKIPPED on GPU (no GPU device found)");
    }
    for device in gpus {
        if refuses_long_loops(device) {
            let t = |x: &[f32], rows| Tensor::from_slice_on(device, x, rows, hd).unwrap();
            let (mut dq, mut dk, mut dv) = Default::default();
            let err = ops::flash_attention_backward(
                &t(&data[0], lq),
                &t(&data[1], lk),
                &t(&data[2], lk),
                &Tensor::default(),
                &t(&data[3], lq),
                None,
                1,
                false,
                &mut dq,
                &mut dk,
                &mut dv,
            )
            .expect_err("the software device must refuse loops past its limit");
            let msg = err.to_string();
            assert!(
                msg.contains("flash_attention_backward") && msg.contains("software Vulkan"),
                "{msg}"
            );
            eprintln!("flash_grad long: {device} refuses {lk} keys (loop limit), as it must");
            continue;
        }
        let got = grads(device, &data, (lq, lk, hd));
        for (name, (want, got)) in ["dq", "dk", "dv"].iter().zip(cpu.iter().zip(&got)) {
            assert_close_rows(
                &format!("{name} over {lk} keys on {device}"),
                want,
                got,
                hd,
                tolerance(Dtype::F32),
            );
        }
    }
}
