//! The complex element ops of the spectral family on interleaved `[re, im]` f32 pairs (the
//! memory of an `(R, 2C)` F32 complex tensor and of a C64 one), as
//! `brotensor_cpu::spectral` computes them: one unit per complex element. The product
//! itself is the algebra family's complex map (`crate::algebra::map::launch_complex_map`).

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// `da += dy conj(b)`, `db += dy conj(a)`.
#[cube(launch_unchecked)]
fn complex_mul_backward_kernel(
    a: &Array<f32>,
    b: &Array<f32>,
    dy: &Array<f32>,
    da: &mut Array<f32>,
    db: &mut Array<f32>,
    n: usize,
) {
    let i = ABSOLUTE_POS;
    if i < n {
        let (ar, ai) = (a[2 * i], a[2 * i + 1]);
        let (br, bi) = (b[2 * i], b[2 * i + 1]);
        let (gr, gi) = (dy[2 * i], dy[2 * i + 1]);
        da[2 * i] += gr * br + gi * bi;
        da[2 * i + 1] += gi * br - gr * bi;
        db[2 * i] += gr * ar + gi * ai;
        db[2 * i + 1] += gi * ar - gr * ai;
    }
}

/// `y = |z|` or (`angle`) `y = atan2(im, re)`, 0 at the origin (where the shader's atan2
/// is undefined).
#[cube(launch_unchecked)]
fn complex_to_real_kernel(z: &Array<f32>, y: &mut Array<f32>, n: usize, #[comptime] angle: bool) {
    let i = ABSOLUTE_POS;
    if i < n {
        let (re, im) = (z[2 * i], z[2 * i + 1]);
        if comptime!(angle) {
            let mut p = 0.0f32;
            if re != 0.0f32 || im != 0.0f32 {
                p = f32::atan2(im, re);
            }
            y[i] = p;
        } else {
            y[i] = f32::sqrt(re * re + im * im);
        }
    }
}

/// `dz = dy z / |z|`, 0 where `|z| = 0`.
#[cube(launch_unchecked)]
fn complex_abs_backward_kernel(z: &Array<f32>, dy: &Array<f32>, dz: &mut Array<f32>, n: usize) {
    let i = ABSOLUTE_POS;
    if i < n {
        let (re, im) = (z[2 * i], z[2 * i + 1]);
        let r = f32::sqrt(re * re + im * im);
        let mut gr = 0.0f32;
        let mut gi = 0.0f32;
        if r > 0.0f32 {
            let g = dy[i];
            gr = g * re / r;
            gi = g * im / r;
        }
        dz[2 * i] = gr;
        dz[2 * i + 1] = gi;
    }
}

/// `y = (mag cos phase, mag sin phase)`.
#[cube(launch_unchecked)]
fn complex_from_polar_kernel(mag: &Array<f32>, phase: &Array<f32>, y: &mut Array<f32>, n: usize) {
    let i = ABSOLUTE_POS;
    if i < n {
        let (m, p) = (mag[i], phase[i]);
        y[2 * i] = m * f32::cos(p);
        y[2 * i + 1] = m * f32::sin(p);
    }
}

/// Checks `n` complex elements (`2n` parts) against the 32-bit index range; the part count.
fn parts(n: usize) -> Result<usize, LaunchError> {
    let p = extent("2 * complex elements", &[n, 2])?;
    check_u32(&[("2 * complex elements", p)])?;
    Ok(p)
}

/// The gradient of a complex product over `n` complex elements: `da += dy conj(b)`,
/// `db += dy conj(a)` (all `2n` interleaved floats).
pub fn launch_complex_mul_backward<R: Runtime>(
    client: &ComputeClient<R>,
    (a, b, dy): (&Handle, &Handle, &Handle),
    (da, db): (&Handle, &Handle),
    n: usize,
) -> Result<(), LaunchError> {
    let p = parts(n)?;
    if n == 0 {
        return Ok(());
    }
    let (a, b, dy) = (
        Buf::new("a", a, p, 4)?,
        Buf::new("b", b, p, 4)?,
        Buf::new("dy", dy, p, 4)?,
    );
    let (da, db) = (Buf::new("da", da, p, 4)?, Buf::new("db", db, p, 4)?);
    let (count, dim) = grid_1d(client, n)?;
    // SAFETY: every buffer holds `2n` floats (checked `Buf`s, indices below 2^32); unit
    // `i < n` touches parts `2i` and `2i + 1` only.
    unsafe {
        complex_mul_backward_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            a.arg(),
            b.arg(),
            dy.arg(),
            da.arg(),
            db.arg(),
            n,
        );
    }
    Ok(())
}

