//! N-d tensors and zero-copy views against numpy: every chain of views in
//! `tests/fixtures/views.txt` (written by `make_views.py`) replayed on every device and in
//! every dtype it has, materialised with `contiguous()` and `copy_into`, and fed to an
//! element-wise op (relu), a binary op and a row op (sum over the last dim); plus the error
//! cases and the rules for writing through views.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{assert_close, gpu_devices, read_f32, tolerance};

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// One chain of views and numpy's answer.
struct Case {
    name: String,
    base: Vec<usize>,
    ops: Vec<(String, Vec<i64>)>,
    dims: Vec<usize>,
    values: Vec<i64>,
}

fn numbers<T: std::str::FromStr>(words: std::str::SplitWhitespace<'_>) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    words.map(|w| w.parse().expect("a number")).collect()
}

fn cases() -> Vec<Case> {
    let text = include_str!("../../fixtures/views.txt");
    let mut cases: Vec<Case> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let key = words.next().expect("a keyword");
        match key {
            "case" => cases.push(Case {
                name: line.to_string(),
                base: Vec::new(),
                ops: Vec::new(),
                dims: Vec::new(),
                values: Vec::new(),
            }),
            "base" => cases.last_mut().unwrap().base = numbers(words),
            "dims" => cases.last_mut().unwrap().dims = numbers(words),
            "values" => cases.last_mut().unwrap().values = numbers(words),
            op => cases
                .last_mut()
                .unwrap()
                .ops
                .push((op.to_string(), numbers(words))),
        }
    }
    assert!(cases.len() >= 64, "the fixture holds the cases");
    cases
}

/// The base tensor's element at flat index `i` (the script's `value`).
fn base_value(i: usize) -> i64 {
    (i as i64 * 37 % 251) - 125
}

