//! The codec quantizers against float64 math written here, on every device: vector
//! quantization by direct squared distances (with planted exact ties: a repeated codeword
//! split across the kernel's units, and distinct codewords equally far), finite scalar
//! quantization by its formula (with planted halves, out-of-range values and NaN), the
//! straight-through backward passes, empty inputs and the error cases.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{assert_close, gpu_devices, SplitMix64};

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// Squared distances of `x` to every codeword, in float64.
fn distances(x: &[f32], codebook: &[f32], d: usize) -> Vec<f64> {
    codebook
        .chunks_exact(d)
        .map(|c| {
            x.iter()
                .zip(c)
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum()
        })
        .collect()
}

/// The first index of the smallest distance (the lowest index on ties).
fn argmin(dist: &[f64]) -> usize {
    let mut best = 0;
    for (k, &v) in dist.iter().enumerate() {
        if v < dist[best] {
            best = k;
        }
    }
    best
}

#[test]
fn vq_encode_picks_the_nearest_codeword_lowest_index_on_ties() {
    // K = 300 > 256: codewords 5 and 261 are scored by different units of the GPU's cube
    // and merged, as are 7 and 290.
    let (n, k, d) = (41usize, 300usize, 24usize);
    let mut rng = SplitMix64::new(0xc0dec);
    let mut codebook = rng.uniform(k * d, -1.0, 1.0);
    let mut x = rng.uniform(n * d, -1.0, 1.0);
    let five: Vec<f32> = codebook[5 * d..6 * d].to_vec();
    codebook[261 * d..262 * d].copy_from_slice(&five);
    // Row 0 sits on the repeated codeword; row 1 at the origin, equally far from the two
    // shortest codewords 7 and 290 (every other has |c|^2 near 8).
    x[..d].copy_from_slice(&five);
    for (j, v) in x[d..2 * d].iter_mut().enumerate() {
        *v = if j == 3 { 0.001 } else { 0.0 };
    }
    for (at, axis) in [(7usize, 0usize), (290, 1)] {
        for j in 0..d {
            codebook[at * d + j] = if j == axis { 0.01 } else { 0.0 };
        }
    }
    // Row 2 sits on codeword 40.
    let forty: Vec<f32> = codebook[40 * d..41 * d].to_vec();
    x[2 * d..3 * d].copy_from_slice(&forty);
    let mut want = Vec::with_capacity(n);
    for r in 0..n {
        let dist = distances(&x[r * d..(r + 1) * d], &codebook, d);
        let best = argmin(&dist);
        // Apart from the planted ties, the data leaves no near-tie that rounding could flip.
        if r > 1 {
            let second = dist
                .iter()
                .enumerate()
                .filter(|&(kk, _)| kk != best)
                .map(|(_, &v)| v)
                .fold(f64::INFINITY, f64::min);
            // (FP32 scores of |c|^2 ~ 8 round at about 1e-6.)
            let gap = second - dist[best];
            assert!(gap > 1e-4, "row {r}: the data has a near-tie ({gap})");
        }
        want.push(best);
    }
    assert_eq!((want[0], want[1], want[2]), (5, 7, 40));
    for dev in devices() {
        let xt = Tensor::from_slice_on(dev, &x, n, d).unwrap();
        let cb = Tensor::from_slice_on(dev, &codebook, k, d).unwrap();
        let (mut idx, mut q) = (Tensor::default(), Tensor::default());
        ops::vq_encode_forward(&xt, &cb, &mut idx, &mut q).unwrap();
        assert_eq!(
            (idx.dims(), idx.dtype()),
            (&[n, 1][..], Dtype::I32),
            "{dev}"
        );
        assert_eq!((q.dims(), q.dtype()), (&[n, d][..], Dtype::F32), "{dev}");
        let got: Vec<usize> = idx
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&i| i as usize)
            .collect();
        assert_eq!(got, want, "{dev}: indices");
        let q = q.to_vec::<f32>().unwrap();
        for (r, &w) in want.iter().enumerate() {
            assert_eq!(
                &q[r * d..(r + 1) * d],
                &codebook[w * d..(w + 1) * d],
                "{dev} row {r}"
            );
        }
    }
}

