//! Where a tensor's storage lives.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// A compute device. The variants exist whatever features are compiled; a device whose
/// runtime is missing is reported as unavailable, not as a compile error.
///
/// `Wgpu(n)` ordinals list hardware adapters first (discrete, integrated, virtual, in the
/// order the graphics API enumerates them), then the software adapter (llvmpipe / lavapipe)
/// if there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    /// Host memory; ops run on the rayon FP32 reference.
    #[default]
    Cpu,
    /// An NVIDIA GPU through CubeCL's CUDA runtime, by driver ordinal.
    Cuda(usize),
    /// A GPU (or software rasterizer) through CubeCL's wgpu runtime: Vulkan, Metal, DX12.
    Wgpu(usize),
}

/// The runtime a [`Device`] belongs to, without its ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// The host.
    Cpu,
    /// CUDA devices.
    Cuda,
    /// wgpu adapters.
    Wgpu,
}

impl Device {
    /// Whether this is a GPU device (CUDA or wgpu).
    pub fn is_gpu(self) -> bool {
        !matches!(self, Device::Cpu)
    }

    /// Its runtime.
    pub fn kind(self) -> DeviceKind {
        match self {
            Device::Cpu => DeviceKind::Cpu,
            Device::Cuda(_) => DeviceKind::Cuda,
            Device::Wgpu(_) => DeviceKind::Wgpu,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Through `pad`, so width, fill and alignment flags apply (`{:>8}`).
        let name = match self {
            Device::Cpu => "cpu".to_string(),
            Device::Cuda(i) => format!("cuda:{i}"),
            Device::Wgpu(i) => format!("wgpu:{i}"),
        };
        f.pad(&name)
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N` (case-insensitive; no index means 0).
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        let (kind, index) = match lower.split_once(':') {
            Some((k, i)) => {
                let index = i.parse::<usize>().map_err(|_| {
                    Error::invalid("parse_device", format!("bad device index in `{s}`"))
                })?;
                (k.to_string(), index)
            }
            None => (lower.clone(), 0),
        };
        match kind.as_str() {
            "cpu" if index == 0 => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(index)),
            "wgpu" => Ok(Device::Wgpu(index)),
            _ => Err(Error::invalid(
                "parse_device",
                format!("unknown device `{s}` (expected cpu, cuda[:N] or wgpu[:N])"),
            )),
        }
    }
}

#[cfg(feature = "internals")]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
    use super::*;

    pub fn display_honours_width_and_alignment() {
        assert_eq!(format!("[{:>8}]", Device::Cuda(1)), "[  cuda:1]");
        assert_eq!(format!("[{:<6}]", Device::Cpu), "[cpu   ]");
        assert_eq!(format!("[{:^8}]", crate::Dtype::BF16), "[  BF16  ]");
        assert_eq!(format!("{}", crate::Dtype::Q4_K), "Q4_K");
    }

    pub fn parses_and_displays() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("CUDA".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::Cuda(3));
        assert_eq!(" Wgpu:1 ".parse::<Device>().unwrap(), Device::Wgpu(1));
        assert!("metal".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
        assert!("cpu:1".parse::<Device>().is_err());
        assert_eq!(Device::Wgpu(2).to_string(), "wgpu:2");
    }
}
