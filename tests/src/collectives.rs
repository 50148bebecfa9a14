//! The collectives' conformance suite: one set of checks that every [`Communicator`] engine
//! passes (the thread engine in the integration tests, MPI under `mpirun`). Every rank of a
//! world runs [`conformance`] at the same time; each builds every rank's input from the
//! rank and a seed, so it knows the float64 answer without asking the others.

use std::time::{Duration, Instant};

use brotensor::distributed::{Communicator, ReduceOp};
use brotensor::{Device, Dtype, Error, Tensor};

use crate::{check_close, read_f32, round_through, tolerance, SplitMix64};

type Check = std::result::Result<(), String>;

/// Rank `rank`'s input of `n` elements for case `seed`, as stored in `dtype`. Values differ
/// in sign and size across ranks, so a sum that drops or repeats a rank fails.
fn input(seed: u64, rank: usize, n: usize, dtype: Dtype) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed * 1000 + rank as u64);
    let scale = 1.0 + rank as f32;
    round_through(dtype, &rng.uniform(n, -scale, scale))
}

fn upload(device: Device, data: &[f32], dims: &[usize], dtype: Dtype) -> Result<Tensor, String> {
    let t = Tensor::from_slice_nd_on(device, data, dims).map_err(|e| e.to_string())?;
    t.to_dtype(dtype).map_err(|e| e.to_string())
}

fn read(t: &Tensor) -> Result<Vec<f32>, String> {
    read_f32(t).map_err(|e| e.to_string())
}

fn close(tag: &str, want: &[f64], got: &[f32], dtype: Dtype) -> Check {
    let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    check_close(&want, got, want.len(), tolerance(dtype)).map_err(|e| format!("{tag}: {e}"))
}

/// The float64 reduction of every rank's input.
fn reduced(op: ReduceOp, inputs: &[Vec<f32>]) -> Vec<f64> {
    let n = inputs[0].len();
    (0..n)
        .map(|i| {
            let vals = inputs.iter().map(|x| x[i] as f64);
            match op {
                ReduceOp::Sum => vals.sum(),
                ReduceOp::Mean => vals.sum::<f64>() / inputs.len() as f64,
                ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            }
        })
        .collect()
}

fn dtypes(device: Device) -> Vec<Dtype> {
    [Dtype::F32, Dtype::F16, Dtype::BF16]
        .into_iter()
        .filter(|&d| brotensor::supports_dtype(device, d).unwrap_or(false))
        .collect()
}

fn expect_collective_error(tag: &str, got: brotensor::Result<impl Sized>, says: &str) -> Check {
    match got {
        Err(Error::Collective { reason, .. }) if reason.contains(says) => Ok(()),
        Err(e) => Err(format!("{tag}: wrong error: {e}")),
        Ok(_) => Err(format!("{tag}: succeeded; an error was expected")),
    }
}

fn all_reduce_cases(comm: &dyn Communicator, device: Device) -> Check {
    let (rank, world) = (comm.rank(), comm.world_size());
    let shapes: [&[usize]; 5] = [&[0], &[1], &[7, 13], &[3, 5, 4], &[100_003]];
    for dtype in dtypes(device) {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
            for (case, dims) in shapes.iter().enumerate() {
                let n: usize = dims.iter().product();
                let seed = 10 + case as u64;
                let inputs: Vec<Vec<f32>> = (0..world).map(|r| input(seed, r, n, dtype)).collect();
                let mut t = upload(device, &inputs[rank], dims, dtype)?;
                let id = t.allocation_id();
                comm.all_reduce(&mut t, op).map_err(|e| e.to_string())?;
                let tag = format!("all_reduce {op:?} {dims:?} {dtype} on {device}");
                if t.dims() != *dims || t.dtype() != dtype || t.allocation_id() != id {
                    return Err(format!("{tag}: not written in place ({:?})", t.dims()));
                }
                close(&tag, &reduced(op, &inputs), &read(&t)?, dtype)?;
            }
        }
    }
    Ok(())
}