#[test]
fn vq_encode_small_codebooks_and_empty_inputs() {
    // K = 1 (every row takes 0), K = 3 < the cube's units; N = 0 gives empty outputs.
    let d = 3;
    let codebook = [0.0f32, 0.0, 0.0, 4.0, 4.0, 4.0, -2.0, 1.0, 0.5];
    let x = [
        3.0f32, 3.5, 5.0, -1.0, 0.0, 0.0, 0.1, 0.0, -0.1, -3.0, 2.0, 1.0,
    ];
    let n = x.len() / d;
    for dev in devices() {
        let xt = Tensor::from_slice_on(dev, &x, n, d).unwrap();
        for (kk, want) in [(1usize, [0i32, 0, 0, 0]), (3, [1, 0, 0, 2])] {
            let cb = Tensor::from_slice_on(dev, &codebook[..kk * d], kk, d).unwrap();
            let (mut idx, mut q) = (Tensor::default(), Tensor::default());
            ops::vq_encode_forward(&xt, &cb, &mut idx, &mut q).unwrap();
            assert_eq!(idx.to_vec::<i32>().unwrap(), want, "{dev} K = {kk}");
        }
        let empty = Tensor::zeros_on(dev, 0, d, Dtype::F32).unwrap();
        let cb = Tensor::from_slice_on(dev, &codebook, 3, d).unwrap();
        let (mut idx, mut q) = (Tensor::default(), Tensor::default());
        ops::vq_encode_forward(&empty, &cb, &mut idx, &mut q).unwrap();
        assert_eq!((idx.dims(), q.dims()), (&[0, 1][..], &[0, d][..]), "{dev}");
        assert_eq!((idx.device(), q.device()), (dev, dev));
    }
}

/// FSQ of one value on `l` levels in float64: the level index and the quantized value.
fn fsq64(x: f32, l: i32) -> (i64, f64) {
    let v = if x > -1.0 {
        f64::from(x).min(1.0)
    } else {
        -1.0
    };
    let t = (v + 1.0) / 2.0 * f64::from(l - 1);
    let i = t.round();
    (i as i64, i / (f64::from(l - 1) / 2.0) - 1.0)
}

#[test]
fn fsq_quantize_follows_its_formula() {
    let levels = [8i32, 5, 5, 5, 3, 2];
    let d = levels.len();
    let n = 53;
    let mut rng = SplitMix64::new(0xf5a);
    let mut x = rng.uniform(n * d, -1.3, 1.3);
    // No random value within rounding of a half-way point (f32 and f64 could round apart).
    for (i, v) in x.iter_mut().enumerate() {
        let l = f64::from(levels[i % d] - 1);
        let t = (f64::from(v.clamp(-1.0, 1.0)) + 1.0) / 2.0 * l;
        if ((t - t.floor()) - 0.5).abs() < 1e-4 {
            *v += 1e-3;
        }
    }
    // Planted: exact halves (5 levels: t = 2 (v + 1) is k + 0.5 at v = -0.75, -0.25, 0.25,
    // 0.75, which round up), the bounds, values past them, NaN and infinities.
    let planted = [
        (1, -0.75f32),
        (2, 0.25),
        (3, 0.75),
        (5, 0.0), // 2 levels: t = 0.5 rounds up to 1
        (0, 1.0),
        (4, -1.0),
        (6 + 1, 7.5),
        (6 + 2, -9.0),
        (6 + 3, f32::NAN),
        (6 + 4, f32::INFINITY),
        (6 + 5, f32::NEG_INFINITY),
    ];
    for &(at, v) in &planted {
        x[at] = v;
    }
    let mut want_q = vec![0.0f32; n * d];
    let mut want_p = vec![0i32; n];
    for r in 0..n {
        let (mut code, mut stride) = (0i64, 1i64);
        for (j, &l) in levels.iter().enumerate() {
            let (i, q) = fsq64(x[r * d + j], l);
            want_q[r * d + j] = q as f32;
            code += i * stride;
            stride *= i64::from(l);
        }
        want_p[r] = code as i32;
    }
    assert_eq!(want_p[0] % 8, 7, "x[0] = 1 takes the top of 8 levels");
    for dev in devices() {
        let xt = Tensor::from_slice_on(dev, &x, n, d).unwrap();
        let lt = Tensor::from_slice_on(dev, &levels, d, 1).unwrap();
        let (mut q, mut p) = (Tensor::default(), Tensor::default());
        ops::fsq_quantize_forward(&xt, &lt, &mut q, &mut p).unwrap();
        assert_eq!((p.dims(), p.dtype()), (&[n, 1][..], Dtype::I32), "{dev}");
        assert_eq!(p.to_vec::<i32>().unwrap(), want_p, "{dev}: packed indices");
        assert_close(
            &format!("fsq {dev}"),
            &want_q,
            &q.to_vec::<f32>().unwrap(),
            (1e-6, 1e-6),
        );
    }
}

