//! Plain-data shapes and parameters of the spatial ops: NCHW dims ([`Nchw`]) and the
//! geometry of convolutions ([`ConvSpec`]), pooling ([`PoolSpec`]) and resizing
//! ([`ResizeSpec`]), each with a checked `out_*` method that gives the output size by the
//! PyTorch formula or a reason it has none. Every product and sum here is checked: sizes
//! come from users.
//!
//! The specs are generic over the number of spatial axes `D` (1 for NCL, 2 for NCHW, 3 for
//! NCTHW), with one value per axis for the kernel, stride, padding and dilation.

/// The dims of an NCHW activation: batch, channels, height, width. Stored as a flat
/// `(N, C*H*W)` row-major tensor by the spatial ops (the C++ layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Nchw {
    /// Batch size.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Height.
    pub h: usize,
    /// Width.
    pub w: usize,
}

impl Nchw {
    /// `(n, c, h, w)`.
    pub const fn new(n: usize, c: usize, h: usize, w: usize) -> Self {
        Nchw { n, c, h, w }
    }

    /// `H * W`, or an error naming the overflowing product.
    pub fn plane(self) -> Result<usize, String> {
        self.h
            .checked_mul(self.w)
            .ok_or_else(|| format!("H*W = {}*{} overflows", self.h, self.w))
    }

    /// `C * H * W` (one batch entry), or an error naming the overflowing product.
    pub fn per_item(self) -> Result<usize, String> {
        self.plane()?
            .checked_mul(self.c)
            .ok_or_else(|| format!("C*H*W = {}*{}*{} overflows", self.c, self.h, self.w))
    }

    /// `N * C * H * W`, or an error naming the overflowing product.
    pub fn numel(self) -> Result<usize, String> {
        self.per_item()?.checked_mul(self.n).ok_or_else(|| {
            format!(
                "N*C*H*W = {}*{}*{}*{} overflows",
                self.n, self.c, self.h, self.w
            )
        })
    }

    /// `[n, c, h, w]`.
    pub const fn dims(self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
}

/// `(n, c, h, w)` as [`Nchw`], so the NCHW ops also take a plain tuple.
impl From<(usize, usize, usize, usize)> for Nchw {
    fn from((n, c, h, w): (usize, usize, usize, usize)) -> Self {
        Nchw { n, c, h, w }
    }
}

/// `in + 2 * pad`, checked.
fn padded(axis: usize, input: usize, pad: usize) -> Result<usize, String> {
    pad.checked_mul(2)
        .and_then(|p| p.checked_add(input))
        .ok_or_else(|| format!("axis {axis}: size {input} + 2 * padding {pad} overflows"))
}

/// `dilation * (kernel - 1) + 1`, the span a dilated kernel covers, checked.
fn span(axis: usize, kernel: usize, dilation: usize) -> Result<usize, String> {
    if kernel == 0 || dilation == 0 {
        return Err(format!(
            "axis {axis}: kernel {kernel} and dilation {dilation} must be at least 1"
        ));
    }
    (kernel - 1)
        .checked_mul(dilation)
        .and_then(|s| s.checked_add(1))
        .ok_or_else(|| {
            format!("axis {axis}: dilation {dilation} * (kernel {kernel} - 1) overflows")
        })
}

/// The geometry of a convolution over `D` spatial axes (PyTorch's `ConvNd` parameters): one
/// kernel size, stride, padding (zeros, on both sides) and dilation per axis, and the number
/// of channel groups (depthwise when `groups` = input channels = output channels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvSpec<const D: usize> {
    /// Kernel size per axis.
    pub kernel: [usize; D],
    /// Stride per axis (at least 1).
    pub stride: [usize; D],
    /// Zero padding on both sides, per axis.
    pub padding: [usize; D],
    /// Dilation per axis (at least 1).
    pub dilation: [usize; D],
    /// Channel groups: both channel counts must be multiples of it.
    pub groups: usize,
}

/// A 1-D convolution over NCL.
pub type Conv1dSpec = ConvSpec<1>;
/// A 2-D convolution over NCHW.
pub type Conv2dSpec = ConvSpec<2>;
/// A 3-D convolution over NCTHW.
pub type Conv3dSpec = ConvSpec<3>;

