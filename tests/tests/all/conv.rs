//! The convolution family against float64 loops written here from the definitions (direct
//! sums over the taps; the transposed convolution from its scatter formula, not as an
//! adjoint), on every device and float dtype, plus the adjoint identity, the accumulation
//! rules, zero-size batches and the error cases.

use brotensor::ops::{self, Conv1dSpec, Conv2dSpec, PadMode};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::{reference_with, Check, Input};

/// One 2-D convolution case: input dims, output channels, spec.
#[derive(Clone, Copy, Debug)]
struct Case {
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    spec: Conv2dSpec,
}

impl Case {
    fn out(&self) -> [usize; 2] {
        let s = &self.spec;
        let size = |a: usize, i: usize| {
            (i + 2 * s.padding[a] - s.dilation[a] * (s.kernel[a] - 1) - 1) / s.stride[a] + 1
        };
        [size(0, self.h), size(1, self.w)]
    }
    fn x_len(&self) -> usize {
        self.c_in * self.h * self.w
    }
    fn y_len(&self) -> usize {
        let [ho, wo] = self.out();
        self.c_out * ho * wo
    }
    fn w_row(&self) -> usize {
        self.c_in / self.spec.groups * self.spec.kernel[0] * self.spec.kernel[1]
    }
    fn dims(&self) -> (usize, usize, usize, usize) {
        (self.n, self.c_in, self.h, self.w)
    }

