//! Reductions against float64 references written here from each op's definition (not the CPU
//! crate's code), on every device and dtype the op takes.

use brotensor::{ops, Dtype, Result, Tensor};
use brotensor_tests::{reference_with, Check, Input};

type Reference = Box<dyn Fn(&[Vec<f64>]) -> Vec<f64>>;

/// Equality: indices and counts.
fn exact(_: Dtype) -> (f32, f32) {
    (0.0, 0.0)
}

/// A committed destination of another shape (full of 7s when it is a float): an op must
/// resize and overwrite it.
fn stale(like: &Tensor, dtype: Dtype) -> Result<Tensor> {
    let mut t = Tensor::zeros_on(like.device(), like.rows() + 3, like.cols() + 2, dtype)?;
    if dtype.is_float() {
        ops::fill(&mut t, 7.0)?;
    }
    Ok(t)
}

/// The rows of the first input, `cols` wide.
fn rows(v: &[Vec<f64>], cols: usize) -> impl Iterator<Item = &[f64]> {
    v[0].chunks(cols)
}

fn row_sums(cols: usize) -> Reference {
    Box::new(move |v| rows(v, cols).map(|r| r.iter().sum()).collect())
}

fn col_sums(cols: usize) -> Reference {
    Box::new(move |v| {
        let mut s = vec![0.0; cols];
        for r in rows(v, cols) {
            for (s, x) in s.iter_mut().zip(r) {
                *s += x;
            }
        }
        s
    })
}

#[test]
fn sums() {
    // Values in [-1, 3): mixed signs, but the sums are far from 0 (well conditioned), so the
    // default tolerance relative to each output row applies. Shapes: a row or a column per
    // cube, columns not a multiple of 4, and a tall input whose rows are split across units.
    for (i, (r, c)) in [(20, 257), (3, 1000), (300, 7)].into_iter().enumerate() {
        reference_with(
            &format!("sum_rows {r}x{c}"),
            0x7000 + i as u64,
            &[Input::new(r, c, -1.0, 3.0)],
            Check::default(),
            |t| {
                let mut y = stale(&t[0], t[0].dtype())?;
                ops::sum_rows(&t[0], &mut y)?;
                Ok(y)
            },
            row_sums(c),
        );
    }
    for (i, (r, c)) in [(257, 20), (1, 500), (2000, 3), (33, 130)]
        .into_iter()
        .enumerate()
    {
        reference_with(
            &format!("sum_cols {r}x{c}"),
            0x7010 + i as u64,
            &[Input::new(r, c, -1.0, 3.0)],
            Check::default(),
            |t| {
                let mut y = stale(&t[0], t[0].dtype())?;
                ops::sum_cols(&t[0], &mut y)?;
                Ok(y)
            },
            col_sums(c),
        );
    }
}

/// The first column holding each row's maximum.
fn argmax(cols: usize) -> Reference {
    Box::new(move |v| {
        rows(v, cols)
            .map(|r| {
                let mut best = 0;
                for (j, &x) in r.iter().enumerate() {
                    if x > r[best] {
                        best = j;
                    }
                }
                best as f64
            })
            .collect()
    })
}

#[test]
fn argmax_rows() {
    let index = Check {
        same_dtype: false,
        tol: Some(exact),
        ..Check::default()
    };
    // In 16 bits [-4, 4) holds few values (BF16: 8 per unit near 4), so rows of 150 often
    // hold their maximum twice: the first one must win.
    for (i, (r, c)) in [(40, 150), (5, 3), (2, 2000)].into_iter().enumerate() {
        reference_with(
            &format!("argmax_rows {r}x{c}"),
            0x7100 + i as u64,
            &[Input::new(r, c, -4.0, 4.0)],
            index,
            |t| {
                // A stale I32 output still gets the C++ F32 indices.
                let mut idx = stale(&t[0], Dtype::I32)?;
                ops::argmax_rows(&t[0], &mut idx)?;
                assert_eq!(idx.dtype(), Dtype::F32, "argmax_rows gives F32");
                Ok(idx)
            },
            argmax(c),
        );
        reference_with(
            &format!("argmax_rows i32 {r}x{c}"),
            0x7108 + i as u64,
            &[Input::new(r, c, -4.0, 4.0)],
            index,
            |t| {
                let mut idx = Tensor::default();
                ops::argmax_rows_i32(&t[0], &mut idx)?;
                assert_eq!(idx.dtype(), Dtype::I32, "argmax_rows_i32 gives I32");
                Ok(idx)
            },
            argmax(c),
        );
    }
}

