//! Reductions: the CPU reference against every GPU device and dtype.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{parity_with, Check, Input};

fn exact(_: Dtype) -> (f32, f32) {
    (0.0, 0.0)
}

#[test]
fn row_and_column_sums() {
    let sums = Check {
        tol: None,
        ..Check::default()
    };
    // Rows of up to 32 values take the one-unit-per-row kernel (the last two), longer ones
    // a cube per row.
    for (i, (r, c)) in [(67, 1000), (3, 4099), (33, 33), (300, 7), (130, 32)]
        .into_iter()
        .enumerate()
    {
        parity_with(
            &format!("sum_rows {r}x{c}"),
            0x400 + i as u64,
            &[Input::new(r, c, -1.0, 1.0)],
            sums,
            |t| {
                let mut y = Tensor::default();
                ops::sum_rows(&t[0], &mut y)?;
                Ok(y)
            },
        );
        parity_with(
            &format!("sum_cols {r}x{c}"),
            0x410 + i as u64,
            &[Input::new(r, c, -1.0, 1.0)],
            sums,
            |t| {
                let mut y = Tensor::default();
                ops::sum_cols(&t[0], &mut y)?;
                Ok(y)
            },
        );
    }
}

#[test]
fn column_sums_of_tall_inputs() {
    // More rows than lavapipe lets one unit loop over (it stops every loop of a shader after
    // 65535 iterations in all), and few columns: the rows must be split across units.
    let (r, c) = (70_000, 3);
    parity_with(
        &format!("sum_cols {r}x{c}"),
        0x420,
        &[Input::new(r, c, -1.0, 1.0)],
        Check {
            tol: None,
            ..Check::default()
        },
        |t| {
            let mut y = Tensor::default();
            ops::sum_cols(&t[0], &mut y)?;
            Ok(y)
        },
    );
}

#[test]
fn argmax_and_counts() {
    let index = Check {
        same_dtype: false,
        tol: Some(exact),
        ..Check::default()
    };
    for (i, (r, c)) in [(40, 1000), (5, 3), (1, 5000)].into_iter().enumerate() {
        parity_with(
            &format!("argmax_rows {r}x{c}"),
            0x420 + i as u64,
            &[Input::new(r, c, -4.0, 4.0)],
            index,
            |t| {
                let mut idx = Tensor::default();
                ops::argmax_rows(&t[0], &mut idx)?;
                Ok(idx)
            },
        );
        parity_with(
            &format!("argmax_rows i32 {r}x{c}"),
            0x428 + i as u64,
            &[Input::new(r, c, -4.0, 4.0)],
            index,
            |t| {
                let mut idx = Tensor::zeros_on(t[0].device(), 1, 1, Dtype::F32)?;
                ops::argmax_rows_i32(&t[0], &mut idx)?;
                assert_eq!(idx.dtype(), Dtype::I32);
                Ok(idx)
            },
        );
    }
    let counts = Check {
        dtypes: &[Dtype::F32, Dtype::F16],
        same_dtype: false,
        tol: Some(exact),
    };
    parity_with(
        "rows_count_above",
        0x430,
        &[Input::new(33, 777, -1.0, 1.0)],
        counts,
        |t| {
            let mut c = Tensor::default();
            ops::rows_count_above(&t[0], -0.25, 0.5, &mut c)?;
            Ok(c)
        },
    );
}

#[test]
fn top_k() {
    let f32_only = Check {
        dtypes: &[Dtype::F32],
        same_dtype: false,
        tol: Some(exact),
    };
    for (i, (r, c, k)) in [(9, 1000, 5), (4, 50, 50), (2, 3000, 1)]
        .into_iter()
        .enumerate()
    {
        parity_with(
            &format!("top_k_rows values k={k}"),
            0x440 + i as u64,
            &[Input::new(r, c, -5.0, 5.0)],
            f32_only,
            |t| {
                let (mut v, mut ix) = (Tensor::default(), Tensor::default());
                ops::top_k_rows(&t[0], k, &mut v, &mut ix)?;
                Ok(v)
            },
        );
        parity_with(
            &format!("top_k_rows indices k={k}"),
            0x440 + i as u64,
            &[Input::new(r, c, -5.0, 5.0)],
            f32_only,
            |t| {
                let (mut v, mut ix) = (Tensor::default(), Tensor::default());
                ops::top_k_rows(&t[0], k, &mut v, &mut ix)?;
                Ok(ix)
            },
        );
    }
}

#[test]
fn exact_values_ties_and_errors() {
    for d in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        // Ties: the smaller index wins; NaN is never chosen.
        let x = Tensor::from_slice_on(d, &[1.0f32, 3.0, 3.0, f32::NAN, 2.0, 2.0], 2, 3).unwrap();
        let mut idx = Tensor::default();
        ops::argmax_rows(&x, &mut idx).unwrap();
        assert_eq!(idx.to_vec::<f32>().unwrap(), vec![1.0, 1.0], "{d}");
        let (mut v, mut ix) = (Tensor::default(), Tensor::default());
        ops::top_k_rows(&x, 2, &mut v, &mut ix).unwrap();
        assert_eq!(ix.to_vec::<i32>().unwrap(), vec![1, 2, 1, 2], "{d}");
        assert_eq!(v.to_vec::<f32>().unwrap(), vec![3.0, 3.0, 2.0, 2.0], "{d}");
        let mut s = Tensor::default();
        ops::sum_rows(&x.to(Device::Cpu).unwrap().to(d).unwrap(), &mut s).unwrap();
        let mut c = Tensor::default();
        ops::rows_count_above(&x, 1.0, 2.5, &mut c).unwrap();
        assert_eq!(c.to_vec::<i32>().unwrap(), vec![2, 2, 2, 0], "{d}");
        // Empty rows sum to zero and argmax to 0.
        let e = Tensor::zeros_on(d, 3, 0, Dtype::F32).unwrap();
        ops::sum_rows(&e, &mut s).unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), vec![0.0; 3]);
        // Errors.
        let e = ops::top_k_rows(&x, 4, &mut v, &mut ix).unwrap_err();
        assert_eq!(
            e.to_string(),
            "brotensor: top_k_rows: k = 4 must be <= C (per-row length 3)"
        );
        assert!(matches!(
            ops::top_k_rows(&x, 0, &mut v, &mut ix),
            Err(Error::InvalidArgument { .. })
        ));
        let i = Tensor::zeros_on(d, 2, 2, Dtype::I32).unwrap();
        assert!(matches!(
            ops::sum_rows(&i, &mut s),
            Err(Error::Dtype { op: "sum_rows", .. })
        ));
    }
}
