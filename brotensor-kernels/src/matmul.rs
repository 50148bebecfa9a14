//! A tiled matrix product: `C (m, n) = op(A) . op(B)` (+ `C` when accumulating), batched with
//! element strides, FP32 accumulation for every storage type.
//!
//! Each cube computes a `128 x 128` tile of `C` with `16 x 16` units, each unit an `8 x 8`
//! block held in registers. The cube stages `128 x 16` slices of `A` and `16 x 128` slices of
//! `B` in shared memory (widened to FP32), so every global element is read once per tile. Edges are
//! zero-filled, so any shape is correct (ragged tiles, `k == 0`, `1 x 1`). Transposes are
//! comptime index maps, not copies. The epilogue (accumulate, bias, activation) is a launch
//! argument of every kernel here, not a specialisation: a kernel is compiled once per
//! transpose and storage type, where twelve epilogues times two accumulate settings used to
//! compile it 24 times (each compile costs seconds on software devices and in NVRTC).
//!
//! At most [`SKINNY_MAX_M`] rows of `C` (decode steps) take a kernel without tiles instead
//! (when its grid fits, and `k` is at most [`SKINNY_SERIAL_K`] unless `B` is transposed):
//! every element of `B` is read once and multiplies each row, where a `64 x 64` tile would
//! compute 64 rows to keep one.
//!
//! Other 16-bit operands on a runtime with matrix units take a tensor-core kernel instead (CubeCL
//! `cmma`: CUDA tensor cores with 16 x 16 x 16 fragments on 32-unit planes; Vulkan
//! cooperative matrices through the SPIR-V compiler, e.g. lavapipe's 8 x 8 x 8 on 8-unit
//! planes): the same 64 x 64 tile, staged in shared memory in the storage type, each plane
//! multiplying 2 x 2 fragments that accumulate in FP32, then the same epilogue.
//! [`CMMA_ENV`]`=0` turns it off.

use cubecl::features::MmaConfig;
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::elementwise::{gelu, gelu_exact, sigmoid, silu};
use crate::launch::{extent, strided_span, Buf, LaunchError};

/// The tensor-core kernel's (and the quantized GEMM's) `64 x 64` tile of `C`.
pub(crate) const BM: usize = 64;
pub(crate) const BN: usize = 64;
/// The depth of a staged slice.
const BK: usize = 16;
/// Units along a cube's columns (the dense scalar tiles are `UNITS x rows / 8` units).
const UNITS: usize = 16;
/// Rows and columns of `C` per unit of the quantized GEMM.
pub(crate) const TM: usize = 4;
pub(crate) const TN: usize = 4;
/// The dense scalar kernels' tiles: `rows x 128` of `C` per cube (`rows` 32, 64 or 128),
/// [`UNITS`]` x rows / 8` units of `8 x 8` blocks each: 64 FMAs per 16 shared loads (a `4 x 4`
/// block does 16 per 8: software devices, which load shared memory one lane at a time, run
/// twice as fast), and no more rows than the product has (to 32).
const COLS: usize = 128;
const PER: usize = 8;
/// The tile row counts, smallest first.
const TILE_ROWS: [usize; 3] = [32, 64, 128];
/// The fewest cubes a grid should have before it takes taller tiles (the device's
/// multiprocessors where the runtime knows them, if more).
const MIN_CUBES: usize = 16;

/// What a launch computes, beyond the three operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmSpec {
    /// Rows of `C` (and of `op(A)`).
    pub m: usize,
    /// Columns of `C` (and of `op(B)`).
    pub n: usize,
    /// The inner dimension.
    pub k: usize,
    /// `A` is stored `k x m` and read transposed.
    pub trans_a: bool,
    /// `B` is stored `n x k` and read transposed.
    pub trans_b: bool,
    /// `C += ...` instead of `C = ...`.
    pub accumulate: bool,
    /// Independent products, `C[z] = op(A[z]) . op(B[z])`.
    pub batch: usize,
    /// Element strides between consecutive batch entries of `A`, `B`, `C`.
    pub strides: (usize, usize, usize),
    /// Add `bias[j]` (a vector of `n`) to every row of `C` before the activation.
    pub bias: bool,
    /// The activation applied last: 0 none, 1 relu, 2 tanh-GELU, 3 erf-GELU, 4 SiLU,
    /// 5 quick-GELU (the C++ epilogue codes; any other value is none).
    pub act: u32,
}

impl GemmSpec {
    /// A single product of the given shape, no transposes, overwriting `C`. The strides of a
    /// single product are never used; a shape whose products do not fit saturates them, and
    /// `launch_gemm` refuses it.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        GemmSpec {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            accumulate: false,
            batch: 1,
            strides: (
                m.saturating_mul(k),
                k.saturating_mul(n),
                m.saturating_mul(n),
            ),
            bias: false,
            act: 0,
        }
    }
}

/// The epilogue activation `act` (comptime) of one value.
#[cube]
pub(crate) fn activate(v: f32, #[comptime] act: u32) -> f32 {
    let x = Vector::<f32, Const<1>>::new(v);
    let mut out = x;
    if comptime!(act == 1) {
        out = select_many(x.greater_than(Vector::new(0.0f32)), x, Vector::new(0.0f32));
    } else if comptime!(act == 2) {
        out = gelu::<Const<1>>(x);
    } else if comptime!(act == 3) {
        out = gelu_exact::<Const<1>>(x);
    } else if comptime!(act == 4) {
        out = silu::<Const<1>>(x);
    } else if comptime!(act == 5) {
        out = x * sigmoid::<Const<1>>(Vector::new(1.702f32) * x);
    }
    f32::cast_from(out)
}

