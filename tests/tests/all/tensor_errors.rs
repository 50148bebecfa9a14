//! Bad input is an error with a clear message, never a panic: shapes, byte counts, dtypes,
//! devices.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::gpu_devices;

fn all_devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

#[test]
fn factories_check_sizes() {
    for d in all_devices() {
        let e = Tensor::from_slice_on(d, &[1.0f32; 5], 2, 3).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Shape {
                    op: "from_slice",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "brotensor: from_slice: 5 elements given for a 2 x 3 tensor"
        );
        let e = Tensor::empty_on(d, usize::MAX, 2, Dtype::F32).unwrap_err();
        assert!(matches!(e, Error::Shape { op: "empty", .. }), "{e}");
        let e = Tensor::zeros_on(d, 1 << 62, 4, Dtype::F32).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
        let e = Tensor::from_raw_bytes_on(d, &[0u8; 17], 1, 32, Dtype::Q4_0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "brotensor: from_raw_bytes: 17 bytes given; a 1 x 32 Q4_0 tensor takes 18"
        );
        let e = Tensor::from_raw_bytes_on(d, &[0u8; 18], 32, 1, Dtype::Q4_0).unwrap_err();
        assert!(e.to_string().contains("whole blocks"), "{e}");
        let ok = Tensor::from_raw_bytes_on(d, &[7u8; 36], 1, 64, Dtype::Q4_0).unwrap();
        assert_eq!(ok.to_bytes().unwrap(), vec![7u8; 36]);
        let mut t = Tensor::zeros_on(d, 2, 2, Dtype::F32).unwrap();
        assert!(matches!(
            t.resize(3, 100, Dtype::Q4_K),
            Err(Error::Shape { op: "resize", .. })
        ));
        assert!(matches!(
            t.to_vec::<half::f16>(),
            Err(Error::Dtype {
                op: "to_vec",
                found: Dtype::F32,
                ..
            })
        ));
    }
}

#[test]
fn mismatched_shapes_are_refused_by_every_binary_op() {
    for d in all_devices() {
        let a = Tensor::zeros_on(d, 2, 3, Dtype::F32).unwrap();
        let b = Tensor::zeros_on(d, 3, 2, Dtype::F32).unwrap();
        let mut y = a.clone();
        let results = [
            ("add_out", ops::add(&a, &b).map(|_| ())),
            ("sub_out", ops::sub(&a, &b).map(|_| ())),
            ("mul_out", ops::mul(&a, &b).map(|_| ())),
            ("div_out", ops::div(&a, &b).map(|_| ())),
            ("add_", y.add_(&b)),
            ("add_inplace", ops::add_inplace(&mut y, &b)),
            ("add_inplace_batched", ops::add_inplace_batched(&mut y, &b)),
            ("mul_inplace", ops::mul_inplace(&mut y, &b)),
            ("axpby_inplace", ops::axpby_inplace(&mut y, &b, 1.0, 1.0)),
            (
                "exp_backward",
                ops::exp_backward(&a, &b, &mut Tensor::default()),
            ),
            (
                "rsqrt_backward",
                ops::rsqrt_backward(&a, &b, &mut Tensor::default()),
            ),
        ];
        for (op, r) in results {
            match r {
                Err(Error::Shape { op: got, reason }) => {
                    assert_eq!(got, op);
                    // The dims as passed, in either spelling of the messages.
                    let (a, b) = (
                        reason.contains("2x3") || reason.contains("[2, 3]"),
                        reason.contains("3x2") || reason.contains("[3, 2]"),
                    );
                    assert!(a && b, "{reason}");
                }
                other => panic!("{op} on {d}: expected a shape error, got {other:?}"),
            }
        }
    }
}

#[test]
fn wrong_dtypes_are_refused() {
    for d in all_devices() {
        // Non-float operands.
        let i = Tensor::from_slice_on(d, &[1i32, 2, 3], 3, 1).unwrap();
        match ops::exp(&i) {
            Err(Error::Dtype {
                op: "exp_forward",
                operand: "x",
                found: Dtype::I32,
                ..
            }) => {}
            other => panic!("{d}: {other:?}"),
        }
        let mut q = Tensor::from_raw_bytes_on(d, &[0u8; 34], 1, 32, Dtype::Q8_0).unwrap();
        assert!(matches!(
            ops::fill(&mut q, 1.0),
            Err(Error::Dtype { op: "fill", .. })
        ));
        // Block formats hold no per-element values to convert.
        assert!(matches!(
            ops::cast(&q, &mut Tensor::default(), Dtype::F32),
            Err(Error::Dtype {
                op: "cast",
                operand: "src",
                ..
            })
        ));
        let f = Tensor::zeros_on(d, 3, 1, Dtype::F32).unwrap();
        assert!(matches!(
            ops::cast(&f, &mut Tensor::default(), Dtype::I8),
            Err(Error::Dtype {
                op: "cast",
                operand: "dtype",
                ..
            })
        ));
        // The same dtype is a byte copy for every dtype, integers included.
        let mut copy = Tensor::default();
        ops::cast(&i, &mut copy, Dtype::I32).unwrap();
        assert_eq!(copy.to_vec::<i32>().unwrap(), vec![1, 2, 3]);
    }
}