/// Each row's `k` largest values (`want_idx` false) or their columns (true): descending,
/// equal values by ascending column.
fn top_k(cols: usize, k: usize, want_idx: bool) -> Reference {
    Box::new(move |v| {
        rows(v, cols)
            .flat_map(|r| {
                let mut order: Vec<usize> = (0..cols).collect();
                order.sort_by(|&a, &b| r[b].total_cmp(&r[a]).then(a.cmp(&b)));
                order.truncate(k);
                order
                    .into_iter()
                    .map(|j| if want_idx { j as f64 } else { r[j] })
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

#[test]
fn top_k_rows() {
    let f32_only = Check {
        dtypes: &[Dtype::F32],
        same_dtype: false,
        tol: Some(exact),
    };
    // k well inside a row, k = the whole row (a full sort), k = 1.
    for (i, (r, c, k)) in [(6, 300, 7), (4, 50, 50), (3, 1000, 1)]
        .into_iter()
        .enumerate()
    {
        for want_idx in [false, true] {
            reference_with(
                &format!(
                    "top_k_rows {r}x{c} k={k} {}",
                    ["values", "indices"][usize::from(want_idx)]
                ),
                0x7200 + i as u64,
                &[Input::new(r, c, -5.0, 5.0)],
                f32_only,
                move |t| {
                    let (mut vals, mut idx) = (stale(&t[0], Dtype::F32)?, Tensor::default());
                    ops::top_k_rows(&t[0], k, &mut vals, &mut idx)?;
                    assert_eq!(idx.dtype(), Dtype::I32);
                    Ok(if want_idx { idx } else { vals })
                },
                top_k(c, k, want_idx),
            );
        }
    }
    // Ties: the input rounded to integers in [-5, 5] (11 values in rows of 40), so the k
    // largest include equal values, which come in ascending column order.
    for want_idx in [false, true] {
        reference_with(
            &format!(
                "top_k_rows ties {}",
                ["values", "indices"][usize::from(want_idx)]
            ),
            0x7210,
            &[Input::new(5, 40, -5.0, 5.0)],
            f32_only,
            move |t| {
                let x = ops::round(&t[0])?;
                let (mut vals, mut idx) = (Tensor::default(), Tensor::default());
                ops::top_k_rows(&x, 9, &mut vals, &mut idx)?;
                Ok(if want_idx { idx } else { vals })
            },
            {
                let inner = top_k(40, 9, want_idx);
                Box::new(move |v: &[Vec<f64>]| {
                    inner(&[v[0].iter().map(|x| x.round_ties_even()).collect()])
                })
            },
        );
    }
}

#[test]
fn rows_count_above() {
    // -0.25 and 0.5 are on every grid, so 16-bit inputs equal to a threshold occur and must
    // not count (the comparison is strict).
    let (lo, hi) = (-0.25, 0.5);
    let cols = 300;
    reference_with(
        "rows_count_above",
        0x7300,
        &[Input::new(12, cols, -1.0, 1.0)],
        Check {
            dtypes: &[Dtype::F32, Dtype::F16],
            same_dtype: false,
            tol: Some(exact),
        },
        move |t| {
            let mut counts = stale(&t[0], Dtype::I32)?;
            ops::rows_count_above(&t[0], lo, hi, &mut counts)?;
            assert_eq!(counts.dtype(), Dtype::I32);
            Ok(counts)
        },
        move |v| {
            rows(v, cols)
                .flat_map(|r| {
                    let above = |t: f32| r.iter().filter(|&&x| x > f64::from(t)).count() as f64;
                    [above(lo), above(hi)]
                })
                .collect()
        },
    );
}
