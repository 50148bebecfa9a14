//! Model-file throughput: opening and indexing a 1 GiB safetensors file (mmap, no copy), in
//! milliseconds, against reading the same file into memory in the same run; and host
//! dequantization throughput per GGUF block type (GB/s of F32 output, best of 5).
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_io [-- --dir DIR]` (writes a
//! 1 GiB file into DIR, default the system temp folder, and removes it).

use std::collections::BTreeMap;
use std::time::Instant;

use brotensor::io::gguf;
use brotensor::io::safetensors::{self as st, SafeTensors, StDtype, WriteEntry};
use brotensor::Dtype;

fn main() -> brotensor::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!(
        "brotensor-bench-{}.safetensors",
        std::process::id()
    ));
    // 256 tensors of 4 MiB: 1 GiB, the shape of a small model's weight file.
    let chunk = vec![0x3Cu8; 4 << 20];
    let names: Vec<String> = (0..256)
        .map(|i| format!("model.layers.{}.weight", i))
        .collect();
    let entries: Vec<WriteEntry> = names
        .iter()
        .map(|n| WriteEntry {
            name: n,
            dtype: StDtype::F16,
            shape: &[1024, 2048],
            data: &chunk,
        })
        .collect();
    st::write(&path, &entries, &BTreeMap::new())?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);

    let mut best_open = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        let f = SafeTensors::open(&path)?;
        let n = f.tensors().count();
        let v = f.get("model.layers.255.weight")?;
        std::hint::black_box((n, v.data.len()));
        best_open = best_open.min(t0.elapsed().as_secs_f64());
    }
    let t0 = Instant::now();
    let bytes = std::fs::read(&path).map_err(|e| brotensor::Error::InvalidArgument {
        op: "bench_io",
        reason: e.to_string(),
    })?;
    let read = t0.elapsed().as_secs_f64();
    std::hint::black_box(bytes.len());
    std::fs::remove_file(&path).ok();

    println!(
        "# bench_io: {} MiB safetensors file, 256 tensors",
        size >> 20
    );
    println!();
    println!("| op | ms | note |");
    println!("|---|---:|---|");
    println!("| SafeTensors::open + index + get | {:.3} | best of 5; mmap, header validated, no data read |", best_open * 1e3);
    println!(
        "| std::fs::read (reference) | {:.1} | the whole file into memory, page cache warm |",
        read * 1e3
    );

    // Host dequantization throughput per block type, in GB/s of F32 output.
    println!();
    println!("| block type | MiB in | ms | GB/s out |");
    println!("|---|---:|---:|---:|");
    let blocks = 1 << 15;
    for dtype in [
        Dtype::Q4_0,
        Dtype::Q4_1,
        Dtype::Q5_0,
        Dtype::Q5_1,
        Dtype::Q8_0,
        Dtype::Q8_1,
        Dtype::Q2_K,
        Dtype::Q3_K,
        Dtype::Q4_K,
        Dtype::Q5_K,
        Dtype::Q6_K,
        Dtype::Q8_K,
        Dtype::IQ4_NL,
        Dtype::IQ4_XS,
        Dtype::MXFP4,
    ] {
        // Bytes below 0x40 keep every f16 / f32 scale finite.
        let bytes: Vec<u8> = (0..blocks * dtype.block_bytes())
            .map(|i| (i * 131 % 251) as u8 & 0x3F)
            .collect();
        let elems = blocks * dtype.block_size();
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            let out = gguf::dequantize(dtype, &bytes)?;
            std::hint::black_box(out.len());
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "| {dtype} | {:.1} | {:.2} | {:.1} |",
            bytes.len() as f64 / (1 << 20) as f64,
            best * 1e3,
            (elems * 4) as f64 / best / 1e9
        );
    }
    Ok(())
}
