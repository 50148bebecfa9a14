//! Tests of the embedding ops: every op on every device (the CPU and each GPU found) and in
//! each dtype it claims. Gathers and scatters move random bits and are compared bit for bit
//! with index arithmetic written here; the accumulating scatters are compared with float64
//! sums written here. Plus bad ids (on the host and on the device), every other error case
//! of the contracts, and empty inputs.

use brotensor::{ops, Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{
    assert_close_rows, read_f32, reference_with, round_through, tensor, tolerance, Check, Input,
    SplitMix64,
};

use crate::concat::{assert_bits, devices, download, random, upload, Elems, BYTE_DTYPES};

/// An I32 id tensor `(m, 1)` on `device`.
fn ids_on(device: Device, ids: &[i32]) -> Tensor {
    Tensor::from_slice_nd_on(device, ids, &[ids.len(), 1]).unwrap()
}

/// `m` random ids in `[0, rows)`.
fn random_ids(rng: &mut SplitMix64, m: usize, rows: usize) -> Vec<i32> {
    (0..m)
        .map(|_| (rng.next_u64() % rows as u64) as i32)
        .collect()
}

/// The rows of `table (rows, cols)` named by `ids`, spelled out.
fn gathered(table: &Elems, cols: usize, ids: &[i32]) -> Elems {
    ids.iter()
        .flat_map(|&id| table[id as usize * cols..(id as usize + 1) * cols].to_vec())
        .collect()
}

#[test]
fn gather_rows_and_embedding_lookup_forward_copy_the_named_rows() {
    let mut rng = SplitMix64::new(0xE4B0);
    // (table dims, ids): odd widths (rows share 32-bit words for 8- and 16-bit elements),
    // one column, repeated ids, an N-d table (leading dims are rows).
    let cases: [(&[usize], Vec<i32>); 4] = [
        (&[7, 5], vec![3, 0, 6, 3, 3, 1, 5, 2, 6]),
        (&[4, 1], vec![0, 3, 1, 2, 2]),
        (&[3, 8], vec![2, 1]),
        (&[2, 3, 3], random_ids(&mut rng, 41, 6)),
    ];
    for device in devices() {
        for dtype in BYTE_DTYPES {
            for (k, (dims, ids)) in cases.iter().enumerate() {
                let cols = *dims.last().unwrap();
                let numel: usize = dims.iter().product();
                let table = random(&mut rng, numel, dtype);
                let t = upload(device, &table, dims, dtype);
                let idx = ids_on(device, ids);
                let want = gathered(&table, cols, ids);
                let tag = |op: &str| format!("{op} case {k} on {device} {dtype}");
                // A stale output of another shape and dtype is resized.
                let mut y = Tensor::zeros_on(device, 3, 3, Dtype::I32).unwrap();
                ops::gather_rows(&t, &idx, &mut y).unwrap();
                assert_eq!((y.dims(), y.dtype()), (&[ids.len(), cols][..], dtype));
                assert_bits(&tag("gather_rows"), &want, &download(&y));
                let mut out = Tensor::default();
                ops::embedding_lookup_forward(&t, &idx, &mut out).unwrap();
                assert_bits(&tag("embedding_lookup_forward"), &want, &download(&out));
            }
        }
    }
}

#[test]
fn scatter_rows_overwrites_the_named_rows_only() {
    let mut rng = SplitMix64::new(0xE4B1);
    // (rows, cols, unique ids): neighbouring rows written in one call, rows that share a
    // word (one column of 8-bit elements packs four rows per word).
    let cases: [(usize, usize, &[i32]); 5] = [
        (9, 5, &[3, 2, 4, 0, 8]),
        (8, 1, &[1, 2, 3, 5, 6, 0]),
        (5, 2, &[4, 1]),
        (6, 3, &[5, 4, 3, 2, 1, 0]),
        (7, 7, &[6]),
    ];
    for device in devices() {
        for dtype in BYTE_DTYPES {
            for (k, &(rows, cols, ids)) in cases.iter().enumerate() {
                let before = random(&mut rng, rows * cols, dtype);
                let src = random(&mut rng, ids.len() * cols, dtype);
                let mut want = before.clone();
                for (m, &id) in ids.iter().enumerate() {
                    for c in 0..cols {
                        want[id as usize * cols + c] = src[m * cols + c].clone();
                    }
                }
                let mut x = upload(device, &before, &[rows, cols], dtype);
                let y = upload(device, &src, &[ids.len(), cols], dtype);
                ops::scatter_rows(&y, &ids_on(device, ids), &mut x).unwrap();
                assert_eq!(x.dims(), &[rows, cols], "scatter_rows never resizes");
                assert_bits(
                    &format!("scatter_rows case {k} on {device} {dtype}"),
                    &want,
                    &download(&x),
                );
            }
        }
    }
}

/// The float dtypes of the accumulating scatters.
const FLOATS: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];

