//! Matrix products and linear layers against float64 formulas written here from each op's
//! definition (not the CPU crate's code), on every device and in every dtype the op takes.
//! Parameter gradients start from a known non-zero tensor, so accumulation is checked;
//! overwritten outputs start from unrelated contents, so overwriting is checked.

use brotensor::ops::{self, AbtSpec, Act, Conv2dSpec};
use brotensor::{Dtype, Result, Tensor};
use brotensor_tests::reference::{as_row, epilogue, erf};
use brotensor_tests::{reference_with, Check, Input, SplitMix64};

const ALL: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

const HALF: Check = Check {
    dtypes: &[Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

fn input(r: usize, c: usize) -> Input {
    Input::new(r, c, -1.0, 1.0)
}

/// `a (m, k) . b (k, n)`, row-major.
fn mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    assert_eq!((a.len(), b.len()), (m * k, k * n));
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

/// The transpose of a row-major `r x c` matrix.
fn tr(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c * r).map(|i| a[(i % r) * c + i / r]).collect()
}

fn plus(a: &[f64], b: &[f64]) -> Vec<f64> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// `y[i, j] + bias[j]` for a row-major `y` with `bias.len()` columns.
fn plus_row(y: &[f64], bias: &[f64]) -> Vec<f64> {
    y.iter()
        .enumerate()
        .map(|(i, v)| v + bias[i % bias.len()])
        .collect()
}

const ACTS: [Act; 6] = [
    Act::None,
    Act::Relu,
    Act::Gelu,
    Act::GeluExact,
    Act::Silu,
    Act::QuickGelu,
];

#[test]
fn erf_matches_known_values() {
    // Abramowitz & Stegun table 7.1 values.
    for (x, want) in [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_047),
        (1.0, 0.842_700_792_949_715),
        (2.0, 0.995_322_265_018_953),
        (3.5, 0.999_999_256_901_628),
        (-1.0, -0.842_700_792_949_715),
    ] {
        assert!((erf(x) - want).abs() < 1e-13, "erf({x}) = {}", erf(x));
    }
}

#[test]
fn matmul_vs_f64() {
    for (i, (m, k, n)) in [(16, 32, 16), (7, 45, 13), (3, 1, 5), (1, 70, 1)]
        .into_iter()
        .enumerate()
    {
        reference_with(
            &format!("matmul {m}x{k}x{n}"),
            0x7100 + i as u64,
            &[input(m, k), input(k, n)],
            ALL,
            |t| {
                let mut c = Tensor::default();
                ops::matmul(&t[0], &t[1], &mut c)?;
                assert_eq!(c.shape(), (m, n));
                Ok(c)
            },
            |x| mm(&x[0], &x[1], m, k, n),
        );
    }
    // A committed output of another shape holding other values is resized and overwritten.
    let (m, k, n) = (9, 20, 11);
    reference_with(
        "matmul into a used output",
        0x7110,
        &[input(m, k), input(k, n)],
        ALL,
        |t| {
            let mut c = t[0].try_clone()?;
            ops::matmul(&t[0], &t[1], &mut c)?;
            assert_eq!(c.shape(), (m, n));
            Ok(c)
        },
        |x| mm(&x[0], &x[1], m, k, n),
    );
}

#[test]
fn matmul_backward_vs_f64() {
    let (m, k, n) = (12, 20, 9);
    let ins = [
        input(m, k),
        input(k, n),
        input(m, n),
        Input::new(m, k, 0.5, 1.5),
        Input::new(k, n, 0.5, 1.5),
    ];
    reference_with(
        "matmul_backward da",
        0x7120,
        &ins,
        ALL,
        |t| {
            let (mut da, mut db) = (t[3].try_clone()?, t[4].try_clone()?);
            ops::matmul_backward(&t[0], &t[1], &t[2], &mut da, &mut db)?;
            Ok(da)
        },
        // dA += dC . B^T
        |x| plus(&x[3], &mm(&x[2], &tr(&x[1], k, n), m, n, k)),
    );
    reference_with(
        "matmul_backward db",
        0x7121,
        &ins,
        ALL,
        |t| {
            let (mut da, mut db) = (t[3].try_clone()?, t[4].try_clone()?);
            ops::matmul_backward(&t[0], &t[1], &t[2], &mut da, &mut db)?;
            Ok(db)
        },
        // dB += A^T . dC
        |x| plus(&x[4], &mm(&tr(&x[0], m, k), &x[2], k, m, n)),
    );
}

