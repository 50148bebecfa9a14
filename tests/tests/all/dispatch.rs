//! The dispatch rules: device discovery, scopes, resolution from the first committed
//! operand, mismatch errors and output adoption.

use brotensor::{ops, Device, DeviceScope, Dtype, Error, Tensor};
use brotensor_tests::gpu_devices;

#[test]
fn init_is_idempotent_and_lists_the_cpu() {
    let first = brotensor::init();
    let second = brotensor::init();
    assert_eq!(first, second);
    let devices = brotensor::available_devices();
    assert_eq!(devices.first(), Some(&Device::Cpu));
    for d in &devices {
        assert!(brotensor::is_available(*d), "{d} listed but not available");
        let name = brotensor::device_name(*d).unwrap();
        assert!(
            name.starts_with(&d.to_string()),
            "name `{name}` should start with {d}"
        );
    }
    assert!(!brotensor::is_available(Device::Cuda(99)));
    assert!(!brotensor::is_available(Device::Wgpu(99)));
    assert!(brotensor::is_available(brotensor::default_device()));
}

#[test]
fn software_adapters_are_never_the_default() {
    let _ = brotensor::init();
    let default = brotensor::default_device();
    if std::env::var(brotensor::DEFAULT_DEVICE_ENV).is_err() {
        assert!(
            !brotensor::is_software(default).unwrap(),
            "{default} is a software device"
        );
        let hardware = gpu_devices()
            .into_iter()
            .find(|d| !brotensor::is_software(*d).unwrap());
        let cuda = brotensor::available_devices()
            .into_iter()
            .find(|d| matches!(d, Device::Cuda(_)));
        assert_eq!(default, cuda.or(hardware).unwrap_or(Device::Cpu));
    }
}

#[test]
fn scopes_override_nest_and_restore() {
    let outer = brotensor::default_device();
    {
        let _cpu = DeviceScope::new(Device::Cpu).unwrap();
        assert_eq!(brotensor::default_device(), Device::Cpu);
        assert_eq!(
            Tensor::zeros(2, 2, Dtype::F32).unwrap().device(),
            Device::Cpu
        );
        for gpu in gpu_devices() {
            let _inner = DeviceScope::new(gpu).unwrap();
            assert_eq!(brotensor::default_device(), gpu);
            assert_eq!(Tensor::zeros(1, 3, Dtype::F32).unwrap().device(), gpu);
        }
        assert_eq!(brotensor::default_device(), Device::Cpu);
    }
    assert_eq!(brotensor::default_device(), outer);
    match DeviceScope::new(Device::Cuda(99)) {
        Err(Error::DeviceUnavailable { device, .. }) => assert_eq!(device, Device::Cuda(99)),
        other => panic!("expected DeviceUnavailable, got {:?}", other.map(|_| ())),
    }
    assert_eq!(brotensor::default_device(), outer);
}

#[test]
fn ops_dispatch_to_the_operands_device_with_exact_values() {
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = Tensor::from_slice_on(device, &[-1.5f32, 0.0, 2.0, 3.0], 2, 2).unwrap();
        let mut y = Tensor::default();
        ops::clamp_out(&x, -1.0, 2.5, &mut y).unwrap();
        assert_eq!(y.device(), device, "uncommitted output adopted");
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![-1.0, 0.0, 2.0, 2.5]);
    }
}

