//! Tensor-parallel SmolLM2 on the thread engine: the model split over 2 and 3 ranks (threads
//! of this process, each holding its KV groups and FFN slice) gives the float64 reference's
//! 16 greedy tokens, as one rank does, and logits within the same tolerance; on every GPU
//! device too (2 ranks, the first tokens only on a software GPU, as in models.rs).

use std::time::Duration;

use brotensor::distributed::{thread_group, Communicator};
use brotensor::{Device, Dtype};
use brotensor_models::files;
use brotensor_models::smollm2::{Sampling, Shard, SmolLm2};

mod common;
use common::{devices, f32_fixture, json};

/// As in models.rs: the prompt's logits within this fraction of the largest logit.
const LOGIT_TOL: f64 = 5e-4;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn sharded_smollm2_gives_the_reference_tokens_on_every_world_size() {
    let reference = json("smollm2.json");
    let prompt = ids(&reference["ids"]);
    let greedy = ids(&reference["greedy"]);
    let want = f32_fixture("smollm2_logits.bin");
    let scale = want.iter().fold(0.0f64, |m, x| m.max(f64::from(x.abs())));
    let runs = [2, 3]
        .map(|w| (Device::Cpu, w))
        .into_iter()
        .chain(devices().into_iter().filter(|d| d.is_gpu()).map(|d| (d, 2)));
    for (device, world) in runs {
        let steps = if brotensor::is_software(device).unwrap() {
            4
        } else {
            greedy.len()
        };
        let ranks = thread_group(world).unwrap();
        let results: Vec<(Vec<f32>, Vec<u32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .into_iter()
                .map(|comm| {
                    let prompt = &prompt;
                    s.spawn(move || {
                        let comm = comm.with_timeout(Duration::from_secs(120));
                        let shard = Shard {
                            rank: comm.rank(),
                            world: comm.world_size(),
                        };
                        let model =
                            SmolLm2::load_shard(&files::smollm2_gguf(), device, Dtype::F32, shard)
                                .unwrap();
                        let mut cache = model.new_cache(prompt.len()).unwrap();
                        let logits = model
                            .forward_sharded(prompt, &mut cache, &comm)
                            .unwrap()
                            .to_vec::<f32>()
                            .unwrap();
                        let tokens = model
                            .generate_sharded(prompt, steps, &Sampling::greedy(), &comm)
                            .unwrap();
                        (logits, tokens)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, (logits, tokens)) in results.iter().enumerate() {
            let err = logits
                .iter()
                .zip(&want)
                .map(|(g, w)| f64::from(*g - *w).abs())
                .fold(0.0, f64::max);
            eprintln!(
                "{device} world {world} rank {rank}: largest logit error {err:.3e} of {scale:.2}"
            );
            assert!(
                err <= LOGIT_TOL * scale,
                "{device} world {world} rank {rank}: {err}"
            );
            assert_eq!(
                tokens,
                &greedy[..steps],
                "{device} world {world} rank {rank}: greedy tokens"
            );
        }
    }
}

#[test]
fn a_shard_refuses_bad_worlds_and_the_plain_forward() {
    let path = files::smollm2_gguf();
    // 3 KV heads: at most 3 ranks.
    let e = SmolLm2::load_shard(&path, Device::Cpu, Dtype::F32, Shard { rank: 0, world: 4 })
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("1 to 3 ranks"), "{e}");
    let e = SmolLm2::load_shard(&path, Device::Cpu, Dtype::F32, Shard { rank: 2, world: 2 })
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("rank 2 of 2"), "{e}");
    let model =
        SmolLm2::load_shard(&path, Device::Cpu, Dtype::F32, Shard { rank: 1, world: 2 }).unwrap();
    let mut cache = model.new_cache(4).unwrap();
    let e = model
        .forward(&[1, 2], &mut cache)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("forward_sharded"), "{e}");
    // A communicator of another world is refused.
    let ranks = thread_group(1).unwrap();
    let e = model
        .forward_sharded(&[1, 2], &mut cache, &ranks[0])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("rank 0 of 1"), "{e}");
}
