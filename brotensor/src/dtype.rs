//! Element types: the arithmetic floats, the storage carriers and the GGUF block carriers.

use brotensor_cpu::quant::Block;

use crate::{Error, Result};

/// What a tensor's bytes are.
///
/// F32, F16 and BF16 are the arithmetic dtypes of the C++-contract ops. F64, I64, C64 and C128
/// are the wide dtypes of the tensor-algebra ops ([`crate::ops::algebra`]); complex values are
/// stored as interleaved `(re, im)` pairs. I8 and I32 are storage carriers (indices, masks,
/// weight-only INT8). The `Q*` variants are GGUF block carriers:
/// opaque blocks of 32 (legacy) or 256 (K-quant) elements, sized with
/// [`Dtype::storage_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (the top half of a binary32).
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Signed 32-bit integer.
    I32,
    /// IEEE binary64.
    F64,
    /// Signed 64-bit integer (arithmetic wraps).
    I64,
    /// Complex of two binary32: `(re, im)`, 8 bytes.
    C64,
    /// Complex of two binary64: `(re, im)`, 16 bytes.
    C128,
    /// GGUF Q4_0: 32 elements in 18 bytes.
    Q4_0,
    /// GGUF Q4_1: 32 elements in 20 bytes.
    Q4_1,
    /// GGUF Q5_0: 32 elements in 22 bytes.
    Q5_0,
    /// GGUF Q5_1: 32 elements in 24 bytes.
    Q5_1,
    /// GGUF Q8_0: 32 elements in 34 bytes.
    Q8_0,
    /// GGUF Q8_1: 32 elements in 36 bytes.
    Q8_1,
    /// GGUF Q2_K: 256 elements in 84 bytes.
    Q2_K,
    /// GGUF Q3_K: 256 elements in 110 bytes.
    Q3_K,
    /// GGUF Q4_K: 256 elements in 144 bytes.
    Q4_K,
    /// GGUF Q5_K: 256 elements in 176 bytes.
    Q5_K,
    /// GGUF Q6_K: 256 elements in 210 bytes.
    Q6_K,
    /// GGUF Q8_K: 256 elements in 292 bytes.
    Q8_K,
    /// GGUF IQ4_NL: 32 elements in 18 bytes (4-bit non-linear codebook).
    IQ4_NL,
    /// GGUF IQ4_XS: 256 elements in 136 bytes (IQ4_NL with 6-bit sub-block scales).
    IQ4_XS,
    /// GGUF MXFP4: 32 elements in 17 bytes (an E8M0 scale and 4-bit E2M1 values).
    MXFP4,
}

impl Dtype {
    /// Every dtype, in declaration order.
    pub const ALL: [Dtype; 24] = [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I8,
        Dtype::I32,
        Dtype::F64,
        Dtype::I64,
        Dtype::C64,
        Dtype::C128,
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
    ];

    /// Bytes per element, or `None` for a block carrier (use [`Dtype::storage_bytes`]).
    pub const fn size_bytes(self) -> Option<usize> {
        match self {
            Dtype::F32 | Dtype::I32 => Some(4),
            Dtype::F16 | Dtype::BF16 => Some(2),
            Dtype::I8 => Some(1),
            Dtype::F64 | Dtype::I64 | Dtype::C64 => Some(8),
            Dtype::C128 => Some(16),
            _ => None,
        }
    }

    /// The GGUF block format a block carrier holds, `None` for the other dtypes.
    pub(crate) const fn block(self) -> Option<Block> {
        Some(match self {
            Dtype::Q4_0 => Block::Q4_0,
            Dtype::Q4_1 => Block::Q4_1,
            Dtype::Q5_0 => Block::Q5_0,
            Dtype::Q5_1 => Block::Q5_1,
            Dtype::Q8_0 => Block::Q8_0,
            Dtype::Q8_1 => Block::Q8_1,
            Dtype::Q2_K => Block::Q2_K,
            Dtype::Q3_K => Block::Q3_K,
            Dtype::Q4_K => Block::Q4_K,
            Dtype::Q5_K => Block::Q5_K,
            Dtype::Q6_K => Block::Q6_K,
            Dtype::Q8_K => Block::Q8_K,
            Dtype::IQ4_NL => Block::IQ4_NL,
            Dtype::IQ4_XS => Block::IQ4_XS,
            Dtype::MXFP4 => Block::MXFP4,
            Dtype::F32
            | Dtype::F16
            | Dtype::BF16
            | Dtype::I8
            | Dtype::I32
            | Dtype::F64
            | Dtype::I64
            | Dtype::C64
            | Dtype::C128 => return None,
        })
    }