#[test]
fn mixed_dtypes_are_refused() {
    for d in gpu_devices() {
        if !brotensor::supports_dtype(d, Dtype::F16).unwrap() {
            continue;
        }
        let a = Tensor::zeros_on(d, 2, 2, Dtype::F32).unwrap();
        let b = Tensor::zeros_on(d, 2, 2, Dtype::F16).unwrap();
        let e = ops::add(&a, &b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Dtype {
                    op: "add_out",
                    operand: "b",
                    found: Dtype::F16,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "brotensor: add_out: operand `b` is F16; must match `a` (F32)"
        );
    }
    // On the CPU an F16 pair computes (FP32 math, rounded once to F16).
    let a = Tensor::zeros_on(Device::Cpu, 2, 2, Dtype::F16).unwrap();
    assert_eq!(ops::add(&a, &a).unwrap().dtype(), Dtype::F16);
}

#[test]
fn unsupported_dtypes_on_a_device_are_errors() {
    for d in all_devices() {
        for dtype in [Dtype::F16, Dtype::BF16] {
            if brotensor::supports_dtype(d, dtype).unwrap() {
                continue;
            }
            let t = Tensor::zeros_on(d, 4, 4, dtype).unwrap();
            match ops::sin(&t) {
                Err(Error::UnsupportedDtype {
                    op,
                    dtype: got,
                    device,
                }) => {
                    assert_eq!((op, got, device), ("sin_forward", dtype, d));
                    let msg = ops::sin(&t).unwrap_err().to_string();
                    assert_eq!(
                        msg,
                        format!("brotensor: sin_forward: {dtype} is not supported on {d}")
                    );
                }
                other => panic!("{d} {dtype}: expected UnsupportedDtype, got {other:?}"),
            }
        }
    }
    // The CPU computes the 16-bit floats (FP32 math, one rounding), and casts them.
    assert!(brotensor::supports_dtype(Device::Cpu, Dtype::BF16).unwrap());
    let h = Tensor::zeros_on(Device::Cpu, 2, 2, Dtype::BF16).unwrap();
    assert!(h.to_dtype(Dtype::F32).is_ok());
    assert_eq!(ops::sin(&h).unwrap().dtype(), Dtype::BF16);
}

#[test]
fn unavailable_devices_are_errors() {
    for d in [Device::Cuda(64), Device::Wgpu(64)] {
        match Tensor::zeros_on(d, 2, 2, Dtype::F32) {
            Err(Error::DeviceUnavailable {
                op: "empty",
                device,
                ..
            }) => assert_eq!(device, d),
            other => panic!("{d}: {other:?}"),
        }
        let t = Tensor::zeros_on(Device::Cpu, 2, 2, Dtype::F32).unwrap();
        assert!(matches!(
            t.to(d),
            Err(Error::DeviceUnavailable { op: "to", .. })
        ));
        assert!(brotensor::device_name(d).is_err());
    }
}

#[test]
fn oversized_gpu_buffers_are_refused_and_the_device_keeps_working() {
    for d in gpu_devices() {
        let max = brotensor::max_buffer_bytes(d).unwrap();
        let Ok(too_many) = usize::try_from(max / 4 + 1) else {
            continue;
        };
        match Tensor::empty_on(d, too_many, 1, Dtype::F32) {
            Err(Error::InvalidArgument {
                op: "alloc",
                reason,
            }) => {
                assert!(reason.contains("largest buffer"), "{reason}")
            }
            other => panic!("{d}: expected a refused allocation, got {other:?}"),
        }
        let t = Tensor::from_slice_on(d, &[1.0f32, 2.0], 2, 1).unwrap();
        assert_eq!(
            ops::add(&t, &t).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0, 4.0]
        );
        brotensor::sync(d).unwrap();
    }
    assert_eq!(brotensor::max_buffer_bytes(Device::Cpu).unwrap(), u64::MAX);
}
