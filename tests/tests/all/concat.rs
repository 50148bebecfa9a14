//! Tests of the concat ops: every op on every device (the CPU and each GPU found) and every
//! element width, on random bits, compared bit for bit with index arithmetic written here;
//! plus every error case of the contracts and empty inputs.

use brotensor::{ops, Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{gpu_devices, SplitMix64};

/// The dtypes the byte-aware ops claim: every element width (8, 16, 32 and 64 bits).
pub(crate) const BYTE_DTYPES: [Dtype; 6] = [
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::I32,
    Dtype::I8,
    Dtype::F64,
];

/// The CPU and every GPU device found (the harness says loudly when there is none).
pub(crate) fn devices() -> Vec<Device> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("concat/embedding: SKIPPED on GPU (no GPU device found)");
    }
    std::iter::once(Device::Cpu).chain(gpus).collect()
}

/// Host elements as raw bytes, one `Vec<u8>` per element.
pub(crate) type Elems = Vec<Vec<u8>>;

/// `n` elements of `dtype` with random bits (NaN patterns included: copies keep bits).
pub(crate) fn random(rng: &mut SplitMix64, n: usize, dtype: Dtype) -> Elems {
    let w = dtype.size_bytes().unwrap();
    (0..n)
        .map(|_| rng.next_u64().to_le_bytes()[..w].to_vec())
        .collect()
}

/// A tensor of `dims` on `device` holding `e`.
pub(crate) fn upload(device: Device, e: &Elems, dims: &[usize], dtype: Dtype) -> Tensor {
    let bytes: Vec<u8> = e.concat();
    Tensor::from_raw_bytes_nd_on(device, &bytes, dims, dtype)
        .unwrap_or_else(|err| panic!("upload {dtype} to {device}: {err}"))
}

/// A tensor's elements as raw bytes.
pub(crate) fn download(t: &Tensor) -> Elems {
    let w = t.dtype().size_bytes().unwrap();
    t.to_bytes()
        .unwrap()
        .chunks(w)
        .map(<[u8]>::to_vec)
        .collect()
}

/// Asserts bit equality, naming the first differing element.
pub(crate) fn assert_bits(tag: &str, want: &Elems, got: &Elems) {
    assert_eq!(want.len(), got.len(), "{tag}: element count");
    if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
        panic!("{tag}: element {i} is {:?}, want {:?}", got[i], want[i]);
    }
}

/// `(src_off, src_pitch, dst_off, dst_pitch, width, height)` geometries: rows that share
/// 32-bit words for 8- and 16-bit elements (pitch = width, odd offsets), gaps, one row,
/// one column.
const GEOMETRIES: [(usize, usize, usize, usize, usize, usize); 6] = [
    (3, 7, 1, 5, 5, 4),
    (0, 5, 0, 5, 5, 3),
    (2, 3, 5, 9, 3, 5),
    (1, 0, 2, 0, 11, 1),
    (0, 3, 1, 2, 1, 7),
    (5, 6, 3, 7, 6, 33),
];

#[test]
fn copy_d2d_strided_moves_exactly_the_block() {
    let mut rng = SplitMix64::new(0xC0A7);
    for device in devices() {
        for dtype in BYTE_DTYPES {
            for (i, &(so, sp, d_o, dp, w, h)) in GEOMETRIES.iter().enumerate() {
                let src_n = so + sp * h.saturating_sub(1) + w + 2;
                let dst_n = d_o + dp * h.saturating_sub(1) + w + 3;
                let src = random(&mut rng, src_n, dtype);
                let dst = random(&mut rng, dst_n, dtype);
                let mut want = dst.clone();
                for r in 0..h {
                    for c in 0..w {
                        want[d_o + r * dp + c] = src[so + r * sp + c].clone();
                    }
                }
                let s = upload(device, &src, &[src_n], dtype);
                let mut d = upload(device, &dst, &[dst_n], dtype);
                ops::copy_d2d_strided(&s, so, sp, d_o, dp, w, h, &mut d).unwrap();
                assert_bits(
                    &format!("copy_d2d_strided geometry {i} on {device} {dtype}"),
                    &want,
                    &download(&d),
                );
            }
        }
    }
}

