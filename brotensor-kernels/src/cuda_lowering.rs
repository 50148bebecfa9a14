//! Test-only: every kernel, in every specialisation the library can launch, lowered to CUDA
//! C++ with CubeCL's CUDA compiler, and to Metal Shading Language with cubecl-cpp's Metal
//! dialect (no GPU needed for either).
//!
//! Each kernel file has a `lower_for_cuda` function (under `cfg(test)`) that builds its
//! kernels' definitions for the whole launch domain: every float storage type the backend
//! dispatches to (`with_float!` in `brotensor/src/backend/cube/`), every vector size that
//! [`crate::launch::vector_size_for`] can return, every instruction (each instruction set's
//! `ALL`), and every value of each comptime flag. The function keeps its name for both
//! targets: it hands each definition to [`Lowering::lower`], which compiles it for the
//! [`Target`] the lowering was made for (a file whose specialisations differ by target asks
//! [`Lowering::target`]). A new comptime parameter breaks the build of these functions (the
//! kernel constructors are positional); a new kernel, instruction or dtype fails
//! [`every_kernel_lowers_to_cuda`] and [`every_kernel_lowers_to_msl`], which cross-check the
//! sources. With `BROTENSOR_CUDA_DIR` set, the CUDA test writes one `.cu` file per unit
//! there, which `scripts/nvrtc_check.py` compiles to PTX; with `BROTENSOR_MSL_DIR` set, the
//! MSL test writes one `.metal` file per unit there.
//!
//! Metal runs through wgpu, whose Metal backend in CubeCL registers no BF16 type: the MSL
//! lowering skips the specialisations listed in [`MSL_SKIPS`] (BF16 tensors reach Metal as
//! 16-bit words, `crate::bf16_words`, which it does lower) and prints what it skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cubecl::cuda::CudaCompiler;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use cubecl::Compiler;
use cubecl_cpp::MslCompiler;

/// The runtime whose client builds the kernel definitions (the struct wants a client; the
/// software Vulkan device serves, and the definition is compiled for CUDA, not for it).
pub(crate) type Rt = WgpuRuntime;

/// Calls `$body` once per float storage type the backend launches, with `$F` bound to it.
macro_rules! for_floats {
    (|$F:ident| $body:expr) => {{
        {
            type $F = f32;
            $body
        }
        {
            type $F = half::f16;
            $body
        }
        {
            type $F = half::bf16;
            $body
        }
    }};
}
pub(crate) use for_floats;

/// The names of the types [`for_floats`] visits, as `with_float!` in the backend spells them.
const FLOAT_NAMES: [&str; 3] = ["f32", "f16", "bf16"];

/// The language a [`Lowering`] compiles the kernel definitions to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// CUDA C++, with CubeCL's CUDA compiler (as the CUDA runtime compiles before NVRTC).
    Cuda,
    /// Metal Shading Language, with cubecl-cpp's Metal dialect (as cubecl-wgpu's Metal
    /// backend compiles before handing the source to Metal).
    Msl,
}

impl Target {
    /// The target's name in messages.
    fn name(self) -> &'static str {
        match self {
            Target::Cuda => "CUDA C++",
            Target::Msl => "MSL",
        }
    }

    /// The extension of the files the test writes.
    fn extension(self) -> &'static str {
        match self {
            Target::Cuda => "cu",
            Target::Msl => "metal",
        }
    }

    /// The environment variable naming the folder the test writes its units to.
    fn dir_var(self) -> &'static str {
        match self {
            Target::Cuda => "BROTENSOR_CUDA_DIR",
            Target::Msl => "BROTENSOR_MSL_DIR",
        }
    }
}

/// A family of specialisations the MSL lowering leaves out on purpose.
struct Skip {
    /// Which units: a description for the printed list.
    what: &'static str,
    /// Whether the rule takes the unit: its kernel type name and its compact comptime info.
    applies: fn(kernel: &str, info: &str) -> bool,
    /// Why these units are never launched on Metal.
    reason: &'static str,
}