/// `op(X)[row, col]` of a `rows x cols` operand stored at `base` (row-major, or transposed
/// when `trans`), widened to FP32; 0 outside the operand (the zero fill of ragged tiles).
/// Reads `A` as `(m, k)` and `B` as `(k, n)`. `trans` is a run-time value, so one compiled
/// kernel can serve every layout; kernels specialised on the layout pass a constant.
#[cube]
#[allow(clippy::too_many_arguments)]
fn read_operand<F: Float>(
    x: &Array<F>,
    base: usize,
    row: usize,
    col: usize,
    rows: usize,
    cols: usize,
    trans: bool,
) -> f32 {
    let mut v = f32::new(0.0f32);
    if row < rows && col < cols {
        let mut at = base + row * cols + col;
        if trans {
            at = base + col * rows + row;
        }
        v = f32::cast_from(x[at]);
    }
    v
}

/// The activation code `act` applied at run time (the GEMM epilogues take it as a launch
/// argument, so one compiled kernel serves every activation): `activate(v, act)`.
#[cube]
fn activate_runtime(v: f32, act: u32) -> f32 {
    let mut out = v;
    if act == 1u32 {
        out = activate(v, 1u32);
    } else if act == 2u32 {
        out = activate(v, 2u32);
    } else if act == 3u32 {
        out = activate(v, 3u32);
    } else if act == 4u32 {
        out = activate(v, 4u32);
    } else if act == 5u32 {
        out = activate(v, 5u32);
    }
    out
}

/// One `depth`-deep step of the register tile: `acc += sa[:, rows] x sb[:, cols]` for this
/// unit's `per x per` block (`tx`, `ty` its position in the cube), over shared tiles with
/// rows of `width_a` and `width_b` floats (the dense GEMM: `rows` and [`COLS`], 8 x 8 blocks,
/// `BK` deep; the quantized GEMM: `BM` and `BN`, 4 x 4 blocks, a 32-element block run).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_fma(
    sa: &SharedMemory<f32>,
    sb: &SharedMemory<f32>,
    acc: &mut Array<f32>,
    tx: usize,
    ty: usize,
    #[comptime] depth: usize,
    #[comptime] width_a: usize,
    #[comptime] width_b: usize,
    #[comptime] per: usize,
) {
    let mut ra = Array::<f32>::new(per);
    let mut rb = Array::<f32>::new(per);
    #[unroll]
    for kk in 0..depth {
        #[unroll]
        for i in 0..per {
            ra[i] = sa[kk * width_a + ty * per + i];
        }
        #[unroll]
        for j in 0..per {
            rb[j] = sb[kk * width_b + tx * per + j];
        }
        #[unroll]
        for i in 0..per {
            #[unroll]
            for j in 0..per {
                acc[i * per + j] += ra[i] * rb[j];
            }
        }
    }
}

/// Writes this unit's `per x per` block at `(gi0, gj0)` of `C` through [`write_c_runtime`]
/// (`flags`, `act` as there); edges beyond `(m, n)` are skipped. The block is walked in a
/// loop, not unrolled, so the kernel holds one copy of the epilogue; `acc` is copied first
/// so the product loop's accumulators keep constant indices.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_tile<F: Float>(
    c: &mut Array<F>,
    bias: &Array<F>,
    acc: &Array<f32>,
    gi0: usize,
    gj0: usize,
    m: usize,
    n: usize,
    base_c: usize,
    flags: u32,
    act: u32,
    #[comptime] per: usize,
) {
    let mut out = Array::<f32>::new(per * per);
    #[unroll]
    for e in 0..per * per {
        out[e] = acc[e];
    }
    for e in 0..per * per {
        let gi = gi0 + e / per;
        let gj = gj0 + e % per;
        if gi < m && gj < n {
            write_c_runtime::<F>(c, bias, out[e], base_c + gi * n + gj, gj, flags, act);
        }
    }
}

/// The epilogue of one element of `C` at `at` (column `gj`), chosen at run time so that one
/// compiled kernel serves every epilogue: the product `v`, plus `C` when `flags` bit 0 is
/// set (accumulate), plus `bias[gj]` when bit 1 is, then the activation `act` (the
/// [`GemmSpec::act`] codes), stored in `F`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_c_runtime<F: Float>(
    c: &mut Array<F>,
    bias: &Array<F>,
    v: f32,
    at: usize,
    gj: usize,
    flags: u32,
    act: u32,
) {
    let mut v = v;
    if flags & 1 != 0 {
        v += f32::cast_from(c[at]);
    }
    if flags & 2 != 0 {
        v += f32::cast_from(bias[gj]);
    }
    c[at] = F::cast_from(activate_runtime(v, act));
}

/// `flags` bit of [`gemm_kernel`]: `A` is stored transposed.
const TRANS_A: u32 = 4;
/// `flags` bit of [`gemm_kernel`]: `B` is stored transposed.
const TRANS_B: u32 = 8;

/// The most rows of `C` the skinny kernel takes (decode steps, short prompts): it keeps one
/// FP32 accumulator per row in each unit.
pub const SKINNY_MAX_M: usize = 8;
/// Units per cube of the skinny kernel.
const SKINNY_UNITS: usize = 256;
/// With `B` read transposed (a linear layer's `(n, k)` weight), the skinny kernel's units
/// split `k` into this many strided lanes per column of `C`, so neighbouring units read
/// neighbouring weights; a cube covers `SKINNY_UNITS / SKINNY_LANES` columns.
const SKINNY_LANES: usize = 32;
/// The longest `k` the skinny kernel walks in one unit (with `B` untransposed): lavapipe ends
/// a loop after 65535 iterations, and a long serial walk leaves a GPU idle; longer products
/// take the tiled kernel.
pub const SKINNY_SERIAL_K: usize = 16_384;

