//! The spatial and image families against float64 loops written here from the definitions
//! (index maps evaluated per output element; the padding's gradient as the scatter of `dy`
//! through the forward's index map, the adjoint by definition), on every device and float
//! dtype, plus the PNG round trip of a file written by Pillow and the error cases.

use brotensor::ops::{self, PadMode};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::{gpu_devices, reference_with, Check, Input};

use crate::conv::pad_source;

/// `(N, C, H, W)`.
type Dims = (usize, usize, usize, usize);

/// The unfold by definition: `y[p, ky kW + kx, oy, ox] = x[p, src(oy s - top + ky), src(ox s
/// - left + kx)]`, calling `f(y index, x index)` for every element that reads the input.
#[allow(clippy::too_many_arguments)]
fn unfold_map(
    (n, c, h, w): Dims,
    k: [usize; 2],
    s: [usize; 2],
    [top, bottom, left, right]: [usize; 4],
    mode: PadMode,
    mut f: impl FnMut(usize, usize),
) -> usize {
    let ho = (h + top + bottom - k[0]) / s[0] + 1;
    let wo = (w + left + right - k[1]) / s[1] + 1;
    let per_plane = k[0] * k[1] * ho * wo;
    for p in 0..n * c {
        for ky in 0..k[0] {
            for kx in 0..k[1] {
                for oy in 0..ho {
                    for ox in 0..wo {
                        let yi = p * per_plane + ((ky * k[1] + kx) * ho + oy) * wo + ox;
                        let sy =
                            pad_source(mode, (oy * s[0] + ky) as isize - top as isize, h as isize);
                        let sx =
                            pad_source(mode, (ox * s[1] + kx) as isize - left as isize, w as isize);
                        if let (Some(sy), Some(sx)) = (sy, sx) {
                            f(yi, (p * h + sy) * w + sx);
                        }
                    }
                }
            }
        }
    }
    n * c * per_plane
}

#[test]
fn pad2d_and_its_gradient_against_float64() {
    let cases: [(Dims, [usize; 4], PadMode); 5] = [
        ((2, 3, 4, 5), [1, 2, 3, 0], PadMode::Zero),
        ((2, 2, 4, 5), [3, 2, 4, 1], PadMode::Reflect),
        ((1, 2, 3, 4), [2, 0, 1, 3], PadMode::Replicate),
        ((1, 1, 1, 1), [2, 1, 0, 3], PadMode::Replicate),
        ((2, 1, 5, 2), [0, 0, 1, 1], PadMode::Reflect),
    ];
    for (seed, (dims, pads, mode)) in cases.into_iter().enumerate() {
        let (n, c, h, w) = dims;
        let (hp, wp) = (h + pads[0] + pads[1], w + pads[2] + pads[3]);
        let ins = [
            Input::new(n, c * h * w, -1.0, 1.0),
            Input::new(n, c * hp * wp, -1.0, 1.0),
        ];
        let tag = format!("pad2d {mode:?} {dims:?} {pads:?}");
        reference_with(
            &tag,
            200 + seed as u64,
            &ins,
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::pad2d_forward(&t[0], dims, pads, mode, &mut y)?;
                Ok(y)
            },
            |v| {
                let mut y = vec![0.0; n * c * hp * wp];
                unfold_map(dims, [1, 1], [1, 1], pads, mode, |yi, xi| y[yi] = v[0][xi]);
                y
            },
        );
        reference_with(
            &format!("{tag} backward"),
            210 + seed as u64,
            &ins,
            Check::default(),
            |t| {
                let mut dx = Tensor::default();
                ops::pad2d_backward(&t[1], dims, pads, mode, &mut dx)?;
                Ok(dx)
            },
            |v| {
                let mut dx = vec![0.0; n * c * h * w];
                unfold_map(dims, [1, 1], [1, 1], pads, mode, |yi, xi| {
                    dx[xi] += v[1][yi]
                });
                dx
            },
        );
    }
}

