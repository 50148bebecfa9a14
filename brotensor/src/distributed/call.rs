//! What each rank asks for, exchanged before every collective so that ranks which disagree
//! (another op, shape, dtype or root) get an error instead of a hang or a wrong result, and
//! the host staging the engines without device memory share.

use half::{bf16, f16};

use super::ReduceOp;
#[cfg(any(feature = "distributed", feature = "cuda"))]
use crate::MAX_RANK;
use crate::{Device, Dtype, Error, Result, Tensor};

/// Which collective a rank called, with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce(ReduceOp),
    AllGather,
    ReduceScatter(ReduceOp),
    Broadcast { root: usize },
    Barrier,
    Send { from: usize, to: usize },
}

/// One rank's call: the collective and the tensor it passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub kind: Kind,
    pub dtype: Dtype,
    pub dims: Vec<usize>,
}

/// Words of [`Call::encode`].
#[cfg(any(feature = "distributed", feature = "cuda"))]
pub(crate) const CALL_WORDS: usize = 4 + MAX_RANK;

#[cfg(any(feature = "distributed", feature = "cuda"))]
fn reduce_code(op: ReduceOp) -> u64 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
    }
}

#[cfg(any(feature = "distributed", feature = "cuda"))]
fn reduce_from(code: u64) -> Option<ReduceOp> {
    Some(match code {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Mean,
        2 => ReduceOp::Max,
        _ => return None,
    })
}

const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];

impl Call {
    /// The call `kind` on `tensor`, after the checks every engine shares: a float dtype the
    /// collectives move.
    pub fn new(op: &'static str, kind: Kind, tensor: &Tensor) -> Result<Call> {
        let dtype = tensor.dtype();
        if !DTYPES.contains(&dtype) {
            return Err(Error::Dtype {
                op,
                operand: "tensor",
                expected: "collectives move F32, F16 or BF16 tensors".into(),
                found: dtype,
            });
        }
        Ok(Call {
            kind,
            dtype,
            dims: tensor.dims().to_vec(),
        })
    }

    /// A fixed-size form for engines that exchange plain words (MPI).
    #[cfg(any(feature = "distributed", feature = "cuda"))]
    pub fn encode(&self) -> [u64; CALL_WORDS] {
        let (code, a, b) = match self.kind {
            Kind::AllReduce(op) => (1, reduce_code(op), 0),
            Kind::AllGather => (2, 0, 0),
            Kind::ReduceScatter(op) => (3, reduce_code(op), 0),
            Kind::Broadcast { root } => (4, root as u64, 0),
            Kind::Barrier => (5, 0, 0),
            Kind::Send { from, to } => (6, from as u64, to as u64),
        };
        let dtype = DTYPES.iter().position(|&d| d == self.dtype).unwrap_or(0) as u64;
        let mut w = [0u64; CALL_WORDS];
        w[0] = code;
        w[1] = a;
        w[2] = b;
        w[3] = dtype | ((self.dims.len() as u64) << 8);
        for (slot, &d) in w[4..].iter_mut().zip(&self.dims) {
            *slot = d as u64;
        }
        w
    }

    /// The call [`Call::encode`] wrote; `None` for words no rank of this build writes.
    #[cfg(any(feature = "distributed", feature = "cuda"))]
    pub fn decode(w: &[u64; CALL_WORDS]) -> Option<Call> {
        let (a, b) = (usize::try_from(w[1]).ok()?, usize::try_from(w[2]).ok()?);
        let kind = match w[0] {
            1 => Kind::AllReduce(reduce_from(w[1])?),
            2 => Kind::AllGather,
            3 => Kind::ReduceScatter(reduce_from(w[1])?),
            4 => Kind::Broadcast { root: a },
            5 => Kind::Barrier,
            6 => Kind::Send { from: a, to: b },
            _ => return None,
        };
        let dtype = *DTYPES.get((w[3] & 0xff) as usize)?;
        let rank = (w[3] >> 8) as usize;
        if rank > MAX_RANK {
            return None;
        }
        let dims = w[4..4 + rank]
            .iter()
            .map(|&d| usize::try_from(d).ok())
            .collect::<Option<Vec<usize>>>()?;
        Some(Call { kind, dtype, dims })
    }

    fn describe(&self) -> String {
        let what = match self.kind {
            Kind::AllReduce(op) => format!("all_reduce({op:?})"),
            Kind::AllGather => "all_gather".into(),
            Kind::ReduceScatter(op) => format!("reduce_scatter({op:?})"),
            Kind::Broadcast { root } => format!("broadcast(root {root})"),
            Kind::Barrier => return "barrier".into(),
            Kind::Send { from, to } => format!("send(from {from} to {to})"),
        };
        format!("{what} of {:?} {}", self.dims, self.dtype)
    }
}

/// Errors unless every rank made the same call (`calls` in rank order; every rank runs this
/// on the same list, so all of them return the same verdict).
pub(crate) fn agree(op: &'static str, calls: &[Option<Call>]) -> Result<()> {
    let describe = |c: &Option<Call>| match c {
        Some(c) => c.describe(),
        None => "a call it refused itself (it returns its own error)".to_string(),
    };
    for (rank, call) in calls.iter().enumerate().skip(1) {
        if call != &calls[0] || call.is_none() {
            return Err(Error::Collective {
                op,
                reason: format!(
                    "the ranks disagree: rank {rank} called {} but rank 0 called {}",
                    describe(call),
                    describe(&calls[0])
                ),
            });
        }
    }
    Ok(())
}