fn base_tensor(device: Device, dims: &[usize], dtype: Dtype) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<i64> = (0..n).map(base_value).collect();
    match dtype {
        Dtype::F32 => {
            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        Dtype::F16 => {
            let v: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x as f64)).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        Dtype::BF16 => {
            let v: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f64(x as f64)).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        Dtype::F64 => {
            let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        Dtype::I32 => {
            let v: Vec<i32> = v.iter().map(|&x| x as i32).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        Dtype::I8 => {
            let v: Vec<i8> = v.iter().map(|&x| x as i8).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        other => panic!("no base for {other}"),
    }
    .unwrap()
}

/// Every element as i64, whatever the dtype (all values are small integers).
fn read_ints(t: &Tensor) -> Vec<i64> {
    match t.dtype() {
        Dtype::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        Dtype::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        Dtype::I8 => t
            .to_vec::<i8>()
            .unwrap()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        _ => read_f32(t).unwrap().iter().map(|&v| v as i64).collect(),
    }
}

fn usizes(args: &[i64]) -> Vec<usize> {
    args.iter().map(|&a| a as usize).collect()
}

/// Replays the chain's views on `x`; a `reshape_copy` must be refused as a view.
fn replay(case: &Case, mut x: Tensor) -> Tensor {
    for (op, args) in &case.ops {
        let tag = format!("{}: {op} {args:?}", case.name);
        x = match op.as_str() {
            "permute" => x.permute(&usizes(args)),
            "slice" => x.slice(
                args[0] as usize,
                args[1] as usize,
                args[2] as usize,
                args[3] as isize,
            ),
            "broadcast" => x.broadcast_to(&usizes(args)),
            "flip" => x.flip(&usizes(args)),
            "unsqueeze" => x.unsqueeze(args[0] as usize),
            "squeeze" => x.squeeze(args[0] as usize),
            "reshape" => x.reshape(&usizes(args)),
            "reshape_copy" => {
                let e = x.reshape(&usizes(args)).unwrap_err().to_string();
                assert!(e.contains("contiguous()"), "{tag}: {e}");
                x.contiguous().unwrap().reshape(&usizes(args))
            }
            other => panic!("unknown op {other}"),
        }
        .unwrap_or_else(|e| panic!("{tag}: {e}"));
    }
    x
}

fn dtypes_on(device: Device) -> Vec<Dtype> {
    [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::F64,
        Dtype::I32,
        Dtype::I8,
    ]
    .into_iter()
    .filter(|&d| !d.is_float() || brotensor::supports_dtype(device, d).unwrap_or(false))
    .collect()
}

#[test]
fn view_chains_match_numpy_on_every_device_and_dtype() {
    let cases = cases();
    for device in devices() {
        for dtype in dtypes_on(device) {
            let mut reused = Tensor::default();
            for case in &cases {
                let tag = format!("{device} {dtype} {}", case.name);
                let base = base_tensor(device, &case.base, dtype);
                let base_id = base.allocation_id();
                let v = replay(case, base);
                assert_eq!(v.dims(), case.dims, "{tag}: dims");
                if case.ops.iter().all(|(op, _)| op != "reshape_copy") {
                    // Views share their base's storage: no copy was made.
                    assert_eq!(v.allocation_id(), base_id, "{tag}: a view allocated");
                }
                let dense = v.contiguous().unwrap();
                assert!(dense.is_contiguous(), "{tag}");
                assert_eq!(dense.dims(), case.dims, "{tag}");
                assert_eq!(read_ints(&dense), case.values, "{tag}: contiguous()");
                ops::copy_into(&v, &mut reused).unwrap();
                assert_eq!(read_ints(&reused), case.values, "{tag}: copy_into");
                // to_vec of the view reads its elements in its own order.
                assert_eq!(read_ints(&v), case.values, "{tag}: to_vec");
            }
        }
    }
}

#[test]
fn ops_read_views_as_their_elements() {
    let cases = cases();
    for device in devices() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype).unwrap_or(false) {
                continue;
            }
            let tol = tolerance(dtype);
            for case in cases.iter().filter(|c| !c.values.is_empty()) {
                let tag = format!("{device} {dtype} {}", case.name);
                let v = replay(case, base_tensor(device, &case.base, dtype));
                let want: Vec<f64> = case.values.iter().map(|&x| x as f64).collect();
                // Element-wise: relu of the view.
                let relu: Vec<f32> = want.iter().map(|&x| x.max(0.0) as f32).collect();
                assert_close(
                    &format!("{tag} relu"),
                    &relu,
                    &read_f32(&ops::relu(&v).unwrap()).unwrap(),
                    tol,
                );
                // Binary: the view plus itself.
                let twice: Vec<f32> = want.iter().map(|&x| (2.0 * x) as f32).collect();
                assert_close(
                    &format!("{tag} add"),
                    &twice,
                    &read_f32(&ops::add(&v, &v).unwrap()).unwrap(),
                    tol,
                );
                // Row op: the sum over the last dim, in float64 here.
                let cols = case.dims.last().copied().unwrap_or(1);
                if cols > 0 {
                    let sums: Vec<f32> = want
                        .chunks(cols)
                        .map(|r| r.iter().sum::<f64>() as f32)
                        .collect();
                    let mut s = Tensor::default();
                    ops::sum_rows(&v, &mut s).unwrap();
                    assert_close(
                        &format!("{tag} sum_rows"),
                        &sums,
                        &read_f32(&s).unwrap(),
                        tol,
                    );
                }
            }
        }
    }
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    for device in devices() {
        // (2, 1, 3) + (4, 1) -> (2, 4, 3)
        let a: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..4).map(|i| 10.0 * i as f32).collect();
        let ta = Tensor::from_slice_nd_on(device, &a, &[2, 1, 3]).unwrap();
        let tb = Tensor::from_slice_nd_on(device, &b, &[4, 1]).unwrap();
        let mut want = Vec::new();
        for i in 0..2 {
            for bj in &b {
                for k in 0..3 {
                    want.push(a[i * 3 + k] + bj);
                }
            }
        }
        // expand is broadcast_to: (2, 1, 3) repeated along dim 1.
        let ex = ta.expand(&[2, 4, 3]).unwrap().to_vec::<f32>().unwrap();
        let rep: Vec<f32> = (0..24).map(|n| a[(n / 12) * 3 + n % 3]).collect();
        assert_eq!(ex, rep, "{device}");
        let sum = ops::add(&ta, &tb).unwrap();
        assert_eq!(sum.dims(), [2, 4, 3], "{device}");
        assert_eq!(sum.to_vec::<f32>().unwrap(), want, "{device}");
        let diff = tb.sub(&ta).unwrap();
        let neg: Vec<f32> = (0..24)
            .map(|n| b[n / 3 % 4] - a[(n / 12) * 3 + n % 3])
            .collect();
        assert_eq!(diff.to_vec::<f32>().unwrap(), neg, "{device}");
        // In place: the right operand broadcasts to the left one's dims, never the reverse.
        let mut big = Tensor::from_slice_nd_on(device, &[1.0f32; 24], &[2, 4, 3]).unwrap();
        big.mul_(&Tensor::from_slice_nd_on(device, &[2.0f32, 3.0, 4.0], &[3]).unwrap())
            .unwrap();
        assert_eq!(
            big.to_vec::<f32>().unwrap()[..3],
            [2.0, 3.0, 4.0],
            "{device}"
        );
        let e = tb.clone().add_(&ta).unwrap_err().to_string();
        assert!(e.starts_with("brotensor: add_:"), "{e}");
        let e = ops::add(
            &ta,
            &Tensor::zeros_nd_on(device, &[3, 2], Dtype::F32).unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("do not broadcast"), "{e}");
    }
}

