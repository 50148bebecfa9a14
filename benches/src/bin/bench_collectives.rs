//! All-reduce bandwidth and tensor-parallel SmolLM2 decode on the CPU.
//!
//! - All-reduce (sum, F32) of 4 KiB to 256 MiB per rank on the thread engine (2 ranks) and,
//!   built with `--features distributed`, on MPI (2 processes under `mpirun`, which this
//!   binary starts itself): time per call, algorithm bandwidth (bytes / time) and bus
//!   bandwidth (nccl-tests: algbw * 2 (n - 1) / n), beside a host copy of the same bytes
//!   (the faster of one thread and the pool).
//! - SmolLM2 decode tokens/s on one rank and split over 2 ranks (threads; MPI processes).
//!
//! `cargo run --release -p brotensor-benches --features distributed --bin bench_collectives`

use std::time::{Duration, Instant};

use brotensor::distributed::{thread_group, Communicator, ReduceOp};
use brotensor::{Device, Dtype, Tensor};
use brotensor_models::files;
use brotensor_models::smollm2::{Shard, SmolLm2};
use rayon::prelude::*;

const SIZES_KIB: [usize; 9] = [4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144];
const DECODE_STEPS: usize = 48;

/// Best seconds per call over rounds of at least 0.2 s (or 3 calls), 3 rounds.
fn best(mut f: impl FnMut()) -> f64 {
    f();
    (0..3)
        .map(|_| {
            let start = Instant::now();
            let mut calls = 0;
            while calls < 3 || start.elapsed() < Duration::from_millis(200) {
                f();
                calls += 1;
            }
            start.elapsed().as_secs_f64() / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Seconds per all-reduce of `kib` KiB on `comm` (every rank calls this together).
fn all_reduce_secs(comm: &dyn Communicator, kib: usize) -> f64 {
    let n = kib * 256;
    let mut t = Tensor::from_slice_on(Device::Cpu, &vec![1.0f32; n], 1, n).unwrap();
    // Rounds must stay in step across ranks: a fixed call count, agreed by timing rank 0.
    let mut once = || comm.all_reduce(&mut t, ReduceOp::Sum).unwrap();
    once();
    let start = Instant::now();
    once();
    let mut probe =
        Tensor::from_slice_on(Device::Cpu, &[start.elapsed().as_secs_f64() as f32], 1, 1).unwrap();
    comm.broadcast(&mut probe, 0).unwrap();
    let per = f64::from(probe.to_vec::<f32>().unwrap()[0]).max(1e-7);
    let calls = ((0.2 / per) as usize).clamp(3, 10_000);
    (0..3)
        .map(|_| {
            comm.barrier().unwrap();
            let start = Instant::now();
            for _ in 0..calls {
                once();
            }
            start.elapsed().as_secs_f64() / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn copy_secs(kib: usize) -> f64 {
    let n = kib * 256;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let chunk = n.div_ceil(rayon::current_num_threads()).max(1024);
    let parallel = best(|| {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    // Small copies are faster on one thread than handed to the pool: the better of the two.
    parallel.min(best(|| dst.copy_from_slice(&src)))
}

fn row(engine: &str, world: usize, kib: usize, secs: f64, copy: f64) {
    let bytes = (kib * 1024) as f64;
    let algbw = bytes / secs / 1e9;
    let busbw = algbw * 2.0 * (world as f64 - 1.0) / world as f64;
    let copy_bw = bytes / copy / 1e9;
    println!(
        "| {engine} | {world} | {} | {:.1} | {algbw:.2} | {busbw:.2} | {copy_bw:.2} | {:.2} |",
        if kib >= 1024 {
            format!("{} MiB", kib / 1024)
        } else {
            format!("{kib} KiB")
        },
        secs * 1e6,
        busbw / copy_bw
    );
}

/// Decode tokens/s of SmolLM2 on `comm`'s shard (rank 0 of 1 without one).
fn decode_rate(comm: Option<&dyn Communicator>) -> f64 {
    let shard = comm.map_or(Shard::WHOLE, |c| Shard {
        rank: c.rank(),
        world: c.world_size(),
    });
    let model =
        SmolLm2::load_shard(&files::smollm2_gguf(), Device::Cpu, Dtype::F32, shard).unwrap();
    let prompt = model.encode("The capital of France is").unwrap();
    let mut best = f64::INFINITY;
    for _ in 0..2 {
        let mut cache = model.new_cache(prompt.len() + DECODE_STEPS).unwrap();
        let run = |ids: &[u32], cache: &mut _| match comm {
            Some(c) => model.forward_sharded(ids, cache, c).unwrap(),
            None => model.forward(ids, cache).unwrap(),
        };
        run(&prompt, &mut cache);
        let start = Instant::now();
        for i in 0..DECODE_STEPS {
            run(&[(100 + i) as u32], &mut cache);
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    DECODE_STEPS as f64 / best
}

#[cfg(feature = "distributed")]
fn mpi_child() {
    use brotensor::distributed::MpiComm;
    let comm = MpiComm::init().unwrap();
    for kib in SIZES_KIB {
        let secs = all_reduce_secs(&comm, kib);
        if comm.rank() == 0 {
            println!("mpi-allreduce {kib} {secs}");
        }
    }
    let rate = decode_rate(Some(&comm));
    if comm.rank() == 0 {
        println!("mpi-decode {rate}");
    }
}

/// Runs this binary as 2 MPI ranks and returns what rank 0 printed.
#[cfg(feature = "distributed")]
fn run_mpi() -> String {
    let out = std::process::Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(std::env::current_exe().unwrap())
        .env("OMPI_MCA_btl", "self,vader")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .expect("mpirun (Open MPI) is needed for the MPI rows");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn main() {
    #[cfg(feature = "distributed")]
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        mpi_child();
        return;
    }
    files::ensure_models().unwrap();
    println!(
        "CPU threads: {}; F32 sum; bus bandwidth as nccl-tests defines it; copy: a parallel \
         host copy of the same bytes",
        rayon::current_num_threads()
    );
    println!();
    println!("| engine | ranks | size per rank | us per call | algbw GB/s | busbw GB/s | copy GB/s | busbw / copy |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let world = 2;
    let mut thread_secs = Vec::new();
    for kib in SIZES_KIB {
        let ranks = thread_group(world).unwrap();
        let secs = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .into_iter()
                .map(|c| s.spawn(move || all_reduce_secs(&c, kib)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .fold(0.0, f64::max)
        });
        thread_secs.push(secs);
        row("threads", world, kib, secs, copy_secs(kib));
    }
    #[cfg(feature = "distributed")]
    let mpi = run_mpi();
    #[cfg(feature = "distributed")]
    for line in mpi.lines().filter_map(|l| l.strip_prefix("mpi-allreduce ")) {
        let mut it = line.split_whitespace();
        let kib: usize = it.next().unwrap().parse().unwrap();
        let secs: f64 = it.next().unwrap().parse().unwrap();
        row("mpi", world, kib, secs, copy_secs(kib));
    }
    println!();
    println!("| SmolLM2-135M Q4_1 decode | tokens/s |");
    println!("|---|---:|");
    // One rank and two thread ranks take turns, round by round (this VM's bandwidth drifts).
    let (mut one, mut two) = (0f64, 0f64);
    for _ in 0..3 {
        one = one.max(decode_rate(None));
        let ranks = thread_group(2).unwrap();
        let rate = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .into_iter()
                .map(|c| s.spawn(move || decode_rate(Some(&c))))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .fold(f64::INFINITY, f64::min)
        });
        two = two.max(rate);
    }
    let rate = two;
    println!(
        "| 1 rank ({} CPU threads) | {one:.1} |",
        rayon::current_num_threads()
    );
    println!("| 2 ranks, threads (sharing the CPU pool) | {rate:.1} |");
    #[cfg(feature = "distributed")]
    for line in mpi.lines().filter_map(|l| l.strip_prefix("mpi-decode ")) {
        let rate: f64 = line.trim().parse().unwrap();
        println!("| 2 ranks, MPI processes (1 CPU thread each) | {rate:.1} |");
    }
}