#[test]
fn straight_through_backward_copies_the_gradient() {
    let g: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    for dev in devices() {
        let dq = Tensor::from_slice_on(dev, &g, 4, 3).unwrap();
        let mut dx = Tensor::from_slice_on(dev, &[9.0f32; 2], 1, 2).unwrap();
        ops::vq_encode_backward(&dq, &mut dx).unwrap();
        assert_eq!(
            (dx.dims(), dx.to_vec::<f32>().unwrap()),
            (&[4, 3][..], g.clone())
        );
        let mut dx = Tensor::default();
        ops::fsq_quantize_backward(&dq, &mut dx).unwrap();
        assert_eq!(
            (dx.dims(), dx.to_vec::<f32>().unwrap()),
            (&[4, 3][..], g.clone())
        );
        assert_eq!(dx.device(), dev);
    }
}

#[test]
fn codec_errors_name_the_operand() {
    let x = Tensor::from_slice(&[0.5f32; 6], 2, 3).unwrap();
    let (mut a, mut b) = (Tensor::default(), Tensor::default());
    let shape = |r: brotensor::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::Shape { .. })), "{what}: {r:?}");
    };
    let cb_wide = Tensor::from_slice(&[0.0f32; 8], 2, 4).unwrap();
    shape(
        ops::vq_encode_forward(&x, &cb_wide, &mut a, &mut b),
        "codeword width",
    );
    let cb_empty = Tensor::zeros(0, 3, Dtype::F32).unwrap();
    shape(
        ops::vq_encode_forward(&x, &cb_empty, &mut a, &mut b),
        "no codeword",
    );
    let x16 = x.to_dtype(Dtype::F16).unwrap();
    let cb = Tensor::from_slice(&[0.0f32; 3], 1, 3).unwrap();
    let r = ops::vq_encode_forward(&x16, &cb, &mut a, &mut b);
    assert!(matches!(r, Err(Error::Dtype { operand: "x", .. })), "{r:?}");
    let r = ops::vq_encode_backward(&x16, &mut a);
    assert!(
        matches!(
            r,
            Err(Error::Dtype {
                operand: "dquantized",
                ..
            })
        ),
        "{r:?}"
    );

    let fsq = |levels: &[i32], a: &mut Tensor, b: &mut Tensor| {
        let lt = Tensor::from_slice(levels, levels.len(), 1).unwrap();
        ops::fsq_quantize_forward(&x, &lt, a, b)
    };
    let r = fsq(&[4, 1, 3], &mut a, &mut b);
    assert!(
        matches!(&r, Err(Error::InvalidArgument { reason, .. }) if reason.contains("levels[1] = 1")),
        "{r:?}"
    );
    let r = fsq(&[65_536, 65_536, 2], &mut a, &mut b);
    assert!(
        matches!(r, Err(Error::InvalidArgument { .. })),
        "packed overflow: {r:?}"
    );
    shape(fsq(&[4, 4], &mut a, &mut b), "levels count");
    let lf = Tensor::from_slice(&[4.0f32, 4.0, 4.0], 3, 1).unwrap();
    let r = ops::fsq_quantize_forward(&x, &lf, &mut a, &mut b);
    assert!(
        matches!(
            r,
            Err(Error::Dtype {
                operand: "levels",
                ..
            })
        ),
        "{r:?}"
    );
    // The largest products that fit are accepted (2 (2^30 - 1) = i32::MAX - 1), one more
    // level is refused.
    let x2 = Tensor::from_slice(&[0.5f32; 4], 2, 2).unwrap();
    let lt = Tensor::from_slice(&[2i32, 1_073_741_823], 2, 1).unwrap();
    ops::fsq_quantize_forward(&x2, &lt, &mut a, &mut b).unwrap();
    let lt = Tensor::from_slice(&[2i32, 1_073_741_824], 2, 1).unwrap();
    let r = ops::fsq_quantize_forward(&x2, &lt, &mut a, &mut b);
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
}