impl<const D: usize> ConvSpec<D> {
    /// A kernel of `kernel` with stride 1, no padding, no dilation and one group.
    pub const fn new(kernel: [usize; D]) -> Self {
        ConvSpec {
            kernel,
            stride: [1; D],
            padding: [0; D],
            dilation: [1; D],
            groups: 1,
        }
    }

    /// Checks `groups` against the channel counts: at least 1, dividing both.
    pub fn check_channels(&self, c_in: usize, c_out: usize) -> Result<(), String> {
        if self.groups == 0
            || !c_in.is_multiple_of(self.groups)
            || !c_out.is_multiple_of(self.groups)
        {
            return Err(format!(
                "groups = {} must divide C_in = {c_in} and C_out = {c_out}",
                self.groups
            ));
        }
        Ok(())
    }

    /// The output size per axis of the forward convolution:
    /// `(in + 2 pad - dilation (kernel - 1) - 1) / stride + 1`, rounded down. Errors when a
    /// stride, kernel or dilation is 0, a size overflows, or the dilated kernel is larger than
    /// the padded input.
    pub fn out_size(&self, input: [usize; D]) -> Result<[usize; D], String> {
        let mut out = [0; D];
        for a in 0..D {
            if self.stride[a] == 0 {
                return Err(format!("axis {a}: stride must be at least 1"));
            }
            let padded = padded(a, input[a], self.padding[a])?;
            let span = span(a, self.kernel[a], self.dilation[a])?;
            if span > padded {
                return Err(format!(
                    "axis {a}: the dilated kernel spans {span} but the padded input is {padded}"
                ));
            }
            out[a] = (padded - span) / self.stride[a] + 1;
        }
        Ok(out)
    }

    /// The output size per axis of the transposed convolution (the gradient of the forward
    /// one): `(in - 1) stride - 2 pad + dilation (kernel - 1) + output_padding + 1`. Errors
    /// when `output_padding` is not smaller than the stride or the dilation of its axis (as
    /// PyTorch), a size overflows, or the result is not positive.
    pub fn transposed_out_size(
        &self,
        input: [usize; D],
        output_padding: [usize; D],
    ) -> Result<[usize; D], String> {
        let mut out = [0; D];
        for a in 0..D {
            let (s, d, op) = (self.stride[a], self.dilation[a], output_padding[a]);
            if s == 0 {
                return Err(format!("axis {a}: stride must be at least 1"));
            }
            if op >= s && op >= d {
                return Err(format!(
                    "axis {a}: output_padding {op} must be smaller than the stride {s} or the \
                     dilation {d}"
                ));
            }
            let span = span(a, self.kernel[a], d)?;
            let grown = input[a]
                .checked_sub(1)
                .ok_or_else(|| format!("axis {a}: an empty input has no transposed output"))?
                .checked_mul(s)
                .and_then(|v| v.checked_add(span))
                .and_then(|v| v.checked_add(op))
                .ok_or_else(|| format!("axis {a}: the transposed output size overflows"))?;
            let pads = self.padding[a]
                .checked_mul(2)
                .ok_or_else(|| format!("axis {a}: padding overflows"))?;
            out[a] = grown
                .checked_sub(pads)
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("axis {a}: padding {} leaves no output", self.padding[a]))?;
        }
        Ok(out)
    }
}

/// The geometry of a pooling window over `D` spatial axes (PyTorch's `MaxPoolNd` /
/// `AvgPoolNd` parameters): window, stride, padding (which max pooling treats as -inf) and
/// dilation per axis, and whether the output size rounds up (`ceil_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolSpec<const D: usize> {
    /// Window size per axis.
    pub kernel: [usize; D],
    /// Stride per axis (at least 1; PyTorch's default is the window).
    pub stride: [usize; D],
    /// Padding on both sides, per axis. PyTorch allows at most half the window; the C++
    /// library allows more, and a window entirely in the padding then gives -inf and
    /// index -1 in max pooling.
    pub padding: [usize; D],
    /// Dilation per axis (at least 1).
    pub dilation: [usize; D],
    /// Round the output size up instead of down (a last window may then start in the
    /// right padding only if it starts inside the input or the left padding).
    pub ceil_mode: bool,
}

/// Pooling over NCHW.
pub type Pool2dSpec = PoolSpec<2>;

impl<const D: usize> PoolSpec<D> {
    /// Non-overlapping windows of `kernel` (stride = window), no padding, no dilation.
    pub const fn new(kernel: [usize; D]) -> Self {
        PoolSpec {
            kernel,
            stride: kernel,
            padding: [0; D],
            dilation: [1; D],
            ceil_mode: false,
        }
    }

