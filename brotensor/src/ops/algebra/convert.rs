//! Element type conversion between the structural dtypes.

use super::super::{dispatch, input};
use crate::{Dtype, Error, Result, Tensor};

use super::*;

/// `x` converted to `dtype` (F32, F64, I32, I64, C64, C128 in any pair): complex to real
/// keeps the real part, real to complex has a zero imaginary part, float to integer
/// truncates toward zero and errors on NaN, infinities and out-of-range values.
pub fn convert(x: &Tensor, dtype: Dtype) -> Result<Tensor> {
    const OP: &str = "convert";
    let be = dispatch(OP, &[input("x", x)])?;
    check_dtype(OP, "x", x, &STRUCTURAL, be)?;
    if !STRUCTURAL.contains(&dtype) || (dtype != Dtype::I32 && !be.supports(dtype)) {
        return Err(Error::UnsupportedDtype {
            op: OP,
            dtype,
            device: be.device(),
        });
    }
    let mut out = Tensor::default();
    be.out("out", &mut out, x.dims(), dtype)?;
    if x.numel() == 0 {
        return Ok(out);
    }
    be.convert(x, &mut out)?;
    Ok(out)
}
