//! Matrix products and linear layers: the CPU reference (gemm) against every GPU device.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{parity_with, Check, Input};

const DOT: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

/// Every epilogue activation of the products.
const EVERY_ACT: [ops::Act; 6] = [
    ops::Act::None,
    ops::Act::Relu,
    ops::Act::Gelu,
    ops::Act::GeluExact,
    ops::Act::Silu,
    ops::Act::QuickGelu,
];

/// `matmul_abt` with a bias and `act` on `(batch, m, n, k)` (contiguous batches) against
/// the CPU, in F16 and BF16.
fn abt_parity(
    name: &str,
    seed: u64,
    (batch, m, n, k): (usize, usize, usize, usize),
    act: ops::Act,
) {
    let spec = ops::AbtSpec {
        batch,
        m,
        n,
        k,
        stride_a: m * k,
        stride_b: n * k,
        stride_c: m * n,
    };
    let ins = [input(batch * m, k), input(batch * n, k), input(n, 1)];
    parity_with(name, seed, &ins, HALF, |t| {
        let (a, b, bias) = (as_16(&t[0])?, as_16(&t[1])?, as_16(&t[2])?);
        let mut c = Tensor::zeros_on(a.device(), batch * m, n, a.dtype())?;
        ops::matmul_abt(&a, &b, &mut c, spec, Some(&bias), act)?;
        Ok(c)
    });
}

fn input(r: usize, c: usize) -> Input {
    Input::new(r, c, -1.0, 1.0)
}

#[test]
fn matmul_any_shape() {
    // Full tiles, ragged edges, 1x1, K = 0, tall and skinny, decode-sized.
    let shapes = [
        (64, 64, 64),
        (67, 129, 45),
        (1, 1, 1),
        (5, 0, 7),
        (1000, 8, 3),
        (4, 300, 200),
        (2, 1, 513),
    ];
    for (i, (m, k, n)) in shapes.into_iter().enumerate() {
        parity_with(
            &format!("matmul {m}x{k}x{n}"),
            0x500 + i as u64,
            &[input(m, k), input(k, n)],
            DOT,
            |t| {
                let mut c = Tensor::default();
                ops::matmul(&t[0], &t[1], &mut c)?;
                Ok(c)
            },
        );
    }
}

/// Products large enough for the GPU's taller tiles (`128 x 128` and `64 x 128`: at least 16 of
/// them; smaller products take `32 x 128`), ragged on both sides, in every layout: plain,
/// 4-wide vectors, `B` transposed (linear), `A` transposed (the weight gradient).
#[test]
fn tall_tiles_in_every_layout() {
    let shapes = [
        (520, 33, 516),
        (516, 36, 520),
        (100, 33, 1000),
        (100, 36, 1000),
    ];
    for (i, (m, k, n)) in shapes.into_iter().enumerate() {
        parity_with(
            &format!("matmul tall tiles {m}x{k}x{n}"),
            0x5b0 + i as u64,
            &[input(m, k), input(k, n)],
            DOT,
            |t| {
                let mut c = Tensor::default();
                ops::matmul(&t[0], &t[1], &mut c)?;
                Ok(c)
            },
        );
    }
    let (rows, out, inp) = (520, 516, 33);
    parity_with(
        "linear_forward_batched tall tiles",
        0x5b4,
        &[input(out, inp), input(out, 1), input(rows, inp)],
        DOT,
        |t| {
            let mut y = Tensor::default();
            ops::linear_forward_batched(&t[0], Some(&t[1]), &t[2], &mut y)?;
            Ok(y)
        },
    );
    let (rows, out, inp) = (9, 516, 520);
    let bwd = [
        input(out, inp),
        input(rows, inp),
        input(rows, out),
        input(out, inp),
        input(out, 1),
    ];
    parity_with(
        "linear_backward_batched tall tiles dw",
        0x5b5,
        &bwd,
        DOT,
        |t| {
            let (mut dx, mut dw, mut db) = (Tensor::default(), t[3].clone(), t[4].clone());
            ops::linear_backward_batched(&t[0], &t[1], &t[2], &mut dx, &mut dw, &mut db)?;
            Ok(dw)
        },
    );
}