#[test]
fn mixed_devices_are_refused_naming_the_operand() {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("mixed_devices: SKIPPED (no GPU device; only one device to mix)");
        return;
    }
    for gpu in gpus {
        let cpu = Tensor::from_slice_on(Device::Cpu, &[1.0f32; 4], 2, 2).unwrap();
        let on_gpu = Tensor::from_slice_on(gpu, &[1.0f32; 4], 2, 2).unwrap();
        match ops::add(&cpu, &on_gpu) {
            Err(Error::DeviceMismatch {
                op,
                operand,
                expected,
                found,
            }) => {
                assert_eq!(
                    (op, operand, expected, found),
                    ("add_out", "b", Device::Cpu, gpu)
                );
            }
            other => panic!("expected DeviceMismatch, got {other:?}"),
        }
        // A committed output on another device than the inputs is refused too.
        let mut out = Tensor::zeros_on(Device::Cpu, 2, 2, Dtype::F32).unwrap();
        let err = ops::exp_forward(&on_gpu, &mut out).unwrap_err();
        assert!(
            matches!(err, Error::DeviceMismatch { operand: "out", .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with("brotensor: exp_forward: operand `out` is on cpu"),
            "{msg}"
        );
        // An in-place op with a foreign operand.
        let mut y = on_gpu.clone();
        assert!(matches!(
            y.mul_(&cpu),
            Err(Error::DeviceMismatch { operand: "x", .. })
        ));
        let mut dst = Tensor::zeros_on(Device::Cpu, 1, 1, Dtype::F32).unwrap();
        assert!(matches!(
            ops::cast(&on_gpu, &mut dst, Dtype::F16),
            Err(Error::DeviceMismatch { operand: "dst", .. })
        ));
    }
}

#[test]
fn first_committed_operand_decides_and_wildcards_are_skipped() {
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = Tensor::from_slice_on(device, &[4.0f32], 1, 1).unwrap();
        // The uncommitted output is first in the signature; the op still runs on x's device.
        let mut dx = Tensor::default();
        let dy = Tensor::from_slice_on(device, &[2.0f32], 1, 1).unwrap();
        ops::log_backward(&x, &dy, &mut dx).unwrap();
        assert_eq!(dx.device(), device);
        assert_eq!(dx.to_vec::<f32>().unwrap(), vec![0.5]);
    }
}

#[test]
fn tensors_move_between_every_pair_of_devices() {
    let devices = brotensor::available_devices();
    let data: Vec<f32> = (0..37).map(|i| i as f32 * 0.25 - 3.0).collect();
    for &from in &devices {
        for &to in &devices {
            let a = Tensor::from_slice_on(from, &data, 37, 1).unwrap();
            let b = a.to(to).unwrap();
            assert_eq!(b.device(), to);
            assert_eq!(b.to_vec::<f32>().unwrap(), data, "{from} -> {to}");
            let c = b.clone();
            assert_eq!(c.device(), to);
            assert_ne!(c.allocation_id(), b.allocation_id(), "clone is a deep copy");
        }
    }
}

#[test]
fn sync_and_memory_queries() {
    brotensor::sync_all().unwrap();
    assert_eq!(brotensor::memory_info(Device::Cpu).unwrap(), None);
    for gpu in gpu_devices() {
        let t = Tensor::zeros_on(gpu, 256, 256, Dtype::F32).unwrap();
        brotensor::sync(gpu).unwrap();
        let info = brotensor::memory_info(gpu)
            .unwrap()
            .expect("GPU memory figures");
        assert!(info.reserved >= info.in_use);
        assert!(info.in_use >= t.storage_bytes() as u64, "{info:?}");
        drop(t);
        brotensor::memory_trim(gpu).unwrap();
    }
    assert!(matches!(
        brotensor::sync(Device::Wgpu(99)),
        Err(Error::DeviceUnavailable { .. })
    ));
}

#[test]
fn compute_dtype_follows_the_device() {
    assert_eq!(
        brotensor::compute_dtype_on(Device::Cpu).unwrap(),
        Dtype::F32
    );
    // A GPU answers F16 exactly where it computes in F16.
    for gpu in brotensor_tests::gpu_devices() {
        let f16 = brotensor::supports_dtype(gpu, Dtype::F16).unwrap();
        let want = if f16 { Dtype::F16 } else { Dtype::F32 };
        assert_eq!(brotensor::compute_dtype_on(gpu).unwrap(), want, "{gpu}");
    }
    assert!(matches!(
        brotensor::compute_dtype_on(Device::Wgpu(99)),
        Err(Error::DeviceUnavailable { .. })
    ));
    let _scope = DeviceScope::new(Device::Cpu).unwrap();
    assert_eq!(brotensor::compute_dtype().unwrap(), Dtype::F32);
}

/// `Err(DeviceMismatch)` naming `op` and `operand`, else a panic with what came instead.
fn assert_mismatch(got: brotensor::Result<()>, op: &str, operand: &str) {
    match got {
        Err(Error::DeviceMismatch {
            op: o, operand: n, ..
        }) => assert_eq!((o, n), (op, operand)),
        other => panic!("{op}: `{operand}` on another device gave {other:?}"),
    }
}