/// The end of the skinny kernels with `B` read transposed: unit `tid` holds `sums[r]`, its
/// lane's partial sum of row `r`; the [`SKINNY_LANES`] lanes of each column are added in
/// shared memory and one unit per (row, column) writes `C` through the epilogue.
#[cube]
#[allow(clippy::too_many_arguments)]
fn skinny_reduce_store<F: Float>(
    sums: &Array<f32>,
    c: &mut Array<F>,
    bias: &Array<F>,
    m: usize,
    n: usize,
    base_c: usize,
    flags: u32,
    act: u32,
) {
    let tid = UNIT_POS as usize;
    let cols = comptime!(SKINNY_UNITS / SKINNY_LANES);
    let mut part = SharedMemory::<f32>::new(SKINNY_MAX_M * SKINNY_UNITS);
    #[unroll]
    for r in 0..SKINNY_MAX_M {
        part[r * SKINNY_UNITS + tid] = sums[r];
    }
    sync_cube();
    let r = tid / cols;
    let col = tid % cols;
    let j = CUBE_POS_X as usize * cols + col;
    if r < m && j < n {
        let mut v = f32::new(0.0f32);
        for l in 0..SKINNY_LANES {
            v += part[r * SKINNY_UNITS + col * SKINNY_LANES + l];
        }
        write_c_runtime::<F>(c, bias, v, base_c + r * n + j, j, flags, act);
    }
}

/// The product for at most [`SKINNY_MAX_M`] rows of `C`, where a `64 x 64` tile would waste
/// most of its work: every element of `B` is read once and multiplies every row. With
/// `trans_b` each column of `C` takes [`SKINNY_LANES`] units striding along `k` (coalesced
/// reads of the weight rows) whose partial sums one unit adds in shared memory; without it
/// each unit takes one column and walks `k` (neighbouring units read neighbouring columns;
/// launched for `k` up to [`SKINNY_SERIAL_K`]).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gemm_skinny_kernel<F: Float>(
    a: &Array<F>,
    b: &Array<F>,
    bias: &Array<F>,
    c: &mut Array<F>,
    m: usize,
    n: usize,
    k: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    flags: u32,
    act: u32,
    #[comptime] trans_a: bool,
    #[comptime] trans_b: bool,
) {
    let z = CUBE_POS_Z as usize;
    let tid = UNIT_POS as usize;
    let (base_a, base_b, base_c) = (z * stride_a, z * stride_b, z * stride_c);
    let mut acc = Array::<f32>::new(SKINNY_MAX_M);
    #[unroll]
    for r in 0..SKINNY_MAX_M {
        acc[r] = f32::new(0.0f32);
    }
    if comptime!(trans_b) {
        let cols = comptime!(SKINNY_UNITS / SKINNY_LANES);
        let lane = tid % SKINNY_LANES;
        let col = tid / SKINNY_LANES;
        let j = CUBE_POS_X as usize * cols + col;
        if j < n {
            let mut kk = lane;
            loop {
                if kk >= k {
                    break;
                }
                let bv = f32::cast_from(b[base_b + j * k + kk]);
                #[unroll]
                for r in 0..SKINNY_MAX_M {
                    if r < m {
                        acc[r] += read_operand::<F>(a, base_a, r, kk, m, k, trans_a) * bv;
                    }
                }
                kk += SKINNY_LANES;
            }
        }
        skinny_reduce_store::<F>(&acc, c, bias, m, n, base_c, flags, act);
    } else {
        let j = CUBE_POS_X as usize * SKINNY_UNITS + tid;
        if j < n {
            for kk in 0..k {
                let bv = f32::cast_from(b[base_b + kk * n + j]);
                #[unroll]
                for r in 0..SKINNY_MAX_M {
                    if r < m {
                        acc[r] += read_operand::<F>(a, base_a, r, kk, m, k, trans_a) * bv;
                    }
                }
            }
            #[unroll]
            for r in 0..SKINNY_MAX_M {
                if r < m {
                    write_c_runtime::<F>(c, bias, acc[r], base_c + r * n + j, j, flags, act);
                }
            }
        }
    }
}

/// [`gemm_skinny_kernel`] for a linear layer's layout (`A` as stored, `B` read transposed)
/// when `k` and the batch strides of `A` and `B` are multiples of 4: each lane reads
/// 4-element vectors of `A`'s rows and of the weight row, a quarter of the reads.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gemm_skinny_v4_kernel<F: Float>(
    a: &Array<Vector<F, Const<4>>>,
    b: &Array<Vector<F, Const<4>>>,
    bias: &Array<F>,
    c: &mut Array<F>,
    m: usize,
    n: usize,
    k: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    flags: u32,
    act: u32,
) {
    let z = CUBE_POS_Z as usize;
    let tid = UNIT_POS as usize;
    let cols = comptime!(SKINNY_UNITS / SKINNY_LANES);
    let lane = tid % SKINNY_LANES;
    let col = tid / SKINNY_LANES;
    let j = CUBE_POS_X as usize * cols + col;
    let k4 = k / 4;
    let (base_a, base_b) = (z * stride_a / 4, z * stride_b / 4);
    let mut acc = Array::<Vector<f32, Const<4>>>::new(SKINNY_MAX_M);
    #[unroll]
    for r in 0..SKINNY_MAX_M {
        acc[r] = Vector::new(0.0f32);
    }
    if j < n {
        let mut q = lane;
        loop {
            if q >= k4 {
                break;
            }
            let bv = Vector::<f32, Const<4>>::cast_from(b[base_b + j * k4 + q]);
            #[unroll]
            for r in 0..SKINNY_MAX_M {
                if r < m {
                    let av = Vector::<f32, Const<4>>::cast_from(a[base_a + r * k4 + q]);
                    acc[r] += av * bv;
                }
            }
            q += SKINNY_LANES;
        }
    }
    let mut sums = Array::<f32>::new(SKINNY_MAX_M);
    #[unroll]
    for r in 0..SKINNY_MAX_M {
        let v = acc[r];
        sums[r] = v[0] + v[1] + v[2] + v[3];
    }
    skinny_reduce_store::<F>(&sums, c, bias, m, n, z * stride_c, flags, act);
}

