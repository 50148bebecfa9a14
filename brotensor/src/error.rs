//! The one error type of the crate.

use crate::{Device, Dtype};

/// Everything that can go wrong in brotensor. Messages read `brotensor: <op>: <reason>`.
///
/// Variants are structured so that callers can match on them (the op, the devices, the
/// shapes, the dtype) instead of parsing text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operand lives on another device than the one the op resolved to.
    #[error(
        "brotensor: {op}: operand `{operand}` is on {found} but the op resolved to {expected}"
    )]
    DeviceMismatch {
        /// The op.
        op: &'static str,
        /// The operand's name in the op's signature.
        operand: &'static str,
        /// The device the op runs on (that of the first committed operand).
        expected: Device,
        /// The operand's device.
        found: Device,
    },
    /// Operand shapes do not fit the op's shape contract.
    #[error("brotensor: {op}: {reason}")]
    Shape {
        /// The op.
        op: &'static str,
        /// What is wrong, with the shapes.
        reason: String,
    },
    /// An operand's dtype is not one the op accepts.
    #[error("brotensor: {op}: operand `{operand}` is {found:?}; {expected}")]
    Dtype {
        /// The op.
        op: &'static str,
        /// The operand's name.
        operand: &'static str,
        /// What the op accepts.
        expected: String,
        /// The dtype it got.
        found: Dtype,
    },
    /// The device cannot compute in this dtype (e.g. F16 on an adapter without shader-f16,
    /// or a 16-bit float on the CPU for an op that computes in F32 only).
    #[error("brotensor: {op}: {dtype:?} is not supported on {device}")]
    UnsupportedDtype {
        /// The op.
        op: &'static str,
        /// The dtype.
        dtype: Dtype,
        /// The device.
        device: Device,
    },
    /// The backend of this device does not implement the op.
    #[error("brotensor: {op}: not implemented on {device}")]
    NotImplemented {
        /// The op.
        op: &'static str,
        /// The device.
        device: Device,
    },
    /// The device is not present, or its runtime failed to start.
    #[error("brotensor: {op}: device {device} is not available{}", detail_suffix(.reason))]
    DeviceUnavailable {
        /// The op.
        op: &'static str,
        /// The device asked for.
        device: Device,
        /// Why, when known.
        reason: String,
    },
    /// A bad argument that is not a shape or dtype (an index, a byte count, a name).
    #[error("brotensor: {op}: {reason}")]
    InvalidArgument {
        /// The op.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("brotensor: {op}: {path}: {reason}")]
    Io {
        /// The op.
        op: &'static str,
        /// The file.
        path: String,
        /// The operating system's message.
        reason: String,
    },
    /// A file's contents break its format.
    #[error("brotensor: {op}: {reason}")]
    Format {
        /// The op.
        op: &'static str,
        /// What is wrong, where.
        reason: String,
    },
    /// The GPU runtime reported a failure (a launch, a transfer, a device loss).
    #[error("brotensor: {op}: GPU runtime error on {device}: {reason}")]
    Gpu {
        /// The op.
        op: &'static str,
        /// The device.
        device: Device,
        /// The runtime's message.
        reason: String,
    },
    /// A collective failed across ranks: the ranks disagree on the call (op, shape, dtype,
    /// root), a rank did not arrive within the communicator's timeout, or the engine (MPI,
    /// NCCL) reported an error. After a timeout the communicator refuses further calls.
    #[error("brotensor: {op}: {reason}")]
    Collective {
        /// The collective.
        op: &'static str,
        /// What went wrong, naming the ranks.
        reason: String,
    },
}

fn detail_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn shape(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Shape {
            op,
            reason: reason.into(),
        }
    }

    pub(crate) fn format(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Format {
            op,
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }
}