#[test]
fn unfold2d_against_float64() {
    // (dims, window, stride, pads, mode)
    type Case = (Dims, [usize; 2], [usize; 2], [usize; 4], PadMode);
    let cases: [Case; 3] = [
        ((2, 2, 5, 6), [3, 3], [1, 1], [1, 1, 1, 1], PadMode::Zero),
        ((1, 3, 6, 5), [2, 3], [2, 1], [1, 0, 2, 1], PadMode::Reflect),
        (
            (1, 2, 4, 4),
            [3, 2],
            [3, 2],
            [2, 2, 0, 1],
            PadMode::Replicate,
        ),
    ];
    for (seed, (dims, k, s, pads, mode)) in cases.into_iter().enumerate() {
        let (n, c, h, w) = dims;
        let len = unfold_map(dims, k, s, pads, mode, |_, _| {});
        reference_with(
            &format!("unfold2d {mode:?} {dims:?} k {k:?} s {s:?} {pads:?}"),
            220 + seed as u64,
            &[Input::new(n, c * h * w, -1.0, 1.0)],
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::unfold2d_forward(&t[0], dims, k, s, pads, mode, &mut y)?;
                Ok(y)
            },
            |v| {
                let mut y = vec![0.0; len];
                unfold_map(dims, k, s, pads, mode, |yi, xi| y[yi] = v[0][xi]);
                y
            },
        );
    }
}

/// Runs a pure rearrangement on every device and dtype against `index`, which gives the
/// input element each output element copies (checked exactly: a copy rounds nothing).
fn rearrangement(
    tag: &str,
    input: Input,
    out_len: usize,
    op: impl Fn(&Tensor) -> brotensor::Result<Tensor>,
    index: impl Fn(usize) -> usize,
) {
    reference_with(
        tag,
        230,
        &[input],
        Check {
            tol: Some(|_| (0.0, 0.0)),
            ..Check::default()
        },
        |t| op(&t[0]),
        |v| (0..out_len).map(|i| v[0][index(i)]).collect(),
    );
}