#[test]
fn concat_rows_and_split_rows_round_trip() {
    let mut rng = SplitMix64::new(0xC0A8);
    let sizes: [&[usize]; 4] = [&[3, 5], &[2, 3, 4], &[0], &[1, 1, 1, 1, 1]];
    for device in devices() {
        for dtype in BYTE_DTYPES {
            // Parts of several shapes (N-d ones are read flat).
            let dims: Vec<Vec<usize>> = vec![vec![3], vec![1, 5], vec![2, 2, 3]];
            let elems: Vec<Elems> = dims
                .iter()
                .map(|d| random(&mut rng, d.iter().product(), dtype))
                .collect();
            let parts: Vec<Tensor> = elems
                .iter()
                .zip(&dims)
                .map(|(e, d)| upload(device, e, d, dtype))
                .collect();
            let refs: Vec<&Tensor> = parts.iter().collect();
            // A stale output of another shape and dtype is resized.
            let mut out = Tensor::zeros_on(device, 2, 2, Dtype::F32).unwrap();
            ops::concat_rows(&refs, &mut out).unwrap();
            assert_eq!(out.dims(), &[20, 1]);
            assert_eq!(out.dtype(), dtype);
            let want: Elems = elems.concat();
            assert_bits(
                &format!("concat_rows on {device} {dtype}"),
                &want,
                &download(&out),
            );

            for (k, sz) in sizes.iter().enumerate() {
                let input = random(&mut rng, 12, dtype);
                let t = upload(device, &input, &[3, 4], dtype);
                let mut outs: Vec<Tensor> = sz
                    .iter()
                    .map(|&n| upload(device, &random(&mut rng, n, dtype), &[n], dtype))
                    .collect();
                let mut muts: Vec<&mut Tensor> = outs.iter_mut().collect();
                ops::split_rows(&t, &mut muts).unwrap();
                let mut off = 0;
                for (p, &n) in outs.iter().zip(sz.iter()) {
                    assert_bits(
                        &format!("split_rows case {k} on {device} {dtype}"),
                        &input[off..off + n].to_vec(),
                        &download(p),
                    );
                    assert_eq!(p.dims(), &[n], "split_rows keeps the parts' shapes");
                    off += n;
                }
            }
        }
    }
}

#[test]
fn concat_batched_rows_places_column_blocks() {
    let mut rng = SplitMix64::new(0xC0A9);
    let widths = [1usize, 4, 3, 0, 2];
    let b = 5;
    for device in devices() {
        for dtype in BYTE_DTYPES {
            let elems: Vec<Elems> = widths
                .iter()
                .map(|&d| random(&mut rng, b * d, dtype))
                .collect();
            let parts: Vec<Tensor> = elems
                .iter()
                .zip(widths)
                .map(|(e, d)| upload(device, e, &[b, d], dtype))
                .collect();
            let refs: Vec<&Tensor> = parts.iter().collect();
            let mut out = Tensor::default();
            ops::concat_batched_rows(&refs, &mut out).unwrap();
            let total: usize = widths.iter().sum();
            assert_eq!(out.dims(), &[b, total]);
            let mut want = Vec::new();
            for r in 0..b {
                for (e, &d) in elems.iter().zip(&widths) {
                    want.extend_from_slice(&e[r * d..(r + 1) * d]);
                }
            }
            assert_bits(
                &format!("concat_batched_rows on {device} {dtype}"),
                &want,
                &download(&out),
            );
        }
    }
}

