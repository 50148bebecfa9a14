//! Element-wise ops: the CPU reference against every GPU device, in every float dtype the
//! device supports, through all three forms (allocating, `_out`, in place).

use brotensor::{ops, Dtype, Tensor};
use brotensor_tests::{parity, Input};

/// A shape that is not a multiple of the vector width (exercises the scalar path).
const ODD: (usize, usize) = (37, 19);
/// A shape large enough to span many cubes, and a multiple of 4 (the vectorized path).
const WIDE: (usize, usize) = (257, 1024);

fn pair(lo: f32, hi: f32) -> [Input; 2] {
    [
        Input::new(WIDE.0, WIDE.1, lo, hi),
        Input::new(WIDE.0, WIDE.1, lo, hi),
    ]
}

fn one((r, c): (usize, usize), lo: f32, hi: f32) -> [Input; 1] {
    [Input::new(r, c, lo, hi)]
}

#[test]
fn add_sub_mul_div_allocating() {
    parity("add", 0xA1, &pair(-2.0, 2.0), |t| ops::add(&t[0], &t[1]));
    parity("sub", 0xA2, &pair(-2.0, 2.0), |t| ops::sub(&t[0], &t[1]));
    parity("mul", 0xA3, &pair(-2.0, 2.0), |t| ops::mul(&t[0], &t[1]));
    parity("div", 0xA4, &pair(0.5, 2.0), |t| ops::div(&t[0], &t[1]));
}

#[test]
fn add_out_reuses_a_committed_destination() {
    parity("add_out", 0xA5, &pair(-1.0, 1.0), |t| {
        let mut out = Tensor::zeros_on(t[0].device(), t[0].rows(), t[0].cols(), t[0].dtype())?;
        ops::add_out(&t[0], &t[1], &mut out)?;
        Ok(out)
    });
    parity(
        "mul_out odd shape",
        0xA6,
        &[Input::new(37, 19, -1.0, 1.0), Input::new(37, 19, -1.0, 1.0)],
        |t| {
            let mut out = Tensor::default();
            ops::mul_out(&t[0], &t[1], &mut out)?;
            Ok(out)
        },
    );
}

#[test]
fn in_place_tensor_tensor() {
    parity("add_", 0xA7, &pair(-1.0, 1.0), |t| {
        let mut y = t[0].clone();
        y.add_(&t[1])?;
        Ok(y)
    });
    parity("sub_", 0xA8, &pair(-1.0, 1.0), |t| {
        let mut y = t[0].clone();
        y.sub_(&t[1])?;
        Ok(y)
    });
    parity("div_", 0xA9, &pair(0.5, 3.0), |t| {
        let mut y = t[0].clone();
        y.div_(&t[1])?;
        Ok(y)
    });
    parity("add_inplace", 0xAA, &pair(-1.0, 1.0), |t| {
        let mut y = t[0].clone();
        ops::add_inplace(&mut y, &t[1])?;
        Ok(y)
    });
    parity("add_inplace_batched", 0xAB, &pair(-1.0, 1.0), |t| {
        let mut y = t[0].clone();
        ops::add_inplace_batched(&mut y, &t[1])?;
        Ok(y)
    });
    parity("mul_inplace", 0xAC, &pair(-1.5, 1.5), |t| {
        let mut y = t[0].clone();
        ops::mul_inplace(&mut y, &t[1])?;
        Ok(y)
    });
    parity("axpby_inplace", 0xAD, &pair(-1.0, 1.0), |t| {
        let mut y = t[0].clone();
        ops::axpby_inplace(&mut y, &t[1], 0.75, -1.25)?;
        Ok(y)
    });
}

