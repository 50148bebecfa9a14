//! The quantized gemv kernels: the decode product `y (m, n) = act(x (m, k) . dequant(w)^T +
//! bias)` for few activation rows (`m <= GEMV_MAX_ROWS`), reading the weight's blocks
//! directly.
//!
//! A cube of 256 units computes [`ROWS_PER_CUBE`] output rows with [`LANES`] units each: a
//! unit decodes groups of 8 consecutive weights (one [`decode8()`]) strided by [`LANES`] along
//! the row, and multiplies each decoded group into all `m` activation rows (read as two
//! 4-wide vectors each), so every weight byte is read once for all rows. The FP32 partial sums meet in shared memory (a tree over
//! the row's lanes), then one unit per activation row adds the bias and applies the
//! epilogue activation.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::blocks::{block_bytes, block_elems, decode8, KINDS};
use super::dequant::quant_extent;
use crate::launch::{extent, grid_1d, Buf, LaunchError};
use crate::matmul::write_c_runtime;

/// The most activation rows one launch takes.
pub const GEMV_MAX_ROWS: usize = 8;
/// Units sharing one output row.
pub const LANES: usize = 32;
/// Output rows per cube.
pub const ROWS_PER_CUBE: usize = 8;
/// Units per cube.
const UNITS: usize = LANES * ROWS_PER_CUBE;

/// Cube `c` computes output columns `c * ROWS_PER_CUBE ..` of `y (m, n)`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn quant_gemv_kernel<F: Float>(
    w: &Array<u32>,
    x: &Array<Vector<F, Const<4>>>,
    bias: &Array<F>,
    y: &mut Array<F>,
    m: usize,
    n: usize,
    k: usize,
    flags: u32,
    act: u32,
    #[comptime] kind: u32,
) {
    let u = UNIT_POS as usize;
    let lane = u % LANES;
    let local = u / LANES;
    let j = CUBE_POS * ROWS_PER_CUBE + local;
    let elems = comptime!(block_elems(kind));
    let bytes = comptime!(block_bytes(kind));
    let mut acc = Array::<f32>::new(GEMV_MAX_ROWS);
    #[unroll]
    for r in 0..GEMV_MAX_ROWS {
        acc[r] = 0.0;
    }
    if j < n {
        let row_at = j * (k / elems) * bytes;
        let groups = k / 8;
        let mut vals = Array::<f32>::new(8usize);
        let mut g = lane;
        loop {
            if g >= groups {
                break;
            }
            let first = g * 8;
            decode8(
                w,
                row_at + (first / elems) * bytes,
                first % elems,
                &mut vals,
                kind,
            );
            for r in 0..m {
                // The group's 8 activations as two 4-wide vectors (`k` and `first` are
                // multiples of 8).
                let xa = (r * k + first) / 4;
                let lo = Vector::<f32, Const<4>>::cast_from(x[xa]);
                let hi = Vector::<f32, Const<4>>::cast_from(x[xa + 1]);
                let mut s = f32::new(0.0f32);
                #[unroll]
                for t in 0..4usize {
                    s += lo[t] * vals[t];
                }
                #[unroll]
                for t in 0..4usize {
                    s += hi[t] * vals[t + 4];
                }
                acc[r] += s;
            }
            g += LANES;
        }
    }
    let mut smem = SharedMemory::<f32>::new(UNITS * GEMV_MAX_ROWS);
    #[unroll]
    for r in 0..GEMV_MAX_ROWS {
        smem[r * UNITS + u] = acc[r];
    }
    sync_cube();
    let mut stride = usize::new((LANES / 2) as i64);
    loop {
        if stride == 0 {
            break;
        }
        if lane < stride {
            for r in 0..m {
                smem[r * UNITS + u] += smem[r * UNITS + u + stride];
            }
        }
        sync_cube();
        stride /= 2;
    }
    if j < n && lane < m {
        let v = smem[lane * UNITS + local * LANES];
        write_c_runtime::<F>(y, bias, v, lane * n + j, j, flags, act);
    }
}

/// The sizes of a quantized GEMV: `m` activation rows of `k` elements, `n` weight rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantGemvSpec {
    /// Activation rows (at most [`GEMV_MAX_ROWS`]).
    pub m: usize,
    /// Weight rows (output columns).
    pub n: usize,
    /// Row length (a whole number of blocks).
    pub k: usize,
    /// Block type code ([`super::blocks`]).
    pub kind: u32,
    /// Whether `bias` (`n` elements) is added.
    pub bias: bool,
    /// Epilogue activation code (`crate::matmul::GemmSpec::act`; any other value is none).
    pub act: u32,
}