/// Outputs that an op sizes itself and gradients it accumulates into, committed on another
/// device than the inputs: each is refused by name under the op's own name (these panicked
/// or named another op before every output went through the op's dispatch).
#[test]
fn every_output_on_another_device_is_refused_by_name() {
    let _ = brotensor::init();
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("outputs on another device: SKIPPED (no GPU device; only one device to mix)");
    }
    for gpu in gpus {
        let cpu = |v: &[f32], r, c| Tensor::from_slice_on(Device::Cpu, v, r, c).unwrap();
        let on_gpu = |r, c| Tensor::zeros_on(gpu, r, c, Dtype::F32).unwrap();
        let cpu_zeros = |r, c| Tensor::zeros_on(Device::Cpu, r, c, Dtype::F32).unwrap();
        // NCHW (2, 3, 2, 2): x is 2*3*4 values; per-channel vectors are (3, 1).
        let xs: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
        let x = cpu(&xs, 2, 12);
        let ones = cpu(&[1.0; 3], 3, 1);
        let zeros = cpu(&[0.0; 3], 3, 1);
        let dims = (2, 3, 2, 2);
        let forward = |slot: usize| {
            let mut outs: Vec<Tensor> = (0..5)
                .map(|i| {
                    let (r, c) = if i == 2 { (2, 12) } else { (3, 1) };
                    if i == slot {
                        on_gpu(r, c)
                    } else if i < 2 {
                        cpu_zeros(r, c)
                    } else {
                        Tensor::default()
                    }
                })
                .collect();
            let [rm, rv, y, sm, sr] = &mut outs[..] else {
                unreachable!()
            };
            ops::batch_norm_forward(&x, &ones, &zeros, dims, 1e-5, 0.1, rm, rv, y, sm, sr)
        };
        forward(usize::MAX).expect("all on cpu");
        for (slot, name) in [
            "running_mean",
            "running_var",
            "y",
            "saved_mean",
            "saved_rstd",
        ]
        .iter()
        .enumerate()
        {
            assert_mismatch(forward(slot), "batch_norm_forward", name);
        }

        let backward = |slot: usize| {
            let mut dx = if slot == 0 {
                on_gpu(2, 12)
            } else {
                Tensor::default()
            };
            let mut dgamma = if slot == 1 {
                on_gpu(3, 1)
            } else {
                cpu_zeros(3, 1)
            };
            let mut dbeta = if slot == 2 {
                on_gpu(3, 1)
            } else {
                cpu_zeros(3, 1)
            };
            ops::batch_norm_backward(
                &x,
                &ones,
                &zeros,
                &ones,
                &x,
                dims,
                &mut dx,
                &mut dgamma,
                &mut dbeta,
            )
        };
        backward(usize::MAX).expect("all on cpu");
        for (slot, name) in ["dx", "dgamma", "dbeta"].iter().enumerate() {
            assert_mismatch(backward(slot), "batch_norm_backward", name);
        }

        let ln_backward = |slot: usize| {
            // One vector of D = 4 (the C++ single-row form; rstd is a scalar).
            let dy = cpu(&xs[..4], 1, 4);
            let gamma = cpu(&[1.0; 4], 4, 1);
            let mut dx = if slot == 0 {
                on_gpu(1, 4)
            } else {
                Tensor::default()
            };
            let mut dgamma = if slot == 1 {
                on_gpu(4, 1)
            } else {
                cpu_zeros(4, 1)
            };
            let mut dbeta = if slot == 2 {
                on_gpu(4, 1)
            } else {
                cpu_zeros(4, 1)
            };
            ops::layernorm_backward(&dy, &dy, &gamma, 1.0, &mut dx, &mut dgamma, &mut dbeta)
        };
        ln_backward(usize::MAX).expect("all on cpu");
        for (slot, name) in ["dx", "dgamma", "dbeta"].iter().enumerate() {
            assert_mismatch(ln_backward(slot), "layernorm_backward", name);
        }
    }
}

/// An output that is a view is refused under the op's name (not a generic "resize").
#[test]
fn a_view_as_output_is_refused_under_the_ops_name() {
    let x = Tensor::from_slice_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0], 2, 2).unwrap();
    let base = Tensor::zeros_on(Device::Cpu, 2, 2, Dtype::F32).unwrap();
    let mut view = base.transpose(0, 1).unwrap();
    let err = ops::exp_forward(&x, &mut view).unwrap_err().to_string();
    assert!(err.starts_with("brotensor: exp_forward: "), "{err}");
    assert!(err.contains("`out`"), "{err}");
}
