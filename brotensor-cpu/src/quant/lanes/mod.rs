//! Sixteen FP32 and sixteen i32 lanes in the registers of one instruction set: the
//! operations the register-decoding [`gemv`](super::gemv) kernels of `registers` are written
//! in, so each block layout is written once for every tier. AVX-512 holds sixteen lanes in one
//! register, AVX2 in two (`x86`), NEON in four (`neon`).
//!
//! Every method is `unsafe`: the CPU must run the tier's instructions, which holds inside
//! [`Lanes::enter`] (the kernels run nowhere else).

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "aarch64")]
use neon as arch;
#[cfg(target_arch = "aarch64")]
pub(super) use neon::Neon;
#[cfg(target_arch = "x86_64")]
use x86 as arch;
#[cfg(target_arch = "x86_64")]
pub(super) use x86::{Avx2, Avx512};

/// One tier's sixteen-lane operations (see the module doc).
pub(super) trait Lanes {
    /// 16 FP32 lanes.
    type F: Copy;
    /// 16 i32 lanes.
    type I: Copy;
    /// The 16 values `q d + c` of `q = 0..16`, read by [`Lanes::linear`].
    type Linear: Copy;
    /// 16 arbitrary FP32 values, read by [`Lanes::lookup`].
    type Table: Copy;
    /// The most activation rows one kernel pass takes: its accumulators must stay in
    /// registers.
    const ROWS_PER_PASS: usize;
    /// The most rows of a pass that get two sixteen-lane accumulators each (two independent
    /// chains of multiply-adds a row); larger passes take one a row.
    const TWO_ACC_ROWS: usize;

    /// Runs `f` inlined into a function compiled for this tier.
    ///
    /// # Safety
    /// The CPU must run this tier's instructions.
    unsafe fn enter<R>(f: impl FnOnce() -> R) -> R;
    /// The f16 at `b[at..at + 2]` as FP32 (exact; F16C on x86-64, whose every tier has it).
    #[inline(always)]
    unsafe fn half(b: &[u8], at: usize) -> f32 {
        arch::f16(b, at)
    }
    /// The two f16 at `b[at..at + 4]` as FP32 (exact).
    #[inline(always)]
    unsafe fn half_pair(b: &[u8], at: usize) -> [f32; 2] {
        arch::f16_pair(b, at)
    }
    /// Zeros.
    unsafe fn zero() -> Self::F;
    /// `v` in every lane.
    unsafe fn splat(v: f32) -> Self::F;
    /// The 16 floats at `x` (unaligned).
    unsafe fn load(x: *const f32) -> Self::F;
    /// `a b + c`, one rounding.
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `acc[i][a] = v x_i + acc[i][a]` for every row `i`, `x_i` the 16 floats at `x + i k`:
    /// row after row, or (where one sixteen-lane value spans registers) register after
    /// register across the rows, so that each register of `v` dies as early as it can.
    #[inline(always)]
    unsafe fn fma_rows<const M: usize, const A: usize>(
        acc: &mut [[Self::F; A]; M],
        a: usize,
        v: Self::F,
        x: *const f32,
        k: usize,
    ) {
        for (i, acc) in acc.iter_mut().enumerate() {
            acc[a] = Self::fma(v, Self::load(x.add(i * k)), acc[a]);
        }
    }
    /// `a b`.
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// `a + b`.
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    /// The sum of the lanes.
    unsafe fn sum(a: Self::F) -> f32;
    /// The integers as FP32.
    unsafe fn to_f32(q: Self::I) -> Self::F;
    /// The 16 bytes `b[at..at + 16]`, zero-extended.
    unsafe fn bytes(b: &[u8], at: usize) -> Self::I;
    /// The 16 bytes `b[at..at + 16]`, sign-extended.
    unsafe fn signed_bytes(b: &[u8], at: usize) -> Self::I;
    /// `q & m`.
    unsafe fn and(q: Self::I, m: i32) -> Self::I;
    /// `a | b`.
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    /// `q >> n` (logical).
    unsafe fn shr(q: Self::I, n: u32) -> Self::I;
    /// `q << n`.
    unsafe fn shl(q: Self::I, n: u32) -> Self::I;
    /// `q - v`.
    unsafe fn sub(q: Self::I, v: i32) -> Self::I;
    /// `q | v` in the lanes `j` whose bit `j` of `bits` is set, `q` in the others.
    unsafe fn or_where_bits(q: Self::I, bits: u16, v: i32) -> Self::I;
    /// `q | v` in the lanes whose `qh` has bit `bit` set, `q` in the others.
    unsafe fn or_where_bit(q: Self::I, qh: Self::I, bit: u32, v: i32) -> Self::I;
    /// The table of `q d + c` (one rounding each) for [`Lanes::linear`].
    unsafe fn linear_table(d: Self::F, c: Self::F) -> Self::Linear;
    /// `q d + c` for `q` in `0..16`, one rounding: the same bits however the tier gets them.
    unsafe fn linear(q: Self::I, t: Self::Linear) -> Self::F;
    /// The 16 int8 `values` times `d` for [`Lanes::lookup`].
    unsafe fn table(values: &[i8; 16], d: Self::F) -> Self::Table;
    /// `table[q]` for `q` in `0..16`.
    unsafe fn lookup(q: Self::I, t: Self::Table) -> Self::F;
}

/// The 16 bytes of `b` at `at`, bounds-checked.
#[inline(always)]
fn sixteen(b: &[u8], at: usize) -> *const u8 {
    b[at..at + 16].as_ptr()
}