#[test]
fn concat_nchw_channels_and_backward() {
    let mut rng = SplitMix64::new(0xC0AA);
    let (n, h, w) = (3usize, 2usize, 3usize);
    let cs = [1usize, 2, 0, 3];
    let hw = h * w;
    let total: usize = cs.iter().sum();
    for device in devices() {
        for dtype in BYTE_DTYPES {
            let elems: Vec<Elems> = cs
                .iter()
                .map(|&c| random(&mut rng, n * c * hw, dtype))
                .collect();
            let parts: Vec<Tensor> = elems
                .iter()
                .zip(cs)
                .map(|(e, c)| upload(device, e, &[n, c, h, w], dtype))
                .collect();
            let refs: Vec<&Tensor> = parts.iter().collect();
            let mut out = Tensor::default();
            ops::concat_nchw_channels(&refs, (n, cs.iter().sum::<usize>(), h, w), &cs, &mut out)
                .unwrap();
            assert_eq!(out.dims(), &[n, total * hw]);
            // out[s, (off_i + c) hw + p] = part_i[s, c hw + p], spelled out per element.
            let mut want = vec![Vec::new(); n * total * hw];
            let mut off = 0;
            for (e, &ci) in elems.iter().zip(&cs) {
                for s in 0..n {
                    for c in 0..ci {
                        for p in 0..hw {
                            want[s * total * hw + (off + c) * hw + p] =
                                e[s * ci * hw + c * hw + p].clone();
                        }
                    }
                }
                off += ci;
            }
            assert_bits(
                &format!("concat_nchw_channels on {device} {dtype}"),
                &want,
                &download(&out),
            );

            // The backward splits a random dY the same way (parts resized from stale ones).
            let dy = random(&mut rng, n * total * hw, dtype);
            let dyt = upload(device, &dy, &[n, total, h, w], dtype);
            let mut grads: Vec<Tensor> = cs
                .iter()
                .map(|_| Tensor::zeros_on(device, 1, 1, Dtype::F32).unwrap())
                .collect();
            let mut muts: Vec<&mut Tensor> = grads.iter_mut().collect();
            ops::concat_nchw_channels_backward(
                &dyt,
                (n, cs.iter().sum::<usize>(), h, w),
                &cs,
                &mut muts,
            )
            .unwrap();
            let mut off = 0;
            for (g, &ci) in grads.iter().zip(&cs) {
                assert_eq!(g.dims(), &[n, ci * hw]);
                assert_eq!(g.dtype(), dtype);
                let mut want = Vec::new();
                for s in 0..n {
                    for c in 0..ci {
                        for p in 0..hw {
                            want.push(dy[s * total * hw + (off + c) * hw + p].clone());
                        }
                    }
                }
                assert_bits(
                    &format!("concat_nchw_channels_backward on {device} {dtype}"),
                    &want,
                    &download(g),
                );
                off += ci;
            }
        }
    }
}

/// Asserts `r` is an error of the given kind for `op`.
fn expect_err(tag: &str, r: Result<()>, ok: impl Fn(&Error) -> bool) {
    match r {
        Err(e) if ok(&e) => {}
        Err(e) => panic!("{tag}: wrong error: {e}"),
        Ok(()) => panic!("{tag}: accepted"),
    }
}

fn is_shape(e: &Error) -> bool {
    matches!(e, Error::Shape { .. })
}

fn is_invalid(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument { .. })
}

fn is_dtype(e: &Error) -> bool {
    matches!(e, Error::Dtype { .. })
}

#[test]
fn copy_d2d_strided_refuses_bad_geometry_and_dtypes() {
    let mut rng = SplitMix64::new(0xC0AB);
    for device in devices() {
        let dtype = Dtype::F16;
        let src = upload(device, &random(&mut rng, 20, dtype), &[20], dtype);
        let before = random(&mut rng, 20, dtype);
        let mut dst = upload(device, &before, &[4, 5], dtype);
        let tag = |what: &str| format!("copy_d2d_strided {what} on {device}");
        // Pitch below the width.
        expect_err(
            &tag("src pitch < width"),
            ops::copy_d2d_strided(&src, 0, 3, 0, 5, 4, 2, &mut dst),
            is_invalid,
        );
        expect_err(
            &tag("dst pitch < width"),
            ops::copy_d2d_strided(&src, 0, 5, 0, 3, 4, 2, &mut dst),
            is_invalid,
        );
        // Reaching past either tensor.
        expect_err(
            &tag("src offset past the end"),
            ops::copy_d2d_strided(&src, 17, 4, 0, 4, 4, 1, &mut dst),
            is_shape,
        );
        expect_err(
            &tag("dst rows past the end"),
            ops::copy_d2d_strided(&src, 0, 4, 2, 5, 4, 4, &mut dst),
            is_shape,
        );
        expect_err(
            &tag("overflowing geometry"),
            ops::copy_d2d_strided(&src, 0, 4, usize::MAX, 4, 4, 2, &mut dst),
            is_shape,
        );
        // Different dtypes on the two sides.
        let mut other = Tensor::zeros_on(device, 4, 5, Dtype::F32).unwrap();
        expect_err(
            &tag("dtype mismatch"),
            ops::copy_d2d_strided(&src, 0, 4, 0, 4, 4, 1, &mut other),
            is_dtype,
        );
        // Nothing was written by the refused calls; an empty copy writes nothing either.
        ops::copy_d2d_strided(&src, 99, 0, 99, 0, 0, 3, &mut dst).unwrap();
        ops::copy_d2d_strided(&src, 0, 0, 0, 0, 4, 0, &mut dst).unwrap();
        assert_bits(
            &tag("refused calls write nothing"),
            &before,
            &download(&dst),
        );
    }
}