/// `y = |z|` (or, with `angle`, `y = atan2(im, re)`) over `n` complex elements: `z` `2n`
/// interleaved floats, `y` `n`.
pub fn launch_complex_to_real<R: Runtime>(
    client: &ComputeClient<R>,
    (z, y): (&Handle, &Handle),
    n: usize,
    angle: bool,
) -> Result<(), LaunchError> {
    let p = parts(n)?;
    if n == 0 {
        return Ok(());
    }
    let (z, y) = (Buf::new("z", z, p, 4)?, Buf::new("y", y, n, 4)?);
    let (count, dim) = grid_1d(client, n)?;
    // SAFETY: z holds `2n` floats and y `n` (checked `Buf`s); unit `i < n` reads parts `2i`,
    // `2i + 1` and writes element `i`.
    unsafe {
        complex_to_real_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            z.arg(),
            y.arg(),
            n,
            angle,
        );
    }
    Ok(())
}

/// The gradient of `y = |z|` over `n` complex elements: `dz = dy z / |z|` (0 at the
/// origin); `z`, `dz` `2n` floats, `dy` `n`.
pub fn launch_complex_abs_backward<R: Runtime>(
    client: &ComputeClient<R>,
    (z, dy): (&Handle, &Handle),
    dz: &Handle,
    n: usize,
) -> Result<(), LaunchError> {
    let p = parts(n)?;
    if n == 0 {
        return Ok(());
    }
    let (z, dy, dz) = (
        Buf::new("z", z, p, 4)?,
        Buf::new("dy", dy, n, 4)?,
        Buf::new("dz", dz, p, 4)?,
    );
    let (count, dim) = grid_1d(client, n)?;
    // SAFETY: z and dz hold `2n` floats, dy `n` (checked `Buf`s); unit `i < n` touches its
    // own element and parts.
    unsafe {
        complex_abs_backward_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            z.arg(),
            dy.arg(),
            dz.arg(),
            n,
        );
    }
    Ok(())
}

/// `y = mag e^{i phase}` over `n` elements: `mag`, `phase` `n` floats, `y` `2n` interleaved.
pub fn launch_complex_from_polar<R: Runtime>(
    client: &ComputeClient<R>,
    (mag, phase): (&Handle, &Handle),
    y: &Handle,
    n: usize,
) -> Result<(), LaunchError> {
    let p = parts(n)?;
    if n == 0 {
        return Ok(());
    }
    let (mag, phase) = (Buf::new("mag", mag, n, 4)?, Buf::new("phase", phase, n, 4)?);
    let y = Buf::new("y", y, p, 4)?;
    let (count, dim) = grid_1d(client, n)?;
    // SAFETY: mag and phase hold `n` floats, y `2n` (checked `Buf`s); unit `i < n` touches
    // its own element and parts.
    unsafe {
        complex_from_polar_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            mag.arg(),
            phase.arg(),
            y.arg(),
            n,
        );
    }
    Ok(())
}

/// Every kernel of this file, lowered to CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    l.lower(
        complex_mul_backward_kernel::ComplexMulBackwardKernel::<Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            a(),
            (),
        ),
    );
    for angle in [false, true] {
        l.lower(complex_to_real_kernel::ComplexToRealKernel::<Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            angle,
        ));
    }
    l.lower(
        complex_abs_backward_kernel::ComplexAbsBackwardKernel::<Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            (),
        ),
    );
    l.lower(
        complex_from_polar_kernel::ComplexFromPolarKernel::<Rt>::new(
            L::settings_1d(),
            c,
            a(),
            a(),
            a(),
            (),
        ),
    );
}