/// The product for untransposed operands whose rows are whole 4-element vectors (`k` and
/// `n` multiples of 4, batch strides too): each unit stages one 4-wide vector of `A` and one
/// of `B` per step instead of four scalars.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gemm_v4_kernel<F: Float>(
    a: &Array<Vector<F, Const<4>>>,
    b: &Array<Vector<F, Const<4>>>,
    bias: &Array<F>,
    c: &mut Array<F>,
    m: usize,
    n: usize,
    k: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    flags: u32,
    act: u32,
    #[comptime] rows: usize,
) {
    let z = CUBE_POS_Z as usize;
    let units = comptime!(UNITS * rows / PER);
    let row0 = CUBE_POS_Y as usize * rows;
    let col0 = CUBE_POS_X as usize * COLS;
    let tid = UNIT_POS as usize;
    let tx = tid % UNITS;
    let ty = tid / UNITS;
    let mut sa = SharedMemory::<f32>::new(BK * rows);
    let mut sb = SharedMemory::<f32>::new(BK * COLS);
    let mut acc = Array::<f32>::new(PER * PER);
    #[unroll]
    for i in 0..PER * PER {
        acc[i] = f32::new(0.0f32);
    }
    // A's `rows x 16` slice is `4 * rows` vectors along k (two per unit), B's `16 x 128`
    // slice 512 vectors along n (2 to 8 per unit); consecutive units along the stored rows.
    let mut k0 = usize::new(0);
    loop {
        if k0 >= k {
            break;
        }
        #[unroll]
        for r in 0..comptime!(rows * BK / (4 * units)) {
            let e = tid + r * units;
            let ai = e / (BK / 4);
            let aq = (e % (BK / 4)) * 4;
            let gi = row0 + ai;
            let gk = k0 + aq;
            let mut va = Vector::<f32, Const<4>>::new(0.0);
            if gi < m && gk < k {
                va = Vector::cast_from(a[(z * stride_a + gi * k + gk) / 4]);
            }
            #[unroll]
            for t in 0..4usize {
                sa[(aq + t) * rows + ai] = va[t];
            }
        }
        #[unroll]
        for r in 0..comptime!(COLS * BK / (4 * units)) {
            let e = tid + r * units;
            let bk = e / (COLS / 4);
            let bq = (e % (COLS / 4)) * 4;
            let gkb = k0 + bk;
            let gj = col0 + bq;
            let mut vb = Vector::<f32, Const<4>>::new(0.0);
            if gkb < k && gj < n {
                vb = Vector::cast_from(b[(z * stride_b + gkb * n + gj) / 4]);
            }
            #[unroll]
            for t in 0..4usize {
                sb[bk * COLS + bq + t] = vb[t];
            }
        }
        sync_cube();
        tile_fma(&sa, &sb, &mut acc, tx, ty, BK, rows, COLS, PER);
        sync_cube();
        k0 += BK;
    }
    store_tile::<F>(
        c,
        bias,
        &acc,
        row0 + ty * PER,
        col0 + tx * PER,
        m,
        n,
        z * stride_c,
        flags,
        act,
        PER,
    );
}

/// The scalar tiled product: one cube computes `rows x COLS` of `C`, each unit a `PER x PER`
/// block from `BK`-deep slices of `A` and `B` staged in shared memory. Whether `A` and `B`
/// are read transposed is a run-time choice (`flags` bits [`TRANS_A`], [`TRANS_B`]), not a
/// specialisation: software devices compile every specialisation in every process, and the
/// unrolled product loop is what costs there, not the two index forms of the staging reads.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gemm_kernel<F: Float>(
    a: &Array<F>,
    b: &Array<F>,
    bias: &Array<F>,
    c: &mut Array<F>,
    m: usize,
    n: usize,
    k: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    flags: u32,
    act: u32,
    #[comptime] rows: usize,
) {
    let trans_a = flags & TRANS_A != 0;
    let trans_b = flags & TRANS_B != 0;
    let z = CUBE_POS_Z as usize;
    let units = comptime!(UNITS * rows / PER);
    let row0 = CUBE_POS_Y as usize * rows;
    let col0 = CUBE_POS_X as usize * COLS;
    let tid = UNIT_POS as usize;
    let tx = tid % UNITS;
    let ty = tid / UNITS;
    let base_a = z * stride_a;
    let base_b = z * stride_b;
    let base_c = z * stride_c;

    let mut sa = SharedMemory::<f32>::new(BK * rows);
    let mut sb = SharedMemory::<f32>::new(BK * COLS);
    let mut acc = Array::<f32>::new(PER * PER);
    #[unroll]
    for i in 0..PER * PER {
        acc[i] = f32::new(0.0f32);
    }

    let mut k0 = usize::new(0);
    loop {
        if k0 >= k {
            break;
        }
        // Stage A's `rows x 16` slice: 8 elements per unit, consecutive units along the
        // stored row so global reads coalesce.
        #[unroll]
        for r in 0..comptime!(rows * BK / units) {
            let e = tid + r * units;
            let mut i = e / BK;
            let mut kk = e % BK;
            if trans_a {
                i = e % rows;
                kk = e / rows;
            }
            let v = read_operand::<F>(a, base_a, row0 + i, k0 + kk, m, k, trans_a);
            sa[kk * rows + i] = v;
        }
        // Stage B's `16 x 128` slice likewise (8 to 32 elements per unit).
        #[unroll]
        for r in 0..comptime!(BK * COLS / units) {
            let e = tid + r * units;
            let mut kk = e / COLS;
            let mut j = e % COLS;
            if trans_b {
                kk = e % BK;
                j = e / BK;
            }
            let v = read_operand::<F>(b, base_b, k0 + kk, col0 + j, k, n, trans_b);
            sb[kk * COLS + j] = v;
        }
        sync_cube();
        tile_fma(&sa, &sb, &mut acc, tx, ty, BK, rows, COLS, PER);
        sync_cube();
        k0 += BK;
    }

    store_tile::<F>(
        c,
        bias,
        &acc,
        row0 + ty * PER,
        col0 + tx * PER,
        m,
        n,
        base_c,
        flags,
        act,
        PER,
    );
}