fn gather_scatter_cases(comm: &dyn Communicator, device: Device) -> Check {
    let (rank, world) = (comm.rank(), comm.world_size());
    for dtype in dtypes(device) {
        for (case, dims) in [&[5usize, 3][..], &[0, 3], &[], &[2, 1, 4]]
            .iter()
            .enumerate()
        {
            let n: usize = dims.iter().product();
            let inputs: Vec<Vec<f32>> = (0..world)
                .map(|r| input(30 + case as u64, r, n, dtype))
                .collect();
            let t = upload(device, &inputs[rank], dims, dtype)?;
            let g = comm.all_gather(&t).map_err(|e| e.to_string())?;
            let tag = format!("all_gather {dims:?} {dtype} on {device}");
            let mut want_dims = if dims.is_empty() {
                vec![1]
            } else {
                dims.to_vec()
            };
            want_dims[0] *= world;
            if g.dims() != want_dims || g.device() != device || g.dtype() != dtype {
                return Err(format!(
                    "{tag}: got {:?} {} on {}",
                    g.dims(),
                    g.dtype(),
                    g.device()
                ));
            }
            let want: Vec<f64> = inputs.iter().flatten().map(|&v| v as f64).collect();
            close(&tag, &want, &read(&g)?, dtype)?;
        }
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
            let dims = [world * 3, 4];
            let inputs: Vec<Vec<f32>> = (0..world)
                .map(|r| input(40, r, dims[0] * 4, dtype))
                .collect();
            let t = upload(device, &inputs[rank], &dims, dtype)?;
            let s = comm.reduce_scatter(&t, op).map_err(|e| e.to_string())?;
            let tag = format!("reduce_scatter {op:?} {dims:?} {dtype} on {device}");
            if s.dims() != [3, 4] {
                return Err(format!("{tag}: dims {:?}", s.dims()));
            }
            let all = reduced(op, &inputs);
            close(&tag, &all[rank * 12..(rank + 1) * 12], &read(&s)?, dtype)?;
        }
        let odd = upload(
            device,
            &input(41, rank, (world * 3 + 1) * 2, dtype),
            &[world * 3 + 1, 2],
            dtype,
        )?;
        match comm.reduce_scatter(&odd, ReduceOp::Sum) {
            Err(Error::Shape { reason, .. }) if reason.contains("divisible") || world == 1 => {}
            Ok(_) if world == 1 => {}
            other => return Err(format!("reduce_scatter of an uneven first axis: {other:?}")),
        }
    }
    Ok(())
}