/// An allocating binary op and its float64 formula.
type BinaryFn = fn(&Tensor, &Tensor) -> brotensor::Result<Tensor>;
type MathFn = fn(f64, f64) -> f64;

#[test]
fn broadcast_shapes_give_numpy_results_for_every_op() {
    // (left dims, right dims): a broadcast row, one value per row, a scalar, an outer
    // product, a broadcast plane, a middle-dim broadcast and a transposed operand.
    let pairs: [(&[usize], &[usize]); 7] = [
        (&[5, 7], &[7]),
        (&[5, 7], &[5, 1]),
        (&[5, 7], &[1]),
        (&[5, 1], &[1, 7]),
        (&[2, 5, 7], &[5, 7]),
        (&[2, 5, 7], &[2, 1, 7]),
        (&[7, 5], &[7, 5]),
    ];
    let value = |i: usize, salt: usize| ((i * 13 + salt * 7) % 23) as f64 / 4.0 + 0.5;
    for device in devices() {
        for (n, &(ld, rd)) in pairs.iter().enumerate() {
            let (ln, rn) = (ld.iter().product::<usize>(), rd.iter().product::<usize>());
            let lv: Vec<f64> = (0..ln).map(|i| value(i, 1)).collect();
            let rv: Vec<f64> = (0..rn).map(|i| value(i, 2)).collect();
            let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
            let l = Tensor::from_slice_nd_on(device, &to32(&lv), ld).unwrap();
            // The last pair reads the right operand through a transposed view.
            let r = if n == 6 {
                let base: Vec<f64> = (0..rn).map(|i| rv[(i % 7) * 5 + i / 7]).collect();
                Tensor::from_slice_nd_on(device, &to32(&base), &[5, 7])
                    .unwrap()
                    .t()
                    .unwrap()
            } else {
                Tensor::from_slice_nd_on(device, &to32(&rv), rd).unwrap()
            };
            // numpy's rules, in float64 here.
            let dims: Vec<usize> = {
                let rank = ld.len().max(rd.len());
                let at =
                    |d: &[usize], i: usize| (i + d.len()).checked_sub(rank).map_or(1, |j| d[j]);
                (0..rank).map(|i| at(ld, i).max(at(rd, i))).collect()
            };
            let index = |d: &[usize], flat: usize| {
                let mut rest = flat;
                let mut idx = 0;
                let mut step = 1;
                for k in (0..dims.len()).rev() {
                    let coord = rest % dims[k];
                    rest /= dims[k];
                    if let Some(j) = (k + d.len()).checked_sub(dims.len()) {
                        if d[j] != 1 {
                            idx += coord * step;
                        }
                        step *= d[j];
                    }
                }
                idx
            };
            let total: usize = dims.iter().product();
            let ops: [(&str, BinaryFn, MathFn); 4] = [
                ("add", ops::add, |a, b| a + b),
                ("sub", ops::sub, |a, b| a - b),
                ("mul", ops::mul, |a, b| a * b),
                ("div", ops::div, |a, b| a / b),
            ];
            for (name, f, math) in ops {
                let want: Vec<f32> = (0..total)
                    .map(|i| math(lv[index(ld, i)], rv[index(rd, i)]) as f32)
                    .collect();
                let got = f(&l, &r).unwrap();
                assert_eq!(got.dims(), dims, "{device} {name} {ld:?} {rd:?}");
                let tag = format!("{device} {name} {ld:?} {rd:?}");
                assert_close(
                    &tag,
                    &want,
                    &got.to_vec::<f32>().unwrap(),
                    tolerance(Dtype::F32),
                );
                // Swapped operands too: the pattern may be on either side.
                let want: Vec<f32> = (0..total)
                    .map(|i| math(rv[index(rd, i)], lv[index(ld, i)]) as f32)
                    .collect();
                let got = f(&r, &l).unwrap();
                assert_close(
                    &format!("{tag} swapped"),
                    &want,
                    &got.to_vec::<f32>().unwrap(),
                    tolerance(Dtype::F32),
                );
            }
        }
    }
}

