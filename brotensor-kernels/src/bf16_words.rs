//! BF16 on runtimes whose shader language has no bf16 type (WGSL: Vulkan, Metal, DX12
//! through wgpu). A BF16 tensor is stored as 16-bit words, two to a `u32`; kernels widen each
//! half to `f32` with a shift, run the same instruction as the float kernels, and narrow back
//! with round-to-nearest-even (NaN stays NaN). Element `2k` is the low half of word `k`.
//!
//! Word counts are `ceil(elements / 2)`: an odd tensor's last word carries one element and
//! one padding half, which buffers always have room for (they are sized in 16-byte units).

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::elementwise::{apply_binary, apply_unary, input_arg, BinaryInstr, Source, UnaryInstr};
use crate::launch::{extent, grid_1d, vector_size_for, Buf, LaunchError};

/// The low bf16 of each word, widened to f32 (exact).
#[cube]
fn widen_lo<N: Size>(w: Vector<u32, N>) -> Vector<f32, N> {
    Vector::<f32, N>::reinterpret(w << Vector::new(16u32))
}

/// The high bf16 of each word, widened to f32 (exact).
#[cube]
fn widen_hi<N: Size>(w: Vector<u32, N>) -> Vector<f32, N> {
    Vector::<f32, N>::reinterpret(w & Vector::new(0xFFFF_0000u32))
}

/// f32 to bf16 bits (in the low 16 bits): round to nearest even; NaN becomes a quiet NaN
/// with its sign; overflow rounds to infinity.
#[cube]
fn narrow<N: Size>(v: Vector<f32, N>) -> Vector<u32, N> {
    let bits = Vector::<u32, N>::reinterpret(v);
    let lsb = (bits >> Vector::new(16u32)) & Vector::new(1u32);
    let rounded = (bits + Vector::new(0x7FFFu32) + lsb) >> Vector::new(16u32);
    let quiet = (bits >> Vector::new(16u32)) | Vector::new(0x40u32);
    select_many(v.not_equal(v), quiet, rounded)
}

#[cube]
fn pack<N: Size>(lo: Vector<f32, N>, hi: Vector<f32, N>) -> Vector<u32, N> {
    narrow::<N>(lo) | (narrow::<N>(hi) << Vector::new(16u32))
}

#[cube(launch_unchecked)]
fn unary_words_kernel<N: Size>(
    x: &Array<Vector<u32, N>>,
    out: &mut Array<Vector<u32, N>>,
    a: f32,
    b: f32,
    #[comptime] instr: UnaryInstr,
) {
    if ABSOLUTE_POS < out.len() {
        let w = x[ABSOLUTE_POS];
        let lo = apply_unary::<N>(widen_lo::<N>(w), a, b, instr);
        let hi = apply_unary::<N>(widen_hi::<N>(w), a, b, instr);
        out[ABSOLUTE_POS] = pack::<N>(lo, hi);
    }
}

#[cube(launch_unchecked)]
fn binary_words_kernel<N: Size>(
    x: &Array<Vector<u32, N>>,
    y: &Array<Vector<u32, N>>,
    out: &mut Array<Vector<u32, N>>,
    a: f32,
    b: f32,
    #[comptime] instr: BinaryInstr,
) {
    if ABSOLUTE_POS < out.len() {
        let wx = x[ABSOLUTE_POS];
        let wy = y[ABSOLUTE_POS];
        let lo = apply_binary::<N>(widen_lo::<N>(wx), widen_lo::<N>(wy), a, b, instr);
        let hi = apply_binary::<N>(widen_hi::<N>(wx), widen_hi::<N>(wy), a, b, instr);
        out[ABSOLUTE_POS] = pack::<N>(lo, hi);
    }
}

/// Word `k` of bf16 to elements `2k`, `2k+1` of `F`.
#[cube(launch_unchecked)]
fn words_to_float_kernel<F: Float>(x: &Array<u32>, out: &mut Array<F>) {
    let k = ABSOLUTE_POS;
    if k < x.len() {
        let w = Vector::<u32, Const<1>>::new(x[k]);
        out[2 * k] = F::cast_from(widen_lo::<Const<1>>(w));
        out[2 * k + 1] = F::cast_from(widen_hi::<Const<1>>(w));
    }
}

