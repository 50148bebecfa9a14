//! Tensor-parallel SmolLM2 over MPI on the CPU: run by cargo, it launches itself under
//! `mpirun -np 2`; each process loads its shard and generates the float64 reference's 16
//! greedy tokens with the other, and prints its decode speed.

use std::time::{Duration, Instant};

use brotensor::distributed::{Communicator, MpiComm};
use brotensor::{Device, Dtype};
use brotensor_models::files;
use brotensor_models::smollm2::{Sampling, Shard, SmolLm2};
use brotensor_tests::{launched_by_mpirun, mpirun_self};

mod common;
use common::json;

fn rank_main() -> anyhow::Result<String> {
    let comm = MpiComm::init()?.with_timeout(Duration::from_secs(120));
    let reference = json("smollm2.json");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let (prompt, greedy) = (ids(&reference["ids"]), ids(&reference["greedy"]));
    let shard = Shard {
        rank: comm.rank(),
        world: comm.world_size(),
    };
    let model = SmolLm2::load_shard(&files::smollm2_gguf(), Device::Cpu, Dtype::F32, shard)?;
    let start = Instant::now();
    let tokens = model.generate_sharded(&prompt, greedy.len(), &Sampling::greedy(), &comm)?;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(tokens == greedy, "tokens {tokens:?}, want {greedy:?}");
    Ok(format!(
        "the reference's {} greedy tokens ({:.1} tokens/s with the prefill)",
        tokens.len(),
        tokens.len() as f64 / secs
    ))
}

fn main() {
    if launched_by_mpirun() {
        let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default();
        match rank_main() {
            Ok(msg) => println!("rank {rank}: {msg}"),
            Err(e) => {
                println!("rank {rank}: FAILED: {e:#}");
                std::process::exit(1);
            }
        }
        return;
    }
    let text = mpirun_self(2, Duration::from_secs(600));
    for r in 0..2 {
        assert!(
            text.contains(&format!("rank {r}: the reference's 16 greedy tokens")),
            "rank {r} did not pass:\n{text}"
        );
    }
    print!("{text}");
}