    /// Calls `f(xi, wi, yi)` for every tap of every output element that reads an input pixel
    /// inside the image: `y[yi] += x[xi] w[wi]` is the convolution.
    fn taps(&self, mut f: impl FnMut(usize, usize, usize)) {
        let s = &self.spec;
        let [ho, wo] = self.out();
        let (cg_in, cg_out) = (self.c_in / s.groups, self.c_out / s.groups);
        for n in 0..self.n {
            for o in 0..self.c_out {
                let g = o / cg_out;
                for oy in 0..ho {
                    for ox in 0..wo {
                        let yi = ((n * self.c_out + o) * ho + oy) * wo + ox;
                        for ci in 0..cg_in {
                            for ky in 0..s.kernel[0] {
                                for kx in 0..s.kernel[1] {
                                    let iy = (oy * s.stride[0] + ky * s.dilation[0]) as isize
                                        - s.padding[0] as isize;
                                    let ix = (ox * s.stride[1] + kx * s.dilation[1]) as isize
                                        - s.padding[1] as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= self.h as isize
                                        || ix >= self.w as isize
                                    {
                                        continue;
                                    }
                                    let c = g * cg_in + ci;
                                    let xi = ((n * self.c_in + c) * self.h + iy as usize) * self.w
                                        + ix as usize;
                                    let wi =
                                        ((o * cg_in + ci) * s.kernel[0] + ky) * s.kernel[1] + kx;
                                    f(xi, wi, yi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn forward(&self, x: &[f64], w: &[f64], b: Option<&[f64]>) -> Vec<f64> {
        let [ho, wo] = self.out();
        let mut y = vec![0.0; self.n * self.y_len()];
        if let Some(b) = b {
            for (i, v) in y.iter_mut().enumerate() {
                *v = b[(i / (ho * wo)) % self.c_out];
            }
        }
        self.taps(|xi, wi, yi| y[yi] += x[xi] * w[wi]);
        y
    }

    fn backward_input(&self, w: &[f64], dy: &[f64]) -> Vec<f64> {
        let mut dx = vec![0.0; self.n * self.x_len()];
        self.taps(|xi, wi, yi| dx[xi] += dy[yi] * w[wi]);
        dx
    }

    fn backward_weight(&self, x: &[f64], dy: &[f64], dw0: &[f64]) -> Vec<f64> {
        let mut dw = dw0.to_vec();
        self.taps(|xi, wi, yi| dw[wi] += x[xi] * dy[yi]);
        dw
    }
}

/// `db0[c] + sum over n and pixels of dy[n, c]`.
fn bias_grad(dy: &[f64], (n, c, pixels): (usize, usize, usize), db0: &[f64]) -> Vec<f64> {
    let mut db = db0.to_vec();
    for b in 0..n {
        for (ch, d) in db.iter_mut().enumerate() {
            *d += dy[(b * c + ch) * pixels..][..pixels].iter().sum::<f64>();
        }
    }
    db
}

fn spec(
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Conv2dSpec {
    Conv2dSpec {
        kernel,
        stride,
        padding,
        dilation,
        groups,
    }
}

/// Ragged cases: per-axis stride, padding and dilation with two groups; depthwise; a 1x1
/// (the batched-product path); a kernel larger than its input, reached through padding.
fn cases() -> Vec<(&'static str, Case)> {
    vec![
        (
            "grouped ragged",
            Case {
                n: 2,
                c_in: 4,
                h: 5,
                w: 6,
                c_out: 6,
                spec: spec([3, 2], [2, 1], [1, 0], [1, 2], 2),
            },
        ),
        (
            "depthwise",
            Case {
                n: 1,
                c_in: 3,
                h: 4,
                w: 5,
                c_out: 3,
                spec: spec([3, 3], [1, 1], [1, 1], [1, 1], 3),
            },
        ),
        (
            "1x1",
            Case {
                n: 2,
                c_in: 3,
                h: 3,
                w: 4,
                c_out: 5,
                spec: spec([1, 1], [1, 1], [0, 0], [1, 1], 1),
            },
        ),
        (
            // 576 patch rows over 576 pixels: the CPU takes two tiles of pixels.
            "two CPU tiles",
            Case {
                n: 1,
                c_in: 64,
                h: 24,
                w: 24,
                c_out: 2,
                spec: spec([3, 3], [1, 1], [1, 1], [1, 1], 1),
            },
        ),
        (
            "kernel over the input",
            Case {
                n: 2,
                c_in: 2,
                h: 2,
                w: 3,
                c_out: 3,
                spec: spec([3, 4], [1, 2], [2, 2], [1, 1], 1),
            },
        ),
    ]
}

#[test]
fn conv2d_forward_against_float64() {
    for (name, c) in cases() {
        forward_against_float64(name, c);
    }
}

/// The forward of `c` against float64 on every device and dtype.
fn forward_against_float64(name: &str, c: Case) {
    let inputs = [
        Input::new(c.n, c.x_len(), -1.0, 1.0),
        Input::new(c.c_out, c.w_row(), -1.0, 1.0),
        Input::new(c.c_out, 1, -1.0, 1.0),
    ];
    reference_with(
        &format!("conv2d_forward {name}"),
        11,
        &inputs,
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::conv2d_forward(
                &t[0],
                &t[1],
                Some(&t[2]),
                c.dims(),
                c.c_out,
                &c.spec,
                &mut y,
            )?;
            Ok(y)
        },
        |v| c.forward(&v[0], &v[1], Some(&v[2])),
    );
}

#[test]
fn conv2d_backward_input_against_float64() {
    for (name, c) in cases() {
        let inputs = [
            Input::new(c.c_out, c.w_row(), -1.0, 1.0),
            Input::new(c.n, c.y_len(), -1.0, 1.0),
        ];
        reference_with(
            &format!("conv2d_backward_input {name}"),
            12,
            &inputs,
            Check::default(),
            |t| {
                let mut dx = Tensor::default();
                ops::conv2d_backward_input(&t[0], &t[1], c.dims(), c.c_out, &c.spec, &mut dx)?;
                Ok(dx)
            },
            |v| c.backward_input(&v[0], &v[1]),
        );
    }
}

#[test]
fn conv2d_backward_weight_and_bias_accumulate_against_float64() {
    for (name, c) in cases() {
        backward_weight_against_float64(name, c);
    }
}

/// More output columns than one GPU tile of patches holds (576 patch rows over 3 x 10000
/// output pixels, past 2^24 elements): the GPU's tiles of columns, which run across batch
/// entries, start and end inside entries, forward and for the weight gradient.
#[test]
fn conv2d_tiles_span_batch_entries() {
    let c = Case {
        n: 3,
        c_in: 64,
        h: 100,
        w: 100,
        c_out: 2,
        spec: spec([3, 3], [1, 1], [1, 1], [1, 1], 1),
    };
    forward_against_float64("tiles across entries", c);
    backward_weight_against_float64("tiles across entries", c);
}

/// The weight and bias gradients of `c`, added to non-zero ones, against float64 on every
/// device and dtype.
fn backward_weight_against_float64(name: &str, c: Case) {
    let [ho, wo] = c.out();
    let inputs = [
        Input::new(c.n, c.x_len(), -1.0, 1.0),
        Input::new(c.n, c.y_len(), -1.0, 1.0),
        // Non-zero starting gradients: the passes add to them.
        Input::new(c.c_out, c.w_row(), -1.0, 1.0),
        Input::new(c.c_out, 1, -1.0, 1.0),
    ];
    reference_with(
        &format!("conv2d_backward_weight {name}"),
        13,
        &inputs,
        Check::default(),
        |t| {
            let mut dw = t[2].try_clone()?;
            ops::conv2d_backward_weight(&t[0], &t[1], c.dims(), c.c_out, &c.spec, &mut dw)?;
            Ok(dw)
        },
        |v| c.backward_weight(&v[0], &v[1], &v[2]),
    );
    reference_with(
        &format!("conv2d_backward_bias {name}"),
        14,
        &inputs,
        Check::default(),
        |t| {
            let mut db = t[3].try_clone()?;
            ops::conv2d_backward_bias(&t[1], (c.n, c.c_out, ho, wo), &mut db)?;
            Ok(db)
        },
        |v| bias_grad(&v[1], (c.n, c.c_out, ho * wo), &v[3]),
    );
}

/// `<conv(x), y> = <x, conv_backward_input(y)>` and `<conv(x), y> = <w, dW(x, y)>` in
/// float64 for the library's FP32 results on the CPU, and the reference's own passes agree
/// with each other the same way.
#[test]
fn conv2d_passes_are_adjoint() {
    for (name, c) in cases() {
        let mut rng = brotensor_tests::SplitMix64::new(5);
        let x = rng.uniform(c.n * c.x_len(), -1.0, 1.0);
        let w = rng.uniform(c.c_out * c.w_row(), -1.0, 1.0);
        let y = rng.uniform(c.n * c.y_len(), -1.0, 1.0);
        let dot = |a: &[f32], b: &[f32]| -> f64 {
            a.iter()
                .zip(b)
                .map(|(&p, &q)| f64::from(p) * f64::from(q))
                .sum()
        };
        let xt = Tensor::from_slice(&x, c.n, c.x_len()).unwrap();
        let wt = Tensor::from_slice(&w, c.c_out, c.w_row()).unwrap();
        let yt = Tensor::from_slice(&y, c.n, c.y_len()).unwrap();
        let (mut cx, mut aty) = (Tensor::default(), Tensor::default());
        ops::conv2d_forward(&xt, &wt, None, c.dims(), c.c_out, &c.spec, &mut cx).unwrap();
        ops::conv2d_backward_input(&wt, &yt, c.dims(), c.c_out, &c.spec, &mut aty).unwrap();
        let mut dw = Tensor::zeros(c.c_out, c.w_row(), Dtype::F32).unwrap();
        ops::conv2d_backward_weight(&xt, &yt, c.dims(), c.c_out, &c.spec, &mut dw).unwrap();
        let (cx, aty, dw) = (
            cx.to_vec::<f32>().unwrap(),
            aty.to_vec::<f32>().unwrap(),
            dw.to_vec::<f32>().unwrap(),
        );
        let lhs = dot(&cx, &y);
        let scale = cx.iter().map(|v| v.abs() as f64).sum::<f64>().max(1.0);
        for (what, rhs) in [("input", dot(&x, &aty)), ("weight", dot(&w, &dw))] {
            assert!(
                (lhs - rhs).abs() <= 1e-5 * scale,
                "{name}: <conv x, y> = {lhs} but <.., {what} gradient> = {rhs}"
            );
        }
        // The float64 reference passes are adjoint too.
        let wide = |v: &[f32]| v.iter().map(|&p| f64::from(p)).collect::<Vec<_>>();
        let (x64, w64, y64) = (wide(&x), wide(&w), wide(&y));
        let f: f64 = c
            .forward(&x64, &w64, None)
            .iter()
            .zip(&y64)
            .map(|(a, b)| a * b)
            .sum();
        let b: f64 = c
            .backward_input(&w64, &y64)
            .iter()
            .zip(&x64)
            .map(|(a, b)| a * b)
            .sum();
        assert!(
            (f - b).abs() <= 1e-9 * scale,
            "{name}: reference adjoint {f} vs {b}"
        );
    }
}

/// A transposed 2-D convolution case: input dims, output channels, spec, output padding.
struct TCase {
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    spec: Conv2dSpec,
    output_padding: [usize; 2],
}

impl TCase {
    fn out(&self) -> [usize; 2] {
        let s = &self.spec;
        let size = |a: usize, i: usize| {
            (i - 1) * s.stride[a] + s.dilation[a] * (s.kernel[a] - 1) + self.output_padding[a] + 1
                - 2 * s.padding[a]
        };
        [size(0, self.h), size(1, self.w)]
    }
    fn w_row(&self) -> usize {
        self.c_out / self.spec.groups * self.spec.kernel[0] * self.spec.kernel[1]
    }
    fn y_len(&self) -> usize {
        let [ho, wo] = self.out();
        self.c_out * ho * wo
    }
    fn dims(&self) -> (usize, usize, usize, usize) {
        (self.n, self.c_in, self.h, self.w)
    }

    /// The C++ scatter: `x[n, ci, i, j]` adds `x w[ci, o_local, ky, kx]` into output pixel
    /// `(i s - p + ky d, j s - p + kx d)` of channel `g C_out/groups + o_local`, where
    /// inside the output; `f(xi, wi, yi)` for each such term.
    fn scatter(&self, mut f: impl FnMut(usize, usize, usize)) {
        let s = &self.spec;
        let [ho, wo] = self.out();
        let (cg_in, cg_out) = (self.c_in / s.groups, self.c_out / s.groups);
        for n in 0..self.n {
            for ci in 0..self.c_in {
                let g = ci / cg_in;
                for i in 0..self.h {
                    for j in 0..self.w {
                        let xi = ((n * self.c_in + ci) * self.h + i) * self.w + j;
                        for ol in 0..cg_out {
                            for ky in 0..s.kernel[0] {
                                for kx in 0..s.kernel[1] {
                                    let oy = (i * s.stride[0] + ky * s.dilation[0]) as isize
                                        - s.padding[0] as isize;
                                    let ox = (j * s.stride[1] + kx * s.dilation[1]) as isize
                                        - s.padding[1] as isize;
                                    if oy < 0 || ox < 0 || oy >= ho as isize || ox >= wo as isize {
                                        continue;
                                    }
                                    let o = g * cg_out + ol;
                                    let yi = ((n * self.c_out + o) * ho + oy as usize) * wo
                                        + ox as usize;
                                    let wi =
                                        ((ci * cg_out + ol) * s.kernel[0] + ky) * s.kernel[1] + kx;
                                    f(xi, wi, yi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn transposed_cases() -> Vec<(&'static str, TCase)> {
    vec![
        (
            "grouped strided",
            TCase {
                n: 2,
                c_in: 4,
                h: 3,
                w: 2,
                c_out: 6,
                spec: spec([3, 2], [2, 2], [1, 0], [1, 1], 2),
                output_padding: [1, 1],
            },
        ),
        (
            // output_padding >= stride, allowed below the dilation (as torch).
            "output padding below the dilation",
            TCase {
                n: 1,
                c_in: 2,
                h: 3,
                w: 4,
                c_out: 3,
                spec: spec([2, 2], [1, 1], [0, 1], [3, 2], 1),
                output_padding: [2, 1],
            },
        ),
    ]
}

#[test]
fn conv_transpose2d_passes_against_float64() {
    for (name, c) in transposed_cases() {
        let [ho, wo] = c.out();
        let x_len = c.c_in * c.h * c.w;
        let inputs = [
            Input::new(c.n, x_len, -1.0, 1.0),
            Input::new(c.c_in, c.w_row(), -1.0, 1.0),
            Input::new(c.c_out, 1, -1.0, 1.0),
            Input::new(c.n, c.y_len(), -1.0, 1.0),
            Input::new(c.c_in, c.w_row(), -1.0, 1.0),
        ];
        let op = c.output_padding;
        reference_with(
            &format!("conv_transpose2d_forward {name}"),
            21,
            &inputs,
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::conv_transpose2d_forward(
                    &t[0],
                    &t[1],
                    Some(&t[2]),
                    c.dims(),
                    c.c_out,
                    &c.spec,
                    op,
                    &mut y,
                )?;
                Ok(y)
            },
            |v| {
                let mut y: Vec<f64> = (0..c.n * c.y_len())
                    .map(|i| v[2][(i / (ho * wo)) % c.c_out])
                    .collect();
                c.scatter(|xi, wi, yi| y[yi] += v[0][xi] * v[1][wi]);
                y
            },
        );
        reference_with(
            &format!("conv_transpose2d_backward_input {name}"),
            22,
            &inputs,
            Check::default(),
            |t| {
                let mut dx = Tensor::default();
                ops::conv_transpose2d_backward_input(
                    &t[1],
                    &t[3],
                    c.dims(),
                    c.c_out,
                    &c.spec,
                    op,
                    &mut dx,
                )?;
                Ok(dx)
            },
            |v| {
                let mut dx = vec![0.0; c.n * x_len];
                c.scatter(|xi, wi, yi| dx[xi] += v[3][yi] * v[1][wi]);
                dx
            },
        );
        reference_with(
            &format!("conv_transpose2d_backward_weight {name}"),
            23,
            &inputs,
            Check::default(),
            |t| {
                let mut dw = t[4].try_clone()?;
                ops::conv_transpose2d_backward_weight(
                    &t[0],
                    &t[3],
                    c.dims(),
                    c.c_out,
                    &c.spec,
                    op,
                    &mut dw,
                )?;
                Ok(dw)
            },
            |v| {
                let mut dw = v[4].clone();
                c.scatter(|xi, wi, yi| dw[wi] += v[0][xi] * v[3][yi]);
                dw
            },
        );
        reference_with(
            &format!("conv_transpose2d_backward_bias {name}"),
            24,
            &inputs,
            Check::default(),
            |t| {
                let mut db = t[2].try_clone()?;
                ops::conv_transpose2d_backward_bias(&t[3], (c.n, c.c_out, ho, wo), &mut db)?;
                Ok(db)
            },
            |v| bias_grad(&v[3], (c.n, c.c_out, ho * wo), &v[2]),
        );
    }
}

/// The 1-D forms are the 2-D ones with one row: each against the 2-D float64 reference of
/// that case, and `conv_transpose1d` against its scatter formula.
#[test]
fn conv1d_family_against_float64() {
    let (n, c_in, l, c_out) = (2, 4, 9, 6);
    let s1 = Conv1dSpec {
        kernel: [3],
        stride: [2],
        padding: [2],
        dilation: [2],
        groups: 2,
    };
    let c = Case {
        n,
        c_in,
        h: 1,
        w: l,
        c_out,
        spec: spec([1, 3], [1, 2], [0, 2], [1, 2], 2),
    };
    let l_out = c.out()[1];
    let inputs = [
        Input::new(n, c_in * l, -1.0, 1.0),
        Input::new(c_out, c.w_row(), -1.0, 1.0),
        Input::new(c_out, 1, -1.0, 1.0),
        Input::new(n, c_out * l_out, -1.0, 1.0),
        Input::new(c_out, c.w_row(), -1.0, 1.0),
    ];
    let dims = (n, c_in, l);
    reference_with(
        "conv1d_forward",
        31,
        &inputs,
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::conv1d_forward(&t[0], &t[1], Some(&t[2]), dims, c_out, &s1, &mut y)?;
            Ok(y)
        },
        |v| c.forward(&v[0], &v[1], Some(&v[2])),
    );
    reference_with(
        "conv1d_backward_input",
        32,
        &inputs,
        Check::default(),
        |t| {
            let mut dx = Tensor::default();
            ops::conv1d_backward_input(&t[1], &t[3], dims, c_out, &s1, &mut dx)?;
            Ok(dx)
        },
        |v| c.backward_input(&v[1], &v[3]),
    );
    reference_with(
        "conv1d_backward_weight",
        33,
        &inputs,
        Check::default(),
        |t| {
            let mut dw = t[4].try_clone()?;
            ops::conv1d_backward_weight(&t[0], &t[3], dims, c_out, &s1, &mut dw)?;
            Ok(dw)
        },
        |v| c.backward_weight(&v[0], &v[3], &v[4]),
    );
    reference_with(
        "conv1d_backward_bias",
        34,
        &inputs,
        Check::default(),
        |t| {
            let mut db = t[2].try_clone()?;
            ops::conv1d_backward_bias(&t[3], (n, c_out, l_out), &mut db)?;
            Ok(db)
        },
        |v| bias_grad(&v[3], (n, c_out, l_out), &v[2]),
    );

    // conv_transpose1d: l_out = l stride - padding + kl dilation, scattered.
    let t = TCase {
        n,
        c_in,
        h: 1,
        w: l,
        c_out,
        spec: spec([1, 3], [1, 2], [0, 2], [1, 2], 2),
        output_padding: [0, 1],
    };
    let lt = t.out()[1];
    let tin = [
        Input::new(n, c_in * l, -1.0, 1.0),
        Input::new(c_in, t.w_row(), -1.0, 1.0),
        Input::new(c_out, 1, -1.0, 1.0),
        Input::new(n, c_out * lt, -1.0, 1.0),
        Input::new(c_in, t.w_row(), -1.0, 1.0),
    ];
    reference_with(
        "conv_transpose1d_forward",
        35,
        &tin,
        Check::default(),
        |v| {
            let mut y = Tensor::default();
            ops::conv_transpose1d_forward(&v[0], &v[1], Some(&v[2]), dims, c_out, &s1, 1, &mut y)?;
            Ok(y)
        },
        |v| {
            let mut y: Vec<f64> = (0..n * c_out * lt)
                .map(|i| v[2][(i / lt) % c_out])
                .collect();
            t.scatter(|xi, wi, yi| y[yi] += v[0][xi] * v[1][wi]);
            y
        },
    );
    reference_with(
        "conv_transpose1d_backward_input",
        36,
        &tin,
        Check::default(),
        |v| {
            let mut dx = Tensor::default();
            ops::conv_transpose1d_backward_input(&v[1], &v[3], dims, c_out, &s1, 1, &mut dx)?;
            Ok(dx)
        },
        |v| {
            let mut dx = vec![0.0; n * c_in * l];
            t.scatter(|xi, wi, yi| dx[xi] += v[3][yi] * v[1][wi]);
            dx
        },
    );
    reference_with(
        "conv_transpose1d_backward_weight",
        37,
        &tin,
        Check::default(),
        |v| {
            let mut dw = v[4].try_clone()?;
            ops::conv_transpose1d_backward_weight(&v[0], &v[3], dims, c_out, &s1, 1, &mut dw)?;
            Ok(dw)
        },
        |v| {
            let mut dw = v[4].clone();
            t.scatter(|xi, wi, yi| dw[wi] += v[0][xi] * v[3][yi]);
            dw
        },
    );
    reference_with(
        "conv_transpose1d_backward_bias",
        38,
        &tin,
        Check::default(),
        |v| {
            let mut db = v[2].try_clone()?;
            ops::conv_transpose1d_backward_bias(&v[3], (n, c_out, lt), &mut db)?;
            Ok(db)
        },
        |v| bias_grad(&v[3], (n, c_out, lt), &v[2]),
    );
}

/// The padded sample `j` of a row of `len` padded by `left` reads, or `None` for a zero:
/// written from the mode definitions.
pub(crate) fn pad_source(mode: PadMode, j: isize, len: isize) -> Option<usize> {
    let i = match mode {
        PadMode::Zero => j,
        PadMode::Reflect if j < 0 => -j,
        PadMode::Reflect if j >= len => 2 * (len - 1) - j,
        PadMode::Reflect => j,
        PadMode::Replicate => j.clamp(0, len - 1),
    };
    (0..len).contains(&i).then_some(i as usize)
}

#[test]
fn pad1d_forward_and_backward_against_float64() {
    let (n, c, l) = (2, 3, 5);
    for (mode, (left, right)) in [
        (PadMode::Zero, (3, 1)),
        (PadMode::Reflect, (4, 2)),
        (PadMode::Replicate, (3, 4)),
    ] {
        let out_len = l + left + right;
        let inputs = [
            Input::new(n, c * l, -1.0, 1.0),
            Input::new(n, c * out_len, -1.0, 1.0),
        ];
        let dims = (n, c, l);
        reference_with(
            &format!("pad1d_forward {mode:?}"),
            41,
            &inputs,
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::pad1d_forward(&t[0], dims, (left, right), mode, &mut y)?;
                Ok(y)
            },
            |v| {
                (0..n * c * out_len)
                    .map(|i| {
                        let (r, j) = (i / out_len, i % out_len);
                        pad_source(mode, j as isize - left as isize, l as isize)
                            .map_or(0.0, |s| v[0][r * l + s])
                    })
                    .collect()
            },
        );
        reference_with(
            &format!("pad1d_backward {mode:?}"),
            42,
            &inputs,
            Check::default(),
            |t| {
                let mut dx = Tensor::default();
                ops::pad1d_backward(&t[1], dims, (left, right), mode, &mut dx)?;
                Ok(dx)
            },
            |v| {
                let mut dx = vec![0.0; n * c * l];
                for r in 0..n * c {
                    for j in 0..out_len {
                        if let Some(s) = pad_source(mode, j as isize - left as isize, l as isize) {
                            dx[r * l + s] += v[1][r * out_len + j];
                        }
                    }
                }
                dx
            },
        );
    }
}

/// Two streaming steps against one causal convolution over the concatenated input (zero
/// history), computed in float64 here; the state after the steps is checked too.
#[test]
fn causal_conv1d_update_against_float64() {
    let (n, c, k, dil) = (2, 3, 3, 2);
    let s = (k - 1) * dil;
    let steps = [4usize, 1];
    let total: usize = steps.iter().sum();
    let inputs = [
        Input::new(n, c * total, -1.0, 1.0),
        Input::new(c, k, -1.0, 1.0),
        Input::new(c, 1, -1.0, 1.0),
    ];
    // Output: the two steps' outputs then the final state, row (n, c) by row.
    let want = |v: &[Vec<f64>]| -> Vec<f64> {
        let mut out = Vec::new();
        let mut states = Vec::new();
        for r in 0..n * c {
            let ch = r % c;
            let sig = |t: isize| {
                if t < 0 {
                    0.0
                } else {
                    v[0][r * total + t as usize]
                }
            };
            for t in 0..total as isize {
                let mut acc = v[2][ch];
                for kl in 0..k {
                    acc += v[1][ch * k + kl] * sig(t - ((k - 1 - kl) * dil) as isize);
                }
                out.push(acc);
            }
            states.extend((0..s).map(|i| sig((total - s + i) as isize)));
        }
        // Reorder to the test's layout: step 1 (rows of 4), step 2 (rows of 1), state.
        let mut y = Vec::new();
        let mut first = 0;
        for &len in &steps {
            for r in 0..n * c {
                y.extend_from_slice(&out[r * total + first..][..len]);
            }
            first += len;
        }
        y.extend(states);
        y
    };
    reference_with(
        "causal_conv1d_update",
        51,
        &inputs,
        Check::default(),
        |t| {
            let dev = t[0].device();
            let dtype = t[0].dtype();
            let mut state = Tensor::zeros_on(dev, n, c * s, Dtype::F32)?.to_dtype(dtype)?;
            let host = t[0].to_dtype(Dtype::F32)?.to_vec::<f32>()?;
            let mut parts = Vec::new();
            let mut first = 0;
            for &len in &steps {
                let chunk: Vec<f32> = (0..n * c)
                    .flat_map(|r| host[r * total + first..][..len].to_vec())
                    .collect();
                let xs = Tensor::from_slice_on(dev, &chunk, n, c * len)?.to_dtype(dtype)?;
                let mut y = Tensor::default();
                ops::causal_conv1d_update(
                    &xs,
                    &t[1],
                    Some(&t[2]),
                    (n, c, len),
                    k,
                    dil,
                    &mut state,
                    &mut y,
                )?;
                parts.extend(y.to_dtype(Dtype::F32)?.to_vec::<f32>()?);
                first += len;
            }
            parts.extend(state.to_dtype(Dtype::F32)?.to_vec::<f32>()?);
            Tensor::from_slice_on(dev, &parts, 1, parts.len())?.to_dtype(dtype)
        },
        want,
    );
}

#[test]
fn zero_size_batches_give_empty_outputs_and_leave_gradients() {
    for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        let c = spec([3, 3], [1, 1], [1, 1], [1, 1], 1);
        let x = Tensor::zeros_on(dev, 0, 2 * 4 * 4, Dtype::F32).unwrap();
        let w = Tensor::from_slice_on(dev, &[0.5f32; 3 * 18], 3, 18).unwrap();
        let mut y = Tensor::default();
        ops::conv2d_forward(&x, &w, None, (0, 2, 4, 4), 3, &c, &mut y).unwrap();
        assert_eq!(y.dims(), [0, 3 * 16], "{dev}");
        let mut dw = Tensor::from_slice_on(dev, &[1.5f32; 3 * 18], 3, 18).unwrap();
        ops::conv2d_backward_weight(&x, &y, (0, 2, 4, 4), 3, &c, &mut dw).unwrap();
        assert!(
            dw.to_vec::<f32>().unwrap().iter().all(|&v| v == 1.5),
            "{dev}: dw kept"
        );
        let mut dx = Tensor::default();
        ops::conv2d_backward_input(&w, &y, (0, 2, 4, 4), 3, &c, &mut dx).unwrap();
        assert_eq!(dx.dims(), [0, 32], "{dev}");
        // No output channels: the input gradient is zero, over any old contents.
        let w0 = Tensor::zeros_on(dev, 0, 18, Dtype::F32).unwrap();
        let dy0 = Tensor::zeros_on(dev, 1, 0, Dtype::F32).unwrap();
        let mut dx = Tensor::from_slice_on(dev, &[3.0f32; 32], 1, 32).unwrap();
        ops::conv2d_backward_input(&w0, &dy0, (1, 2, 4, 4), 0, &c, &mut dx).unwrap();
        assert_eq!(
            dx.to_vec::<f32>().unwrap(),
            vec![0.0; 32],
            "{dev}: dx zeroed"
        );
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_operand() {
    let x = Tensor::zeros(1, 3 * 5 * 5, Dtype::F32).unwrap();
    let w = Tensor::zeros(4, 3 * 9, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    let s = spec([3, 3], [1, 1], [0, 0], [1, 1], 1);
    let msg = |e: &Error| e.to_string();
    // Channels not divisible by groups.
    let e = ops::conv2d_forward(
        &x,
        &w,
        None,
        (1, 3, 5, 5),
        4,
        &Conv2dSpec { groups: 2, ..s },
        &mut y,
    )
    .unwrap_err();
    assert!(msg(&e).contains("groups = 2 must divide"), "groups");
    // An output size below 1.
    let e = ops::conv2d_forward(&x, &w, None, (1, 3, 2, 2), 4, &s, &mut y).unwrap_err();
    assert!(msg(&e).contains("conv2d_forward"), "output size");
    // A weight of the wrong shape.
    let bad_w = Tensor::zeros(4, 3 * 8, Dtype::F32).unwrap();
    let e = ops::conv2d_forward(&x, &bad_w, None, (1, 3, 5, 5), 4, &s, &mut y).unwrap_err();
    assert!(
        msg(&e).contains("`w` must be shaped (4, 27)"),
        "weight shape: {}",
        msg(&e)
    );
    // An input that does not match its dims.
    let e = ops::conv2d_forward(&x, &w, None, (1, 3, 5, 4), 4, &s, &mut y).unwrap_err();
    assert!(msg(&e).contains("`x` must be shaped"), "input shape");
    // A bias of the wrong length.
    let b = Tensor::zeros(3, 1, Dtype::F32).unwrap();
    let e = ops::conv2d_forward(&x, &w, Some(&b), (1, 3, 5, 5), 4, &s, &mut y).unwrap_err();
    assert!(msg(&e).contains("`bias` must hold C_out = 4"), "bias");
    // Output padding not below the stride or the dilation.
    let tw = Tensor::zeros(3, 4 * 9, Dtype::F32).unwrap();
    let e = ops::conv_transpose2d_forward(&x, &tw, None, (1, 3, 5, 5), 4, &s, [1, 0], &mut y)
        .unwrap_err();
    assert!(
        msg(&e).contains("output_padding 1 must be smaller"),
        "output padding"
    );
    // A reflect pad not below the length.
    let sig = Tensor::zeros(2, 3 * 4, Dtype::F32).unwrap();
    let e = ops::pad1d_forward(&sig, (2, 3, 4), (4, 0), PadMode::Reflect, &mut y).unwrap_err();
    assert!(
        msg(&e).contains("reflect padding needs each pad below the length"),
        "reflect"
    );
    // An accumulated gradient that is not pre-sized.
    let dy = Tensor::zeros(1, 4 * 9, Dtype::F32).unwrap();
    let mut dw = Tensor::default();
    let e = ops::conv2d_backward_weight(&x, &dy, (1, 3, 5, 5), 4, &s, &mut dw).unwrap_err();
    assert!(msg(&e).contains("`dw` must be pre-sized to 108"), "dw");
    // Sizes whose products overflow.
    for dims in [
        (usize::MAX, 3, 5, 5),
        (1, 3, usize::MAX, 2),
        (1, 3, 1 << 40, 1 << 40),
    ] {
        let e = ops::conv2d_forward(&x, &w, None, dims, 4, &s, &mut y).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{dims:?}: {e}");
    }
    let e =
        ops::pad1d_forward(&sig, (2, 3, 4), (usize::MAX, 1), PadMode::Zero, &mut y).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "pad overflow: {e}");
    // A state of the wrong size.
    let xs = Tensor::zeros(2, 3, Dtype::F32).unwrap();
    let kw = Tensor::zeros(3, 4, Dtype::F32).unwrap();
    let mut state = Tensor::zeros(2, 3 * 2, Dtype::F32).unwrap();
    let e =
        ops::causal_conv1d_update(&xs, &kw, None, (2, 3, 1), 4, 1, &mut state, &mut y).unwrap_err();
    assert!(msg(&e).contains("`state` must be pre-sized to 18"), "state");
}

/// The methods take and give N-D tensors and check the kernel against the spec.
#[test]
fn methods_give_nd_outputs() {
    let x = Tensor::from_slice_nd(&[1.0f32; 2 * 3 * 4 * 4], &[2, 3, 4, 4]).unwrap();
    let w = Tensor::from_slice_nd(&[0.5f32; 5 * 3 * 9], &[5, 3, 3, 3]).unwrap();
    let s = spec([3, 3], [1, 1], [1, 1], [1, 1], 1);
    let y = x.conv2d(&w, None, &s).unwrap();
    assert_eq!(y.dims(), [2, 5, 4, 4]);
    // A centre pixel sees all 27 taps of ones times 0.5; a corner 12 of them.
    let v = y.to_vec::<f32>().unwrap();
    assert_eq!((v[5], v[0]), (13.5, 6.0));
    assert!(x
        .conv2d(&w, None, &spec([3, 2], [1, 1], [1, 1], [1, 1], 1))
        .is_err());
    let tw = Tensor::from_slice_nd(&[1.0f32; 3 * 2 * 4], &[3, 2, 2, 2]).unwrap();
    let t = x
        .conv_transpose2d(&tw, None, &spec([2, 2], [2, 2], [0, 0], [1, 1], 1), [0, 0])
        .unwrap();
    assert_eq!(t.dims(), [2, 2, 8, 8]);
    assert!(
        t.to_vec::<f32>().unwrap().iter().all(|&v| v == 3.0),
        "each output gets 3 channels of one tap"
    );
    let sig = Tensor::from_slice_nd(&[1.0f32; 2 * 3 * 7], &[2, 3, 7]).unwrap();
    let w1 = Tensor::from_slice_nd(&[1.0f32; 4 * 3 * 3], &[4, 3, 3]).unwrap();
    let s1 = Conv1dSpec {
        kernel: [3],
        stride: [1],
        padding: [0],
        dilation: [1],
        groups: 1,
    };
    let y1 = sig.conv1d(&w1, None, &s1).unwrap();
    assert_eq!(y1.dims(), [2, 4, 5]);
    assert!(y1.to_vec::<f32>().unwrap().iter().all(|&v| v == 9.0));
}

/// The W8A16 convolution against float64 of the dequantized weight (rounded to the
/// activations' dtype, as the device holds it) on every device, in F16 and BF16.
#[test]
fn conv2d_int8w_fp16_forward_against_float64() {
    use brotensor_tests::{assert_close_rows, round_through, tensor, tolerance};
    let (name, c) = cases()[0];
    let mut rng = brotensor_tests::SplitMix64::new(61);
    let q: Vec<i8> = (0..c.c_out * c.w_row())
        .map(|i| ((i * 37 + 11) % 255) as i32 - 127)
        .map(|v| v as i8)
        .collect();
    let scales = rng.uniform(c.c_out, 0.001, 0.02);
    let x = rng.uniform(c.n * c.x_len(), -1.0, 1.0);
    let b = rng.uniform(c.c_out, -0.5, 0.5);
    let wide = |v: &[f32]| v.iter().map(|&p| f64::from(p)).collect::<Vec<_>>();
    for dtype in [Dtype::F16, Dtype::BF16] {
        let w: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| (f64::from(v) * f64::from(scales[i / c.w_row()])) as f32)
            .collect();
        let want: Vec<f32> = c
            .forward(
                &wide(&round_through(dtype, &x)),
                &wide(&round_through(dtype, &w)),
                Some(&wide(&round_through(dtype, &b))),
            )
            .into_iter()
            .map(|v| v as f32)
            .collect();
        for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
            let xt = tensor(dev, &x, c.n, c.x_len(), dtype).unwrap();
            let bt = tensor(dev, &b, c.c_out, 1, dtype).unwrap();
            let wt = Tensor::from_slice_on(dev, &q, c.c_out, c.w_row()).unwrap();
            let st = Tensor::from_slice_on(dev, &scales, c.c_out, 1).unwrap();
            let mut y = Tensor::default();
            ops::conv2d_int8w_fp16_forward(
                &xt,
                &wt,
                &st,
                Some(&bt),
                c.dims(),
                c.c_out,
                &c.spec,
                &mut y,
            )
            .unwrap();
            assert_eq!(y.dtype(), dtype);
            let got = y.to_dtype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
            let tag = format!("conv2d_int8w_fp16_forward {name} on {dev} {dtype}");
            assert_close_rows(&tag, &want, &got, c.y_len(), tolerance(dtype));
        }
    }
    // An F32 activation or a float weight is refused, naming the operand.
    let xt = Tensor::from_slice(&x, c.n, c.x_len()).unwrap();
    let wt = Tensor::from_slice(&q, c.c_out, c.w_row()).unwrap();
    let st = Tensor::from_slice(&scales, c.c_out, 1).unwrap();
    let mut y = Tensor::default();
    let e = ops::conv2d_int8w_fp16_forward(&xt, &wt, &st, None, c.dims(), c.c_out, &c.spec, &mut y)
        .unwrap_err();
    assert!(e.to_string().contains("x"), "{e}");
    let wf = Tensor::zeros(c.c_out, c.w_row(), Dtype::F16).unwrap();
    let x16 = xt.to_dtype(Dtype::F16).unwrap();
    let e =
        ops::conv2d_int8w_fp16_forward(&x16, &wf, &st, None, c.dims(), c.c_out, &c.spec, &mut y)
            .unwrap_err();
    assert!(e.to_string().contains("must be I8"), "{e}");
}

/// `conv3d_forward` (and its W8A16 form) against float64 loops over the taps, with per-axis
/// stride, padding and dilation and two groups.
#[test]
fn conv3d_forward_against_float64() {
    use brotensor::ops::Conv3dSpec;
    use brotensor_tests::{assert_close_rows, round_through, tensor, tolerance};
    let (n, c_in, [d, h, w], c_out) = (2, 4, [3, 4, 5], 6);
    let spec = Conv3dSpec {
        kernel: [2, 3, 2],
        stride: [1, 2, 1],
        padding: [1, 1, 0],
        dilation: [2, 1, 2],
        groups: 2,
    };
    let size = |a: usize, i: usize| {
        (i + 2 * spec.padding[a] - spec.dilation[a] * (spec.kernel[a] - 1) - 1) / spec.stride[a] + 1
    };
    let out = [size(0, d), size(1, h), size(2, w)];
    let (cg_in, cg_out) = (c_in / 2, c_out / 2);
    let row = cg_in * spec.kernel.iter().product::<usize>();
    let voxels: usize = out.iter().product();
    let reference = |x: &[f64], wt: &[f64], b: &[f64]| -> Vec<f64> {
        let mut y = vec![0.0; n * c_out * voxels];
        for (i, v) in y.iter_mut().enumerate() {
            let (nb, o, p) = (i / (c_out * voxels), (i / voxels) % c_out, i % voxels);
            let (oz, oy, ox) = (p / (out[1] * out[2]), (p / out[2]) % out[1], p % out[2]);
            let g = o / cg_out;
            let mut acc = b[o];
            for ci in 0..cg_in {
                for kz in 0..spec.kernel[0] {
                    for ky in 0..spec.kernel[1] {
                        for kx in 0..spec.kernel[2] {
                            let at = |a: usize, o: usize, k: usize, n: usize| {
                                let i = (o * spec.stride[a] + k * spec.dilation[a]) as isize
                                    - spec.padding[a] as isize;
                                (0..n as isize).contains(&i).then_some(i as usize)
                            };
                            let (Some(iz), Some(iy), Some(ix)) =
                                (at(0, oz, kz, d), at(1, oy, ky, h), at(2, ox, kx, w))
                            else {
                                continue;
                            };
                            let c = g * cg_in + ci;
                            let xv = x[(((nb * c_in + c) * d + iz) * h + iy) * w + ix];
                            let wi = (((o * cg_in + ci) * spec.kernel[0] + kz) * spec.kernel[1]
                                + ky)
                                * spec.kernel[2]
                                + kx;
                            acc += xv * wt[wi];
                        }
                    }
                }
            }
            *v = acc;
        }
        y
    };
    let dims = (n, c_in, d, h, w);
    let inputs = [
        Input::new(n, c_in * d * h * w, -1.0, 1.0),
        Input::new(c_out, row, -1.0, 1.0),
        Input::new(c_out, 1, -1.0, 1.0),
    ];
    reference_with(
        "conv3d_forward",
        71,
        &inputs,
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::conv3d_forward(&t[0], &t[1], Some(&t[2]), dims, c_out, &spec, &mut y)?;
            Ok(y)
        },
        |v| reference(&v[0], &v[1], &v[2]),
    );

    let mut rng = brotensor_tests::SplitMix64::new(72);
    let q: Vec<i8> = (0..c_out * row)
        .map(|i| (((i * 53 + 7) % 255) as i32 - 127) as i8)
        .collect();
    let scales = rng.uniform(c_out, 0.001, 0.02);
    let x = rng.uniform(n * c_in * d * h * w, -1.0, 1.0);
    let b = rng.uniform(c_out, -0.5, 0.5);
    let wide = |v: &[f32]| v.iter().map(|&p| f64::from(p)).collect::<Vec<_>>();
    for dtype in [Dtype::F16, Dtype::BF16] {
        let wq: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| (f64::from(v) * f64::from(scales[i / row])) as f32)
            .collect();
        let want: Vec<f32> = reference(
            &wide(&round_through(dtype, &x)),
            &wide(&round_through(dtype, &wq)),
            &wide(&round_through(dtype, &b)),
        )
        .into_iter()
        .map(|v| v as f32)
        .collect();
        for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
            let xt = tensor(dev, &x, n, c_in * d * h * w, dtype).unwrap();
            let bt = tensor(dev, &b, c_out, 1, dtype).unwrap();
            let wt = Tensor::from_slice_on(dev, &q, c_out, row).unwrap();
            let st = Tensor::from_slice_on(dev, &scales, c_out, 1).unwrap();
            let mut y = Tensor::default();
            ops::conv3d_int8w_fp16_forward(&xt, &wt, &st, Some(&bt), dims, c_out, &spec, &mut y)
                .unwrap();
            let got = y.to_dtype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
            let tag = format!("conv3d_int8w_fp16_forward on {dev} {dtype}");
            assert_close_rows(&tag, &want, &got, c_out * voxels, tolerance(dtype));
        }
    }
    // A 5-D input gives a 5-D output; a bad weight names `w`.
    let x5 = Tensor::from_slice_nd(&x, &[n, c_in, d, h, w]).unwrap();
    let w5 = Tensor::from_slice_nd(&vec![0.5f32; c_out * row], &[c_out, cg_in, 2, 3, 2]).unwrap();
    let mut y = Tensor::default();
    ops::conv3d_forward(&x5, &w5, None, dims, c_out, &spec, &mut y).unwrap();
    assert_eq!(y.dims(), [n, c_out, out[0], out[1], out[2]]);
    let e = ops::conv3d_forward(&x5, &x5, None, dims, c_out, &spec, &mut y).unwrap_err();
    assert!(e.to_string().contains("`w` must be shaped"), "{e}");
}

/// DCNv2 against float64 written here from torchvision's definition (bilinear samples, zero
/// outside, corner by corner), with two groups, two offset groups, offsets that push samples
/// out of the image, with and without a mask.
#[test]
fn deform_conv2d_forward_against_float64() {
    let c = Case {
        n: 2,
        c_in: 4,
        h: 4,
        w: 5,
        c_out: 6,
        spec: spec([2, 3], [1, 2], [1, 1], [2, 1], 2),
    };
    let dg = 2;
    let [ho, wo] = c.out();
    let [kh, kw] = c.spec.kernel;
    let (taps, pixels) = (kh * kw, ho * wo);
    let sample = |plane: &[f64], y: f64, x: f64| -> f64 {
        if y <= -1.0 || y >= c.h as f64 || x <= -1.0 || x >= c.w as f64 {
            return 0.0;
        }
        let (y0, x0) = (y.floor(), x.floor());
        let mut acc = 0.0;
        for (dy, wy) in [(0.0, 1.0 - (y - y0)), (1.0, y - y0)] {
            for (dx, wx) in [(0.0, 1.0 - (x - x0)), (1.0, x - x0)] {
                let (yy, xx) = (y0 + dy, x0 + dx);
                if yy >= 0.0 && xx >= 0.0 && yy < c.h as f64 && xx < c.w as f64 {
                    acc += wy * wx * plane[yy as usize * c.w + xx as usize];
                }
            }
        }
        acc
    };
    let reference = |v: &[Vec<f64>], with_mask: bool| -> Vec<f64> {
        let (x, off, mask, w, b) = (&v[0], &v[1], &v[2], &v[3], &v[4]);
        let (cg_in, cg_out) = (c.c_in / 2, c.c_out / 2);
        let mut y = vec![0.0; c.n * c.y_len()];
        for (i, out) in y.iter_mut().enumerate() {
            let (n, o, p) = (i / c.y_len(), (i / pixels) % c.c_out, i % pixels);
            let (oy, ox) = (p / wo, p % wo);
            let g = o / cg_out;
            let mut acc = b[o];
            for cl in 0..cg_in {
                let ci = g * cg_in + cl;
                let d = ci / (c.c_in / dg);
                let plane = &x[(n * c.c_in + ci) * c.h * c.w..][..c.h * c.w];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let tap = ky * kw + kx;
                        let oc = n * dg * 2 * taps + d * 2 * taps + 2 * tap;
                        let sy = (oy * c.spec.stride[0] + ky * c.spec.dilation[0]) as f64
                            - c.spec.padding[0] as f64
                            + off[oc * pixels + p];
                        let sx = (ox * c.spec.stride[1] + kx * c.spec.dilation[1]) as f64
                            - c.spec.padding[1] as f64
                            + off[(oc + 1) * pixels + p];
                        let mut s = sample(plane, sy, sx);
                        if with_mask {
                            s *= mask[((n * dg + d) * taps + tap) * pixels + p];
                        }
                        acc += s * w[(o * cg_in + cl) * taps + tap];
                    }
                }
            }
            *out = acc;
        }
        y
    };
    let inputs = [
        Input::new(c.n, c.x_len(), -1.0, 1.0),
        Input::new(c.n, dg * 2 * taps * pixels, -2.5, 2.5),
        Input::new(c.n, dg * taps * pixels, 0.0, 1.0),
        Input::new(c.c_out, c.w_row(), -1.0, 1.0),
        Input::new(c.c_out, 1, -1.0, 1.0),
    ];
    for with_mask in [true, false] {
        reference_with(
            &format!("deform_conv2d_forward mask={with_mask}"),
            81,
            &inputs,
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                let mask = with_mask.then_some(&t[2]);
                ops::deform_conv2d_forward(
                    &t[0],
                    &t[1],
                    mask,
                    &t[3],
                    Some(&t[4]),
                    c.dims(),
                    c.c_out,
                    &c.spec,
                    dg,
                    &mut y,
                )?;
                Ok(y)
            },
            |v| reference(v, with_mask),
        );
    }
    // Offsets of the wrong channel count and offset groups that do not divide C_in.
    let x = Tensor::zeros(c.n, c.x_len(), Dtype::F32).unwrap();
    let w = Tensor::zeros(c.c_out, c.w_row(), Dtype::F32).unwrap();
    let bad = Tensor::zeros(c.n, taps * pixels, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    let e = ops::deform_conv2d_forward(
        &x,
        &bad,
        None,
        &w,
        None,
        c.dims(),
        c.c_out,
        &c.spec,
        dg,
        &mut y,
    )
    .unwrap_err();
    assert!(e.to_string().contains("`offset` must hold"), "{e}");
    let e = ops::deform_conv2d_forward(
        &x,
        &bad,
        None,
        &w,
        None,
        c.dims(),
        c.c_out,
        &c.spec,
        3,
        &mut y,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("deform_groups = 3 must divide"),
        "{e}"
    );
}

/// Geometry whose products or coordinates pass 32 (or 64) bits: an empty batch must not hide
/// an entry size that overflows, and a tap coordinate past 32 bits must never wrap into the
/// image on a GPU (either the right answer or an error, never a wrong one).
#[test]
fn huge_geometry_is_an_error_or_right() {
    let x = Tensor::zeros(0, 0, Dtype::F32).unwrap();
    let w = Tensor::zeros(1 << 40, 0, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    let s = spec([1, 1], [1, 1], [0, 0], [1, 1], 1);
    let e = ops::conv2d_forward(&x, &w, None, (0, 0, 1 << 16, 1 << 16), 1 << 40, &s, &mut y)
        .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let sig = Tensor::zeros(0, 1 << 62, Dtype::F32).unwrap();
    let e = ops::pad1d_forward(
        &sig,
        (0, 1 << 32, 1 << 30),
        (1 << 40, 0),
        PadMode::Zero,
        &mut y,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let e = ops::pad1d_forward(&sig, (0, 0, 0), (usize::MAX, 1), PadMode::Replicate, &mut y)
        .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");

    // One row of 10 pixels, a 1x2 kernel whose taps land 2^31 apart far into the padding.
    let (stride, pad, dil) = (1usize << 31, 4_294_967_287usize, 2_147_483_639usize);
    let s = spec([1, 2], [1, stride], [0, pad], [1, dil], 1);
    let xs: Vec<f32> = (0..10).map(|i| i as f32 + 1.0).collect();
    let ws = [0.5f32, -2.0];
    let want: Vec<f32> = (0..4i128)
        .map(|ox| {
            (0..2i128)
                .map(|kx| {
                    let ix = ox * stride as i128 + kx * dil as i128 - pad as i128;
                    if (0..10).contains(&ix) {
                        xs[ix as usize] * ws[kx as usize]
                    } else {
                        0.0
                    }
                })
                .sum()
        })
        .collect();
    for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        let xt = Tensor::from_slice_on(dev, &xs, 1, 10).unwrap();
        let wt = Tensor::from_slice_on(dev, &ws, 1, 2).unwrap();
        let mut y = Tensor::default();
        match ops::conv2d_forward(&xt, &wt, None, (1, 1, 1, 10), 1, &s, &mut y) {
            Ok(()) => assert_eq!(y.to_vec::<f32>().unwrap(), want, "{dev}"),
            Err(e) => assert!(dev != Device::Cpu, "the CPU has no 32-bit limit: {e}"),
        }
    }
}