/// `base[ids[m], :] += src[m, :]` in float64.
fn scatter_add_f64(base: &mut [f64], src: &[f64], cols: usize, ids: &[i32]) {
    for (m, &id) in ids.iter().enumerate() {
        for c in 0..cols {
            base[id as usize * cols + c] += src[m * cols + c];
        }
    }
}

#[test]
fn scatter_rows_add_sums_repeated_ids_in_fp32() {
    let mut rng = SplitMix64::new(0xE4B2);
    // (rows, cols, m): many repeats of few rows; one column; no ids at all.
    for (rows, cols, m) in [(6usize, 7usize, 50usize), (3, 1, 9), (4, 5, 0)] {
        let ids = random_ids(&mut rng, m, rows);
        let dy = rng.uniform(m * cols, -1.0, 1.0);
        for device in devices() {
            for dtype in FLOATS {
                let dy_r = round_through(dtype, &dy);
                let mut want = vec![0.0f64; rows * cols];
                let wide: Vec<f64> = dy_r.iter().map(|&v| f64::from(v)).collect();
                scatter_add_f64(&mut want, &wide, cols, &ids);
                let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
                let dyt = tensor(device, &dy, m, cols, dtype).unwrap();
                // A stale, filled output: the op overwrites (an input gradient).
                let mut dx = tensor(device, &[5.0; 6], 2, 3, dtype).unwrap();
                ops::scatter_rows_add(&dyt, &ids_on(device, &ids), rows, &mut dx).unwrap();
                assert_eq!((dx.dims(), dx.dtype()), (&[rows, cols][..], dtype));
                let tag = format!("scatter_rows_add {rows}x{cols} m={m} on {device} {dtype}");
                let got = read_f32(&dx).unwrap();
                if m == 0 {
                    assert!(got.iter().all(|&v| v == 0.0), "{tag}: not zeroed");
                    continue;
                }
                assert_close_rows(
                    &tag,
                    &round_through(dtype, &want),
                    &got,
                    cols,
                    tolerance(dtype),
                );
            }
        }
    }
}

#[test]
fn embedding_lookup_backward_accumulates_into_the_gradient() {
    let mut rng = SplitMix64::new(0xE4B3);
    let (vocab, dim, m) = (9usize, 6usize, 40usize);
    let mut ids = random_ids(&mut rng, m, vocab);
    ids[..4].copy_from_slice(&[2, 2, 2, 2]);
    let d_out = rng.uniform(m * dim, -1.0, 1.0);
    let prefill = rng.uniform(vocab * dim, -2.0, 2.0);
    for device in devices() {
        for dtype in FLOATS {
            let mut want: Vec<f64> = round_through(dtype, &prefill)
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let wide: Vec<f64> = round_through(dtype, &d_out)
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            scatter_add_f64(&mut want, &wide, dim, &ids);
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            let dyt = tensor(device, &d_out, m, dim, dtype).unwrap();
            let mut table = tensor(device, &prefill, vocab, dim, dtype).unwrap();
            ops::embedding_lookup_backward(&dyt, &ids_on(device, &ids), &mut table).unwrap();
            assert_close_rows(
                &format!("embedding_lookup_backward on {device} {dtype}"),
                &round_through(dtype, &want),
                &read_f32(&table).unwrap(),
                dim,
                tolerance(dtype),
            );
        }
    }
}

#[test]
fn scatter_rows_add_walks_more_ids_than_one_loop_may_run() {
    // 70000 ids (more than a software-Vulkan loop may iterate), each adding 1: the counts
    // are exact.
    let (rows, cols, m) = (4usize, 3usize, 70_000usize);
    let ids: Vec<i32> = (0..m).map(|i| (i % 3) as i32 * (i % 2) as i32).collect();
    let mut counts = vec![0f32; rows];
    for &id in &ids {
        counts[id as usize] += 1.0;
    }
    let want: Vec<f32> = counts.iter().flat_map(|&c| vec![c; cols]).collect();
    for device in devices() {
        let dy = Tensor::from_slice_on(device, &vec![1.0f32; m * cols], m, cols).unwrap();
        let mut dx = Tensor::default();
        ops::scatter_rows_add(&dy, &ids_on(device, &ids), rows, &mut dx).unwrap();
        assert_eq!(dx.to_vec::<f32>().unwrap(), want, "on {device}");
    }
}