#[test]
fn skinny_products_in_every_layout() {
    // At most eight rows of C take the GPU's skinny kernel: each operand layout, with the
    // epilogue (bias, activation, accumulation) and batches, at 1, 3 and 8 rows, and 9 rows
    // (the tiled kernel) beside them.
    for (i, m) in [1usize, 3, 8, 9].into_iter().enumerate() {
        let (k, n) = (70, 45);
        parity_with(
            &format!("matmul skinny {m}x{k}x{n}"),
            0x5a0 + i as u64,
            &[input(m, k), input(k, n)],
            DOT,
            |t| {
                let mut c = Tensor::default();
                ops::matmul(&t[0], &t[1], &mut c)?;
                Ok(c)
            },
        );
        // With A (m, 50): dA = dC B^T is an m-row product reading B transposed (scalar at
        // n = 45, 4-wide at n = 48). With A (50, m): dB = A^T dC is an m-row product reading
        // A transposed. Both gradients accumulate into non-zero tensors.
        for (j, (a_dims, nn)) in [((m, 50), 45usize), ((m, 50), 48), ((50, m), 45)]
            .into_iter()
            .enumerate()
        {
            let (rows, inner) = a_dims;
            let which = if rows == m { "da" } else { "db" };
            let bwd = [
                input(rows, inner),
                input(inner, nn),
                input(rows, nn),
                input(rows, inner),
                input(inner, nn),
            ];
            parity_with(
                &format!("matmul_backward skinny {which} m={m} n={nn}"),
                0x5b0 + (3 * i + j) as u64,
                &bwd,
                DOT,
                |t| {
                    let (mut da, mut db) = (t[3].clone(), t[4].clone());
                    ops::matmul_backward(&t[0], &t[1], &t[2], &mut da, &mut db)?;
                    Ok(if which == "da" { da } else { db })
                },
            );
        }
        // k = 72 takes the 4-wide skinny kernel, k = 70 the scalar one.
        for (j, k) in [70usize, 72].into_iter().enumerate() {
            parity_with(
                &format!("linear_forward_batched skinny B={m} k={k}"),
                0x5d0 + (2 * i + j) as u64,
                &[input(n, k), input(n, 1), input(m, k)],
                DOT,
                |t| {
                    let mut y = Tensor::default();
                    ops::linear_forward_batched(&t[0], Some(&t[1]), &t[2], &mut y)?;
                    Ok(y)
                },
            );
        }
    }
    // Batched (z strides), with bias and every activation: two rows per product, scalar
    // (k = 33) and 4-wide (k = 36).
    for (i, k) in [33usize, 36].into_iter().enumerate() {
        for (a, act) in EVERY_ACT.into_iter().enumerate() {
            abt_parity(
                &format!("matmul_abt skinny batched k={k} {act:?}"),
                0x5e0 + (6 * i + a) as u64,
                (3, 2, 40, k),
                act,
            );
        }
    }
}

/// Names the 16-bit dtypes (`F16`, `BF16`, comma-separated) whose matmuls must run on matrix
/// units on some GPU device; `scripts/cmma-check.sh` sets it, so that the parity cases
/// above cannot pass there on the tiled kernel.
const REQUIRE_MATRIX_UNITS_ENV: &str = "BROTENSOR_REQUIRE_MATRIX_UNITS";