/// Whether `kernel`'s type names `half::bf16` (a generic argument: the storage or the
/// destination type).
fn names_bf16(kernel: &str, _info: &str) -> bool {
    kernel.contains(std::any::type_name::<half::bf16>())
}

/// The specialisations [`every_kernel_lowers_to_msl`] does not lower, with the reason. Only
/// the BF16 ones: CubeCL's wgpu Metal backend registers no BF16 type (`register_types` in
/// cubecl-wgpu 0.10's `backend/metal.rs`), so the library runs BF16 there as 16-bit words
/// (`crate::bf16_words`, lowered). Float atomics need no rule: no kernel uses atomics (and
/// that backend registers f32 atomic add and load/store). The tensor-core product is lowered
/// in its 8x8x8 configuration, the one Metal's simdgroup matrices offer (see
/// `crate::matmul::lower_for_cuda`).
const MSL_SKIPS: &[Skip] = &[
    Skip {
        what: "every specialisation with a bf16 type argument",
        applies: names_bf16,
        reason: "Metal through wgpu has no BF16 (cubecl-wgpu's Metal backend does not register \
                 it); BF16 tensors run there as words in bf16_words, which is lowered",
    },
    Skip {
        what: "every specialisation with an f64 type argument (algebra/)",
        applies: names_f64,
        reason: "Metal has no 64-bit floats: F64 and C128 are unsupported dtypes there \
                 (supports_dtype says so, as cubecl registers no f64 for it)",
    },
    Skip {
        what: "the atomic scatter-add of i64 (algebra/index.rs)",
        applies: names_i64_atomic,
        reason: "Metal has no 64-bit atomics (cubecl-cpp's MSL dialect refuses them); the \
                 library scatters I64 there in conflict-free launches without atomics \
                 (scatter_add_plain_kernel, lowered)",
    },
];

/// Whether a unit has an f64 type argument.
fn names_f64(kernel: &str, _info: &str) -> bool {
    kernel.contains("<f64") || kernel.contains(", f64")
}

/// Whether a unit is the atomic scatter-add over i64.
fn names_i64_atomic(kernel: &str, _info: &str) -> bool {
    kernel.contains("scatter_add_atomic_kernel") && kernel.contains("<i64")
}

/// One kernel definition lowered to the target language.
struct Unit {
    /// `type_name` of the kernel struct (kernel module, generics, runtime).
    kernel: &'static str,
    /// The kernel id's comptime information (vector size, flags).
    info: String,
    /// The translation unit.
    source: String,
}

/// One specialisation left out by a rule of [`MSL_SKIPS`].
struct Skipped {
    /// `type_name` of the kernel struct.
    kernel: &'static str,
    /// The kernel id's comptime information.
    info: String,
    /// The index of the rule in [`MSL_SKIPS`].
    rule: usize,
}

/// Held while a unit is compiled and formatted (see [`Lowering::lower`]).
static CPP_COMPILER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Collects the lowered units of every kernel file.
pub(crate) struct Lowering {
    /// The client the kernel structs are built with.
    pub(crate) client: ComputeClient<Rt>,
    target: Target,
    units: Vec<Unit>,
    skipped: Vec<Skipped>,
    failures: Vec<String>,
}

