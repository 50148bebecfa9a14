//! The parity harness: seeded inputs, the CPU reference against every available GPU device,
//! per-dtype tolerances, and a record of which devices ran.
//!
//! Environment:
//! - `BROTENSOR_REQUIRE_GPU=wgpu|cuda|any`: a missing device of that kind fails the test
//!   instead of skipping it (CI sets `wgpu`).
//! - `BROTENSOR_PARITY_LOG=<file>`: every parity check appends `case<TAB>device<TAB>dtype`,
//!   so a run can prove which kernels ran where.

use std::io::Write;

pub mod collectives;
pub mod op_table;
pub mod reference;

use brotensor::{Device, Dtype, Result, Tensor};
use half::{bf16, f16};

/// Environment variable that turns "no such GPU" into a failure.
pub const REQUIRE_GPU_ENV: &str = "BROTENSOR_REQUIRE_GPU";
/// Environment variable naming the ledger of parity checks.
pub const PARITY_LOG_ENV: &str = "BROTENSOR_PARITY_LOG";

/// SplitMix64: a tiny, seedable, well-mixed generator for test inputs.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 24 bits.
    pub fn next_f01(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * self.next_f01()).collect()
    }
}

/// Runs the ignored test `test` (its full path) of the running test binary in a child
/// process, with the environment variable `var` set to `value` or removed, for checks of
/// process-wide state fixed once per process. Asserts that the child succeeded and printed
/// `child done`; returns its standard output and error.
pub fn run_child_test(test: &str, var: &str, value: Option<&str>) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        test,
        "--nocapture",
        "--test-threads=1",
    ]);
    match value {
        Some(v) => cmd.env(var, v),
        None => cmd.env_remove(var),
    };
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{var}={value:?}: {text}");
    assert!(
        text.contains("child done"),
        "the child check did not run: {text}"
    );
    text
}

/// The GPU devices found, after honouring [`REQUIRE_GPU_ENV`]. Panics (fails the test) if a
/// required kind is missing.
pub fn gpu_devices() -> Vec<Device> {
    // An unusable BROTENSOR_DEFAULT_DEVICE is reported by init but does not stop discovery.
    if let Err(e) = brotensor::init() {
        eprintln!("note: {e}");
    }
    let gpus: Vec<Device> = brotensor::available_devices()
        .into_iter()
        .filter(|d| d.is_gpu())
        .collect();
    if let Ok(kind) = std::env::var(REQUIRE_GPU_ENV) {
        let kind = kind.to_ascii_lowercase();
        let found = gpus.iter().any(|d| match kind.as_str() {
            "wgpu" => matches!(d, Device::Wgpu(_)),
            "cuda" => matches!(d, Device::Cuda(_)),
            _ => true,
        });
        assert!(
            kind.is_empty() || found,
            "{REQUIRE_GPU_ENV}={kind} but no such device was found (devices: {:?})",
            brotensor::available_devices()
        );
    }
    gpus
}

/// `(scale_tol, rtol)` for results stored in `dtype`: an element passes when
/// `|got - want| <= scale_tol * s + rtol * |want|`, where `s` is the largest `|want|` in its
/// row of the output. Both parts are relative to the output's own size, so a result that
/// is all zeros, halved, or has one element off by its own magnitude fails (every check
/// proves this on its own data: see [`assert_rejects_wrong`]).
pub fn tolerance(dtype: Dtype) -> (f32, f32) {
    match dtype {
        Dtype::F16 => (4e-3, 1e-2),
        Dtype::BF16 => (2e-2, 2e-2),
        _ => (1e-5, 1e-4),
    }
}

/// `v` after a round trip through `dtype`'s storage (identity for F32).
pub fn round_through(dtype: Dtype, v: &[f32]) -> Vec<f32> {
    match dtype {
        Dtype::F16 => v.iter().map(|&x| f16::from_f32(x).to_f32()).collect(),
        Dtype::BF16 => v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect(),
        _ => v.to_vec(),
    }
}

/// A `rows x cols` tensor of `dtype` on `device` holding `data` (narrowed on the host).
pub fn tensor(
    device: Device,
    data: &[f32],
    rows: usize,
    cols: usize,
    dtype: Dtype,
) -> Result<Tensor> {
    match dtype {
        Dtype::F16 => {
            let h: Vec<f16> = data.iter().map(|&x| f16::from_f32(x)).collect();
            Tensor::from_slice_on(device, &h, rows, cols)
        }
        Dtype::BF16 => {
            let h: Vec<bf16> = data.iter().map(|&x| bf16::from_f32(x)).collect();
            Tensor::from_slice_on(device, &h, rows, cols)
        }
        _ => Tensor::from_slice_on(device, data, rows, cols),
    }
}