#[test]
fn matrix_units_only_for_16_bit_gpu_matmuls() {
    // The parity cases above of more than eight rows run through whichever kernel this
    // reports, so on a device with matrix units they test the `cmma` kernel, and with
    // `BROTENSOR_CMMA=0` the tiled one; the log says which one ran where (the skinny kernel
    // takes the others).
    let mut on_units = Vec::new();
    for d in brotensor::available_devices() {
        for t in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            let on = brotensor::matmul_uses_matrix_units(d, t).unwrap();
            assert!(
                !on || (d != Device::Cpu && t != Dtype::F32),
                "{t} matmul on {d} cannot use matrix units"
            );
            let kernel = if on {
                on_units.push(t);
                "matrix units (cmma)"
            } else {
                "tiled kernel"
            };
            let kernel = format!("{kernel} above 8 rows, skinny kernel up to 8");
            eprintln!("matmul {t} on {d}: {kernel}");
        }
    }
    let required = std::env::var(REQUIRE_MATRIX_UNITS_ENV).unwrap_or_default();
    for name in required.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let t = match name {
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            other => panic!("{REQUIRE_MATRIX_UNITS_ENV}: {other} is not F16 or BF16"),
        };
        assert!(
            on_units.contains(&t),
            "{REQUIRE_MATRIX_UNITS_ENV} names {t}, but no device runs {t} matmuls on matrix units"
        );
    }
    assert!(matches!(
        brotensor::matmul_uses_matrix_units(Device::Cuda(77), Dtype::F16),
        Err(Error::DeviceUnavailable { .. })
    ));
}

#[test]
fn matmul_backward_accumulates() {
    let (m, k, n) = (33, 70, 21);
    let ins = [
        input(m, k),
        input(k, n),
        input(m, n),
        input(m, k),
        input(k, n),
    ];
    for (which, seed) in [("da", 0x520), ("db", 0x521)] {
        parity_with(&format!("matmul_backward {which}"), seed, &ins, DOT, |t| {
            let (mut da, mut db) = (t[3].clone(), t[4].clone());
            ops::matmul_backward(&t[0], &t[1], &t[2], &mut da, &mut db)?;
            Ok(if which == "da" { da } else { db })
        });
    }
}

#[test]
fn linear_single_and_batched() {
    let (out, inp) = (37, 130);
    parity_with(
        "linear_forward",
        0x530,
        &[input(out, inp), input(out, 1), input(inp, 1)],
        DOT,
        |t| {
            let mut y = Tensor::default();
            ops::linear_forward(&t[0], &t[1], &t[2], &mut y)?;
            Ok(y)
        },
    );
    let bwd = [
        input(out, inp),
        input(inp, 1),
        input(out, 1),
        input(out, inp),
        input(out, 1),
    ];
    for (which, seed) in [("dx", 0x531), ("dw", 0x532), ("db", 0x533)] {
        parity_with(&format!("linear_backward {which}"), seed, &bwd, DOT, |t| {
            let (mut dx, mut dw, mut db) = (Tensor::default(), t[3].clone(), t[4].clone());
            ops::linear_backward(&t[0], &t[1], &t[2], &mut dx, &mut dw, &mut db)?;
            Ok(match which {
                "dx" => dx,
                "dw" => dw,
                _ => db,
            })
        });
    }
    for (i, batch) in [1usize, 4, 70].into_iter().enumerate() {
        parity_with(
            &format!("linear_forward_batched B={batch}"),
            0x540 + i as u64,
            &[input(out, inp), input(out, 1), input(batch, inp)],
            DOT,
            |t| {
                let mut y = Tensor::default();
                ops::linear_forward_batched(&t[0], Some(&t[1]), &t[2], &mut y)?;
                Ok(y)
            },
        );
    }
    let bwd = [
        input(out, inp),
        input(9, inp),
        input(9, out),
        input(out, inp),
        input(out, 1),
    ];
    for (which, seed) in [("dx", 0x550), ("dw", 0x551), ("db", 0x552)] {
        parity_with(
            &format!("linear_backward_batched {which}"),
            seed,
            &bwd,
            DOT,
            |t| {
                let (mut dx, mut dw, mut db) = (Tensor::default(), t[3].clone(), t[4].clone());
                ops::linear_backward_batched(&t[0], &t[1], &t[2], &mut dx, &mut dw, &mut db)?;
                Ok(match which {
                    "dx" => dx,
                    "dw" => dw,
                    _ => db,
                })
            },
        );
    }
}