#[test]
fn rearrangements_against_their_index_maps() {
    let (n, c, h, w) = (2, 3, 4, 6);
    let x = Input::new(n, c * h * w, -1.0, 1.0);
    let at = |b: usize, ch: usize, y: usize, xx: usize| ((b * c + ch) * h + y) * w + xx;
    // slice2d: a 3 x 4 crop at (1, 2); its gradient is dy placed there in zeros.
    rearrangement(
        "slice2d_forward",
        x,
        n * c * 3 * 4,
        |t| {
            let mut y = Tensor::default();
            ops::slice2d_forward(t, (n, c, h, w), (1, 2), (3, 4), &mut y)?;
            Ok(y)
        },
        |i| at(i / 36, i / 12 % c, i / 4 % 3 + 1, i % 4 + 2),
    );
    reference_with(
        "slice2d_backward",
        231,
        &[Input::new(n, c * 3 * 4, -1.0, 1.0)],
        Check::default(),
        |t| {
            let mut dx = Tensor::default();
            ops::slice2d_backward(&t[0], (n, c, h, w), (1, 2), (3, 4), &mut dx)?;
            Ok(dx)
        },
        |v| {
            (0..n * c * h * w)
                .map(|i| {
                    let (p, y, xx) = (i / (h * w), i / w % h, i % w);
                    if (1..4).contains(&y) && (2..6).contains(&xx) {
                        v[0][(p * 3 + y - 1) * 4 + xx - 2]
                    } else {
                        0.0
                    }
                })
                .collect()
        },
    );
    // Windows of 2: tile (i, j) of image b is row b*6 + i*3 + j, laid out (C, 2, 2).
    let win = 2;
    rearrangement(
        "window_partition_forward",
        x,
        n * c * h * w,
        |t| {
            let mut y = Tensor::default();
            ops::window_partition_forward(t, (n, c, h, w), win, &mut y)?;
            assert_eq!(y.dims(), [n * 6, c * 4]);
            Ok(y)
        },
        |i| {
            let (row, col) = (i / (c * 4), i % (c * 4));
            let (b, tile) = (row / 6, row % 6);
            let (ti, tj) = (tile / 3, tile % 3);
            let (ch, dy, dx) = (col / 4, col / 2 % 2, col % 2);
            at(b, ch, ti * win + dy, tj * win + dx)
        },
    );
    // window_reverse undoes it: partition then reverse is the identity.
    rearrangement(
        "window_reverse_forward",
        x,
        n * c * h * w,
        |t| {
            let (mut p, mut y) = (Tensor::default(), Tensor::default());
            ops::window_partition_forward(t, (n, c, h, w), win, &mut p)?;
            ops::window_reverse_forward(&p, (n, c, h, w), win, &mut y)?;
            Ok(y)
        },
        |i| i,
    );
    rearrangement(
        "nchw_to_sequence",
        x,
        n * c * h * w,
        |t| {
            let mut y = Tensor::default();
            ops::nchw_to_sequence(t, (n, c, h, w), &mut y)?;
            assert_eq!(y.dims(), [n * h * w, c]);
            Ok(y)
        },
        |i| {
            let (row, ch) = (i / c, i % c);
            at(row / (h * w), ch, row % (h * w) / w, row % w)
        },
    );
    rearrangement(
        "sequence_to_nchw",
        x,
        n * c * h * w,
        |t| {
            let (mut s, mut y) = (Tensor::default(), Tensor::default());
            ops::nchw_to_sequence(t, (n, c, h, w), &mut s)?;
            ops::sequence_to_nchw(&s, (n, c, h, w), &mut y)?;
            Ok(y)
        },
        |i| i,
    );
    for channel_major in [false, true] {
        rearrangement(
            &format!("spatial_merge_2x2_forward channel_major {channel_major}"),
            x,
            n * c * h * w,
            |t| {
                let mut y = Tensor::default();
                ops::spatial_merge_2x2_forward(t, (n, c, h, w), channel_major, &mut y)?;
                Ok(y)
            },
            |i| {
                let (ho, wo) = (h / 2, w / 2);
                let (b, co, yo, xo) = (
                    i / (4 * c * ho * wo),
                    i / (ho * wo) % (4 * c),
                    i / wo % ho,
                    i % wo,
                );
                let (block, ch) = if channel_major {
                    (co % 4, co / 4)
                } else {
                    (co / c, co % c)
                };
                at(b, ch, 2 * yo + block / 2, 2 * xo + block % 2)
            },
        );
    }
    // The DC-AE shortcut with C_in = 3, C_out = 3 (repeats 4) and C_in = 12, C_out = 3
    // (a plain pixel shuffle, repeats 1).
    for (c_in, c_out) in [(3usize, 3usize), (12, 3), (6, 3)] {
        let input = Input::new(1, c_in * 2 * 3, -1.0, 1.0);
        rearrangement(
            &format!("pixel_shuffle_upsample_2x_forward {c_in} -> {c_out}"),
            input,
            c_out * 4 * 6,
            |t| {
                let mut y = Tensor::default();
                ops::pixel_shuffle_upsample_2x_forward(t, (1, c_in, 2, 3), c_out, &mut y)?;
                Ok(y)
            },
            |i| {
                let repeats = 4 * c_out / c_in;
                let (co, fy, fx) = (i / 24, i / 6 % 4, i % 6);
                let src = (4 * co + 2 * (fy % 2) + fx % 2) / repeats;
                (src * 2 + fy / 2) * 3 + fx / 2
            },
        );
    }
    // DiT unpatchify: 2 x 3 tokens of 2 x 2 patches of 4 channels, keep 3.
    let (hp, wp, p, ct, ck) = (2usize, 3usize, 2usize, 4usize, 3usize);
    for channel_major in [false, true] {
        rearrangement(
            &format!("patch_unpack_forward channel_major {channel_major}"),
            Input::new(hp * wp, p * p * ct, -1.0, 1.0),
            ck * hp * p * wp * p,
            |t| {
                let mut y = Tensor::default();
                ops::patch_unpack_forward(t, (hp, wp), p, (ct, ck), channel_major, &mut y)?;
                Ok(y)
            },
            |i| {
                let (hh, ww) = (hp * p, wp * p);
                let (ch, y, xx) = (i / (hh * ww), i / ww % hh, i % ww);
                let (tok, py, px) = ((y / p) * wp + xx / p, y % p, xx % p);
                let col = if channel_major {
                    ch * p * p + py * p + px
                } else {
                    (py * p + px) * ct + ch
                };
                tok * p * p * ct + col
            },
        );
    }
}