/// Asserts that `r` is the bad-id error.
fn assert_bad_ids(tag: &str, r: Result<()>) {
    match r {
        Err(Error::InvalidArgument { reason, .. }) if reason.contains("outside") => {}
        other => panic!("{tag}: want a bad-id error, got {other:?}"),
    }
}

#[test]
fn bad_ids_are_errors_and_write_nothing() {
    let mut rng = SplitMix64::new(0xE4B4);
    let (rows, cols) = (5usize, 3usize);
    for device in devices() {
        for bad in [
            vec![0, 5, 1],
            vec![-1],
            vec![2, 1, i32::MIN],
            vec![i32::MAX, 0],
        ] {
            let tag = |op: &str| format!("{op} ids {bad:?} on {device}");
            let idx = ids_on(device, &bad);
            let table = random(&mut rng, rows * cols, Dtype::F32);
            let t = upload(device, &table, &[rows, cols], Dtype::F32);
            let mut y = Tensor::default();
            assert_bad_ids(&tag("gather_rows"), ops::gather_rows(&t, &idx, &mut y));
            assert_bad_ids(
                &tag("embedding_lookup_forward"),
                ops::embedding_lookup_forward(&t, &idx, &mut y),
            );
            let src = random(&mut rng, bad.len() * cols, Dtype::F32);
            let s = upload(device, &src, &[bad.len(), cols], Dtype::F32);
            let mut x = upload(device, &table, &[rows, cols], Dtype::F32);
            assert_bad_ids(&tag("scatter_rows"), ops::scatter_rows(&s, &idx, &mut x));
            assert_bits(&tag("scatter_rows kept x"), &table, &download(&x));
            assert_bad_ids(
                &tag("embedding_lookup_backward"),
                ops::embedding_lookup_backward(&s, &idx, &mut x),
            );
            assert_bits(&tag("backward kept d_table"), &table, &download(&x));
            let mut dx = Tensor::default();
            assert_bad_ids(
                &tag("scatter_rows_add"),
                ops::scatter_rows_add(&s, &idx, rows, &mut dx),
            );
        }
    }
}

#[test]
fn bad_ids_are_found_among_many() {
    // More than 1 Mi ids: the device check sums several partial counts.
    let n = (1usize << 20) * 2 + 5;
    for device in devices() {
        let t = Tensor::from_slice_on(device, &[1.0f32, 2.0, 3.0], 3, 1).unwrap();
        let mut ids = vec![2i32; n];
        let mut y = Tensor::default();
        ops::gather_rows(&t, &ids_on(device, &ids), &mut y).unwrap();
        assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 3.0));
        ids[n - 1] = 3;
        ids[7] = -4;
        match ops::gather_rows(&t, &ids_on(device, &ids), &mut y) {
            Err(Error::InvalidArgument { reason, .. }) => {
                assert!(reason.starts_with("2 of the"), "on {device}: {reason}")
            }
            other => panic!("on {device}: want a bad-id error, got {other:?}"),
        }
    }
}

fn expect<T: std::fmt::Debug>(tag: &str, r: Result<T>, ok: impl Fn(&Error) -> bool) {
    match r {
        Err(e) if ok(&e) => {}
        other => panic!("{tag}: wrong outcome {other:?}"),
    }
}