/// The contents of a float (or I32) tensor, widened to `f32` on the host.
pub fn read_f32(t: &Tensor) -> Result<Vec<f32>> {
    Ok(match t.dtype() {
        Dtype::F16 => t.to_vec::<f16>()?.into_iter().map(f16::to_f32).collect(),
        Dtype::BF16 => t.to_vec::<bf16>()?.into_iter().map(bf16::to_f32).collect(),
        Dtype::I32 => t.to_vec::<i32>()?.into_iter().map(|v| v as f32).collect(),
        _ => t.to_vec::<f32>()?,
    })
}

/// Where `got` differs from `want` by more than the tolerance (see [`tolerance`]), with
/// `want` cut into rows of `cols` elements for the scale part; NaN matches NaN and
/// infinities match by sign. `Err` names the worst index.
pub fn check_close(
    want: &[f32],
    got: &[f32],
    cols: usize,
    (scale_tol, rtol): (f32, f32),
) -> std::result::Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("length {} vs {}", want.len(), got.len()));
    }
    // A column vector is one row: its elements share one scale.
    let cols = if cols <= 1 { want.len().max(1) } else { cols };
    let mut worst: Option<(usize, f32)> = None;
    for (r, (wr, gr)) in want.chunks(cols).zip(got.chunks(cols)).enumerate() {
        let scale = wr
            .iter()
            .filter(|w| w.is_finite())
            .fold(0.0f32, |m, w| m.max(w.abs()));
        for (j, (&w, &g)) in wr.iter().zip(gr).enumerate() {
            let ok = if w.is_nan() || g.is_nan() {
                w.is_nan() && g.is_nan()
            } else if w.is_infinite() || g.is_infinite() {
                w == g
            } else {
                (w - g).abs() <= scale_tol * scale + rtol * w.abs()
            };
            if !ok {
                let excess = if w.is_finite() && g.is_finite() {
                    (w - g).abs()
                } else {
                    f32::INFINITY
                };
                if worst.is_none_or(|(_, e)| excess > e) {
                    worst = Some((r * cols + j, excess));
                }
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!(
            "mismatch at index {i}: want {} got {} (scale_tol {scale_tol}, rtol {rtol}, rows of {cols})",
            want[i], got[i]
        )),
    }
}

/// Asserts [`check_close`] with the whole output as one row.
pub fn assert_close(tag: &str, want: &[f32], got: &[f32], tol: (f32, f32)) {
    assert_close_rows(tag, want, got, want.len(), tol);
}

/// Asserts [`check_close`] with rows of `cols` elements, and that the check would reject a
/// wrong answer (see [`assert_rejects_wrong`]).
pub fn assert_close_rows(tag: &str, want: &[f32], got: &[f32], cols: usize, tol: (f32, f32)) {
    if let Err(e) = check_close(want, got, cols, tol) {
        panic!("{tag}: {e}");
    }
    assert_rejects_wrong(tag, want, cols, tol);
}

/// The harness self-test: the comparison of `want` under `tol` must reject an all-zero
/// result, a halved result, and a result with its largest element off by its own magnitude.
/// An expected output with no finite non-zero element (an empty product, say) is compared
/// exactly, since its scale is zero, and any non-zero result fails it; there is nothing
/// further to prove.
pub fn assert_rejects_wrong(tag: &str, want: &[f32], cols: usize, tol: (f32, f32)) {
    let Some((big, _)) = want
        .iter()
        .enumerate()
        .filter(|(_, w)| w.is_finite())
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .filter(|(_, w)| **w != 0.0)
    else {
        let mut one_off = want.to_vec();
        if let Some(v) = one_off.iter_mut().find(|v| v.is_finite()) {
            *v = 1e-30;
            assert!(
                check_close(want, &one_off, cols, tol).is_err(),
                "{tag}: harness self-test: an all-zero expectation accepts a non-zero result"
            );
        }
        return;
    };
    let zeros: Vec<f32> = want
        .iter()
        .map(|w| if w.is_finite() { 0.0 } else { *w })
        .collect();
    let halved: Vec<f32> = want.iter().map(|w| w * 0.5).collect();
    let mut one_off = want.to_vec();
    one_off[big] += want[big].abs();
    for (what, wrong) in [
        ("zeros", zeros),
        ("a halved output", halved),
        ("one element off", one_off),
    ] {
        assert!(
            check_close(want, &wrong, cols, tol).is_err(),
            "{tag}: harness self-test: the tolerance {tol:?} accepts {what}"
        );
    }
}

/// One random input of a parity case: its shape and value range.
#[derive(Clone, Copy)]
pub struct Input {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Smallest value.
    pub lo: f32,
    /// Largest value (exclusive).
    pub hi: f32,
}

impl Input {
    /// A `rows x cols` input uniform in `[lo, hi)`.
    pub const fn new(rows: usize, cols: usize, lo: f32, hi: f32) -> Self {
        Input { rows, cols, lo, hi }
    }
}