impl Lowering {
    fn new(client: ComputeClient<Rt>, target: Target) -> Self {
        Self {
            client,
            target,
            units: Vec::new(),
            skipped: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// The language this lowering compiles to.
    pub(crate) fn target(&self) -> Target {
        self.target
    }

    /// Settings of a launch with `dim` units per cube.
    pub(crate) fn settings(dim: CubeDim) -> KernelSettings {
        KernelSettings::default().cube_dim(dim)
    }

    /// Settings of the one-dimensional 256-unit cubes most launches use.
    pub(crate) fn settings_1d() -> KernelSettings {
        Self::settings(CubeDim::new_1d(256))
    }

    /// The compilation argument of an `Array` parameter (never an in-place alias here).
    pub(crate) fn array() -> ArrayCompilationArg {
        ArrayCompilationArg { inplace: None }
    }

    /// Every vector size a vectorized launch can pick.
    pub(crate) fn vector_sizes() -> Vec<usize> {
        let mut sizes = BTreeSet::new();
        for max in 1..=crate::MAX_VECTOR_SIZE {
            for len in 1..=64 {
                sizes.insert(crate::launch::vector_size_for(len, max));
            }
        }
        sizes.into_iter().collect()
    }

    /// Lowers `kernel` to the target language (unchecked mode, as every launch is) and keeps
    /// the unit, or records it as skipped (MSL: a rule of [`MSL_SKIPS`] takes it) or as a
    /// failure (a compilation error, a panic while defining, compiling or formatting it, or
    /// an `#error` line in the source).
    pub(crate) fn lower<K: CubeKernel>(&mut self, kernel: K) {
        let id = kernel.id();
        let kernel_type = std::any::type_name::<K>();
        let info = compact_info(&format!("{id:?}"));
        if self.target == Target::Msl {
            if let Some(rule) = MSL_SKIPS
                .iter()
                .position(|r| (r.applies)(kernel_type, &info))
            {
                self.skipped.push(Skipped {
                    kernel: kernel_type,
                    info,
                    rule,
                });
                return;
            }
        }
        let target = self.target;
        // cubecl-cpp numbers the temporaries it declares while formatting a kernel with one
        // process-wide counter, which each compilation resets: two threads compiling at
        // once (the CUDA and MSL tests run in parallel) could declare one name twice.
        let _one_at_a_time = CPP_COMPILER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let lowered = catch_unwind(AssertUnwindSafe(|| {
            let definition = kernel.define();
            let address = kernel.address_type();
            let mode = ExecutionMode::Unchecked;
            match target {
                Target::Cuda => CudaCompiler::default()
                    .compile(definition, &Default::default(), mode, address)
                    .map(|k| k.to_string()),
                Target::Msl => MslCompiler::default()
                    .compile(definition, &Default::default(), mode, address)
                    .map(|k| k.to_string()),
            }
        }));
        match lowered {
            Ok(Ok(source)) => {
                if let Some(line) = source
                    .lines()
                    .find(|l| l.trim_start().starts_with("#error"))
                {
                    self.failures
                        .push(format!("{kernel_type} {info}: {}", line.trim()));
                } else {
                    self.units.push(Unit {
                        kernel: kernel_type,
                        info,
                        source,
                    });
                }
            }
            Ok(Err(e)) => self.failures.push(format!("{kernel_type} {info}: {e}")),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                self.failures
                    .push(format!("{kernel_type} {info}: panicked: {message}"));
            }
        }
    }
}

/// The kernel id's comptime values on one line, without the array and scalar arguments
/// (which hold nothing here).
fn compact_info(id: &str) -> String {
    let flat = id.split_whitespace().collect::<Vec<_>>().join(" ");
    let info = flat.split_once("info: ").map_or(flat.as_str(), |(_, i)| i);
    let info = info.trim_end_matches(['}', ' ']);
    let (name, fields) = info.split_once(" { ").unwrap_or((info, ""));
    let kept: Vec<&str> = fields
        .split(", ")
        .filter(|f| !f.contains("CompilationArg") && !f.ends_with("()"))
        .collect();
    format!("{name} {{ {} }}", kept.join(", "))
}

/// The `.rs` files under `dir` (subfolders included), as paths relative to `src/` with the
/// `prefix` of the folder they are in.
fn source_files(dir: &str, prefix: &str) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let entry = entry.expect("entry");
        let name = entry.file_name().into_string().expect("utf-8");
        if entry.file_type().expect("file type").is_dir() {
            files.extend(source_files(
                &format!("{dir}/{name}"),
                &format!("{prefix}{name}/"),
            ));
        } else if name.ends_with(".rs") {
            files.push(format!("{prefix}{name}"));
        }
    }
    files.sort();
    files
}