/// Depth of a tensor-core step: two 16-deep or four 8-deep fragments.
const BKC: usize = 32;
/// Fragment sides the tensor-core kernel takes, preferred first: `16 x 16 x 16` (CUDA tensor
/// cores, most Vulkan cooperative-matrix drivers), then `8 x 8 x 8` (lavapipe).
const FRAGS: [usize; 2] = [16, 8];
/// Widest plane the tensor-core kernel takes: with 16-sided fragments its 4 planes then
/// hold 256 units, which still divide the staging loops.
const PLANE_MAX: usize = 64;
/// Byte alignment of the tensor-core kernel's shared arrays.
const SMEM_ALIGN: usize = 128;

/// `acc += A(rows) . B(cols)` for one `frag`-sided fragment pair at depth `kf` of one
/// `BKC`-deep step.
#[cube]
fn fragment_mma<F: Float>(
    sa: &SharedMemory<F>,
    sb: &SharedMemory<F>,
    acc: &cmma::Matrix<f32>,
    row: usize,
    col: usize,
    kf: usize,
    #[comptime] frag: usize,
) {
    let a_at = row * BKC + kf * frag;
    let b_at = kf * frag * BN + col;
    let fa = cmma::Matrix::<F>::from_slice(
        cmma::MatrixIdent::A,
        frag,
        frag,
        frag,
        cmma::MatrixLayout::RowMajor,
        &sa.slice(a_at, BM * BKC),
        BKC as u32,
    );
    let fb = cmma::Matrix::<F>::from_slice(
        cmma::MatrixIdent::B,
        frag,
        frag,
        frag,
        cmma::MatrixLayout::RowMajor,
        &sb.slice(b_at, BKC * BN),
        BN as u32,
    );
    cmma::execute::<F, F, f32, f32>(&fa, &fb, acc, acc);
}

/// A zeroed `frag`-sided FP32 accumulator.
#[cube]
fn zero_accumulator(#[comptime] frag: usize) -> cmma::Matrix<f32> {
    cmma::Matrix::<f32>::from_value(
        cmma::MatrixIdent::Accumulator,
        frag,
        frag,
        frag,
        cmma::MatrixLayout::Undefined,
        0.0f32,
    )
}

/// The product on matrix units for 16-bit `F`: one cube computes a `64 x 64` tile of `C`.
/// Operands are staged (zero-filled at the edges) in shared memory in the storage type; each
/// plane owns a `2 frag x 2 frag` block of the tile as `2 x 2` fragments accumulating in
/// FP32, and the accumulators go through shared memory to the same epilogue as
/// [`gemm_kernel`]. `plane` is the device's plane width (32 on NVIDIA, 8 on lavapipe) and
/// `frag` the fragment side (16 or 8): the cube has `(64 / 2 frag)^2` planes.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gemm_cmma_kernel<F: Float>(
    a: &Array<F>,
    b: &Array<F>,
    bias: &Array<F>,
    c: &mut Array<F>,
    m: usize,
    n: usize,
    k: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    flags: u32,
    act: u32,
    #[comptime] trans_a: bool,
    #[comptime] trans_b: bool,
    #[comptime] plane: usize,
    #[comptime] frag: usize,
) {
    let z = CUBE_POS_Z as usize;
    let row0 = CUBE_POS_Y as usize * BM;
    let col0 = CUBE_POS_X as usize * BN;
    let tid = UNIT_POS as usize;
    let units = comptime!(cmma_units(plane, frag));
    let per_row = comptime!(BN / (2 * frag));
    // The plane's own index: how units are grouped into planes is up to the driver.
    let plane_id = PLANE_POS as usize;
    let pr = (plane_id / per_row) * (2 * frag);
    let pc = (plane_id % per_row) * (2 * frag);
    let base_a = z * stride_a;
    let base_b = z * stride_b;
    let base_c = z * stride_c;

    // Fragment addresses: CUDA (16-sided fragments only) needs them 32-byte aligned, Vulkan
    // aligned to the element. Every offset below is a multiple of `frag` elements (32 bytes
    // of a 16-bit type at `frag = 16`, 64 of F32), and the arrays start 128-byte aligned.
    let mut sa = SharedMemory::<F>::new_aligned(BM * BKC, SMEM_ALIGN);
    let mut sb = SharedMemory::<F>::new_aligned(BKC * BN, SMEM_ALIGN);
    let acc00 = zero_accumulator(frag);
    let acc01 = zero_accumulator(frag);
    let acc10 = zero_accumulator(frag);
    let acc11 = zero_accumulator(frag);

    let mut k0 = usize::new(0);
    loop {
        if k0 >= k {
            break;
        }
        // Stage A's 64 x 32 slice (row-major, stride BKC) and B's 32 x 64 slice (row-major,
        // stride BN); consecutive units walk the stored rows so global reads coalesce.
        #[unroll]
        for r in 0..comptime!((BM * BKC) / units) {
            let e = tid + r * units;
            let mut i = e / BKC;
            let mut kk = e % BKC;
            if comptime!(trans_a) {
                i = e % BM;
                kk = e / BM;
            }
            let v = read_operand::<F>(a, base_a, row0 + i, k0 + kk, m, k, trans_a);
            sa[i * BKC + kk] = F::cast_from(v);
        }
        #[unroll]
        for r in 0..comptime!((BKC * BN) / units) {
            let e = tid + r * units;
            let mut kk = e / BN;
            let mut j = e % BN;
            if comptime!(trans_b) {
                kk = e % BKC;
                j = e / BKC;
            }
            let v = read_operand::<F>(b, base_b, k0 + kk, col0 + j, k, n, trans_b);
            sb[kk * BN + j] = F::cast_from(v);
        }
        sync_cube();
        #[unroll]
        for kf in 0..comptime!(BKC / frag) {
            fragment_mma::<F>(&sa, &sb, &acc00, pr, pc, kf, frag);
            fragment_mma::<F>(&sa, &sb, &acc01, pr, pc + frag, kf, frag);
            fragment_mma::<F>(&sa, &sb, &acc10, pr + frag, pc, kf, frag);
            fragment_mma::<F>(&sa, &sb, &acc11, pr + frag, pc + frag, kf, frag);
        }
        sync_cube();
        k0 += BKC;
    }

    // The accumulators through shared memory (row-major 64 x 64), then the epilogue.
    let mut sc = SharedMemory::<f32>::new_aligned(BM * BN, SMEM_ALIGN);
    cmma::store(
        &mut sc.slice_mut(pr * BN + pc, BM * BN),
        &acc00,
        BN as u32,
        cmma::MatrixLayout::RowMajor,
    );
    cmma::store(
        &mut sc.slice_mut(pr * BN + pc + frag, BM * BN),
        &acc01,
        BN as u32,
        cmma::MatrixLayout::RowMajor,
    );
    cmma::store(
        &mut sc.slice_mut((pr + frag) * BN + pc, BM * BN),
        &acc10,
        BN as u32,
        cmma::MatrixLayout::RowMajor,
    );
    cmma::store(
        &mut sc.slice_mut((pr + frag) * BN + pc + frag, BM * BN),
        &acc11,
        BN as u32,
        cmma::MatrixLayout::RowMajor,
    );
    sync_cube();
    // A loop, not unrolled: one copy of the run-time epilogue.
    for r in 0..comptime!((BM * BN) / units) {
        let e = tid + r * units;
        let gi = row0 + e / BN;
        let gj = col0 + e % BN;
        if gi < m && gj < n {
            write_c_runtime::<F>(c, bias, sc[e], base_c + gi * n + gj, gj, flags, act);
        }
    }
}

