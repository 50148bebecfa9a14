//! The tour: lists every device brotensor found and runs real work on each, checking the
//! result against the CPU reference and timing it.
//!
//! Run: `cargo run -p brotensor --example tour` (the README's main job).

use std::time::Instant;

use brotensor::{ops, Device, Dtype, Tensor};

/// Elements per tensor (16 Mi: 64 MiB in F32).
const N: usize = 1 << 24;
const COLS: usize = 4096;

/// One step of a toy update: `w = clamp(w*0.9 + 0.1*exp(-x^2), 0, 1)`, with a round trip
/// through 16-bit storage when `dtype` is F16 or BF16. Returns the result as F32 values.
fn step(device: Device, x_host: &[f32], w_host: &[f32], dtype: Dtype) -> brotensor::Result<Tensor> {
    let rows = x_host.len() / COLS;
    let x = Tensor::from_slice_on(device, x_host, rows, COLS)?.to_dtype(dtype)?;
    let mut w = Tensor::from_slice_on(device, w_host, rows, COLS)?.to_dtype(dtype)?;
    let mut g = Tensor::default();
    ops::mul_out(&x, &x, &mut g)?; // x^2
    g.mul_scalar_(-1.0)?;
    g.exp_()?; // exp(-x^2)
    ops::axpby_inplace(&mut w, &g, 0.9, 0.1)?;
    ops::clamp(&mut w, 0.0, 1.0)?;
    w.to_dtype(Dtype::F32)
}

/// N-d work on views: a (64, 512, 512) tensor transposed in its last two dims (no copy),
/// plus a broadcast bias row (read in place), a softmax along the last dim and a sum along
/// the middle one, giving (64, 512) as F32 values.
fn views_step(device: Device, x_host: &[f32], dtype: Dtype) -> brotensor::Result<Tensor> {
    let x = Tensor::from_slice_nd_on(device, x_host, &[64, 512, 512])?.to_dtype(dtype)?;
    let bias = Tensor::from_slice_nd_on(device, &x_host[..512], &[512])?.to_dtype(dtype)?;
    let y = x.permute(&[0, 2, 1])?.add(&bias)?;
    y.softmax(2)?.sum(1)?.to_dtype(Dtype::F32)
}

/// The attention path of a decoder on 256 tokens: an embedding lookup of token ids in a
/// (1000, 512) table, RoPE over 8 heads of 64 (interleaved pairs, base 10000), then causal
/// flash attention with grouped-query heads (8 query heads over the 2 KV heads held by the
/// first 128 columns), giving (256, 512) as F32 values.
fn attention_step(
    device: Device,
    table_host: &[f32],
    ids_host: &[i32],
    dtype: Dtype,
) -> brotensor::Result<Tensor> {
    let table = Tensor::from_slice_on(device, table_host, 1000, 512)?.to_dtype(dtype)?;
    let ids = Tensor::from_slice_on(device, ids_host, ids_host.len(), 1)?;
    let mut h = Tensor::default();
    ops::embedding_lookup_forward(&table, &ids, &mut h)?;
    let mut q = Tensor::default();
    ops::rope_forward(&h, 64, 8, 0, &ops::RopeParams::new(10_000.0), &mut q)?;
    let k = q.narrow(1, 0, 128)?.contiguous()?;
    let v = h.narrow(1, 0, 128)?.contiguous()?;
    let mut o = Tensor::default();
    ops::flash_attention_gqa_forward(&q, &k, &v, None, 8, 2, true, &mut o)?;
    o.to_dtype(Dtype::F32)
}