#[test]
fn embedding_ops_refuse_bad_shapes_and_dtypes() {
    let is_dtype = |e: &Error| matches!(e, Error::Dtype { .. });
    let is_shape = |e: &Error| matches!(e, Error::Shape { .. });
    for device in devices() {
        let tag = |what: &str| format!("{what} on {device}");
        let t = Tensor::zeros_on(device, 4, 3, Dtype::F32).unwrap();
        let idx = ids_on(device, &[1, 2]);
        let f_ids = Tensor::zeros_on(device, 2, 1, Dtype::F32).unwrap();
        let mut y = Tensor::default();
        expect(
            &tag("float ids"),
            ops::gather_rows(&t, &f_ids, &mut y),
            is_dtype,
        );
        expect(
            &tag("float ids (lookup)"),
            ops::embedding_lookup_forward(&t, &f_ids, &mut y),
            is_dtype,
        );
        // Widths and row counts.
        let narrow = Tensor::zeros_on(device, 2, 2, Dtype::F32).unwrap();
        let three = Tensor::zeros_on(device, 3, 3, Dtype::F32).unwrap();
        let mut x = Tensor::zeros_on(device, 4, 3, Dtype::F32).unwrap();
        expect(
            &tag("scatter_rows width"),
            ops::scatter_rows(&narrow, &idx, &mut x),
            is_shape,
        );
        expect(
            &tag("scatter_rows rows"),
            ops::scatter_rows(&three, &idx, &mut x),
            is_shape,
        );
        expect(
            &tag("backward width"),
            ops::embedding_lookup_backward(&narrow, &idx, &mut x),
            is_shape,
        );
        expect(
            &tag("backward rows"),
            ops::embedding_lookup_backward(&three, &idx, &mut x),
            is_shape,
        );
        let mut dx = Tensor::default();
        expect(
            &tag("scatter_rows_add rows"),
            ops::scatter_rows_add(&three, &idx, 4, &mut dx),
            is_shape,
        );
        // Dtypes: integer gradients, mixed dtypes.
        let ints = Tensor::zeros_on(device, 2, 3, Dtype::I32).unwrap();
        let mut int_table = Tensor::zeros_on(device, 4, 3, Dtype::I32).unwrap();
        expect(
            &tag("integer gradient"),
            ops::embedding_lookup_backward(&ints, &idx, &mut int_table),
            is_dtype,
        );
        expect(
            &tag("integer scatter_rows_add"),
            ops::scatter_rows_add(&ints, &idx, 4, &mut dx),
            is_dtype,
        );
        expect(
            &tag("scatter_rows dtype mix"),
            ops::scatter_rows(&ints, &idx, &mut x),
            is_dtype,
        );
        let halves = Tensor::zeros_on(device, 2, 3, Dtype::F16).unwrap();
        expect(
            &tag("backward dtype mix"),
            ops::embedding_lookup_backward(&halves, &idx, &mut x),
            |e| matches!(e, Error::Dtype { .. } | Error::UnsupportedDtype { .. }),
        );
        // Block dtypes have no element size to gather by.
        if let Ok(q) = Tensor::zeros_on(device, 4, 32, Dtype::Q8_0) {
            expect(
                &tag("block table"),
                ops::gather_rows(&q, &idx, &mut y),
                is_dtype,
            );
        }
    }
}

#[test]
fn embedding_ops_take_empty_inputs() {
    for device in devices() {
        let t = Tensor::zeros_on(device, 4, 3, Dtype::F16).unwrap();
        let none = ids_on(device, &[]);
        let mut y = Tensor::default();
        ops::gather_rows(&t, &none, &mut y).unwrap();
        assert_eq!((y.dims(), y.dtype()), (&[0usize, 3][..], Dtype::F16));
        ops::embedding_lookup_forward(&t, &none, &mut y).unwrap();
        assert_eq!(y.dims(), &[0, 3]);
        // An empty table: no ids are fine, any id is out of range.
        let empty = Tensor::zeros_on(device, 0, 3, Dtype::F32).unwrap();
        ops::gather_rows(&empty, &none, &mut y).unwrap();
        assert_bad_ids(
            &format!("id into an empty table on {device}"),
            ops::gather_rows(&empty, &ids_on(device, &[0]), &mut y),
        );
        // Zero-width rows still check their ids.
        let thin = Tensor::zeros_on(device, 2, 0, Dtype::F32).unwrap();
        ops::gather_rows(&thin, &ids_on(device, &[1, 0]), &mut y).unwrap();
        assert_eq!(y.dims(), &[2, 0]);
        let mut x = Tensor::zeros_on(device, 4, 3, Dtype::F32).unwrap();
        let src = Tensor::zeros_on(device, 0, 3, Dtype::F32).unwrap();
        ops::scatter_rows(&src, &none, &mut x).unwrap();
        ops::embedding_lookup_backward(&src, &none, &mut x).unwrap();
    }
}

