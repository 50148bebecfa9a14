//! The complex element ops of the spectral family (C++ `ops/spectral.h`). A complex operand
//! is either an F32 tensor whose last dim interleaves `[re, im]` pairs (`(R, 2C)`, the C++
//! layout) or a C64 tensor `(R, C)`: the same memory, taken as it is, with no copy. A real
//! operand or output has one F32 value per complex element: `(R, C)`.
//!
//! ```
//! # fn main() -> brotensor::Result<()> {
//! use brotensor::{ops, Tensor};
//! let z = Tensor::from_slice(&[3.0f32, 4.0, 0.0, -2.0], 1, 4)?; // 3 + 4i, -2i
//! let mut mag = Tensor::default();
//! ops::complex_abs(&z, &mut mag)?;
//! assert_eq!(mag.to_vec::<f32>()?, [5.0, 2.0]);
//! # Ok(())
//! # }
//! ```

use super::{check_dtype, check_dtypes_match, dispatch, input, updated, written};
use crate::{Dtype, Error, Result, Tensor};

/// The dims of the real counterpart of complex operand `t` (one value per complex element):
/// an F32 tensor's dims with the last halved (it must be even), or a C64 tensor's own.
pub(super) fn real_dims(op: &'static str, name: &'static str, t: &Tensor) -> Result<Vec<usize>> {
    let dims = t.dims();
    match (t.dtype(), dims.last()) {
        (Dtype::C64, _) => Ok(dims.to_vec()),
        (Dtype::F32, Some(&last)) if last % 2 == 0 => {
            let mut d = dims.to_vec();
            *d.last_mut().expect("rank >= 1") = last / 2;
            Ok(d)
        }
        (Dtype::F32, _) => Err(Error::shape(
            op,
            format!(
                "{name} holds interleaved [re, im] pairs: its last dim must be even, got dims {dims:?}"
            ),
        )),
        (found, _) => Err(Error::Dtype {
            op,
            operand: name,
            expected: "complex: F32 of interleaved [re, im] pairs, or C64".into(),
            found,
        }),
    }
}

