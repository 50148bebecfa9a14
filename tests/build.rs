//! Gathers the library's op sources into one file at build time, so the op-table test
//! (`tests/all/op_table.rs`) reads them wherever its binary runs: scripts/cmma-check.sh runs
//! it inside a root that holds only the binary and the test fixtures.

use std::path::{Path, PathBuf};

fn main() {
    let ops = Path::new(env!("CARGO_MANIFEST_DIR")).join("../brotensor/src/ops");
    println!("cargo:rerun-if-changed={}", ops.display());
    let mut files = Vec::new();
    collect_rust_files(&ops, &mut files);
    files.sort();
    let mut text = String::new();
    for file in files {
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        text.push_str(&source);
        text.push('\n');
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("ops_sources.rs.txt"), text).expect("cannot write OUT_DIR");
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|x| x == "rs") {
            files.push(path);
        }
    }
}