#[test]
fn gathers_and_scatters_read_views() {
    // A transposed table and a transposed source: the ops read their elements as laid out
    // by the view, not the base storage's order.
    let mut rng = SplitMix64::new(0xE4B5);
    for device in devices() {
        let dtype = Dtype::F16;
        let base = random(&mut rng, 15, dtype);
        let t = upload(device, &base, &[3, 5], dtype);
        let view = t.transpose(0, 1).unwrap(); // (5, 3): view[r][c] = base[c][r]
        let transposed: Elems = (0..15).map(|i| base[(i % 3) * 5 + i / 3].clone()).collect();
        let ids = [4, 0, 2, 2];
        let mut y = Tensor::default();
        ops::gather_rows(&view, &ids_on(device, &ids), &mut y).unwrap();
        assert_bits(
            &format!("gather_rows of a view on {device}"),
            &gathered(&transposed, 3, &ids),
            &download(&y),
        );
        let before = random(&mut rng, 15, dtype);
        let mut x = upload(device, &before, &[5, 3], dtype);
        // Rows 1 and 2 of the transposed view, scattered to rows 0 and 4.
        let src = view.narrow(0, 1, 2).unwrap();
        ops::scatter_rows(&src, &ids_on(device, &[0, 4]), &mut x).unwrap();
        let mut want = before.clone();
        for (m, id) in [(1usize, 0usize), (2, 4)] {
            for c in 0..3 {
                want[id * 3 + c] = transposed[m * 3 + c].clone();
            }
        }
        assert_bits(
            &format!("scatter_rows from a view on {device}"),
            &want,
            &download(&x),
        );
    }
}

/// Equality: the gathers and scatters copy bits.
fn exact(_: Dtype) -> (f32, f32) {
    (0.0, 0.0)
}

/// The float dtypes compared exactly.
pub(crate) const EXACT: Check = Check {
    dtypes: &FLOATS,
    same_dtype: true,
    tol: Some(exact),
};

#[test]
fn embedding_ops_against_f64_on_every_device() {
    // Through the parity harness, so the ledger proves which devices ran each op.
    let (rows, cols) = (7usize, 5usize);
    let ids = [3i32, 0, 6, 3, 1];
    let picked = move |v: &[Vec<f64>]| -> Vec<f64> {
        ids.iter()
            .flat_map(|&i| v[0][i as usize * cols..(i as usize + 1) * cols].to_vec())
            .collect()
    };
    let table = [Input::new(rows, cols, -2.0, 2.0)];
    reference_with(
        "gather_rows",
        0xE4C0,
        &table,
        EXACT,
        |t| {
            let mut y = Tensor::default();
            ops::gather_rows(&t[0], &ids_on(t[0].device(), &ids), &mut y)?;
            Ok(y)
        },
        picked,
    );
    reference_with(
        "embedding_lookup_forward",
        0xE4C1,
        &table,
        EXACT,
        |t| {
            let mut y = Tensor::default();
            ops::embedding_lookup_forward(&t[0], &ids_on(t[0].device(), &ids), &mut y)?;
            Ok(y)
        },
        picked,
    );
    let targets = [4i32, 1, 2];
    reference_with(
        "scatter_rows",
        0xE4C2,
        &[
            Input::new(rows, cols, -2.0, 2.0),
            Input::new(3, cols, -2.0, 2.0),
        ],
        EXACT,
        |t| {
            let mut x = t[0].try_clone()?;
            ops::scatter_rows(&t[1], &ids_on(t[0].device(), &targets), &mut x)?;
            Ok(x)
        },
        |v| {
            let mut x = v[0].clone();
            for (m, &id) in targets.iter().enumerate() {
                let id = id as usize;
                x[id * cols..(id + 1) * cols].copy_from_slice(&v[1][m * cols..(m + 1) * cols]);
            }
            x
        },
    );
    let repeated = [2i32, 5, 2, 2, 0, 5, 6, 2];
    let m = repeated.len();
    reference_with(
        "scatter_rows_add",
        0xE4C3,
        &[Input::new(m, cols, -1.0, 1.0)],
        Check::default(),
        |t| {
            let mut dx = Tensor::default();
            ops::scatter_rows_add(&t[0], &ids_on(t[0].device(), &repeated), rows, &mut dx)?;
            Ok(dx)
        },
        |v| {
            let mut dx = vec![0.0; rows * cols];
            scatter_add_f64(&mut dx, &v[0], cols, &repeated);
            dx
        },
    );
    reference_with(
        "embedding_lookup_backward",
        0xE4C4,
        &[
            Input::new(m, cols, -1.0, 1.0),
            Input::new(rows, cols, -1.0, 1.0),
        ],
        Check::default(),
        |t| {
            let mut table = t[1].try_clone()?;
            ops::embedding_lookup_backward(&t[0], &ids_on(t[0].device(), &repeated), &mut table)?;
            Ok(table)
        },
        |v| {
            let mut table = v[1].clone();
            scatter_add_f64(&mut table, &v[0], cols, &repeated);
            table
        },
    );
}