/// The tensor's elements as FP32 on the host (16-bit floats widened exactly), for engines
/// that reduce on the host. Waits for the tensor's queued writes.
pub(crate) fn stage(tensor: &Tensor) -> Result<Vec<f32>> {
    if tensor.numel() == 0 {
        return Ok(Vec::new());
    }
    Ok(match tensor.dtype() {
        Dtype::F16 => tensor.to_vec::<f16>()?.iter().map(|v| v.to_f32()).collect(),
        Dtype::BF16 => tensor
            .to_vec::<bf16>()?
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        _ => tensor.to_vec::<f32>()?,
    })
}

/// A new tensor of `dims` and `dtype` on `device` holding `data` (rounded once to a 16-bit
/// dtype).
pub(crate) fn unstage(
    device: Device,
    dims: &[usize],
    dtype: Dtype,
    data: &[f32],
) -> Result<Tensor> {
    match dtype {
        Dtype::F16 => {
            let v: Vec<f16> = data.iter().map(|&x| f16::from_f32(x)).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        Dtype::BF16 => {
            let v: Vec<bf16> = data.iter().map(|&x| bf16::from_f32(x)).collect();
            Tensor::from_slice_nd_on(device, &v, dims)
        }
        _ => Tensor::from_slice_nd_on(device, data, dims),
    }
}

/// Writes `data` into `tensor`'s own storage (its allocation stays).
pub(crate) fn unstage_into(op: &'static str, tensor: &mut Tensor, data: &[f32]) -> Result<()> {
    if tensor.numel() == 0 {
        return Ok(());
    }
    let fresh = unstage(tensor.device(), tensor.dims(), tensor.dtype(), data)?;
    tensor.overwrite_with(op, &fresh)
}

/// `out[i] = op over ranks of parts[r][i]`, ranks in order (the same sum on every rank).
pub(crate) fn reduce(op: ReduceOp, parts: &[&[f32]], out: &mut [f32]) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    out.copy_from_slice(first);
    for part in rest {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => {
                for (o, &x) in out.iter_mut().zip(part.iter()) {
                    *o += x;
                }
            }
            ReduceOp::Max => {
                for (o, &x) in out.iter_mut().zip(part.iter()) {
                    // A NaN on any rank gives NaN.
                    *o = if x > *o || x.is_nan() { x } else { *o };
                }
            }
        }
    }
    if op == ReduceOp::Mean {
        let w = parts.len() as f32;
        for o in out.iter_mut() {
            *o /= w;
        }
    }
}

/// The dims of an all-gather's output: `world` inputs stacked along the first axis (a
/// scalar input gives a vector).
pub(crate) fn gathered_dims(op: &'static str, dims: &[usize], world: usize) -> Result<Vec<usize>> {
    let mut out = if dims.is_empty() {
        vec![1]
    } else {
        dims.to_vec()
    };
    let overflow = || Error::shape(op, format!("{world} ranks of {dims:?} overflow"));
    out[0] = out[0].checked_mul(world).ok_or_else(overflow)?;
    // The whole output's element count too: the engines size host buffers from it.
    out.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(overflow)?;
    Ok(out)
}

/// The dims of a reduce-scatter's output: the first axis split evenly over `world` ranks.
pub(crate) fn scattered_dims(op: &'static str, dims: &[usize], world: usize) -> Result<Vec<usize>> {
    match dims.first() {
        Some(&d0) if d0 % world == 0 => {
            let mut out = dims.to_vec();
            out[0] = d0 / world;
            Ok(out)
        }
        _ => Err(Error::shape(
            op,
            format!("`tensor` {dims:?} must have a first axis divisible by the {world} ranks"),
        )),
    }
}

/// Errors unless `rank` names a rank of a world of `world` (`what`: root, peer).
pub(crate) fn check_rank(op: &'static str, what: &str, rank: usize, world: usize) -> Result<()> {
    if rank >= world {
        return Err(Error::invalid(
            op,
            format!("{what} {rank} is not a rank of this world of {world}"),
        ));
    }
    Ok(())
}

/// The call of a point-to-point transfer between this rank `me` and `peer` in a world of
/// `world`: what the sender announces (`sending`), or what the receiver expects of `tensor`
/// (which must then be writable). Errors for a peer outside the world or the rank itself.
pub(crate) fn point_to_point(
    op: &'static str,
    tensor: &Tensor,
    (me, peer, world): (usize, usize, usize),
    sending: bool,
) -> Result<Call> {
    check_rank(op, "peer", peer, world)?;
    if peer == me {
        let verb = if sending { "send to" } else { "receive from" };
        return Err(Error::invalid(
            op,
            format!("rank {peer} cannot {verb} itself"),
        ));
    }
    let (from, to) = if sending { (me, peer) } else { (peer, me) };
    let call = Call::new(op, Kind::Send { from, to }, tensor)?;
    if !sending {
        tensor.check_writable(op, "tensor")?;
    }
    Ok(call)
}