#[test]
fn linear_single_vs_f64() {
    let (out, inp) = (23, 40);
    for (case, seed, reuse) in [
        ("linear_forward", 0x7130, false),
        ("linear_forward into a used output", 0x7131, true),
    ] {
        reference_with(
            case,
            seed,
            &[input(out, inp), input(out, 1), input(inp, 1)],
            ALL,
            |t| {
                let mut y = if reuse {
                    t[0].try_clone()?
                } else {
                    Tensor::default()
                };
                ops::linear_forward(&t[0], &t[1], &t[2], &mut y)?;
                assert_eq!(y.shape(), (out, 1));
                as_row(y)
            },
            |x| plus(&mm(&x[0], &x[2], out, inp, 1), &x[1]),
        );
    }
    let ins = [
        input(out, inp),
        input(inp, 1),
        input(out, 1),
        input(inp, 1),
        Input::new(out, inp, 0.5, 1.5),
        Input::new(out, 1, 0.5, 1.5),
    ];
    // dx starts as unrelated values (it is overwritten); dw, db start non-zero (they
    // accumulate).
    let run = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut dx, mut dw, mut db) =
                (t[3].try_clone()?, t[4].try_clone()?, t[5].try_clone()?);
            ops::linear_backward(&t[0], &t[1], &t[2], &mut dx, &mut dw, &mut db)?;
            match which {
                "dx" => as_row(dx),
                "dw" => Ok(dw),
                _ => as_row(db),
            }
        }
    };
    reference_with("linear_backward dx", 0x7132, &ins, ALL, run("dx"), |x| {
        mm(&tr(&x[0], out, inp), &x[2], inp, out, 1)
    });
    reference_with("linear_backward dw", 0x7133, &ins, ALL, run("dw"), |x| {
        plus(&x[4], &mm(&x[2], &x[1], out, 1, inp))
    });
    reference_with("linear_backward db", 0x7134, &ins, ALL, run("db"), |x| {
        plus(&x[5], &x[2])
    });
}