    /// The output size per axis: `(in + 2 pad - dilation (kernel - 1) - 1) / stride + 1`,
    /// rounded down, or up with `ceil_mode` (then one less when the last window would start
    /// past the input and its left padding). Errors when a stride, window or dilation is 0,
    /// a size overflows, or the window does not fit.
    pub fn out_size(&self, input: [usize; D]) -> Result<[usize; D], String> {
        let mut out = [0; D];
        for a in 0..D {
            let (k, s, p) = (self.kernel[a], self.stride[a], self.padding[a]);
            if s == 0 {
                return Err(format!("axis {a}: stride must be at least 1"));
            }
            let padded = padded(a, input[a], p)?;
            let span = span(a, k, self.dilation[a])?;
            if span > padded {
                return Err(format!(
                    "axis {a}: the window spans {span} but the padded input is {padded}"
                ));
            }
            let room = padded - span;
            let mut n = if self.ceil_mode {
                room.div_ceil(s) + 1
            } else {
                room / s + 1
            };
            // The last window must start inside the input or the left padding.
            if self.ceil_mode && (n - 1) * s >= input[a] + p {
                n -= 1;
            }
            out[a] = n;
        }
        Ok(out)
    }
}

/// How a resize reads the source: the C++ `interp2d` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// The nearest source pixel (half-pixel centres, round half to even, clamped).
    Nearest,
    /// Bilinear.
    Bilinear,
    /// Bicubic with `a = -0.5` (Pillow).
    BicubicPillow,
    /// Bicubic with `a = -0.75` (PyTorch, OpenCV).
    BicubicTorch,
}

/// A 2-D resize of NCHW to `out_h x out_w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResizeSpec {
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
    /// The interpolation.
    pub mode: ResizeMode,
    /// Map the corner pixels' centres onto each other (else half-pixel centres).
    pub align_corners: bool,
}