#[test]
fn peer_style_methods_follow_numpy() {
    for device in devices() {
        let x: Vec<f32> = (0..24).map(|i| (i as f32 - 11.0) / 4.0).collect();
        let t = Tensor::from_slice_nd_on(device, &x, &[2, 3, 4]).unwrap();
        // sum over the middle dim, in float64 here.
        let s = t.sum(1).unwrap();
        assert_eq!(s.dims(), [2, 4]);
        let want: Vec<f32> = (0..8)
            .map(|n| {
                (0..3)
                    .map(|j| x[(n / 4) * 12 + j * 4 + n % 4] as f64)
                    .sum::<f64>() as f32
            })
            .collect();
        assert_close(
            &format!("{device} sum(1)"),
            &want,
            &s.to_vec::<f32>().unwrap(),
            tolerance(Dtype::F32),
        );
        let means: Vec<f32> = want.iter().map(|&v| v / 3.0).collect();
        let m = t.mean(1).unwrap().to_vec::<f32>().unwrap();
        assert_close(
            &format!("{device} mean(1)"),
            &means,
            &m,
            tolerance(Dtype::F32),
        );
        // softmax over dim 0: pairs (x[j], x[12 + j]).
        let p = t.softmax(0).unwrap();
        assert_eq!(p.dims(), [2, 3, 4]);
        let want: Vec<f32> = (0..24)
            .map(|n| {
                let (a, b) = (x[n % 12] as f64, x[12 + n % 12] as f64);
                let me = x[n] as f64;
                (me.exp() / (a.exp() + b.exp())) as f32
            })
            .collect();
        assert_close(
            &format!("{device} softmax(0)"),
            &want,
            &p.to_vec::<f32>().unwrap(),
            tolerance(Dtype::F32),
        );
        // matmul keeps leading dims: (2, 3, 4) . (4, 2)
        let w: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let tw = Tensor::from_slice_nd_on(device, &w, &[4, 2]).unwrap();
        let y = t.matmul(&tw).unwrap();
        assert_eq!(y.dims(), [2, 3, 2]);
        let want: Vec<f32> = (0..12)
            .map(|n| {
                (0..4)
                    .map(|k| x[(n / 2) * 4 + k] as f64 * w[k * 2 + n % 2] as f64)
                    .sum::<f64>() as f32
            })
            .collect();
        assert_close(
            &format!("{device} matmul"),
            &want,
            &y.to_vec::<f32>().unwrap(),
            tolerance(Dtype::F32),
        );
        // exp through the method, against f64.
        let e: Vec<f32> = x.iter().map(|&v| (v as f64).exp() as f32).collect();
        assert_close(
            &format!("{device} exp"),
            &e,
            &t.exp().unwrap().to_vec::<f32>().unwrap(),
            tolerance(Dtype::F32),
        );
        assert_eq!(t.t().unwrap().dims(), [2, 4, 3]);
    }
}

#[test]
fn bad_views_are_errors() {
    let t = Tensor::zeros_nd_on(Device::Cpu, &[2, 3, 4], Dtype::F32).unwrap();
    let err = |r: brotensor::Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(t.permute(&[0, 0, 1])).starts_with("brotensor: permute:"));
    assert!(err(t.permute(&[0, 1])).contains("not a permutation"));
    assert!(err(t.slice(1, 2, 4, 1)).contains("out of bounds"));
    assert!(err(t.slice(3, 0, 1, 1)).contains("out of range"));
    assert!(err(t.slice(0, 0, 1, 0)).contains("step"));
    assert!(err(t.narrow(2, usize::MAX, 2)).starts_with("brotensor: narrow:"));
    assert!(err(t.broadcast_to(&[2, 5, 4])).contains("cannot be broadcast"));
    assert!(err(t.broadcast_to(&[3, 4])).contains("cannot be broadcast"));
    assert!(err(t.squeeze(0)).contains("not 1"));
    assert!(err(t.flip(&[1, 1])).contains("twice"));
    assert!(err(t.reshape(&[5, 5])).contains("elements"));
    assert!(err(t.transpose(0, 3)).starts_with("brotensor: transpose:"));
    assert!(err(t.reshape(&[1; 9])).contains("maximum rank 8"));
    let e = Tensor::zeros_nd_on(Device::Cpu, &[1; 9], Dtype::F32).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let e = Tensor::zeros_nd_on(Device::Cpu, &[usize::MAX, 2], Dtype::F32).unwrap_err();
    assert!(e.to_string().contains("overflow"), "{e}");
    // A transposed matrix cannot be flattened as a view; contiguous() first can.
    let m = t.transpose(1, 2).unwrap();
    assert!(err(m.reshape(&[24])).contains("contiguous()"));
    assert_eq!(m.contiguous().unwrap().reshape(&[24]).unwrap().dims(), [24]);
    let mut r = t.transpose(1, 2).unwrap();
    assert!(r
        .reshape_(&[2, 12])
        .unwrap_err()
        .to_string()
        .contains("contiguous()"));
    // Block dtypes have no strided views.
    let q = Tensor::from_raw_bytes_on(Device::Cpu, &[0u8; 36], 2, 32, Dtype::Q4_0).unwrap();
    assert!(err(q.transpose(0, 1)).contains("only views are reshapes"));
    assert_eq!(q.reshape(&[1, 64]).unwrap().dims(), [1, 64]);
}