/// Environment variable that, set to `0`, keeps 16-bit products off matrix units (the tiled
/// kernel runs instead), e.g. to compare the two kernels on one card.
pub const CMMA_ENV: &str = "BROTENSOR_CMMA";

/// Units in one cube of the tensor-core kernel: `(64 / 2 frag)^2` planes of `plane` units
/// (128 for both 32-unit planes with 16-sided fragments and 8-unit planes with 8-sided ones).
const fn cmma_units(plane: usize, frag: usize) -> usize {
    let per_side = BM / (2 * frag);
    per_side * per_side * plane
}

// Every unit count the kernel can be launched with divides each staging loop's element
// count (all are powers of two) and is no larger than the smallest of them, so no loop
// runs zero times.
const _: () = {
    let mut f = 0;
    while f < FRAGS.len() {
        let units = cmma_units(PLANE_MAX, FRAGS[f]);
        assert!(units <= BM * BKC && units <= BKC * BN && units <= BM * BN);
        assert!(units.is_power_of_two() && FRAGS[f].is_power_of_two());
        f += 1;
    }
};

/// How the tensor-core kernel runs on one client: the plane width and fragment side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixUnitShape {
    /// Units per plane (32 on NVIDIA, 8 on lavapipe).
    pub plane: usize,
    /// Side of the square `frag x frag x frag` fragments (16 or 8).
    pub frag: usize,
}

/// How `launch_gemm` runs the tensor-core kernel for `F` on this client, or `None` where it
/// uses the tiled kernel (products of more rows than the skinny kernel takes). `F` must be 16-bit; the runtime must offer square `cmma` fragments
/// of side 16 or 8 from `F` to FP32 (CUDA tensor cores; Vulkan cooperative matrices through
/// the SPIR-V compiler); planes must have one fixed width, a power of two up to 64; and
/// [`CMMA_ENV`] must not have been `0` when first consulted.
pub fn matrix_unit_shape<R: Runtime, F: Float>(
    client: &ComputeClient<R>,
) -> Option<MatrixUnitShape> {
    // Read once: this runs on every 16-bit launch.
    static TURNED_OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if core::mem::size_of::<F>() != 2
        || *TURNED_OFF.get_or_init(|| std::env::var(CMMA_ENV).is_ok_and(|v| v == "0"))
    {
        return None;
    }
    let hw = &client.properties().hardware;
    let plane = hw.plane_size_min as usize;
    if hw.plane_size_max as usize != plane || !plane.is_power_of_two() || plane > PLANE_MAX {
        return None;
    }
    let elem = F::as_type_native_unchecked().storage_type();
    let offered = |frag: usize| {
        client.features().matmul.cmma.contains(&MmaConfig {
            a_type: elem,
            b_type: elem,
            cd_type: f32::as_type_native_unchecked().storage_type(),
            m: frag as u32,
            n: frag as u32,
            k: frag as u32,
        })
    };
    FRAGS
        .into_iter()
        .find(|&frag| {
            let units = cmma_units(plane, frag);
            offered(frag)
                && units <= hw.max_units_per_cube as usize
                && units <= hw.max_cube_dim.0 as usize
        })
        .map(|frag| MatrixUnitShape { plane, frag })
}