/// The names of the `#[cube(launch_unchecked)]` kernels defined in `src`.
fn launched_kernels(src: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut after_attr = false;
    for line in src.lines().map(str::trim) {
        if line.starts_with("#[cube(launch") {
            after_attr = true;
        } else if let Some(rest) = line
            .strip_prefix("fn ")
            .or_else(|| line.strip_prefix("pub fn "))
            .filter(|_| after_attr)
        {
            let name = rest.split(['<', '(']).next().unwrap_or("");
            names.push(name.to_string());
            after_attr = false;
        }
    }
    names
}

/// The instruction names listed in the `instruction_set!` invocation of `enum set` in `src`.
fn op_names(src: &str, set: &str) -> Vec<String> {
    let start = src
        .find(&format!("\n    enum {set};"))
        .unwrap_or_else(|| panic!("no instruction_set! of enum {set}"));
    let body = &src[start..];
    let end = body.find("\n}").expect("the invocation ends");
    body[..end]
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (name, _) = l.split_once(" => ")?;
            (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()))
                .then(|| name.to_string())
        })
        .collect()
}

/// The `type $X = path::Name;` targets inside `macro_rules! macro_name` in `src`.
fn dispatched_types(src: &str, macro_name: &str) -> Vec<String> {
    let start = src
        .find(&format!("macro_rules! {macro_name} {{"))
        .unwrap_or_else(|| panic!("no macro_rules! {macro_name}"));
    let body = &src[start..];
    let end = body.find("\n}\n").expect("the macro ends");
    body[..end]
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("type $")?;
            let (_, ty) = rest.split_once(" = ")?;
            let ty = ty.trim_end_matches(';');
            Some(ty.rsplit("::").next().unwrap_or(ty).to_string())
        })
        .collect()
}

/// The value of comptime parameter `name` in a unit's compact info
/// (`KernelInfo { name: value, ... }`).
fn comptime_value<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    let (_, rest) = info.split_once(&format!(" {name}: "))?;
    rest.split([',', ' ']).next()
}

/// A file name for unit `i`: its kernel's module name, the index and `extension`.
fn file_name(i: usize, unit: &Unit, extension: &str) -> String {
    let module = unit
        .kernel
        .split('<')
        .next()
        .and_then(|p| p.rsplit("::").nth(1))
        .unwrap_or("kernel");
    format!("{i:04}_{module}.{extension}")
}

/// Lowers every kernel file's units for `target`, or `None` (the test then passes as
/// skipped) where there is no software wgpu adapter to build the definitions with and none
/// is required.
fn lower_all(target: Target) -> Option<Lowering> {
    let Ok(client) = catch_unwind(|| WgpuRuntime::client(&WgpuDevice::Cpu)) else {
        let required = std::env::var("BROTENSOR_REQUIRE_GPU").unwrap_or_default();
        let dir = std::env::var(target.dir_var()).is_ok();
        assert!(
            !dir && !matches!(required.as_str(), "wgpu" | "any"),
            "no software wgpu adapter to build the kernel definitions with"
        );
        eprintln!(
            "{} lowering: SKIPPED (no software wgpu adapter)",
            target.name()
        );
        return None;
    };
    let mut l = Lowering::new(client, target);
    crate::algebra::lower_for_cuda(&mut l);
    crate::attention::lower_for_cuda(&mut l);
    crate::batch_norm::lower_for_cuda(&mut l);
    crate::codec::lower_for_cuda(&mut l);
    crate::bf16_words::lower_for_cuda(&mut l);
    crate::concat::lower_for_cuda(&mut l);
    crate::conv::lower_for_cuda(&mut l);
    crate::conv1d::lower_for_cuda(&mut l);
    crate::delta_rule::lower_for_cuda(&mut l);
    crate::diffusion::lower_for_cuda(&mut l);
    crate::optim::lower_for_cuda(&mut l);
    crate::elementwise::lower_for_cuda(&mut l);
    crate::embedding::lower_for_cuda(&mut l);
    crate::flash::lower_for_cuda(&mut l);
    crate::flash_grad::lower_for_cuda(&mut l);
    crate::glu::lower_for_cuda(&mut l);
    crate::image::lower_for_cuda(&mut l);
    crate::loss::lower_for_cuda(&mut l);
    crate::matmul::lower_for_cuda(&mut l);
    crate::quant::lower_for_cuda(&mut l);
    crate::reduce::lower_for_cuda(&mut l);
    crate::rope::lower_for_cuda(&mut l);
    crate::norm::lower_for_cuda(&mut l);
    crate::pad::lower_for_cuda(&mut l);
    crate::pooling::lower_for_cuda(&mut l);
    crate::resize::lower_for_cuda(&mut l);
    crate::softmax::lower_for_cuda(&mut l);
    crate::spectral::lower_for_cuda(&mut l);
    crate::fft::lower_for_cuda(&mut l);
    crate::lstm::lower_for_cuda(&mut l);
    crate::sampling::lower_for_cuda(&mut l);
    crate::snake::lower_for_cuda(&mut l);
    crate::strided::lower_for_cuda(&mut l);
    crate::stylegan::lower_for_cuda(&mut l);
    assert!(
        l.failures.is_empty(),
        "kernels CubeCL cannot lower to {} ({} of {}):\n{}",
        target.name(),
        l.failures.len(),
        l.failures.len() + l.units.len() + l.skipped.len(),
        l.failures.join("\n")
    );
    Some(l)
}