#[test]
fn tensor_scalar_forms() {
    parity("add_scalar", 0xB1, &one(WIDE, -1.0, 1.0), |t| {
        ops::add_scalar(&t[0], 0.5)
    });
    parity("sub_scalar_out", 0xB2, &one(ODD, -1.0, 1.0), |t| {
        let mut out = Tensor::default();
        ops::sub_scalar_out(&t[0], 0.25, &mut out)?;
        Ok(out)
    });
    parity("mul_scalar_", 0xB3, &one(WIDE, -1.0, 1.0), |t| {
        let mut y = t[0].clone();
        y.mul_scalar_(-3.0)?;
        Ok(y)
    });
    parity("div_scalar", 0xB4, &one(ODD, -1.0, 1.0), |t| {
        ops::div_scalar(&t[0], 3.0)
    });
    parity("add_scalar_inplace", 0xB5, &one(WIDE, -1.0, 1.0), |t| {
        let mut y = t[0].clone();
        ops::add_scalar_inplace(&mut y, -0.75)?;
        Ok(y)
    });
    parity("scale_inplace", 0xB6, &one(WIDE, -1.0, 1.0), |t| {
        let mut y = t[0].clone();
        ops::scale_inplace(&mut y, 1.5)?;
        Ok(y)
    });
}

#[test]
fn clamp_and_fill() {
    parity("clamp", 0xC1, &one(WIDE, -3.0, 3.0), |t| {
        let mut y = t[0].clone();
        ops::clamp(&mut y, -1.0, 0.5)?;
        Ok(y)
    });
    parity("clamp_out", 0xC2, &one(ODD, -3.0, 3.0), |t| {
        let mut out = Tensor::default();
        ops::clamp_out(&t[0], -0.5, 2.0, &mut out)?;
        Ok(out)
    });
    parity("fill", 0xC3, &one(ODD, -3.0, 3.0), |t| {
        let mut y = t[0].clone();
        ops::fill(&mut y, 1.25)?;
        Ok(y)
    });
}

#[test]
fn math_forward_all_forms() {
    parity("exp_forward", 0xD1, &one(WIDE, -4.0, 4.0), |t| {
        let mut y = Tensor::default();
        ops::exp_forward(&t[0], &mut y)?;
        Ok(y)
    });
    parity("exp_", 0xD2, &one(ODD, -4.0, 4.0), |t| {
        let mut y = t[0].clone();
        y.exp_()?;
        Ok(y)
    });
    parity("log_forward", 0xD3, &one(WIDE, 0.05, 8.0), |t| {
        ops::log(&t[0])
    });
    parity("sin_forward", 0xD4, &one(WIDE, -6.0, 6.0), |t| {
        ops::sin(&t[0])
    });
    parity("cos_forward", 0xD5, &one(ODD, -6.0, 6.0), |t| {
        ops::cos(&t[0])
    });
    parity("rsqrt_forward", 0xD6, &one(WIDE, 0.05, 9.0), |t| {
        ops::rsqrt(&t[0])
    });
    parity("round_forward", 0xD7, &one(WIDE, -20.0, 20.0), |t| {
        ops::round(&t[0])
    });
    parity("log_", 0xD8, &one(ODD, 0.1, 4.0), |t| {
        let mut y = t[0].clone();
        y.log_()?;
        Ok(y)
    });
}

#[test]
fn math_backward() {
    let two = |lo: f32, hi: f32| {
        [
            Input::new(WIDE.0, WIDE.1, lo, hi),
            Input::new(WIDE.0, WIDE.1, -1.0, 1.0),
        ]
    };
    let grad = |f: fn(&Tensor, &Tensor, &mut Tensor) -> brotensor::Result<()>| {
        move |t: &[Tensor]| {
            // A stale, larger destination: the gradient must overwrite it, not accumulate.
            let mut dx =
                Tensor::zeros_on(t[0].device(), t[0].rows() + 3, t[0].cols(), t[0].dtype())?;
            ops::fill(&mut dx, 7.0)?;
            f(&t[0], &t[1], &mut dx)?;
            Ok(dx)
        }
    };
    parity(
        "exp_backward",
        0xE1,
        &two(-3.0, 3.0),
        grad(ops::exp_backward),
    );
    parity(
        "log_backward",
        0xE2,
        &two(0.1, 4.0),
        grad(ops::log_backward),
    );
    parity(
        "sin_backward",
        0xE3,
        &two(-6.0, 6.0),
        grad(ops::sin_backward),
    );
    parity(
        "cos_backward",
        0xE4,
        &two(-6.0, 6.0),
        grad(ops::cos_backward),
    );
    parity(
        "rsqrt_backward",
        0xE5,
        &two(0.2, 2.0),
        grad(ops::rsqrt_backward),
    );
    parity("round_backward", 0xE6, &one(WIDE, -1.0, 1.0), |t| {
        let mut dx = Tensor::default();
        ops::round_backward(&t[0], &mut dx)?;
        Ok(dx)
    });
}

