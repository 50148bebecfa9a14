//! Image files to tensors and back: PNG and JPEG decoded (by the `image` crate) to a
//! `[1, C, H, W]` F32 tensor in `[0, 1]` on any device, and `[C, H, W]` or `[1, C, H, W]`
//! tensors (C = 1, 3 or 4: gray, RGB, RGBA) encoded as 8-bit PNG.
//!
//! ```no_run
//! use brotensor::{io::image, Device};
//! let x = image::load_rgb("cat.jpg", Device::Cpu)?; // [1, 3, H, W], values in [0, 1]
//! image::save_png(&x, "copy.png")?;
//! # Ok::<(), brotensor::Error>(())
//! ```
//!
//! Decoding gives bytes `b`, which become `b / 255` through
//! [`image_u8_to_f32_nhwc_to_nchw`](crate::ops::image_u8_to_f32_nhwc_to_nchw) on the target
//! device; encoding clamps to `[0, 1]` and rounds `v * 255` to the nearest byte, so a
//! decoded image encodes back to the same bytes.

use std::path::Path;

use image::{ColorType, ImageEncoder};

use crate::{ops, Device, Dtype, Error, Result, Tensor};

fn decode_error(op: &'static str, e: image::ImageError) -> Error {
    match e {
        image::ImageError::IoError(io) => Error::Io {
            op,
            path: String::new(),
            reason: io.to_string(),
        },
        other => Error::format(op, other.to_string()),
    }
}

/// Decodes PNG or JPEG `bytes` (the format read from the data) to a `[1, 3, H, W]` F32
/// tensor of RGB values in `[0, 1]` on `device` (gray and alpha images are converted to
/// RGB).
pub fn decode_rgb(bytes: &[u8], device: Device) -> Result<Tensor> {
    const OP: &str = "io::image::decode_rgb";
    let img = image::load_from_memory(bytes).map_err(|e| decode_error(OP, e))?;
    let rgb = img.to_rgb8();
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    let mut y = Tensor::empty_on(device, 0, 0, Dtype::F32)?;
    ops::image_u8_to_f32_nhwc_to_nchw(rgb.as_raw(), (1, h, w, 3), 1.0 / 255.0, 0.0, &mut y)?;
    y.reshape(&[1, 3, h, w])
}

/// Reads and decodes the PNG or JPEG file at `path` (see [`decode_rgb`]).
pub fn load_rgb(path: impl AsRef<Path>, device: Device) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        op: "io::image::load_rgb",
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    decode_rgb(&bytes, device)
}

/// Encodes `t` (`[C, H, W]` or `[1, C, H, W]`, any float dtype, any device; C = 1, 3 or 4)
/// as an 8-bit PNG: values clamped to `[0, 1]`, times 255, rounded to the nearest byte.
pub fn encode_png(t: &Tensor) -> Result<Vec<u8>> {
    const OP: &str = "io::image::encode_png";
    let (c, h, w) = match t.dims() {
        &[c, h, w] | &[1, c, h, w] => (c, h, w),
        _ => {
            return Err(Error::shape(
                OP,
                format!(
                    "the image must be [C, H, W] or [1, C, H, W], got {:?}",
                    t.dims()
                ),
            ))
        }
    };
    let color = match c {
        1 => ColorType::L8,
        3 => ColorType::Rgb8,
        4 => ColorType::Rgba8,
        _ => {
            return Err(Error::shape(
                OP,
                format!("C must be 1, 3 or 4 (gray, RGB, RGBA), got {c}"),
            ))
        }
    };
    let (wu, hu) = (
        u32::try_from(w).map_err(|_| Error::shape(OP, "W does not fit a PNG"))?,
        u32::try_from(h).map_err(|_| Error::shape(OP, "H does not fit a PNG"))?,
    );
    let wide = t.to(Device::Cpu)?.to_dtype(Dtype::F32)?.contiguous()?;
    let planes = wide.to_vec::<f32>()?;
    let plane = h * w;
    let mut bytes = vec![0u8; planes.len()];
    for (i, px) in bytes.chunks_exact_mut(c).enumerate() {
        for (ch, b) in px.iter_mut().enumerate() {
            *b = (planes[ch * plane + i].clamp(0.0, 1.0) * 255.0).round() as u8;
        }
    }
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(&bytes, wu, hu, color.into())
        .map_err(|e| decode_error(OP, e))?;
    Ok(out)
}

/// Encodes `t` as PNG (see [`encode_png`]) into the file at `path`.
pub fn save_png(t: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let png = encode_png(t)?;
    std::fs::write(path, png).map_err(|e| Error::Io {
        op: "io::image::save_png",
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}