#[test]
fn pixel_shuffle_methods_match_pytorchs_index_maps() {
    // pixel_shuffle(2) of [1, 8, 2, 3]: y[0, c, 2h + i, 2w + j] = x[0, 4c + 2i + j, h, w].
    let data: Vec<f32> = (0..48).map(|v| v as f32).collect();
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = Tensor::from_slice_nd_on(device, &data, &[1, 8, 2, 3]).unwrap();
        let y = x.pixel_shuffle(2).unwrap();
        assert_eq!(y.dims(), [1, 2, 4, 6]);
        let got = y.to_vec::<f32>().unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (c, yy, xx) = (i / 24, i / 6 % 4, i % 6);
            let want = ((4 * c + 2 * (yy % 2) + xx % 2) * 2 + yy / 2) * 3 + xx / 2;
            assert_eq!(g, want as f32, "{device} pixel_shuffle at {i}");
        }
        let back = y.pixel_unshuffle(2).unwrap();
        assert_eq!(back.dims(), [1, 8, 2, 3]);
        assert_eq!(back.to_vec::<f32>().unwrap(), data, "{device}");
        // pad2d through the method agrees with the op.
        let padded = x.pad2d([1, 0, 0, 2], PadMode::Replicate).unwrap();
        assert_eq!(padded.dims(), [1, 8, 3, 5]);
        assert_eq!(
            padded.to_vec::<f32>().unwrap()[..5],
            [0.0, 1.0, 2.0, 2.0, 2.0]
        );
    }
}

#[test]
fn image_ops_against_float64() {
    let (n, c, h, w) = (2, 3, 4, 5);
    reference_with(
        "image_normalize",
        240,
        &[
            Input::new(n, c * h * w, 0.0, 1.0),
            Input::new(1, c, 0.3, 0.6),
            Input::new(1, c, 0.2, 0.3),
        ],
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::image_normalize(&t[0], &t[1], &t[2], (n, c, h, w), &mut y)?;
            Ok(y)
        },
        |v| {
            (0..n * c * h * w)
                .map(|i| {
                    let ch = i / (h * w) % c;
                    (v[0][i] - v[1][ch]) / v[2][ch]
                })
                .collect()
        },
    );
    // Bytes of every value, as an HWC image of 2 x 4 x 5 x 3, to [-1, 1].
    let bytes: Vec<u8> = (0..n * h * w * c).map(|i| (i * 37 % 256) as u8).collect();
    let (scale, bias) = (2.0f32 / 255.0, -1.0f32);
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let mut y = Tensor::empty_on(device, 0, 0, Dtype::F32).unwrap();
        ops::image_u8_to_f32_nhwc_to_nchw(&bytes, (n, h, w, c), scale, bias, &mut y).unwrap();
        assert_eq!((y.device(), y.dims()), (device, [n, c * h * w].as_slice()));
        let got = y.to_vec::<f32>().unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (b, ch, px) = (i / (c * h * w), i / (h * w) % c, i % (h * w));
            let want =
                f64::from(bytes[(b * h * w + px) * c + ch]) * f64::from(scale) + f64::from(bias);
            assert!(
                (f64::from(g) - want).abs() < 1e-6,
                "{device} at {i}: {g} vs {want}"
            );
        }
    }
}