fn record(case: &str, device: Device, dtype: Dtype) {
    eprintln!("parity {case}: {} {dtype} ok", describe(device));
    if let Ok(path) = std::env::var(PARITY_LOG_ENV) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write per line: O_APPEND keeps lines from parallel tests whole.
            let _ = f.write_all(format!("{case}\t{device}\t{dtype}\n").as_bytes());
        }
    }
}

fn describe(device: Device) -> String {
    brotensor::device_name(device).unwrap_or_else(|_| device.to_string())
}

/// Runs `op` on seeded random inputs on the CPU (FP32 reference) and on every GPU device in
/// every float dtype it supports, and on the CPU in the 16-bit dtypes, and compares. For
/// 16-bit runs the reference gets the inputs rounded through that dtype, so the comparison
/// measures the op, not the input rounding. A dtype the device does not support must be
/// refused with `UnsupportedDtype`.
pub fn parity(case: &str, seed: u64, inputs: &[Input], op: impl Fn(&[Tensor]) -> Result<Tensor>) {
    parity_with(case, seed, inputs, Check::default(), op)
}

/// How [`parity_with`] runs and compares.
#[derive(Clone, Copy)]
pub struct Check {
    /// The input dtypes to try on the GPU (each also rounds the CPU's inputs).
    pub dtypes: &'static [Dtype],
    /// Whether the output keeps the input's dtype (else any dtype; it is read as `f32`).
    pub same_dtype: bool,
    /// `(scale_tol, rtol)` per dtype instead of [`tolerance`]; `Some((0, 0))` demands equality.
    pub tol: Option<fn(Dtype) -> (f32, f32)>,
}

impl Default for Check {
    fn default() -> Self {
        Check {
            dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
            same_dtype: true,
            tol: None,
        }
    }
}

/// [`parity`] with explicit dtypes, output-dtype rule and tolerances.
pub fn parity_with(
    case: &str,
    seed: u64,
    inputs: &[Input],
    check: Check,
    op: impl Fn(&[Tensor]) -> Result<Tensor>,
) {
    let data = seeded_inputs(seed, inputs);
    let run = runner(inputs, &op);
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("parity {case}: SKIPPED on GPU (no GPU device found; set {REQUIRE_GPU_ENV} to fail instead)");
    }
    for &dtype in check.dtypes {
        let rounded: Vec<Vec<f32>> = data.iter().map(|d| round_through(dtype, d)).collect();
        let reference =
            run(Device::Cpu, Dtype::F32, &rounded).and_then(|t| Ok((read_f32(&t)?, t.cols())));
        let (reference, cols) =
            reference.unwrap_or_else(|e| panic!("{case}: CPU reference failed: {e}"));
        // The comparison must be able to fail on this case's data, GPU or not.
        assert_rejects_wrong(
            &format!("{case} {dtype}"),
            &round_through(dtype, &reference),
            cols,
            check.tol.map_or_else(|| tolerance(dtype), |f| f(dtype)),
        );
        if dtype == Dtype::F32 {
            record(case, Device::Cpu, dtype);
        }
        // The CPU computes the 16-bit dtypes too (FP32 math, one rounding on the way out):
        // its 16-bit run is compared with its own FP32 reference like a GPU's.
        let cpu = (dtype != Dtype::F32).then_some(Device::Cpu);
        for device in cpu.into_iter().chain(gpus.iter().copied()) {
            compare_on(
                case,
                device,
                dtype,
                check,
                run(device, dtype, &data),
                &reference,
            );
        }
    }
}

/// Runs `op` on every device (the CPU included) in every dtype of `check`, on seeded random
/// inputs, and compares each result with `reference`: float64 math written in the test (not
/// the CPU crate's code) applied to the same inputs, rounded through the dtype like the
/// device's own inputs. `reference` gets the inputs in row-major order and returns the
/// output's elements in row-major order. Recorded in the ledger as `<case> vs f64`.
pub fn reference_with(
    case: &str,
    seed: u64,
    inputs: &[Input],
    check: Check,
    op: impl Fn(&[Tensor]) -> Result<Tensor>,
    reference: impl Fn(&[Vec<f64>]) -> Vec<f64>,
) {
    let case = format!("{case} vs f64");
    let data = seeded_inputs(seed, inputs);
    let run = runner(inputs, &op);
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("parity {case}: SKIPPED on GPU (no GPU device found; set {REQUIRE_GPU_ENV} to fail instead)");
    }
    for &dtype in check.dtypes {
        let wide: Vec<Vec<f64>> = data
            .iter()
            .map(|d| round_through(dtype, d).into_iter().map(f64::from).collect())
            .collect();
        let want: Vec<f32> = reference(&wide).into_iter().map(|v| v as f32).collect();
        for device in std::iter::once(Device::Cpu).chain(gpus.iter().copied()) {
            compare_on(
                &case,
                device,
                dtype,
                check,
                run(device, dtype, &data),
                &want,
            );
        }
    }
}