/// Cross-checks the enumeration against the sources, so that it cannot fall behind them:
/// every launched kernel, every instruction and every dispatched float type has a unit
/// (lowered, or skipped by a rule of [`MSL_SKIPS`]). Returns the number of kernels.
fn check_coverage(l: &Lowering) -> usize {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |p: &str| {
        std::fs::read_to_string(format!("{root}/{p}")).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let seen: Vec<(&str, &str)> = l
        .units
        .iter()
        .map(|u| (u.kernel, u.info.as_str()))
        .chain(l.skipped.iter().map(|s| (s.kernel, s.info.as_str())))
        .collect();
    let lowered = |needle: &str| seen.iter().any(|(kernel, _)| kernel.contains(needle));
    let mut missing = Vec::new();
    let files = source_files(&format!("{root}/src"), "");
    let mut kernels = 0;
    for file in &files {
        for name in launched_kernels(&read(&format!("src/{file}"))) {
            kernels += 1;
            if !lowered(&format!("::{name}::")) {
                missing.push(format!("kernel {name} ({file})"));
            }
        }
    }
    let elementwise = read("src/elementwise.rs");
    // The GPU glue, one file per op family: scanned as one text.
    let glue = "../brotensor/src/backend/cube";
    let mut glue_files: Vec<String> = std::fs::read_dir(format!("{root}/{glue}"))
        .expect("the GPU glue folder")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .filter(|n| n.ends_with(".rs"))
        .collect();
    glue_files.sort();
    let cube: String = glue_files
        .iter()
        .map(|n| read(&format!("{glue}/{n}")))
        .collect();
    // Instructions are comptime values (named in the kernel id's info); gated units are
    // instruction types (named in the kernel's type).
    let mut ops: Vec<(String, &[&str], bool)> = Vec::new();
    for op in op_names(&elementwise, "UnaryInstr") {
        ops.push((op, &["::unary_kernel::", "::unary_words_kernel::"], true));
    }
    for op in op_names(&elementwise, "BinaryInstr") {
        ops.push((op, &["::binary_kernel::", "::binary_words_kernel::"], true));
    }
    for op in dispatched_types(&cube, "with_glu") {
        ops.push((
            op,
            &["::glu_forward_kernel::", "::glu_backward_kernel::"],
            false,
        ));
    }
    for (op, kernels, comptime) in &ops {
        for k in *kernels {
            let hit = seen.iter().any(|(kernel, info)| {
                kernel.contains(k)
                    && if *comptime {
                        comptime_value(info, "instr") == Some(op.as_str())
                    } else {
                        kernel.contains(&format!("::{op},")) || kernel.contains(&format!("::{op}>"))
                    }
            });
            if !hit {
                missing.push(format!("instruction {op} in {k}"));
            }
        }
    }
    let floats = dispatched_types(&cube, "with_float");
    assert_eq!(
        floats, FLOAT_NAMES,
        "the backend's float dtypes changed: update for_floats! and FLOAT_NAMES"
    );
    assert!(
        kernels > 0 && !ops.is_empty(),
        "the source scan found nothing"
    );
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "launched by the library but not lowered to {} (add them to the kernel file's \
         lower_for_cuda):\n{}",
        l.target.name(),
        missing.join("\n")
    );
    kernels
}