/// Elements `2k`, `2k+1` of `F` to word `k` of bf16.
#[cube(launch_unchecked)]
fn float_to_words_kernel<F: Float>(x: &Array<F>, out: &mut Array<u32>) {
    let k = ABSOLUTE_POS;
    if k < out.len() {
        let lo = Vector::<f32, Const<1>>::new(f32::cast_from(x[2 * k]));
        let hi = Vector::<f32, Const<1>>::new(f32::cast_from(x[2 * k + 1]));
        out[k] = u32::cast_from(pack::<Const<1>>(lo, hi));
    }
}

/// Words holding `len` bf16 elements.
pub fn words_for(len: usize) -> usize {
    len.div_ceil(2)
}

/// `out = instr(x; a, b)` over `len` bf16 elements stored as words.
#[allow(clippy::too_many_arguments)]
pub fn launch_unary_words<R: Runtime>(
    client: &ComputeClient<R>,
    instr: UnaryInstr,
    x: Source<'_>,
    out: &Handle,
    len: usize,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    let words = words_for(len);
    if words == 0 {
        return Ok(());
    }
    let x = x.buf("x", words, 4)?;
    let out = Buf::new("out", out, words, 4)?;
    let vs = vector_size_for(words, crate::MAX_VECTOR_SIZE);
    let (count, dim) = grid_1d(client, words / vs)?;
    // SAFETY: every buffer holds `words` words (checked `Buf`s); the kernel guards its index.
    unsafe {
        unary_words_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            vs,
            input_arg(x.as_ref(), &out),
            out.arg(),
            a,
            b,
            instr,
        );
    }
    Ok(())
}

/// `out = instr(x, y; a, b)` over `len` bf16 elements stored as words.
#[allow(clippy::too_many_arguments)]
pub fn launch_binary_words<R: Runtime>(
    client: &ComputeClient<R>,
    instr: BinaryInstr,
    x: Source<'_>,
    y: Source<'_>,
    out: &Handle,
    len: usize,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    let words = words_for(len);
    if words == 0 {
        return Ok(());
    }
    let x = x.buf("x", words, 4)?;
    let y = y.buf("y", words, 4)?;
    let out = Buf::new("out", out, words, 4)?;
    let vs = vector_size_for(words, crate::MAX_VECTOR_SIZE);
    let (count, dim) = grid_1d(client, words / vs)?;
    // SAFETY: as in `launch_unary_words`.
    unsafe {
        binary_words_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            vs,
            input_arg(x.as_ref(), &out),
            input_arg(y.as_ref(), &out),
            out.arg(),
            a,
            b,
            instr,
        );
    }
    Ok(())
}

/// bf16 words to `F` (f32 or f16): `len` elements; `out` needs room for an even count.
pub fn launch_words_to_float<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    out: &Handle,
    len: usize,
) -> Result<(), LaunchError> {
    let words = words_for(len);
    if words == 0 {
        return Ok(());
    }
    let halves = extent("2 * words", &[2, words])?;
    let x = Buf::new("x", x, words, 4)?;
    let out = Buf::new("out", out, halves, core::mem::size_of::<F>())?;
    let (count, dim) = grid_1d(client, words)?;
    // SAFETY: as in `launch_unary_words`; `out` holds `2 * words` elements.
    unsafe {
        words_to_float_kernel::launch_unchecked::<F, R>(client, count, dim, x.arg(), out.arg());
    }
    Ok(())
}

/// `F` (f32 or f16) to bf16 words: `len` elements; `x` needs room for an even count.
pub fn launch_float_to_words<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    out: &Handle,
    len: usize,
) -> Result<(), LaunchError> {
    let words = words_for(len);
    if words == 0 {
        return Ok(());
    }
    let halves = extent("2 * words", &[2, words])?;
    let x = Buf::new("x", x, halves, core::mem::size_of::<F>())?;
    let out = Buf::new("out", out, words, 4)?;
    let (count, dim) = grid_1d(client, words)?;
    // SAFETY: as in `launch_words_to_float`.
    unsafe {
        float_to_words_kernel::launch_unchecked::<F, R>(client, count, dim, x.arg(), out.arg());
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
    for vs in L::vector_sizes() {
        for &instr in UnaryInstr::ALL {
            l.lower(unary_words_kernel::UnaryWordsKernel::<Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                (),
                (),
                vs,
                instr,
            ));
        }
        for &instr in BinaryInstr::ALL {
            l.lower(binary_words_kernel::BinaryWordsKernel::<Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                vs,
                instr,
            ));
        }
    }
    for_floats!(|F| {
        l.lower(words_to_float_kernel::WordsToFloatKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
        ));
        l.lower(float_to_words_kernel::FloatToWordsKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
        ));
    });
}