#[test]
fn png_written_by_pillow_round_trips_bit_for_bit() {
    use brotensor::io::image;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/image");
    let png = std::fs::read(dir.join("rgb_7x5.png")).unwrap();
    let pixels = std::fs::read(dir.join("rgb_7x5.hwc")).unwrap();
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = image::decode_rgb(&png, device).unwrap();
        assert_eq!((x.device(), x.dims()), (device, [1, 3, 5, 7].as_slice()));
        let got = x.to_vec::<f32>().unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (ch, px) = (i / 35, i % 35);
            // The op's definition (byte times 1/255 in F32), and the byte itself recovered.
            let byte = pixels[px * 3 + ch];
            assert_eq!(g, f32::from(byte) * (1.0 / 255.0), "{device} at {i}");
            assert_eq!((g * 255.0).round() as u8, byte, "{device} at {i}");
        }
        // Encoding and decoding again gives the same bytes.
        let again = image::decode_rgb(&image::encode_png(&x).unwrap(), Device::Cpu).unwrap();
        assert_eq!(again.to_vec::<f32>().unwrap(), got, "{device}");
        // 16-bit tensors encode too.
        let half = x.to_dtype(Dtype::BF16).unwrap();
        assert!(image::encode_png(&half).unwrap().starts_with(b"\x89PNG"));
    }
    // Through files: save, then load.
    let path = std::env::temp_dir().join(format!("brotensor-image-{}.png", std::process::id()));
    let x = image::decode_rgb(&png, Device::Cpu).unwrap();
    image::save_png(&x, &path).unwrap();
    let back = image::load_rgb(&path, Device::Cpu).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let e = image::load_rgb(dir.join("missing.png"), Device::Cpu).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    let e = image::decode_rgb(b"not an image", Device::Cpu).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e}");
    let two = Tensor::zeros_nd_on(Device::Cpu, &[2, 5, 7], Dtype::F32).unwrap();
    assert!(matches!(
        image::encode_png(&two).unwrap_err(),
        Error::Shape { .. }
    ));
}

#[test]
fn bad_spatial_arguments_are_errors_naming_the_problem() {
    let x = Tensor::zeros_on(Device::Cpu, 2, 3 * 4 * 6, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    let msg = |e: Error| e.to_string();
    // Reflect padding as large as the axis; a crop past the image; windows that do not tile.
    let e = msg(
        ops::pad2d_forward(&x, (2, 3, 4, 6), [4, 0, 0, 0], PadMode::Reflect, &mut y).unwrap_err(),
    );
    assert!(e.contains("pad2d_forward") && e.contains("reflect"), "{e}");
    let e = msg(ops::slice2d_forward(&x, (2, 3, 4, 6), (2, 0), (3, 6), &mut y).unwrap_err());
    assert!(e.contains("crop"), "{e}");
    let e = msg(ops::window_partition_forward(&x, (2, 3, 4, 6), 4, &mut y).unwrap_err());
    assert!(e.contains("tiled"), "{e}");
    let e = msg(ops::spatial_merge_2x2_forward(&x, (2, 3, 3, 8), false, &mut y).unwrap_err());
    assert!(e.contains("even"), "{e}");
    let e = msg(ops::pixel_shuffle_upsample_2x_forward(&x, (2, 3, 4, 6), 2, &mut y).unwrap_err());
    assert!(e.contains("divide"), "{e}");
    let e = msg(ops::patch_unpack_forward(&x, (1, 2), 2, (3, 4), false, &mut y).unwrap_err());
    assert!(e.contains("C_keep"), "{e}");
    let e = msg(ops::unfold2d_forward(
        &x,
        (2, 3, 4, 6),
        [5, 1],
        [1, 1],
        [0; 4],
        PadMode::Zero,
        &mut y,
    )
    .unwrap_err());
    assert!(e.contains("window"), "{e}");
    let e = ops::pad2d_forward(
        &x,
        (2, 3, 4, 6),
        [usize::MAX, 1, 0, 0],
        PadMode::Zero,
        &mut y,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let e =
        ops::image_u8_to_f32_nhwc_to_nchw(&[0u8; 5], (1, 2, 2, 1), 1.0, 0.0, &mut y).unwrap_err();
    assert!(msg(e).contains("bytes"));
    let mean = Tensor::zeros_on(Device::Cpu, 1, 2, Dtype::F32).unwrap();
    let e = msg(ops::image_normalize(&x, &mean, &mean, (2, 3, 4, 6), &mut y).unwrap_err());
    assert!(e.contains("mean"), "{e}");
}