/// Runs `work` on every device and dtype it can, warm then timed, against the CPU's FP32
/// result; prints one row each and returns whether all agreed within `tols` (F32, F16, BF16).
fn compare(
    devices: &[Device],
    reference: &[f32],
    tols: [f32; 3],
    work: impl Fn(Device, Dtype) -> brotensor::Result<Tensor>,
) -> brotensor::Result<bool> {
    println!(
        "{:<12} {:<6} {:>10} {:>12}  check",
        "device", "dtype", "time ms", "max |err|"
    );
    let mut all_ok = true;
    for &d in devices {
        for (dtype, tol) in [Dtype::F32, Dtype::F16, Dtype::BF16].into_iter().zip(tols) {
            if d != Device::Cpu && !brotensor::supports_dtype(d, dtype)? {
                continue;
            }
            if d == Device::Cpu && dtype != Dtype::F32 {
                continue; // the CPU is the FP32 reference
            }
            // Warm up (kernel compilation), then time a second run.
            work(d, dtype)?;
            brotensor::sync(d)?;
            let t0 = Instant::now();
            let got = work(d, dtype)?.to_vec::<f32>()?; // reading back synchronizes
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let err = got
                .iter()
                .zip(reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let ok = err <= tol;
            all_ok &= ok;
            println!(
                "{:<12} {:<6} {:>10.1} {:>12.2e}  {}",
                d.to_string(),
                dtype.to_string(),
                ms,
                err,
                if ok { "ok" } else { "FAILED" }
            );
        }
    }
    Ok(all_ok)
}

fn main() -> brotensor::Result<()> {
    if let Err(e) = brotensor::init() {
        eprintln!("warning: {e}");
    }
    println!("brotensor tour: {} elements per tensor", N);
    println!("default device: {}", brotensor::default_device());
    println!("devices:");
    let devices = brotensor::available_devices();
    for &d in &devices {
        let dtypes: Vec<String> = [Dtype::F32, Dtype::F16, Dtype::BF16]
            .into_iter()
            .filter(|&t| brotensor::supports_dtype(d, t).unwrap_or(false))
            .map(|t| t.to_string())
            .collect();
        let mut kind = if brotensor::is_software(d)? {
            ", software".to_string()
        } else {
            String::new()
        };
        let cores: Vec<String> = [Dtype::F16, Dtype::BF16]
            .into_iter()
            .filter(|&t| brotensor::matmul_uses_matrix_units(d, t).unwrap_or(false))
            .map(|t| t.to_string())
            .collect();
        if !cores.is_empty() {
            kind += &format!(", tensor-core matmul in {}", cores.join("/"));
        }
        println!(
            "  {:<60} computes {}{kind}",
            brotensor::device_name(d)?,
            dtypes.join("/")
        );
    }

    let x: Vec<f32> = (0..N)
        .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let w: Vec<f32> = (0..N)
        .map(|i| ((i * 104_729) % 1000) as f32 / 1000.0)
        .collect();
    let reference = step(Device::Cpu, &x, &w, Dtype::F32)?.to_vec::<f32>()?;
    println!();
    println!("element-wise update of a (4096, 4096) tensor:");
    let mut ok = compare(&devices, &reference, [1e-5, 2e-3, 1e-2], |d, t| {
        step(d, &x, &w, t)
    })?;

    // Column sums of softmaxes are sums of 512 probabilities: values near 1, up to ~10.
    let reference = views_step(Device::Cpu, &x, Dtype::F32)?.to_vec::<f32>()?;
    println!();
    println!(
        "N-d views: permute (no copy) + broadcast add + softmax(2) + sum(1) of (64, 512, 512):"
    );
    ok &= compare(&devices, &reference, [1e-5, 1e-2, 5e-2], |d, t| {
        views_step(d, &x, t)
    })?;

    let table: Vec<f32> = (0..1000 * 512usize)
        .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let ids: Vec<i32> = (0..256usize).map(|i| (i * 37 % 1000) as i32).collect();
    let reference = attention_step(Device::Cpu, &table, &ids, Dtype::F32)?.to_vec::<f32>()?;
    println!();
    println!(
        "decoder attention: embedding lookup + RoPE + causal GQA flash attention, 256 tokens:"
    );
    ok &= compare(&devices, &reference, [1e-4, 2e-2, 5e-2], |d, t| {
        attention_step(d, &table, &ids, t)
    })?;
    let failed = !ok;
    if failed {
        eprintln!("a device disagreed with the CPU reference");
        std::process::exit(1);
    }
    Ok(())
}