#[test]
fn the_readme_example_and_errors() {
    for d in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        // The C++ README: W = [[1,2,3],[4,5,6]], b = 0, x = [1,0,-1] gives y = [-2,-2].
        let w = Tensor::from_slice_on(d, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3).unwrap();
        let b = Tensor::zeros_on(d, 2, 1, Dtype::F32).unwrap();
        let x = Tensor::from_slice_on(d, &[1.0f32, 0.0, -1.0], 3, 1).unwrap();
        let mut y = Tensor::default();
        ops::linear_forward(&w, &b, &x, &mut y).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![-2.0, -2.0], "{d}");
        // Mismatched inner dimensions, unsized gradients, mixed dtypes.
        let e = ops::matmul(&w, &w, &mut Tensor::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "brotensor: matmul: `a` is [2, 3] and `b` is [2, 3]: inner dimensions differ"
        );
        let dc = Tensor::zeros_on(d, 2, 2, Dtype::F32).unwrap();
        let wt = Tensor::zeros_on(d, 3, 2, Dtype::F32).unwrap();
        let mut db = Tensor::zeros_on(d, 3, 2, Dtype::F32).unwrap();
        let e = ops::matmul_backward(&w, &wt, &dc, &mut Tensor::default(), &mut db).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Shape {
                    op: "matmul_backward",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("must be pre-sized to 2x3"), "{e}");
        let i = Tensor::zeros_on(d, 3, 2, Dtype::I32).unwrap();
        assert!(matches!(
            ops::matmul(&i, &i, &mut Tensor::default()),
            Err(Error::Dtype { .. })
        ));
    }
}

#[test]
fn batched_linear_converts_16_bit_weights() {
    for d in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        let w = Tensor::from_slice_on(d, &[1.0f32, 2.0, 3.0, 4.0], 2, 2).unwrap();
        let w16 = w.to_dtype(Dtype::BF16).unwrap();
        let x = Tensor::from_slice_on(d, &[1.0f32, 1.0, 0.5, -1.0], 2, 2).unwrap();
        let mut y = Tensor::default();
        ops::linear_forward_batched(&w16, None, &x, &mut y).unwrap();
        assert_eq!(y.dtype(), Dtype::F32);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![3.0, 7.0, -1.5, -2.5],
            "{d}"
        );
    }
}

/// 16-bit-only ops run the CPU reference on F16 copies of its F32 inputs.
fn as_16(t: &Tensor) -> brotensor::Result<Tensor> {
    if t.dtype() == Dtype::F32 {
        t.to_dtype(Dtype::F16)
    } else {
        t.try_clone()
    }
}

