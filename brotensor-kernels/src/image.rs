//! Image input kernels, one unit per output element: per-channel normalisation of NCHW
//! planes, and interleaved HWC bytes (uploaded as packed 32-bit words) to scaled FP32 NCHW.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

#[cube(launch_unchecked)]
fn image_normalize_kernel<F: Float>(
    x: &Array<F>,
    mean: &Array<F>,
    std: &Array<F>,
    y: &mut Array<F>,
    c: usize,
    plane: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let ch = (i / plane) % c;
        let v = (f32::cast_from(x[i]) - f32::cast_from(mean[ch])) / f32::cast_from(std[ch]);
        y[i] = F::cast_from(v);
    }
}

/// `y[n, c] = (x[n, c] - mean[c]) / std[c]` over `len` elements in planes of `plane`.
pub fn launch_image_normalize<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, mean, std, y): (&Handle, &Handle, &Handle, &Handle),
    len: usize,
    (c, plane): (usize, usize),
) -> Result<(), LaunchError> {
    check_u32(&[("x", len)])?;
    if len == 0 {
        return Ok(());
    }
    crate::launch::check_divisors(&[("C", c), ("H*W", plane)])?;
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, len, b)?;
    let yb = Buf::new("y", y, len, b)?;
    let mb = Buf::new("mean", mean, c, b)?;
    let sb = Buf::new("std", std, c, b)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len` (the checked length of `x` and `y`) only; channel indices are
    // `% c`, inside the checked `mean` and `std`; `c` and `plane` are nonzero.
    unsafe {
        image_normalize_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            mb.arg(),
            sb.arg(),
            yb.arg(),
            c,
            plane,
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
fn image_u8_kernel(
    words: &Array<u32>,
    y: &mut Array<f32>,
    c: usize,
    pixels: usize,
    scale: f32,
    bias: f32,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let p = i / pixels;
        let byte = ((p / c) * pixels + i % pixels) * c + p % c;
        let shift = u32::cast_from(byte % 4) * 8u32;
        let v = (words[byte / 4] >> shift) & 255u32;
        y[i] = f32::cast_from(v) * scale + bias;
    }
}

/// `y[n, ch, i] = bytes[(n pixels + i) c + ch] * scale + bias` (FP32) for `n` images of
/// `pixels` pixels of `c` interleaved channels, from host `bytes` (uploaded).
pub fn launch_image_u8_to_nchw<R: Runtime>(
    client: &ComputeClient<R>,
    bytes: &[u8],
    y: &Handle,
    (n, pixels, c): (usize, usize, usize),
    (scale, bias): (f32, f32),
) -> Result<(), LaunchError> {
    let len = extent("N*H*W*C", &[n, pixels, c])?;
    if bytes.len() != len {
        return Err(LaunchError::Invalid {
            what: "the image holds N*H*W*C bytes",
        });
    }
    check_u32(&[("y", len)])?;
    if len == 0 {
        return Ok(());
    }
    let words: Vec<u32> = bytes
        .chunks(4)
        .map(|w| {
            let mut b = [0u8; 4];
            b[..w.len()].copy_from_slice(w);
            u32::from_le_bytes(b)
        })
        .collect();
    let wb = Buf::upload(client, &words);
    let yb = Buf::new("y", y, len, 4)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len` only (so `c` and `pixels` are nonzero); a unit reads byte
    // `((n pixels + i) c + ch) < len`, in word `byte / 4 < ceil(len / 4)`, the uploaded
    // length.
    unsafe {
        image_u8_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            wb.arg(),
            yb.arg(),
            c,
            pixels,
            scale,
            bias,
        );
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for_floats!(|F| {
        l.lower(image_normalize_kernel::ImageNormalizeKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            (),
            (),
        ));
    });
    l.lower(image_u8_kernel::ImageU8Kernel::<Rt>::new(
        L::settings_1d(),
        c,
        a(),
        a(),
        (),
        (),
        (),
        (),
    ));
}