#[test]
fn linear_batched_vs_f64() {
    let (out, inp) = (19, 36);
    // 40 rows: past the CPU's dot-product path, on its packed-weight product.
    for (i, (batch, bias, reuse)) in [
        (1, true, false),
        (6, true, true),
        (5, false, false),
        (40, true, false),
    ]
    .into_iter()
    .enumerate()
    {
        reference_with(
            &format!("linear_forward_batched B={batch} bias={bias} reused={reuse}"),
            0x7140 + i as u64,
            &[input(out, inp), input(out, 1), input(batch, inp)],
            ALL,
            |t| {
                let mut y = if reuse {
                    t[0].try_clone()?
                } else {
                    Tensor::default()
                };
                ops::linear_forward_batched(&t[0], bias.then_some(&t[1]), &t[2], &mut y)?;
                assert_eq!(y.shape(), (batch, out));
                Ok(y)
            },
            |x| {
                let y = mm(&x[2], &tr(&x[0], out, inp), batch, inp, out);
                if bias {
                    plus_row(&y, &x[1])
                } else {
                    y
                }
            },
        );
    }
    // W and bias in BF16 with F32 or F16 activations: converted to X's dtype.
    let bf16 = |v: f64| half::bf16::from_f64(v).to_f64();
    reference_with(
        "linear_forward_batched BF16 weights",
        0x7148,
        &[input(out, inp), input(out, 1), input(4, inp)],
        Check {
            dtypes: &[Dtype::F32, Dtype::F16],
            ..ALL
        },
        |t| {
            let (w, b) = (t[0].to_dtype(Dtype::BF16)?, t[1].to_dtype(Dtype::BF16)?);
            let mut y = Tensor::default();
            ops::linear_forward_batched(&w, Some(&b), &t[2], &mut y)?;
            assert_eq!(y.dtype(), t[2].dtype());
            Ok(y)
        },
        |x| {
            let w: Vec<f64> = x[0].iter().map(|&v| bf16(v)).collect();
            let b: Vec<f64> = x[1].iter().map(|&v| bf16(v)).collect();
            plus_row(&mm(&x[2], &tr(&w, out, inp), 4, inp, out), &b)
        },
    );
    let batch = 7;
    let ins = [
        input(out, inp),
        input(batch, inp),
        input(batch, out),
        input(batch, inp),
        Input::new(out, inp, 0.5, 1.5),
        Input::new(out, 1, 0.5, 1.5),
    ];
    let run = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut dx, mut dw, mut db) =
                (t[3].try_clone()?, t[4].try_clone()?, t[5].try_clone()?);
            ops::linear_backward_batched(&t[0], &t[1], &t[2], &mut dx, &mut dw, &mut db)?;
            match which {
                "dx" => Ok(dx),
                "dw" => Ok(dw),
                _ => as_row(db),
            }
        }
    };
    reference_with(
        "linear_backward_batched dx",
        0x7150,
        &ins,
        ALL,
        run("dx"),
        |x| mm(&x[2], &x[0], batch, out, inp),
    );
    reference_with(
        "linear_backward_batched dw",
        0x7151,
        &ins,
        ALL,
        run("dw"),
        |x| plus(&x[4], &mm(&tr(&x[2], batch, out), &x[1], out, batch, inp)),
    );
    reference_with(
        "linear_backward_batched db",
        0x7152,
        &ins,
        ALL,
        run("db"),
        |x| {
            let sums: Vec<f64> = (0..out)
                .map(|o| (0..batch).map(|b| x[2][b * out + o]).sum())
                .collect();
            plus(&x[5], &sums)
        },
    );
}

#[test]
fn act_codes_round_trip() {
    for (code, act) in ACTS.into_iter().enumerate() {
        assert_eq!(act.code(), code as u32);
        assert_eq!(Act::from_code(code as u32), act);
    }
    assert_eq!(Act::from_code(6), Act::None);
}