fn broadcast_and_p2p_cases(comm: &dyn Communicator, device: Device) -> Check {
    let (rank, world) = (comm.rank(), comm.world_size());
    for dtype in dtypes(device) {
        for root in [0, world - 1] {
            let dims = [4, 33];
            let inputs: Vec<Vec<f32>> = (0..world)
                .map(|r| input(50 + root as u64, r, 132, dtype))
                .collect();
            let mut t = upload(device, &inputs[rank], &dims, dtype)?;
            let id = t.allocation_id();
            comm.broadcast(&mut t, root).map_err(|e| e.to_string())?;
            let tag = format!("broadcast root {root} {dtype} on {device}");
            if t.allocation_id() != id {
                return Err(format!("{tag}: not in place"));
            }
            let want: Vec<f64> = inputs[root].iter().map(|&v| v as f64).collect();
            close(&tag, &want, &read(&t)?, dtype)?;
        }
        // Rank 0 sends each rank its own tensor; each sends it back doubled.
        let dims = [3, 7];
        let letter = |r: usize| input(60 + r as u64, 0, 21, dtype);
        if rank == 0 {
            for peer in 1..world {
                let t = upload(device, &letter(peer), &dims, dtype)?;
                comm.send(&t, peer).map_err(|e| e.to_string())?;
            }
            for peer in 1..world {
                let mut back =
                    Tensor::zeros_nd_on(device, &dims, dtype).map_err(|e| e.to_string())?;
                comm.recv(&mut back, peer).map_err(|e| e.to_string())?;
                let want: Vec<f64> = letter(peer).iter().map(|&v| 2.0 * v as f64).collect();
                close(
                    &format!("recv from {peer} {dtype} on {device}"),
                    &want,
                    &read(&back)?,
                    dtype,
                )?;
            }
        } else {
            let mut t = Tensor::zeros_nd_on(device, &dims, dtype).map_err(|e| e.to_string())?;
            comm.recv(&mut t, 0).map_err(|e| e.to_string())?;
            let want: Vec<f64> = letter(rank).iter().map(|&v| v as f64).collect();
            close(
                &format!("recv on rank {rank} {dtype} on {device}"),
                &want,
                &read(&t)?,
                dtype,
            )?;
            let mut doubled = t.try_clone().map_err(|e| e.to_string())?;
            brotensor::ops::scale_inplace(&mut doubled, 2.0).map_err(|e| e.to_string())?;
            comm.send(&doubled, 0).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Calls on which the ranks disagree: every rank gets an error at once (well inside the
/// timeout), and the communicator works afterwards.
fn disagreement_cases(comm: &dyn Communicator, device: Device, timeout: Duration) -> Check {
    let (rank, world) = (comm.rank(), comm.world_size());
    if world == 1 {
        return Ok(());
    }
    let start = Instant::now();
    let cols = if rank == 0 { 3 } else { 2 };
    let mut t = Tensor::zeros_on(device, 2, cols, Dtype::F32).map_err(|e| e.to_string())?;
    expect_collective_error(
        "shapes differ",
        comm.all_reduce(&mut t, ReduceOp::Sum),
        "disagree",
    )?;
    if rank == 0 {
        expect_collective_error(
            "ops differ",
            comm.all_reduce(&mut t, ReduceOp::Sum),
            "disagree",
        )?;
    } else {
        expect_collective_error("ops differ", comm.broadcast(&mut t, 0), "disagree")?;
    }
    // One rank passes an integer tensor: it gets its own dtype error, the others fail too.
    if rank == world - 1 {
        let mut bad = Tensor::zeros_on(device, 2, 2, Dtype::I32).map_err(|e| e.to_string())?;
        match comm.all_reduce(&mut bad, ReduceOp::Sum) {
            Err(Error::Dtype { .. }) => {}
            other => return Err(format!("integer all_reduce: {other:?}")),
        }
    } else {
        let mut ok = Tensor::zeros_on(device, 2, 2, Dtype::F32).map_err(|e| e.to_string())?;
        expect_collective_error(
            "a rank refused",
            comm.all_reduce(&mut ok, ReduceOp::Sum),
            "refused",
        )?;
    }
    // A receive into the wrong shape fails on both sides.
    if rank == 0 {
        let t = Tensor::zeros_on(device, 2, 5, Dtype::F32).map_err(|e| e.to_string())?;
        expect_collective_error("send to a wrong shape", comm.send(&t, 1), "")?;
    } else if rank == 1 {
        let mut t = Tensor::zeros_on(device, 5, 2, Dtype::F32).map_err(|e| e.to_string())?;
        expect_collective_error(
            "recv into a wrong shape",
            comm.recv(&mut t, 0),
            "receives into",
        )?;
    }
    if start.elapsed() >= timeout / 2 {
        return Err(format!(
            "disagreements took {:?}, near the timeout",
            start.elapsed()
        ));
    }
    // Still usable.
    let mut t = upload(device, &[rank as f32 + 1.0], &[1], Dtype::F32)?;
    comm.all_reduce(&mut t, ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    let want = (world * (world + 1) / 2) as f32;
    if read(&t)? != [want] {
        return Err(format!("after the errors: {:?}, want {want}", read(&t)?));
    }
    comm.barrier().map_err(|e| e.to_string())
}

/// Runs every conformance check on this rank with tensors on `device` (every rank of the
/// world calls it at the same time); `timeout` is the communicator's. Returns the first
/// failure, naming the case.
pub fn conformance(comm: &dyn Communicator, device: Device, timeout: Duration) -> Check {
    let tag = |e: String| {
        format!(
            "{} rank {} of {}: {e}",
            comm.engine(),
            comm.rank(),
            comm.world_size()
        )
    };
    all_reduce_cases(comm, device).map_err(tag)?;
    gather_scatter_cases(comm, device).map_err(tag)?;
    broadcast_and_p2p_cases(comm, device).map_err(tag)?;
    disagreement_cases(comm, device, timeout).map_err(tag)
}