/// With the target's folder variable set, writes each distinct unit there (two comment lines
/// naming the kernel and its comptime values, then the source). Returns how many it wrote.
fn write_units(l: &Lowering) -> usize {
    let Ok(dir) = std::env::var(l.target.dir_var()) else {
        return 0;
    };
    let mut seen = BTreeSet::new();
    let mut unique = 0;
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", l.target.dir_var()));
    for (i, unit) in l.units.iter().enumerate() {
        if !seen.insert(unit.source.clone()) {
            continue;
        }
        unique += 1;
        let mut text = String::new();
        writeln!(text, "// kernel: {}", unit.kernel).unwrap();
        writeln!(text, "// comptime: {}", unit.info.replace('\n', " ")).unwrap();
        text.push_str(&unit.source);
        let name = file_name(i, unit, l.target.extension());
        std::fs::write(format!("{dir}/{name}"), text).expect("write unit");
    }
    unique
}

#[test]
fn every_kernel_lowers_to_cuda() {
    let Some(l) = lower_all(Target::Cuda) else {
        return;
    };
    let kernels = check_coverage(&l);
    let unique = write_units(&l);
    eprintln!(
        "CUDA lowering: {} units from {kernels} kernels ({unique} distinct written)",
        l.units.len()
    );
}

#[test]
fn every_kernel_lowers_to_msl() {
    let Some(l) = lower_all(Target::Msl) else {
        return;
    };
    let kernels = check_coverage(&l);
    // Metal through wgpu has no BF16 type: a lowered unit must not use one (a kernel that
    // uses bf16 without naming it in its type would need a rule in MSL_SKIPS).
    let bfloat: Vec<String> = l
        .units
        .iter()
        .filter(|u| u.source.contains("bfloat"))
        .map(|u| format!("{} {}", u.kernel, u.info))
        .collect();
    assert!(
        bfloat.is_empty(),
        "MSL units that use bfloat, which Metal through wgpu does not offer:\n{}",
        bfloat.join("\n")
    );
    // The tensor-core product is lowered (in its 8x8x8 configuration) as simdgroup matrices.
    assert!(
        l.units
            .iter()
            .any(|u| u.kernel.contains("::gemm_cmma_kernel::")
                && u.source.contains("simdgroup_multiply_accumulate")),
        "no MSL unit of the tensor-core product uses simdgroup matrices"
    );
    let unique = write_units(&l);
    eprintln!(
        "MSL lowering: skipped on purpose ({} units):",
        l.skipped.len()
    );
    for (i, rule) in MSL_SKIPS.iter().enumerate() {
        let mut per_kernel: BTreeMap<&str, usize> = BTreeMap::new();
        for s in l.skipped.iter().filter(|s| s.rule == i) {
            let name = s.kernel.split('<').next().unwrap_or(s.kernel);
            *per_kernel.entry(name).or_default() += 1;
        }
        let count: usize = per_kernel.values().sum();
        eprintln!("  {} ({count} units): {}", rule.what, rule.reason);
        for (kernel, n) in per_kernel {
            eprintln!("    {kernel}: {n}");
        }
    }
    eprintln!(
        "MSL lowering: {} units from {kernels} kernels ({unique} distinct written), {} skipped",
        l.units.len(),
        l.skipped.len()
    );
}