#[test]
fn matmul_abt_vs_f64() {
    // Two products with gapped A and C (one row between batches, one after), B per batch,
    // a bias and every activation. C's gap and tail rows must keep their prior values.
    let (batch, m, n, k) = (2usize, 5usize, 12usize, 24usize);
    let spec = AbtSpec {
        batch,
        m,
        n,
        k,
        stride_a: (m + 1) * k,
        stride_b: n * k,
        stride_c: (m + 1) * n,
    };
    let ins = [
        Input::new((m + 1) * batch, k, -0.5, 0.5),
        Input::new(n * batch, k, -0.5, 0.5),
        Input::new(n, 1, -0.5, 0.5),
        Input::new((m + 1) * batch, n, 2.0, 3.0),
    ];
    let reference = move |x: &[Vec<f64>], act: Act, bias: bool| {
        let mut c = x[3].clone();
        for z in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let a = &x[0][z * spec.stride_a + i * k..][..k];
                    let b = &x[1][z * spec.stride_b + j * k..][..k];
                    let dot: f64 = a.iter().zip(b).map(|(p, q)| p * q).sum();
                    let pre = dot + if bias { x[2][j] } else { 0.0 };
                    c[z * spec.stride_c + i * n + j] = epilogue(act, pre);
                }
            }
        }
        c
    };
    for (i, act) in ACTS.into_iter().enumerate() {
        reference_with(
            &format!("matmul_abt {act:?} gapped"),
            0x7160 + i as u64,
            &ins,
            HALF,
            |t| {
                let mut c = t[3].try_clone()?;
                ops::matmul_abt(&t[0], &t[1], &mut c, spec, Some(&t[2]), act)?;
                Ok(c)
            },
            |x| reference(x, act, true),
        );
    }
    // No inner dimension: every product is act(bias) (and C's gaps keep their values).
    let empty = AbtSpec {
        k: 0,
        stride_a: 0,
        stride_b: 0,
        ..spec
    };
    reference_with(
        "matmul_abt k=0",
        0x716f,
        &[input(1, 0), input(1, 0), ins[2], ins[3]],
        HALF,
        |t| {
            let mut c = t[3].try_clone()?;
            ops::matmul_abt(&t[0], &t[1], &mut c, empty, Some(&t[2]), Act::Silu)?;
            Ok(c)
        },
        |x| {
            let mut c = x[3].clone();
            for z in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        c[z * spec.stride_c + i * n + j] = epilogue(Act::Silu, x[2][j]);
                    }
                }
            }
            c
        },
    );
    // B shared by every product (stride 0), dense C, no bias.
    let shared = AbtSpec {
        batch: 3,
        m: 4,
        n: 10,
        k: 16,
        stride_a: 4 * 16,
        stride_b: 0,
        stride_c: 4 * 10,
    };
    reference_with(
        "matmul_abt shared B",
        0x7170,
        &[input(12, 16), input(10, 16)],
        HALF,
        |t| {
            let mut c = Tensor::zeros_on(t[0].device(), 12, 10, t[0].dtype())?;
            ops::matmul_abt(&t[0], &t[1], &mut c, shared, None, Act::None)?;
            Ok(c)
        },
        |x| {
            (0..3)
                .flat_map(|z| mm(&x[0][z * 64..(z + 1) * 64], &tr(&x[1], 10, 16), 4, 16, 10))
                .collect()
        },
    );
}

#[test]
fn linear_forward_batched_fp16_vs_f64() {
    let (out, inp) = (21, 32);
    let reference = move |x: &[Vec<f64>], batch: usize, act: Act, bias: bool| {
        let y = mm(&x[2], &tr(&x[0], out, inp), batch, inp, out);
        let y = if bias { plus_row(&y, &x[1]) } else { y };
        y.into_iter().map(|v| epilogue(act, v)).collect::<Vec<_>>()
    };
    let ins = |batch| {
        [
            Input::new(out, inp, -0.5, 0.5),
            Input::new(out, 1, -0.5, 0.5),
            Input::new(batch, inp, -0.5, 0.5),
        ]
    };
    for (i, act) in ACTS.into_iter().enumerate() {
        reference_with(
            &format!("linear_forward_batched_fp16_act {act:?}"),
            0x7180 + i as u64,
            &ins(3),
            HALF,
            |t| {
                let mut y = Tensor::default();
                ops::linear_forward_batched_fp16_act(&t[0], Some(&t[1]), &t[2], &mut y, act)?;
                assert_eq!(y.shape(), (3, out));
                Ok(y)
            },
            |x| reference(x, 3, act, true),
        );
    }
    for (i, (batch, bias, reuse)) in [(1, false, false), (9, true, true)].into_iter().enumerate() {
        reference_with(
            &format!("linear_forward_batched_fp16 B={batch} bias={bias} reused={reuse}"),
            0x7190 + i as u64,
            &ins(batch),
            HALF,
            |t| {
                let mut y = if reuse {
                    t[0].try_clone()?
                } else {
                    Tensor::default()
                };
                ops::linear_forward_batched_fp16(&t[0], bias.then_some(&t[1]), &t[2], &mut y)?;
                assert_eq!(y.shape(), (batch, out));
                Ok(y)
            },
            |x| reference(x, batch, Act::None, bias),
        );
    }
}

