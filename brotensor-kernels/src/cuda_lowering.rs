//! Test-only: every kernel, in every specialisation the library can launch, lowered to CUDA
//! C++ with CubeCL's CUDA compiler (no GPU needed).
//!
//! Each kernel file has a `lower_for_cuda` function (under `cfg(test)`) that builds its
//! kernels' definitions for the whole launch domain: every float storage type the backend
//! dispatches to (`with_float!` in `brotensor/src/backend/cube/`), every vector size that
//! [`crate::launch::vector_size_for`] can return, every instruction (each instruction set's
//! `ALL`), and every value of each comptime flag. A new comptime parameter breaks the build
//! of these functions (the kernel constructors are positional); a new kernel, instruction or
//! dtype fails [`every_kernel_lowers_to_cuda`], which cross-checks the sources. With
//! `BROTENSOR_CUDA_DIR` set, the test writes one `.cu` file per unit there, which
//! `scripts/nvrtc_check.py` compiles to PTX.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use cubecl::cuda::CudaCompiler;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use cubecl::Compiler;

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

/// One kernel definition lowered to CUDA C++.
struct Unit {
    /// `type_name` of the kernel struct (kernel module, generics, runtime).
    kernel: &'static str,
    /// The kernel id's comptime information (vector size, flags).
    info: String,
    /// The CUDA C++ translation unit.
    source: String,
}

/// Collects the lowered units of every kernel file.
pub(crate) struct Lowering {
    /// The client the kernel structs are built with.
    pub(crate) client: ComputeClient<Rt>,
    units: Vec<Unit>,
    failures: Vec<String>,
}

impl Lowering {
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

    /// Lowers `kernel` to CUDA C++ (unchecked mode, as every launch is) and keeps the unit.
    pub(crate) fn lower<K: CubeKernel>(&mut self, kernel: K) {
        let id = kernel.id();
        let kernel_type = std::any::type_name::<K>();
        let info = compact_info(&format!("{id:?}"));
        let mut compiler = CudaCompiler::default();
        match compiler.compile(
            kernel.define(),
            &Default::default(),
            ExecutionMode::Unchecked,
            kernel.address_type(),
        ) {
            Ok(source) => self.units.push(Unit {
                kernel: kernel_type,
                info,
                source: source.to_string(),
            }),
            Err(e) => self.failures.push(format!("{kernel_type} {info}: {e}")),
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

/// A file name for unit `i`: its kernel's module name and the index.
fn file_name(i: usize, unit: &Unit) -> String {
    let module = unit
        .kernel
        .split('<')
        .next()
        .and_then(|p| p.rsplit("::").nth(1))
        .unwrap_or("kernel");
    format!("{i:04}_{module}.cu")
}

#[test]
fn every_kernel_lowers_to_cuda() {
    let Ok(client) = std::panic::catch_unwind(|| WgpuRuntime::client(&WgpuDevice::Cpu)) else {
        let required = std::env::var("BROTENSOR_REQUIRE_GPU").unwrap_or_default();
        let dir = std::env::var("BROTENSOR_CUDA_DIR").is_ok();
        assert!(
            !dir && !matches!(required.as_str(), "wgpu" | "any"),
            "no software wgpu adapter to build the kernel definitions with"
        );
        eprintln!("CUDA lowering: SKIPPED (no software wgpu adapter)");
        return;
    };
    let mut l = Lowering {
        client,
        units: Vec::new(),
        failures: Vec::new(),
    };
    crate::algebra::lower_for_cuda(&mut l);
    crate::attention::lower_for_cuda(&mut l);
    crate::batch_norm::lower_for_cuda(&mut l);
    crate::bf16_words::lower_for_cuda(&mut l);
    crate::concat::lower_for_cuda(&mut l);
    crate::elementwise::lower_for_cuda(&mut l);
    crate::embedding::lower_for_cuda(&mut l);
    crate::flash::lower_for_cuda(&mut l);
    crate::flash_grad::lower_for_cuda(&mut l);
    crate::glu::lower_for_cuda(&mut l);
    crate::loss::lower_for_cuda(&mut l);
    crate::matmul::lower_for_cuda(&mut l);
    crate::quant::lower_for_cuda(&mut l);
    crate::reduce::lower_for_cuda(&mut l);
    crate::rope::lower_for_cuda(&mut l);
    crate::rows::lower_for_cuda(&mut l);
    crate::sampling::lower_for_cuda(&mut l);
    crate::snake::lower_for_cuda(&mut l);
    crate::strided::lower_for_cuda(&mut l);
    assert!(
        l.failures.is_empty(),
        "kernels CubeCL cannot lower to CUDA C++:\n{}",
        l.failures.join("\n")
    );

    // Cross-check the enumeration against the sources, so that it cannot fall behind them.
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |p: &str| {
        std::fs::read_to_string(format!("{root}/{p}")).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let lowered = |needle: &str| l.units.iter().any(|u| u.kernel.contains(needle));
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
            let hit = l.units.iter().any(|u| {
                u.kernel.contains(k)
                    && if *comptime {
                        comptime_value(&u.info, "instr") == Some(op.as_str())
                    } else {
                        u.kernel.contains(&format!("::{op},"))
                            || u.kernel.contains(&format!("::{op}>"))
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
        "launched by the library but not lowered to CUDA (add them to the kernel file's \
         lower_for_cuda):\n{}",
        missing.join("\n")
    );

    let mut seen = BTreeSet::new();
    let mut unique = 0;
    if let Ok(dir) = std::env::var("BROTENSOR_CUDA_DIR") {
        std::fs::create_dir_all(&dir).expect("create BROTENSOR_CUDA_DIR");
        for (i, unit) in l.units.iter().enumerate() {
            if !seen.insert(unit.source.clone()) {
                continue;
            }
            unique += 1;
            let mut text = String::new();
            writeln!(text, "// kernel: {}", unit.kernel).unwrap();
            writeln!(text, "// comptime: {}", unit.info.replace('\n', " ")).unwrap();
            text.push_str(&unit.source);
            std::fs::write(format!("{dir}/{}", file_name(i, unit)), text).expect("write unit");
        }
    }
    eprintln!(
        "CUDA lowering: {} units from {kernels} kernels ({unique} distinct written)",
        l.units.len()
    );
}