const HALF: Check = Check {
    dtypes: &[Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

#[test]
fn matmul_abt_batched_with_bias_and_activation() {
    use ops::{AbtSpec, Act};
    let (batch, m, n, k) = (3, 17, 40, 33);
    let spec = AbtSpec {
        batch,
        m,
        n,
        k,
        stride_a: m * k,
        stride_b: n * k,
        stride_c: m * n,
    };
    for (i, act) in EVERY_ACT.into_iter().enumerate() {
        abt_parity(
            &format!("matmul_abt {act:?}"),
            0x560 + i as u64,
            (batch, m, n, k),
            act,
        );
    }
    // Strided: B shared across the batch (stride 0), no bias.
    let shared = AbtSpec {
        stride_b: 0,
        ..spec
    };
    parity_with(
        "matmul_abt shared B",
        0x570,
        &[input(batch * m, k), input(n, k)],
        HALF,
        |t| {
            let (a, b) = (as_16(&t[0])?, as_16(&t[1])?);
            let mut c = Tensor::zeros_on(a.device(), batch * m, n, a.dtype())?;
            ops::matmul_abt(&a, &b, &mut c, shared, None, Act::None)?;
            Ok(c)
        },
    );
    for (i, batch) in [1usize, 3, 33].into_iter().enumerate() {
        parity_with(
            &format!("linear_forward_batched_fp16_act B={batch}"),
            0x580 + i as u64,
            &[input(48, 70), input(48, 1), input(batch, 70)],
            HALF,
            |t| {
                let (w, b, x) = (as_16(&t[0])?, as_16(&t[1])?, as_16(&t[2])?);
                let mut y = Tensor::default();
                ops::linear_forward_batched_fp16_act(&w, Some(&b), &x, &mut y, Act::Silu)?;
                Ok(y)
            },
        );
    }
}

#[test]
fn matmul_abt_checks_dtypes_and_extents() {
    use ops::{AbtSpec, Act};
    let a = Tensor::zeros_on(Device::Cpu, 4, 4, Dtype::F32).unwrap();
    let spec = AbtSpec {
        batch: 1,
        m: 4,
        n: 4,
        k: 4,
        stride_a: 16,
        stride_b: 16,
        stride_c: 16,
    };
    let e = ops::matmul_abt(&a, &a, &mut a.clone(), spec, None, Act::None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Dtype {
                op: "matmul_abt",
                operand: "a",
                ..
            }
        ),
        "{e}"
    );
    let h = a.to_dtype(Dtype::F16).unwrap();
    let big = AbtSpec { batch: 2, ..spec };
    let e = ops::matmul_abt(&h, &h, &mut h.clone(), big, None, Act::None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "brotensor: matmul_abt: `a` holds 16 elements, the batch reaches 32"
    );
    assert_eq!(Act::from_code(4), Act::Silu);
    assert_eq!(Act::from_code(99), Act::None);
}

#[test]
fn int8_weight_only_linear() {
    // The host quantizer's contract.
    let (q, s) = ops::quantize_int8_per_row_host(&[0.5, -1.0, 0.25, 0.0, 0.0, 0.0], 2, 3).unwrap();
    assert_eq!(s, vec![1.0 / 127.0, 0.0]);
    assert_eq!(q, vec![64, -127, 32, 0, 0, 0]); // 63.5 rounds half to even: 64
    let (out, inp) = (24, 37);
    let wf: Vec<f32> = (0..out * inp)
        .map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0)
        .collect();
    let (q, scales) = ops::quantize_int8_per_row_host(&wf, out, inp).unwrap();
    parity_with(
        "linear_forward_batched_int8w_fp16",
        0x590,
        &[input(5, inp), input(out, 1)],
        HALF,
        |t| {
            let dev = t[0].device();
            let w = Tensor::from_slice_on(dev, &q, out, inp)?;
            let sc = Tensor::from_slice_on(dev, &scales, out, 1)?;
            let (x, b) = (as_16(&t[0])?, as_16(&t[1])?);
            let mut y = Tensor::default();
            ops::linear_forward_batched_int8w_fp16(&w, &sc, Some(&b), &x, &mut y)?;
            Ok(y)
        },
    );
    // Dequantized weights match the float weights to within half a quantization step.
    for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        let w = Tensor::from_slice_on(dev, &q, out, inp).unwrap();
        let sc = Tensor::from_slice_on(dev, &scales, out, 1).unwrap();
        let eye: Vec<f32> = (0..inp * inp)
            .map(|i| if i / inp == i % inp { 1.0 } else { 0.0 })
            .collect();
        let x = Tensor::from_slice_on(dev, &eye, inp, inp)
            .unwrap()
            .to_dtype(Dtype::F16)
            .unwrap();
        let mut y = Tensor::default();
        ops::linear_forward_batched_int8w_fp16(&w, &sc, None, &x, &mut y).unwrap();
        let got = brotensor_tests::read_f32(&y).unwrap(); // (in, out): row i is column i of W
        for r in 0..out {
            for c in 0..inp {
                let err = (got[c * out + r] - wf[r * inp + c]).abs();
                assert!(err <= scales[r] * 0.5 + 2e-3, "{dev} w[{r},{c}]");
            }
        }
    }
}