/// `y (m, n) = act(x (m, k) . dequant(w)^T + bias)`, `w` holding `n` rows of `k / elems`
/// blocks of `spec.kind`; `x`, `bias`, `y` of `F`, FP32 accumulation. Refused
/// ([`LaunchError::TooLarge`]) for more than [`GEMV_MAX_ROWS`] rows, a `k` that is not a
/// whole number of blocks, or sizes past 32-bit indexing.
pub fn launch_quant_gemv<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    w: &Handle,
    x: &Handle,
    bias: Option<&Handle>,
    y: &Handle,
    spec: QuantGemvSpec,
) -> Result<(), LaunchError> {
    let QuantGemvSpec { m, n, k, kind, .. } = spec;
    if !KINDS.contains(&kind) {
        return Err(LaunchError::UnknownBlockKind(kind));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if m > GEMV_MAX_ROWS || !k.is_multiple_of(block_elems(kind)) {
        return Err(LaunchError::TooLarge {
            vectors: m.saturating_mul(k),
        });
    }
    let blocks = extent("n * k / block elements", &[n, k / block_elems(kind)])?;
    let (wbytes, _) = quant_extent(kind, blocks)?;
    let (xlen, ylen) = (extent("m * k", &[m, k])?, extent("m * n", &[m, n])?);
    // Indices stay in 32 bits; each unit's loop stays under lavapipe's 65535 iterations.
    if xlen > u32::MAX as usize || ylen > u32::MAX as usize || k / 8 / LANES >= 65_535 {
        return Err(LaunchError::TooLarge { vectors: xlen });
    }
    let b = core::mem::size_of::<F>();
    let words = wbytes.div_ceil(4);
    let w = Buf::new("w", w, words, 4)?;
    let x = Buf::new("x", x, xlen, b)?;
    let y = Buf::new("y", y, ylen, b)?;
    let bias = if spec.bias {
        Buf::required("bias", bias, n, b)?
    } else {
        x.stand_in()
    };
    let cubes = n.div_ceil(ROWS_PER_CUBE);
    let (count, _) = grid_1d(client, extent("cubes * units", &[cubes, UNITS])?)?;
    let act = if spec.act <= 5 { spec.act } else { 0 };
    // SAFETY: lengths from checked `Buf`s (`x` stands in for an absent bias, unread). Unit
    // reads of `w` stay in row `j < n` (bytes below `n (k / elems) bytes`), of `x` at the
    // 4-wide vectors `(r k + 8g) / 4` and the next, elements below `m k` (`k` is whole
    // blocks, a multiple of 8), of `bias` at `j < n`; writes `y[r n + j]` with `r < m`,
    // `j < n`; shared memory at `r UNITS + u (+ stride)` with `r < 8`, `u + stride < UNITS`.
    unsafe {
        quant_gemv_kernel::launch_unchecked::<F, R>(
            client,
            count,
            CubeDim::new_1d(UNITS as u32),
            w.arg(),
            x.arg(),
            bias.arg(),
            y.arg(),
            m,
            n,
            k,
            // The epilogue of `write_c_runtime`: bit 1 adds the bias (no accumulation).
            u32::from(spec.bias) << 1,
            act,
            kind,
        );
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches (one per block
/// type: the bias and activation are launch arguments), lowered to CUDA C++ (see
/// `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    for_floats!(|F| {
        for kind in KINDS {
            l.lower(quant_gemv_kernel::QuantGemvKernel::<F, Rt>::new(
                L::settings(CubeDim::new_1d(UNITS as u32)),
                c.clone(),
                L::array(),
                L::array(),
                L::array(),
                L::array(),
                (),
                (),
                (),
                (),
                (),
                kind,
            ));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequant::launch_dequantize;
    use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

    /// Launches the glue cannot reach (it passes only valid codes and sizes) are refused
    /// before they reach the device.
    #[test]
    fn bad_launches_are_refused() {
        let Ok(client) = std::panic::catch_unwind(|| WgpuRuntime::client(&WgpuDevice::Cpu)) else {
            let required = std::env::var("BROTENSOR_REQUIRE_GPU").unwrap_or_default();
            assert!(
                !matches!(required.as_str(), "wgpu" | "any"),
                "no software wgpu adapter"
            );
            eprintln!("quant launch checks: SKIPPED (no software wgpu adapter)");
            return;
        };
        let h = client.empty(1024);
        assert_eq!(
            launch_dequantize::<WgpuRuntime, f32>(&client, &h, &h, 13, 1),
            Err(LaunchError::UnknownBlockKind(13))
        );
        // 40 Q8_0 blocks (1360 bytes) do not fit a 1024-byte buffer.
        assert!(matches!(
            launch_dequantize::<WgpuRuntime, f32>(&client, &h, &h, super::super::blocks::Q8_0, 40),
            Err(LaunchError::BufferTooSmall { arg: "w", .. })
        ));
        let spec = QuantGemvSpec {
            m: 1,
            n: 1,
            k: 32,
            kind: 99,
            bias: false,
            act: 0,
        };
        let gemv = |spec| launch_quant_gemv::<WgpuRuntime, f32>(&client, &h, &h, None, &h, spec);
        assert_eq!(gemv(spec), Err(LaunchError::UnknownBlockKind(99)));
        let q8 = super::super::blocks::Q8_0;
        // More rows than the GEMV takes, a row of a partial block, a missing bias.
        assert!(gemv(QuantGemvSpec {
            m: 9,
            kind: q8,
            ..spec
        })
        .is_err());
        assert!(gemv(QuantGemvSpec {
            k: 31,
            kind: q8,
            ..spec
        })
        .is_err());
        assert!(matches!(
            gemv(QuantGemvSpec {
                kind: q8,
                bias: true,
                ..spec
            }),
            Err(LaunchError::BufferTooSmall { arg: "bias", .. })
        ));
        // A weight buffer too short for its rows.
        assert!(matches!(
            gemv(QuantGemvSpec {
                n: 100,
                k: 64,
                kind: q8,
                ..spec
            }),
            Err(LaunchError::BufferTooSmall { arg: "w", .. })
        ));
    }
}