/// The seeded random values of each input.
fn seeded_inputs(seed: u64, inputs: &[Input]) -> Vec<Vec<f32>> {
    let mut rng = SplitMix64::new(seed);
    inputs
        .iter()
        .map(|i| rng.uniform(i.rows * i.cols, i.lo, i.hi))
        .collect()
}

/// `op` applied to `inputs` built from host data on a device in a dtype.
fn runner<'a>(
    inputs: &'a [Input],
    op: &'a impl Fn(&[Tensor]) -> Result<Tensor>,
) -> impl Fn(Device, Dtype, &[Vec<f32>]) -> Result<Tensor> + 'a {
    move |device, dtype, data| {
        let tensors = inputs
            .iter()
            .zip(data)
            .map(|(i, d)| tensor(device, d, i.rows, i.cols, dtype))
            .collect::<Result<Vec<_>>>()?;
        op(&tensors)
    }
}

/// With `BROTENSOR_TOL_REPORT=<file>`, appends `case<TAB>dtype<TAB>worst` where `worst` is
/// the largest `|got - want|` over its row's scale: the `scale_tol` this result needed, for
/// keeping tolerances tight.
fn report_margin(case: &str, dtype: Dtype, want: &[f32], got: &[f32], cols: usize) {
    let Ok(path) = std::env::var("BROTENSOR_TOL_REPORT") else {
        return;
    };
    let cols = if cols <= 1 { want.len().max(1) } else { cols };
    let mut worst = 0.0f32;
    for (wr, gr) in want.chunks(cols).zip(got.chunks(cols)) {
        let scale = wr
            .iter()
            .filter(|w| w.is_finite())
            .fold(0.0f32, |m, w| m.max(w.abs()));
        for (w, g) in wr.iter().zip(gr) {
            if w.is_finite() && g.is_finite() && scale > 0.0 {
                worst = worst.max((w - g).abs() / scale);
            }
        }
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(format!("{case}\t{dtype}\t{worst:e}\n").as_bytes());
    }
}

/// Checks one device's result (or its refusal) against `reference` (FP32 values).
fn compare_on(
    case: &str,
    device: Device,
    dtype: Dtype,
    check: Check,
    result: Result<Tensor>,
    reference: &[f32],
) {
    match result {
        Ok(out) => {
            // A device without `dtype` arithmetic may still run a pure byte path (a
            // same-dtype cast is a copy); its result must be right all the same.
            assert_eq!(out.device(), device, "{case}: output left {device}");
            if check.same_dtype {
                assert_eq!(out.dtype(), dtype, "{case}: output dtype on {device}");
            }
            let got = read_f32(&out).unwrap_or_else(|e| panic!("{case}: read back: {e}"));
            let want = round_through(out.dtype(), reference);
            report_margin(case, dtype, &want, &got, out.cols());
            assert_close_rows(
                &format!("{case} on {device} {dtype}"),
                &want,
                &got,
                out.cols(),
                check
                    .tol
                    .map_or_else(|| tolerance(out.dtype()), |f| f(dtype)),
            );
            record(case, device, dtype);
        }
        Err(brotensor::Error::UnsupportedDtype { dtype: refused, .. })
            if !brotensor::supports_dtype(device, refused).expect("listed device") =>
        {
            eprintln!(
                "parity {case}: {} {dtype} refused ({refused} unsupported, as reported)",
                describe(device)
            );
        }
        Err(e) => panic!("{case} on {device} {dtype}: {e}"),
    }
}

/// Runs the ignored test `test` (its full path) of the running test binary as `ranks` MPI
/// processes over loopback (`mpirun --oversubscribe`, as root too, shared-memory transport),
/// each with one CPU thread, and kills the run after `limit`. Panics (fails the test) if
/// `mpirun` is missing, the run fails or it times out; returns everything the ranks printed.
pub fn mpirun_test(ranks: usize, test: &str, limit: std::time::Duration) -> String {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(ranks.to_string())
        .arg(&exe)
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OMPI_MCA_btl", "self,vader")
        .env("RAYON_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start mpirun ({e}): install Open MPI (Debian: openmpi-bin libopenmpi-dev)"
            )
        });
    let out_pipe = child.stdout.take().unwrap();
    let err_pipe = child.stderr.take().unwrap();
    let read = |mut p: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = p.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(out_pipe)), read(Box::new(err_pipe)));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let text = out.join().unwrap() + &err.join().unwrap();
    match status {
        Some(s) if s.success() => text,
        Some(s) => panic!("mpirun -np {ranks} failed ({s}):\n{text}"),
        None => panic!("mpirun -np {ranks} ran past {limit:?} and was killed:\n{text}"),
    }
}