/// A random INT8 weight `(out, in)` with per-row F32 scales, made here (not by the library's
/// quantizer): values in -127..=127 and scales in [0.002, 0.01).
fn int8_weight(out: usize, inp: usize) -> (Vec<i8>, Vec<f32>) {
    let mut rng = SplitMix64::new(0x1d8);
    let q = (0..out * inp)
        .map(|_| (rng.next_u64() % 255) as i32 - 127)
        .map(|v| v as i8)
        .collect();
    let scales = rng.uniform(out, 0.002, 0.01);
    (q, scales)
}

#[test]
fn int8_weight_linear_vs_f64() {
    let (out, inp) = (17, 40);
    let (q, scales) = int8_weight(out, inp);
    for (i, (batch, bias)) in [(4, true), (1, false)].into_iter().enumerate() {
        reference_with(
            &format!("linear_forward_batched_int8w_fp16 B={batch} bias={bias}"),
            0x71a0 + i as u64,
            &[input(batch, inp), input(out, 1)],
            HALF,
            |t| {
                let dev = t[0].device();
                let w = Tensor::from_slice_on(dev, &q, out, inp)?;
                let sc = Tensor::from_slice_on(dev, &scales, out, 1)?;
                let mut y = Tensor::default();
                ops::linear_forward_batched_int8w_fp16(
                    &w,
                    &sc,
                    bias.then_some(&t[1]),
                    &t[0],
                    &mut y,
                )?;
                assert_eq!(y.shape(), (batch, out));
                Ok(y)
            },
            |x| {
                let w: Vec<f64> = (0..out * inp)
                    .map(|j| f64::from(q[j]) * f64::from(scales[j / inp]))
                    .collect();
                let y = mm(&x[0], &tr(&w, out, inp), batch, inp, out);
                if bias {
                    plus_row(&y, &x[1])
                } else {
                    y
                }
            },
        );
    }
}

#[test]
fn quantize_int8_per_row_host_vs_f64() {
    let (rows, cols) = (9, 50);
    let mut rng = SplitMix64::new(0x71b0);
    let mut w = rng.uniform(rows * cols, -3.0, 3.0);
    // An all-zero row has scale 0 and codes 0.
    w[2 * cols..3 * cols].fill(0.0);
    let (q, scales) = ops::quantize_int8_per_row_host(&w, rows, cols).unwrap();
    assert_eq!((q.len(), scales.len()), (rows * cols, rows));
    for r in 0..rows {
        let row = &w[r * cols..(r + 1) * cols];
        let max = row.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
        let scale = max / 127.0;
        assert!(
            (f64::from(scales[r]) - scale).abs() <= 1e-7 * scale,
            "row {r}: scale {} vs {scale}",
            scales[r]
        );
        for (c, &v) in row.iter().enumerate() {
            let want = if scale > 0.0 {
                let u = f64::from(v) / scale;
                // Within float rounding of a tie the f32 quotient may fall either side.
                if ((u - u.trunc()).abs() - 0.5).abs() < 1e-4 {
                    continue;
                }
                u.round_ties_even().clamp(-127.0, 127.0)
            } else {
                0.0
            };
            assert_eq!(f64::from(q[r * cols + c]), want, "row {r} col {c}: {v}");
        }
    }
    // Exact ties round to even: 0.5 / (1 / 127) = 63.5 -> 64; 2.5 / (127 / 127) -> 2.
    let (q, _) = ops::quantize_int8_per_row_host(&[0.5, -1.0, 127.0, 2.5], 2, 2).unwrap();
    assert_eq!(q, vec![64, -127, 127, 2]);
    assert!(ops::quantize_int8_per_row_host(&[1.0; 5], 2, 3).is_err());
}