/// Runs `C = op(A) . op(B)` (or `+=`) as `spec` says. `a`, `b`, `c` must hold every element
/// the batch strides reach.
pub fn launch_gemm<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    a: &Handle,
    b: &Handle,
    bias: Option<&Handle>,
    c: &Handle,
    spec: GemmSpec,
) -> Result<(), LaunchError> {
    let GemmSpec {
        m,
        n,
        k,
        batch,
        strides,
        ..
    } = spec;
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let bytes = core::mem::size_of::<F>();
    let (len_a, len_b, len_c) = (
        strided_span(
            "a: (batch - 1) * stride + m * k",
            batch,
            strides.0,
            extent("m * k", &[m, k])?,
        )?,
        strided_span(
            "b: (batch - 1) * stride + k * n",
            batch,
            strides.1,
            extent("k * n", &[k, n])?,
        )?,
        strided_span(
            "c: (batch - 1) * stride + m * n",
            batch,
            strides.2,
            extent("m * n", &[m, n])?,
        )?,
    );
    let a = Buf::new("a", a, len_a, bytes)?;
    let b = Buf::new("b", b, len_b, bytes)?;
    let c = Buf::new("c", c, len_c, bytes)?;
    let bias = spec
        .bias
        .then(|| Buf::required("bias", bias, n, bytes))
        .transpose()?;
    let max = client.properties().hardware.max_cube_count;
    if batch > max.2 as usize {
        return Err(LaunchError::TooLarge {
            vectors: m.saturating_mul(n).saturating_mul(batch),
        });
    }
    let bias = b.stand_in_for(bias.as_ref());
    let act = if spec.act <= 5 { spec.act } else { 0 };
    // The epilogue, chosen at run time by every kernel: bit 0 accumulate, bit 1 bias; and
    // for the scalar tiled kernel the layout ([`TRANS_A`], [`TRANS_B`]).
    let flags = u32::from(spec.accumulate)
        | (u32::from(spec.bias) << 1)
        | if spec.trans_a { TRANS_A } else { 0 }
        | if spec.trans_b { TRANS_B } else { 0 };
    // Every kernel here takes the same operands and launch arguments, then its own comptime
    // values.
    macro_rules! launch {
        ($kernel:ident, $count:expr, $dim:expr $(, $comptime:expr)*) => {
            $kernel::launch_unchecked::<F, R>(
                client,
                $count,
                $dim,
                a.arg(),
                b.arg(),
                bias.arg(),
                c.arg(),
                m,
                n,
                k,
                strides.0,
                strides.1,
                strides.2,
                flags,
                act
                $(, $comptime)*
            )
        };
    }
    let skinny_cubes = if spec.trans_b {
        n.div_ceil(SKINNY_UNITS / SKINNY_LANES)
    } else {
        n.div_ceil(SKINNY_UNITS)
    };
    if m <= SKINNY_MAX_M && skinny_cubes <= max.0 as usize && (spec.trans_b || k <= SKINNY_SERIAL_K)
    {
        let count = CubeCount::Static(skinny_cubes as u32, 1, batch as u32);
        let dim = CubeDim::new_1d(SKINNY_UNITS as u32);
        let vectorized = !spec.trans_a
            && spec.trans_b
            && k % 4 == 0
            && (batch == 1 || (strides.0 % 4 == 0 && strides.1 % 4 == 0));
        if vectorized {
            // SAFETY: as for `gemm_skinny_kernel` below; every vector index addresses an
            // offset that is a multiple of 4 (k and the strides are) inside the checked spans.
            unsafe {
                launch!(gemm_skinny_v4_kernel, count, dim);
            }
        } else {
            // SAFETY: the same checked spans as below; the kernel reads A only at rows < m
            // and k-indices < k, B only at k-indices < k and columns < n, and writes C at
            // rows < m and columns < n, each offset by its batch stride (z < batch).
            unsafe {
                launch!(gemm_skinny_kernel, count, dim, spec.trans_a, spec.trans_b);
            }
        }
        return Ok(());
    }
    if let Some(MatrixUnitShape { plane, frag }) = matrix_unit_shape::<R, F>(client) {
        let (gx, gy) = (n.div_ceil(BN), m.div_ceil(BM));
        if gx > max.0 as usize || gy > max.1 as usize {
            return Err(LaunchError::TooLarge {
                vectors: m.saturating_mul(n).saturating_mul(batch),
            });
        }
        // SAFETY: as for `gemm_kernel` below: the same index guards against `m`, `n`, `k`
        // and the same checked spans; shared-memory indices stay inside their tiles.
        unsafe {
            launch!(
                gemm_cmma_kernel,
                CubeCount::Static(gx as u32, gy as u32, batch as u32),
                CubeDim::new_1d(cmma_units(plane, frag) as u32),
                spec.trans_a,
                spec.trans_b,
                plane,
                frag
            );
        }
        return Ok(());
    }
    // The scalar kernels' tile: the fewest rows that cover `m`, fewer while the grid would
    // have under `fill` cubes.
    let fill = client
        .properties()
        .hardware
        .num_streaming_multiprocessors
        .map_or(0, |sm| sm as usize)
        .max(MIN_CUBES);
    let cols = n.div_ceil(COLS);
    let mut rows = TILE_ROWS
        .into_iter()
        .find(|&r| r >= m)
        .unwrap_or(TILE_ROWS[TILE_ROWS.len() - 1]);
    while rows > TILE_ROWS[0] && cols * m.div_ceil(rows) * batch < fill {
        rows /= 2;
    }
    let gy = m.div_ceil(rows);
    if cols > max.0 as usize || gy > max.1 as usize {
        return Err(LaunchError::TooLarge {
            vectors: m.saturating_mul(n).saturating_mul(batch),
        });
    }
    let count = CubeCount::Static(cols as u32, gy as u32, batch as u32);
    let dim = CubeDim::new_2d(UNITS as u32, (rows / PER) as u32);
    let vectorized = !spec.trans_a
        && !spec.trans_b
        && k % 4 == 0
        && n % 4 == 0
        && (batch == 1 || (strides.0 % 4 == 0 && strides.1 % 4 == 0));
    if vectorized {
        // SAFETY: as below; every vector index `(offset) / 4` addresses an offset that is a
        // multiple of 4 (k, n and the strides are) inside the checked spans.
        unsafe {
            launch!(gemm_v4_kernel, count, dim, rows);
        }
        return Ok(());
    }
    // SAFETY: each operand holds the elements its batch span reaches (checked `Buf`s; `b`
    // stands in for an absent bias, never read); the kernel reads A and B only at indices
    // inside those spans (guarded by `m`, `n`, `k`) and writes C only inside its span.
    unsafe {
        launch!(gemm_kernel, count, dim, rows);
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch on CUDA (or
/// Metal), lowered to CUDA C++ (or MSL; see `crate::cuda_lowering`): every transpose and tile
/// height (the epilogue is a launch argument, not a specialisation), and the tensor-core kernel
/// for the 16-bit types
/// with a plane of 32 (CUDA's warp, Apple's SIMD group) and 16x16x16 fragments on CUDA,
/// 8x8x8 on Metal (the only simdgroup matrices it has).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt, Target};
    let c = l.client.clone();
    let a = L::array;
    let tiled = |rows: usize| L::settings(CubeDim::new_2d(UNITS as u32, (rows / PER) as u32));
    let frag = match l.target() {
        Target::Cuda => FRAGS[0],
        Target::Msl => FRAGS[1],
    };
    let plane = 32;
    let cmma = || L::settings(CubeDim::new_1d(cmma_units(plane, frag) as u32));
    let flags = [false, true];
    // Every kernel here takes the same operands and launch arguments (`a`, `b`, `bias`, `c`,
    // then `m`, `n`, `k`, the three batch strides, the epilogue flags and the activation),
    // then its own comptime values.
    macro_rules! lower {
        ($kernel:ty, $settings:expr $(, $comptime:expr)*) => {
            l.lower(<$kernel>::new(
                $settings,
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                ()
                $(, $comptime)*
            ))
        };
    }
    let skinny = || L::settings(CubeDim::new_1d(SKINNY_UNITS as u32));
    for_floats!(|F| {
        lower!(gemm_skinny_v4_kernel::GemmSkinnyV4Kernel<F, Rt>, skinny());
        for rows in TILE_ROWS {
            lower!(gemm_v4_kernel::GemmV4Kernel<F, Rt>, tiled(rows), rows);
            lower!(gemm_kernel::GemmKernel<F, Rt>, tiled(rows), rows);
        }
        for trans_a in flags {
            for trans_b in flags {
                lower!(gemm_skinny_kernel::GemmSkinnyKernel<F, Rt>, skinny(), trans_a, trans_b);
                if core::mem::size_of::<F>() == 2 {
                    lower!(
                        gemm_cmma_kernel::GemmCmmaKernel<F, Rt>,
                        cmma(),
                        trans_a,
                        trans_b,
                        plane,
                        frag
                    );
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubecl::cuda::CudaCompiler;
    use cubecl::prelude::{ArrayCompilationArg, CubeKernel, ExecutionMode};
    use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
    use cubecl::Compiler;

    /// The tensor-core kernel for `F`, lowered to CUDA C++ on the host. The kernel's IR is
    /// built with a software Vulkan client (the struct wants one); no GPU is involved.
    fn cuda_source<F: Float>(client: &ComputeClient<WgpuRuntime>) -> String {
        let array = || ArrayCompilationArg { inplace: None };
        let kernel = gemm_cmma_kernel::GemmCmmaKernel::<F, WgpuRuntime>::new(
            KernelSettings::default().cube_dim(CubeDim::new_1d(cmma_units(32, 16) as u32)),
            client.clone(),
            array(),
            array(),
            array(),
            array(),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            true,
            false,
            32,
            16,
        );
        let mut compiler = CudaCompiler::default();
        compiler
            .compile(
                kernel.define(),
                &Default::default(),
                ExecutionMode::Checked,
                u32::as_type_native_unchecked().storage_type(),
            )
            .expect("the tensor-core kernel lowers to CUDA C++")
            .to_string()
    }

    #[test]
    fn tensor_core_kernel_lowers_to_wmma_for_f16_and_bf16() {
        let Ok(client) = std::panic::catch_unwind(|| WgpuRuntime::client(&WgpuDevice::Cpu)) else {
            let required = std::env::var("BROTENSOR_REQUIRE_GPU").unwrap_or_default();
            assert!(
                !matches!(required.as_str(), "wgpu" | "any"),
                "no software wgpu adapter"
            );
            eprintln!("tensor-core lowering: SKIPPED (no software wgpu adapter)");
            return;
        };
        for (name, src) in [
            ("f16", cuda_source::<half::f16>(&client)),
            ("bf16", cuda_source::<half::bf16>(&client)),
        ] {
            // Per plane per step: 2 x 2 fragments x 2 depths of mma, 2 A and 2 B loads per
            // depth, and 4 accumulator stores at the end.
            assert!(src.contains("mma_sync"), "{name}: no mma in\n{src}");
            assert!(
                src.contains("load_matrix_sync"),
                "{name}: no fragment loads"
            );
            assert!(
                src.contains("store_matrix_sync"),
                "{name}: no accumulator stores"
            );
            assert!(src.contains("__syncthreads"), "{name}: no barrier");
            if std::env::var("BROTENSOR_DUMP_CUDA").is_ok() {
                println!("{src}");
            }
        }
    }
}