#[test]
fn concat_ops_refuse_mismatches() {
    let mut rng = SplitMix64::new(0xC0AC);
    for device in devices() {
        let a = upload(
            device,
            &random(&mut rng, 6, Dtype::F32),
            &[2, 3],
            Dtype::F32,
        );
        let b = upload(
            device,
            &random(&mut rng, 6, Dtype::F16),
            &[2, 3],
            Dtype::F16,
        );
        let c = upload(
            device,
            &random(&mut rng, 9, Dtype::F32),
            &[3, 3],
            Dtype::F32,
        );
        let tag = |what: &str| format!("{what} on {device}");
        let mut out = Tensor::default();
        expect_err(
            &tag("concat_rows dtype mix"),
            ops::concat_rows(&[&a, &b], &mut out),
            is_dtype,
        );
        expect_err(
            &tag("concat_batched_rows dtype mix"),
            ops::concat_batched_rows(&[&a, &b], &mut out),
            is_dtype,
        );
        expect_err(
            &tag("concat_batched_rows row mismatch"),
            ops::concat_batched_rows(&[&a, &c], &mut out),
            is_shape,
        );
        expect_err(
            &tag("concat_batched_rows no parts"),
            ops::concat_batched_rows(&[], &mut out),
            is_invalid,
        );
        expect_err(
            &tag("concat_nchw_channels counts per part"),
            ops::concat_nchw_channels(&[&a, &c], (1, 2, 1, 3), &[2], &mut out),
            is_invalid,
        );
        expect_err(
            &tag("concat_nchw_channels counts against dims.c"),
            ops::concat_nchw_channels(&[&a, &c], ops::Nchw::new(1, 5, 1, 3), &[2, 2], &mut out),
            is_shape,
        );
        expect_err(
            &tag("concat_nchw_channels part size"),
            ops::concat_nchw_channels(&[&a, &c], (1, 4, 1, 3), &[2, 2], &mut out),
            is_shape,
        );
        expect_err(
            &tag("concat_nchw_channels dtype mix"),
            ops::concat_nchw_channels(&[&a, &b], (1, 4, 1, 3), &[2, 2], &mut out),
            is_dtype,
        );
        let mut g0 = Tensor::default();
        let mut g1 = Tensor::default();
        expect_err(
            &tag("concat_nchw_channels_backward dY size"),
            ops::concat_nchw_channels_backward(&c, (1, 2, 1, 3), &[1, 1], &mut [&mut g0, &mut g1]),
            is_shape,
        );
        expect_err(
            &tag("concat_nchw_channels_backward counts per part"),
            ops::concat_nchw_channels_backward(&c, (1, 3, 1, 3), &[3], &mut [&mut g0, &mut g1]),
            is_invalid,
        );
        // split_rows: parts holding more than the input, or of another dtype.
        let mut big = Tensor::zeros_on(device, 7, 1, Dtype::F32).unwrap();
        expect_err(
            &tag("split_rows too many elements"),
            ops::split_rows(&a, &mut [&mut big]),
            is_shape,
        );
        let mut half = Tensor::zeros_on(device, 3, 1, Dtype::F16).unwrap();
        expect_err(
            &tag("split_rows dtype"),
            ops::split_rows(&a, &mut [&mut half]),
            is_dtype,
        );
    }
}