/// The CPU keeps a weight packed once for the products that read it (linear layers on more
/// than 16 rows, convolutions): after the weight changes in place, or is reshaped, products
/// must follow the new elements, checked against float64 products of what the weight holds.
#[test]
fn packed_weights_follow_changes_to_the_weight() -> Result<()> {
    let (out, inp, rows) = (40, 48, 33);
    let mut rng = SplitMix64::new(0x7190);
    let mut draw = |n: usize| rng.uniform(n, -1.0, 1.0);
    let (w0, x0) = (draw(out * inp), draw(rows * inp));
    let wide = |v: &[f32]| -> Vec<f64> { v.iter().map(|&a| a as f64).collect() };
    let check = |got: &Tensor, want: &[f64], what: &str| -> Result<()> {
        let got = got.to_vec::<f32>()?;
        let scale = want.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g as f64 - w).abs() <= 1e-5 * scale,
                "{what}: [{i}] {g} vs {w}"
            );
        }
        Ok(())
    };
    let mut w = Tensor::from_slice(&w0, out, inp)?;
    let x = Tensor::from_slice(&x0, rows, inp)?;
    let mut y = Tensor::default();
    let product =
        |w: &[f32], o: usize, i: usize| mm(&wide(&x0[..rows * i]), &tr(&wide(w), o, i), rows, i, o);
    ops::linear_forward_batched(&w, None, &x, &mut y)?;
    check(&y, &product(&w0, out, inp), "first product")?;
    ops::scale_inplace(&mut w, -2.0)?;
    let doubled: Vec<f32> = w0.iter().map(|v| -2.0 * v).collect();
    ops::linear_forward_batched(&w, None, &x, &mut y)?;
    check(&y, &product(&doubled, out, inp), "after scale_inplace")?;
    // The same elements as a (48, 40) weight: 40 inputs per row.
    w.reshape_(&[inp, out])?;
    let x40 = Tensor::from_slice(&x0[..rows * out], rows, out)?;
    ops::linear_forward_batched(&w, None, &x40, &mut y)?;
    check(&y, &product(&doubled, inp, out), "after reshape_")?;

    // A convolution weight (3x3, 8 -> 16 channels) changed in place.
    let spec = Conv2dSpec {
        padding: [1, 1],
        ..Conv2dSpec::new([3, 3])
    };
    let (c_in, c_out, h) = (8, 16, 6);
    let cw0 = draw(c_out * c_in * 9);
    let cx0 = draw(c_in * h * h);
    let mut cw = Tensor::from_slice_nd(&cw0, &[c_out, c_in, 3, 3])?;
    let cx = Tensor::from_slice_nd(&cx0, &[1, c_in, h, h])?;
    let conv = |w: &[f32]| -> Vec<f64> {
        let mut y = vec![0f64; c_out * h * h];
        for o in 0..c_out {
            for (oy, ox) in (0..h).flat_map(|a| (0..h).map(move |b| (a, b))) {
                let mut s = 0f64;
                for (c, ky, kx) in (0..c_in).flat_map(|c| (0..9).map(move |t| (c, t / 3, t % 3))) {
                    let (iy, ix) = ((oy + ky) as isize - 1, (ox + kx) as isize - 1);
                    if (0..h as isize).contains(&iy) && (0..h as isize).contains(&ix) {
                        let xv = cx0[(c * h + iy as usize) * h + ix as usize] as f64;
                        s += xv * w[((o * c_in + c) * 3 + ky) * 3 + kx] as f64;
                    }
                }
                y[(o * h + oy) * h + ox] = s;
            }
        }
        y
    };
    let mut cy = Tensor::default();
    ops::conv2d_forward(&cx, &cw, None, (1, c_in, h, h), c_out, &spec, &mut cy)?;
    check(&cy, &conv(&cw0), "first convolution")?;
    ops::scale_inplace(&mut cw, 0.5)?;
    let halved: Vec<f32> = cw0.iter().map(|v| 0.5 * v).collect();
    ops::conv2d_forward(&cx, &cw, None, (1, c_in, h, h), c_out, &spec, &mut cy)?;
    check(&cy, &conv(&halved), "convolution after scale_inplace")?;
    Ok(())
}