impl ResizeSpec {
    /// The output dims for `input`: its batch and channels at `out_h x out_w`. Errors when an
    /// output side is 0 while the input's is not (or the reverse), or the size overflows.
    pub fn out_dims(&self, input: Nchw) -> Result<Nchw, String> {
        for (axis, (i, o)) in [(input.h, self.out_h), (input.w, self.out_w)]
            .into_iter()
            .enumerate()
        {
            if (i == 0) != (o == 0) {
                return Err(format!(
                    "axis {axis}: cannot resize {i} pixels to {o} (an empty side stays empty)"
                ));
            }
        }
        let out = Nchw::new(input.n, input.c, self.out_h, self.out_w);
        out.numel()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's documented output-size formula, in float64 with floor / ceil, written
    /// independently of the integer code above.
    fn torch_conv(input: f64, k: f64, s: f64, p: f64, d: f64) -> f64 {
        ((input + 2.0 * p - d * (k - 1.0) - 1.0) / s).floor() + 1.0
    }

    #[test]
    fn conv_sizes_follow_the_pytorch_formula() {
        // torch.nn.Conv2d(16, 33, (3, 5), stride=(2, 1), padding=(4, 2), dilation=(3, 1)) on
        // 50 x 100 gives 26 x 100 (the PyTorch docs' example).
        let spec = ConvSpec {
            kernel: [3, 5],
            stride: [2, 1],
            padding: [4, 2],
            dilation: [3, 1],
            groups: 1,
        };
        assert_eq!(spec.out_size([50, 100]).unwrap(), [26, 100]);
        for input in 1..40usize {
            for k in 1..6usize {
                for s in 1..4usize {
                    for p in 0..3usize {
                        for d in 1..3usize {
                            let want =
                                torch_conv(input as f64, k as f64, s as f64, p as f64, d as f64);
                            let got = Conv1dSpec {
                                kernel: [k],
                                stride: [s],
                                padding: [p],
                                dilation: [d],
                                groups: 1,
                            }
                            .out_size([input]);
                            if want >= 1.0 {
                                assert_eq!(
                                    got.unwrap(),
                                    [want as usize],
                                    "{input} {k} {s} {p} {d}"
                                );
                            } else {
                                assert!(got.is_err(), "{input} {k} {s} {p} {d}: {got:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transposed_sizes_invert_the_forward_ones() {
        // ConvTranspose2d(stride 2, padding 1, kernel 3, output_padding 1): 8 -> 16.
        let spec = Conv2dSpec {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
        };
        assert_eq!(spec.transposed_out_size([8, 8], [1, 1]).unwrap(), [16, 16]);
        // (in - 1) s - 2p + d (k - 1) + op + 1, in float64.
        for input in 1..20usize {
            for (k, s, p, d, op) in [
                (3, 2, 1, 1, 0),
                (4, 2, 1, 1, 0),
                (5, 3, 2, 2, 1),
                (1, 1, 0, 1, 0),
            ] {
                let spec = Conv1dSpec {
                    kernel: [k],
                    stride: [s],
                    padding: [p],
                    dilation: [d],
                    groups: 1,
                };
                let want = (input as f64 - 1.0) * s as f64 - 2.0 * p as f64
                    + d as f64 * (k as f64 - 1.0)
                    + op as f64
                    + 1.0;
                let got = spec.transposed_out_size([input], [op]);
                if want >= 1.0 {
                    assert_eq!(got.unwrap(), [want as usize]);
                } else {
                    assert!(got.is_err());
                }
            }
        }
        // output_padding must be smaller than the stride or the dilation.
        assert!(spec.transposed_out_size([8, 8], [2, 0]).is_err());
    }

    #[test]
    fn pool_sizes_with_and_without_ceil_mode() {
        // MaxPool2d(3, stride=2) on 7 x 8: floor gives 3 x 3, ceil_mode gives 3 x 4.
        let mut spec = Pool2dSpec {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
        };
        assert_eq!(spec.out_size([7, 8]).unwrap(), [3, 3]);
        spec.ceil_mode = true;
        assert_eq!(spec.out_size([7, 8]).unwrap(), [3, 4]);
        // ceil_mode's last window may not start in the right padding: kernel 2, stride 2,
        // padding 1 on 5 rounds up to 4 windows, but the fourth would start at padded index
        // 6, past the input and its left padding, so there are 3 (as PyTorch gives).
        let p = PoolSpec {
            kernel: [2],
            stride: [2],
            padding: [1],
            dilation: [1],
            ceil_mode: true,
        };
        assert_eq!(p.out_size([5]).unwrap(), [3]);
        assert_eq!(p.out_size([4]).unwrap(), [3]);
        assert_eq!(PoolSpec::new([2, 2]).out_size([5, 6]).unwrap(), [2, 3]);
        // Padding past half the window is allowed (the C++ contract): (9 + 4 - 3) / 3 + 1 = 4.
        let wide = PoolSpec {
            padding: [2],
            ..PoolSpec::new([3])
        };
        assert_eq!(wide.out_size([9]).unwrap(), [4]);
        // A zero stride, a window larger than the input.
        assert!(PoolSpec {
            stride: [0],
            ..PoolSpec::new([3])
        }
        .out_size([9])
        .is_err());
        assert!(PoolSpec::new([4]).out_size([3]).is_err());
    }

    #[test]
    fn overflowing_and_degenerate_inputs_are_errors() {
        let big = ConvSpec {
            padding: [usize::MAX / 2 + 1],
            ..Conv1dSpec::new([3])
        };
        assert!(big.out_size([4]).unwrap_err().contains("overflows"));
        let dil = ConvSpec {
            dilation: [usize::MAX],
            ..Conv1dSpec::new([3])
        };
        assert!(dil.out_size([4]).unwrap_err().contains("overflows"));
        assert!(Conv1dSpec::new([0]).out_size([4]).is_err());
        assert!(Conv2dSpec {
            groups: 3,
            ..Conv2dSpec::new([3, 3])
        }
        .check_channels(6, 4)
        .is_err());
        assert!(Conv2dSpec {
            groups: 2,
            ..Conv2dSpec::new([3, 3])
        }
        .check_channels(6, 4)
        .is_ok());
        assert!(Nchw::new(usize::MAX, 2, 1, 1).numel().is_err());
        assert_eq!(Nchw::from((2, 3, 4, 5)).numel().unwrap(), 120);
        let r = ResizeSpec {
            out_h: 7,
            out_w: 9,
            mode: ResizeMode::Bilinear,
            align_corners: false,
        };
        assert_eq!(
            r.out_dims(Nchw::new(2, 3, 4, 5)).unwrap(),
            Nchw::new(2, 3, 7, 9)
        );
        assert!(r.out_dims(Nchw::new(2, 3, 0, 5)).is_err());
    }
}