    /// Elements per block: 32 for the legacy GGUF blocks, 256 for K-quants, 1 otherwise.
    pub const fn block_size(self) -> usize {
        match self.block() {
            Some(b) => b.size().0,
            None => 1,
        }
    }

    /// Bytes per block (the element size for non-block dtypes). Block sizes come from
    /// brotensor-cpu's block table ([`Block::size`]), which follows ggml.
    pub const fn block_bytes(self) -> usize {
        match (self.block(), self.size_bytes()) {
            (Some(b), _) => b.size().1,
            (None, Some(bytes)) => bytes,
            (None, None) => panic!("a dtype is either a block carrier or has an element size"),
        }
    }

    /// Whether this is a GGUF block carrier.
    pub const fn is_quant(self) -> bool {
        self.block_size() > 1
    }

    /// Whether this is an arithmetic dtype of the C++-contract ops (F32, F16, BF16).
    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::BF16)
    }

    /// Whether this is a complex dtype (C64, C128).
    pub const fn is_complex(self) -> bool {
        matches!(self, Dtype::C64 | Dtype::C128)
    }

    /// Whether this is a real floating-point dtype (F32, F16, BF16, F64).
    pub const fn is_real_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64)
    }

    /// Whether this is an integer dtype (I8, I32, I64).
    pub const fn is_int(self) -> bool {
        matches!(self, Dtype::I8 | Dtype::I32 | Dtype::I64)
    }

    /// Bytes that `numel` elements occupy. Errors if `numel` is not a whole number of blocks
    /// or the size overflows `usize`.
    pub fn storage_bytes(self, numel: usize) -> Result<usize> {
        let block = self.block_size();
        if !numel.is_multiple_of(block) {
            return Err(Error::invalid(
                "storage_bytes",
                format!("{numel} elements is not a multiple of the {self:?} block size {block}"),
            ));
        }
        (numel / block)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| {
                Error::invalid(
                    "storage_bytes",
                    format!("{numel} elements of {self:?} overflow usize"),
                )
            })
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Through `pad`, so width, fill and alignment flags apply (`{:<5}`).
        f.pad(&format!("{self:?}"))
    }
}

#[cfg(feature = "internals")]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
    use super::*;

    pub fn sizes_follow_ggml() {
        assert_eq!(
            (Dtype::Q4_0.block_size(), Dtype::Q4_0.block_bytes()),
            (32, 18)
        );
        assert_eq!(
            (Dtype::Q4_K.block_size(), Dtype::Q4_K.block_bytes()),
            (256, 144)
        );
        assert_eq!(Dtype::Q2_K.block_bytes(), 84);
        assert_eq!(Dtype::Q4_K.storage_bytes(256).unwrap(), 144);
        assert_eq!(Dtype::F32.storage_bytes(6).unwrap(), 24);
        assert_eq!(Dtype::F64.size_bytes(), Some(8));
        assert_eq!(Dtype::C64.size_bytes(), Some(8));
        assert_eq!(Dtype::C128.storage_bytes(3).unwrap(), 48);
        assert_eq!(Dtype::Q8_0.size_bytes(), None);
        assert!(Dtype::Q4_K.storage_bytes(100).is_err());
        assert!(Dtype::F64.storage_bytes(usize::MAX).is_err());
        for d in Dtype::ALL {
            assert_eq!(d.is_quant(), d.size_bytes().is_none(), "{d}");
        }
    }
}