/// Errors unless `t` is like `like` (dims and dtype).
fn check_like(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    like: (&'static str, &Tensor),
) -> Result<()> {
    check_dtypes_match(op, like, &[(name, t)])?;
    if t.dims() != like.1.dims() {
        return Err(Error::shape(
            op,
            format!(
                "{name} must have {}'s dims {:?}, got {:?}",
                like.0,
                like.1.dims(),
                t.dims()
            ),
        ));
    }
    Ok(())
}

/// Errors unless `t` is a real F32 operand of `dims`.
fn check_real(op: &'static str, name: &'static str, t: &Tensor, dims: &[usize]) -> Result<()> {
    check_dtype(op, name, t, Dtype::F32)?;
    if t.dims() != dims {
        return Err(Error::shape(
            op,
            format!(
                "{name} must have dims {dims:?} (one value per complex element), got {:?}",
                t.dims()
            ),
        ));
    }
    Ok(())
}

/// The complex product `y = a b` per element (C++ `complex_mul`): `a`, `b` complex of one
/// dtype and dims; `y` is resized to match `a`.
pub fn complex_mul(a: &Tensor, b: &Tensor, y: &mut Tensor) -> Result<()> {
    let op = "complex_mul";
    let be = dispatch(op, &[input("a", a), input("b", b), written("y", y)])?;
    let real = real_dims(op, "a", a)?;
    check_like(op, "b", b, ("a", a))?;
    be.out("y", y, a.dims(), a.dtype())?;
    let n = real.iter().product();
    if n == 0 {
        return Ok(());
    }
    be.complex_mul(op, [a, b], y, n)
}

/// The gradient of [`complex_mul`] (C++ `complex_mul_backward`): `da += dy conj(b)`,
/// `db += dy conj(a)`. `a`, `b`, `dy`, `da`, `db` complex of one dtype and dims; `da` and
/// `db` accumulate (the caller sizes and zeroes them).
pub fn complex_mul_backward(
    a: &Tensor,
    b: &Tensor,
    dy: &Tensor,
    da: &mut Tensor,
    db: &mut Tensor,
) -> Result<()> {
    let op = "complex_mul_backward";
    let be = dispatch(
        op,
        &[
            input("a", a),
            input("b", b),
            input("dy", dy),
            updated("da", da),
            updated("db", db),
        ],
    )?;
    let real = real_dims(op, "a", a)?;
    check_like(op, "b", b, ("a", a))?;
    check_like(op, "dy", dy, ("a", a))?;
    check_like(op, "da", da, ("a", a))?;
    check_like(op, "db", db, ("a", a))?;
    let n = real.iter().product();
    if n == 0 {
        return Ok(());
    }
    be.complex_mul_backward(op, [a, b, dy], [da, db], n)
}

/// `|z|` or the phase of `z` into `y`.
fn to_real(op: &'static str, z: &Tensor, angle: bool, y: &mut Tensor) -> Result<()> {
    let be = dispatch(op, &[input("z", z), written("y", y)])?;
    let real = real_dims(op, "z", z)?;
    be.out("y", y, &real, Dtype::F32)?;
    let n = real.iter().product();
    if n == 0 {
        return Ok(());
    }
    be.complex_to_real(op, z, angle, y, n)
}

/// The magnitude `y = sqrt(re^2 + im^2)` per element (C++ `complex_abs`): `z` complex; `y`
/// is resized to its real counterpart (F32, one value per element).
pub fn complex_abs(z: &Tensor, y: &mut Tensor) -> Result<()> {
    to_real("complex_abs", z, false, y)
}

/// The phase `y = atan2(im, re)` in radians, `[-pi, pi]`, per element (C++
/// `complex_angle`, no gradient); the origin has phase 0 (whatever its zeros' signs). `y`
/// is resized as in [`complex_abs`].
pub fn complex_angle(z: &Tensor, y: &mut Tensor) -> Result<()> {
    to_real("complex_angle", z, true, y)
}

/// The gradient of [`complex_abs`] (C++ `complex_abs_backward`): `dz = dy z / |z|`, 0 where
/// `|z| = 0`. `dy` is real (F32, one value per element of `z`); `dz` is resized like `z`
/// and overwritten.
pub fn complex_abs_backward(z: &Tensor, dy: &Tensor, dz: &mut Tensor) -> Result<()> {
    let op = "complex_abs_backward";
    let be = dispatch(op, &[input("z", z), input("dy", dy), written("dz", dz)])?;
    let real = real_dims(op, "z", z)?;
    check_real(op, "dy", dy, &real)?;
    be.out("dz", dz, z.dims(), z.dtype())?;
    let n = real.iter().product();
    if n == 0 {
        return Ok(());
    }
    be.complex_abs_backward(op, z, dy, dz, n)
}

/// The polar form `y = mag e^{i phase}` = `(mag cos phase, mag sin phase)` (C++
/// `complex_from_polar`): `mag`, `phase` real F32 of one dims `(.., C)`; `y` is resized to
/// `(.., 2C)` F32 of interleaved pairs.
pub fn complex_from_polar(mag: &Tensor, phase: &Tensor, y: &mut Tensor) -> Result<()> {
    let op = "complex_from_polar";
    let be = dispatch(
        op,
        &[input("mag", mag), input("phase", phase), written("y", y)],
    )?;
    check_real(op, "mag", mag, mag.dims())?;
    check_real(op, "phase", phase, mag.dims())?;
    let mut dims = mag.dims().to_vec();
    match dims.last_mut() {
        Some(last) => {
            *last = last.checked_mul(2).ok_or_else(|| {
                Error::shape(
                    op,
                    format!("2 * the last dim of {:?} overflows", mag.dims()),
                )
            })?
        }
        None => dims.push(2),
    }
    be.out("y", y, &dims, Dtype::F32)?;
    let n = mag.numel();
    if n == 0 {
        return Ok(());
    }
    be.complex_from_polar(op, mag, phase, y, n)
}