#[test]
fn concat_ops_take_empty_inputs() {
    for device in devices() {
        let empty = Tensor::zeros_on(device, 0, 4, Dtype::BF16).unwrap();
        let mut out = Tensor::default();
        let mut nothing = Tensor::zeros_on(device, 1, 1, Dtype::F32).unwrap();
        ops::concat_rows(&[], &mut nothing).unwrap();
        assert_eq!(nothing.dims(), &[0, 1]);
        ops::concat_rows(&[&empty, &empty], &mut out).unwrap();
        assert_eq!((out.dims(), out.dtype()), (&[0usize, 1][..], Dtype::BF16));
        ops::concat_batched_rows(&[&empty, &empty], &mut out).unwrap();
        assert_eq!(out.dims(), &[0, 8]);
        ops::concat_nchw_channels(&[&empty], (0, 1, 2, 2), &[1], &mut out).unwrap();
        assert_eq!(out.dims(), &[0, 4]);
        let mut g = Tensor::default();
        ops::concat_nchw_channels_backward(&empty, (0, 1, 2, 2), &[1], &mut [&mut g]).unwrap();
        assert_eq!(g.dims(), &[0, 4]);
        ops::split_rows(&empty, &mut []).unwrap();
    }
}

#[test]
fn concat_ops_against_f64_on_every_device() {
    // Through the parity harness (floats, compared exactly), so the ledger proves which
    // devices ran each op.
    use crate::embedding::EXACT;
    use brotensor_tests::{reference_with, Input};
    reference_with(
        "copy_d2d_strided",
        0xC0B0,
        &[Input::new(1, 40, -2.0, 2.0), Input::new(1, 30, -2.0, 2.0)],
        EXACT,
        |t| {
            let mut d = t[1].try_clone()?;
            ops::copy_d2d_strided(&t[0], 3, 7, 1, 5, 5, 4, &mut d)?;
            Ok(d)
        },
        |v| {
            let mut d = v[1].clone();
            for r in 0..4 {
                for c in 0..5 {
                    d[1 + r * 5 + c] = v[0][3 + r * 7 + c];
                }
            }
            d
        },
    );
    let two = [Input::new(3, 2, -2.0, 2.0), Input::new(3, 4, -2.0, 2.0)];
    reference_with(
        "concat_rows",
        0xC0B1,
        &two,
        EXACT,
        |t| {
            let mut out = Tensor::default();
            ops::concat_rows(&[&t[0], &t[1]], &mut out)?;
            Ok(out)
        },
        |v| v.concat(),
    );
    reference_with(
        "split_rows",
        0xC0B2,
        &[Input::new(2, 9, -2.0, 2.0)],
        EXACT,
        |t| {
            let like = |n| Tensor::zeros_on(t[0].device(), n, 1, t[0].dtype());
            let (mut a, mut b) = (like(7)?, like(11)?);
            ops::split_rows(&t[0], &mut [&mut a, &mut b])?;
            Ok(b)
        },
        |v| v[0][7..].to_vec(),
    );
    reference_with(
        "concat_batched_rows",
        0xC0B3,
        &two,
        EXACT,
        |t| {
            let mut out = Tensor::default();
            ops::concat_batched_rows(&[&t[0], &t[1]], &mut out)?;
            Ok(out)
        },
        |v| {
            (0..3)
                .flat_map(|r| [&v[0][r * 2..r * 2 + 2], &v[1][r * 4..r * 4 + 4]].concat())
                .collect()
        },
    );
    // N = 2, H = 2, W = 3, channels (1, 2).
    reference_with(
        "concat_nchw_channels",
        0xC0B4,
        &[Input::new(2, 6, -2.0, 2.0), Input::new(2, 12, -2.0, 2.0)],
        EXACT,
        |t| {
            let mut out = Tensor::default();
            ops::concat_nchw_channels(&[&t[0], &t[1]], (2, 3, 2, 3), &[1, 2], &mut out)?;
            Ok(out)
        },
        |v| {
            (0..2)
                .flat_map(|s| [&v[0][s * 6..(s + 1) * 6], &v[1][s * 12..(s + 1) * 12]].concat())
                .collect()
        },
    );
    reference_with(
        "concat_nchw_channels_backward",
        0xC0B5,
        &[Input::new(2, 18, -2.0, 2.0)],
        EXACT,
        |t| {
            let (mut a, mut b) = (Tensor::default(), Tensor::default());
            ops::concat_nchw_channels_backward(
                &t[0],
                (2, 3, 2, 3),
                &[1, 2],
                &mut [&mut a, &mut b],
            )?;
            Ok(b)
        },
        |v| {
            (0..2)
                .flat_map(|s| v[0][s * 18 + 6..(s + 1) * 18].to_vec())
                .collect()
        },
    );
}