#[test]
fn cast_between_float_dtypes() {
    // Each case casts the input (stored in the dtype under test) to F32 and back, or across.
    parity("cast via F32", 0xF1, &one(WIDE, -100.0, 100.0), |t| {
        t[0].to_dtype(Dtype::F32)?.to_dtype(t[0].dtype())
    });
    parity("cast via BF16", 0xF3, &one(WIDE, -100.0, 100.0), |t| {
        t[0].to_dtype(Dtype::BF16)?.to_dtype(t[0].dtype())
    });
    parity("cast F32->F16->F32", 0xF2, &one(ODD, -100.0, 100.0), |t| {
        let wide = t[0].to_dtype(Dtype::F32)?;
        let narrow = wide.to_dtype(Dtype::F16)?;
        narrow.to_dtype(t[0].dtype())
    });
}

#[test]
fn channel_bias() {
    // y is (N=2, C*L) with C = 3, L = 5 per the C++ layout: here one sample of 3 x 5.
    parity(
        "add_channel_bias_inplace",
        0xF7,
        &[Input::new(1, 15, -1.0, 1.0), Input::new(3, 1, -1.0, 1.0)],
        |t| {
            let mut y = t[0].clone();
            ops::add_channel_bias_inplace(&mut y, &t[1], 3, 5)?;
            assert_eq!(y.shape(), (1, 15), "the shape is restored");
            Ok(y)
        },
    );
    let mut y = Tensor::zeros_on(brotensor::Device::Cpu, 2, 6, Dtype::F32).unwrap();
    let b = Tensor::zeros_on(brotensor::Device::Cpu, 3, 1, Dtype::F32).unwrap();
    let e = ops::add_channel_bias_inplace(&mut y, &b, 3, 5).unwrap_err();
    assert_eq!(
        e.to_string(),
        "brotensor: add_channel_bias_inplace: y size 12 != C*L = 3*5"
    );
}

#[test]
fn threshold_to_bytes() {
    use brotensor_tests::{parity_with, Check};
    let exact = Check {
        dtypes: &[Dtype::F32, Dtype::F16],
        same_dtype: false,
        tol: Some(|_| (0.0, 0.0)),
    };
    parity_with(
        "threshold_u8",
        0xF8,
        &[Input::new(13, 17, -1.0, 1.0)],
        exact,
        |t| {
            let mut y = Tensor::default();
            ops::threshold_u8(&t[0], 0.25, &mut y)?;
            assert_eq!(y.dtype(), Dtype::I8);
            // Read back as F32 through the host for the comparison.
            let v: Vec<f32> = y.to_vec::<i8>()?.into_iter().map(f32::from).collect();
            Tensor::from_slice_on(t[0].device(), &v, y.rows(), y.cols())
        },
    );
    for d in std::iter::once(brotensor::Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        let x = Tensor::from_slice_on(d, &[0.5f32, 0.25, f32::NAN, -1.0, 2.0], 5, 1).unwrap();
        let mut y = Tensor::default();
        ops::threshold_u8(&x, 0.25, &mut y).unwrap();
        assert_eq!(y.to_vec::<i8>().unwrap(), vec![1, 0, 0, 0, 1], "{d}");
        let b = x.to_dtype(Dtype::BF16).unwrap();
        assert!(matches!(
            ops::threshold_u8(&b, 0.0, &mut y),
            Err(brotensor::Error::Dtype { .. })
        ));
    }
}
