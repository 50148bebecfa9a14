//! The collectives on the thread engine (ranks as threads), on every device and dtype, and
//! device discovery by kind.

use std::time::{Duration, Instant};

use brotensor::distributed::{thread_group, Communicator, ReduceOp, ThreadComm};
use brotensor::{Device, DeviceKind, Dtype, Error, Tensor};
use brotensor_tests::collectives::conformance;
use brotensor_tests::gpu_devices;

/// Runs `f` on every rank of a thread world of `world`, each on its own thread; returns the
/// ranks' results in rank order.
fn on_ranks<T: Send>(
    world: usize,
    timeout: Duration,
    f: impl Fn(ThreadComm) -> T + Sync,
) -> Vec<T> {
    let ranks = thread_group(world).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(c.with_timeout(timeout)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn conformance_on_threads_every_device() {
    let timeout = Duration::from_secs(60);
    let devices: Vec<Device> = std::iter::once(Device::Cpu).chain(gpu_devices()).collect();
    for device in devices {
        for world in [1, 2, 3] {
            for (rank, result) in on_ranks(world, timeout, |c| conformance(&c, device, timeout))
                .into_iter()
                .enumerate()
            {
                if let Err(e) = result {
                    panic!("{device}, world {world}, rank {rank}: {e}");
                }
            }
        }
    }
}

#[test]
fn a_missing_rank_times_out_and_poisons_the_group() {
    let timeout = Duration::from_millis(300);
    let results = on_ranks(2, timeout, |c| {
        if c.rank() == 1 {
            // Never joins; waits until rank 0 gave up, then finds the group unusable.
            std::thread::sleep(Duration::from_millis(600));
            return vec![c.barrier().map(|_| Duration::ZERO)];
        }
        let mut t = Tensor::zeros_on(Device::Cpu, 1, 4, Dtype::F32).unwrap();
        let start = Instant::now();
        let first = c.all_reduce(&mut t, ReduceOp::Sum).map(|_| start.elapsed());
        let waited = start.elapsed();
        assert!(
            waited >= timeout && waited < timeout * 10,
            "gave up after {waited:?}"
        );
        vec![first, c.barrier().map(|_| Duration::ZERO)]
    });
    for (rank, calls) in results.iter().enumerate() {
        for r in calls {
            match r {
                Err(Error::Collective { reason, .. }) => assert!(
                    reason.contains("waited") && reason.contains("unusable"),
                    "rank {rank}: {reason}"
                ),
                other => panic!("rank {rank}: expected a timeout error, got {other:?}"),
            }
        }
    }
}

#[test]
fn a_send_nobody_receives_times_out() {
    let timeout = Duration::from_millis(200);
    let results = on_ranks(2, timeout, |c| {
        let t = Tensor::zeros_on(Device::Cpu, 1, 4, Dtype::F32).unwrap();
        if c.rank() == 0 {
            c.send(&t, 1).err()
        } else {
            None
        }
    });
    match &results[0] {
        Some(Error::Collective { reason, .. }) => assert!(reason.contains("did not receive")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn argument_errors_name_the_operand() {
    let ranks = thread_group(1).unwrap();
    let c = &ranks[0];
    let mut t = Tensor::zeros_on(Device::Cpu, 2, 2, Dtype::F32).unwrap();
    let e = c.broadcast(&mut t, 1).unwrap_err().to_string();
    assert!(e.contains("root 1 is not a rank"), "{e}");
    let e = c.send(&t, 0).unwrap_err().to_string();
    assert!(e.contains("itself"), "{e}");
    let e = c.send(&t, 5).unwrap_err().to_string();
    assert!(e.contains("peer 5"), "{e}");
    let view = t.narrow(0, 0, 1).unwrap();
    let mut view = view;
    let e = c
        .all_reduce(&mut view, ReduceOp::Sum)
        .unwrap_err()
        .to_string();
    assert!(e.contains("view"), "{e}");
    assert!(thread_group(0).is_err());
}

#[test]
fn device_count_by_kind() {
    let gpus = gpu_devices();
    assert_eq!(brotensor::device_count(DeviceKind::Cpu), 1);
    for kind in [DeviceKind::Cuda, DeviceKind::Wgpu] {
        let n = brotensor::device_count(kind);
        assert_eq!(n, gpus.iter().filter(|d| d.kind() == kind).count());
        // Ordinals are dense: kind:0 .. kind:n-1 all exist.
        for i in 0..n {
            let d = match kind {
                DeviceKind::Cuda => Device::Cuda(i),
                _ => Device::Wgpu(i),
            };
            assert!(brotensor::is_available(d), "{d}");
        }
    }
}

/// Copies between every pair of devices (through the host between runtimes) keep the
/// values, dtype and dims.
#[test]
fn copies_between_every_pair_of_devices() {
    let devices: Vec<Device> = std::iter::once(Device::Cpu).chain(gpu_devices()).collect();
    let data: Vec<f32> = (0..24).map(|i| i as f32 * 0.5 - 3.0).collect();
    for &a in &devices {
        for &b in &devices {
            let x = Tensor::from_slice_nd_on(a, &data, &[2, 3, 4]).unwrap();
            let y = x.to(b).unwrap();
            assert_eq!((y.device(), y.dims()), (b, &[2usize, 3, 4][..]));
            assert_eq!(
                y.to(a).unwrap().to_vec::<f32>().unwrap(),
                data,
                "{a} -> {b}"
            );
        }
    }
}

/// NCCL on the first CUDA device as a world of one rank (NCCL refuses two ranks on one GPU):
/// loading, init, the call exchange, dtype handling and stream ordering, through the whole
/// conformance suite. Skips, saying so, without a CUDA device or the NCCL library, unless
/// `BROTENSOR_REQUIRE_GPU=cuda`.
#[test]
fn nccl_world_of_one() {
    use brotensor::distributed::{NcclComm, NcclId};
    let Some(device) = gpu_devices()
        .into_iter()
        .find(|d| d.kind() == DeviceKind::Cuda)
    else {
        eprintln!("nccl_world_of_one: SKIPPED (no CUDA device)");
        return;
    };
    let id = match NcclId::new() {
        Ok(id) => id,
        Err(e) if std::env::var("BROTENSOR_REQUIRE_GPU").as_deref() != Ok("cuda") => {
            eprintln!("nccl_world_of_one: SKIPPED ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let comm = NcclComm::from_rank(device, 0, 1, &id).unwrap();
    let timeout = Duration::from_secs(60);
    conformance(&comm, device, timeout).unwrap();
    // A rank beyond the world is refused before NCCL sees it.
    assert!(NcclComm::from_rank(device, 1, 1, &id).is_err());
}