#[test]
fn ops_never_write_through_views() {
    for device in devices() {
        let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let mut base = Tensor::from_slice_nd_on(device, &data, &[3, 4]).unwrap();
        let mut view = base.transpose(0, 1).unwrap();
        // Into a strided view: refused, base untouched.
        let e = ops::add_out(&view, &view, &mut view.clone()).map(|_| ());
        assert!(e.is_ok(), "{device}: a clone is a fresh tensor");
        let x = view.clone();
        let e = ops::add_out(&x, &x, &mut view).unwrap_err().to_string();
        assert!(e.contains("view"), "{device}: {e}");
        let e = view.relu_().unwrap_err().to_string();
        assert!(e.contains("view"), "{device}: {e}");
        // Into the base while a view lives: refused too.
        let e = base.mul_scalar_(2.0).unwrap_err().to_string();
        assert!(e.contains("live view"), "{device}: {e}");
        let e = base.zero().unwrap_err().to_string();
        assert!(e.contains("live view"), "{device}: {e}");
        assert_eq!(base.to_vec::<f32>().unwrap(), data, "{device}");
        // Once the views are gone, the base is writable again.
        drop(view);
        base.mul_scalar_(2.0).unwrap();
        let doubled: Vec<f32> = data.iter().map(|v| 2.0 * v).collect();
        assert_eq!(base.to_vec::<f32>().unwrap(), doubled, "{device}");
        // A view outlives a dropped base and keeps reading its elements.
        let row = base.narrow(0, 1, 1).unwrap().contiguous().unwrap();
        let flipped = base.flip(&[1]).unwrap();
        drop(base);
        assert_eq!(row.to_vec::<f32>().unwrap(), doubled[4..8], "{device}");
        let mut want = doubled.clone();
        want.chunks_mut(4).for_each(|r| r.reverse());
        assert_eq!(flipped.to_vec::<f32>().unwrap(), want, "{device}");
    }
}

#[test]
fn zero_size_dims_everywhere() {
    for device in devices() {
        let t = Tensor::zeros_nd_on(device, &[3, 0, 2], Dtype::F32).unwrap();
        assert_eq!((t.numel(), t.rows(), t.cols()), (0, 0, 2));
        let p = t.permute(&[2, 0, 1]).unwrap();
        assert_eq!(p.dims(), [2, 3, 0]);
        assert_eq!(p.contiguous().unwrap().numel(), 0);
        assert!(ops::relu(&p).unwrap().to_vec::<f32>().unwrap().is_empty());
        let s = Tensor::zeros_nd_on(device, &[4, 5], Dtype::F32)
            .unwrap()
            .slice(0, 2, 2, 1)
            .unwrap();
        assert_eq!(s.dims(), [0, 5]);
        assert!(s.to_vec::<f32>().unwrap().is_empty());
        let b = s.broadcast_to(&[3, 0, 5]).unwrap();
        assert_eq!(b.numel(), 0);
        assert_eq!(ops::add(&b, &s).unwrap().dims(), [3, 0, 5]);
        // Rank 0: one element.
        let r = Tensor::from_slice_nd_on(device, &[4.5f32], &[]).unwrap();
        assert_eq!((r.rank(), r.numel(), r.shape()), (0, 1, (1, 1)));
        assert_eq!(
            r.broadcast_to(&[2, 2]).unwrap().to_vec::<f32>().unwrap(),
            [4.5; 4]
        );
    }
}
