//! The public op API driven by arbitrary bytes on the CPU backend: every op of the op table
//! (`tests/src/op_table.rs`, the list the wrong-device test runs too), views, dims
//! (small ones, and ones near `2^32`, `2^63` and `usize::MAX`), strides, dtypes, scalars and
//! reuse of outputs as inputs. Every call must return `Ok` with a consistent result or an
//! `Err`, never panic or touch memory out of bounds (the fuzz build runs under
//! AddressSanitizer).
#![no_main]

use brotensor::ops;
use brotensor::{Device, Dtype, Result, Tensor};
use libfuzzer_sys::fuzz_target;

/// The op table the tests use: every public op, its tensors from slots, its other
/// arguments from a `Params` source (here, the fuzz bytes).
#[path = "../../tests/src/op_table.rs"]
mod op_table;
use op_table::{Params, OP_TABLE};

/// Reads the fuzz input as a stream of choices; an exhausted input reads as zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// A size: mostly small, sometimes one that overflows products.
    fn dim(&mut self) -> usize {
        const HUGE: [usize; 8] = [
            1 << 32,
            (1 << 32) + 1,
            1 << 62,
            (1 << 62) + 1,
            1 << 63,
            (1 << 63) + 1,
            usize::MAX - 1,
            usize::MAX,
        ];
        let b = self.byte();
        match b {
            0..=239 => (b % 40) as usize,
            _ => HUGE[(b - 240) as usize % HUGE.len()],
        }
    }

    fn scalar(&mut self) -> f32 {
        const SPECIAL: [f32; 8] = [0.0, -0.0, 1e-30, 1e30, f32::INFINITY, f32::NAN, -1.0, 1e-6];
        let b = self.byte();
        if b >= 248 {
            SPECIAL[(b - 248) as usize]
        } else {
            (b as f32 - 124.0) / 16.0
        }
    }

    fn dtype(&mut self) -> Dtype {
        match self.byte() % 16 {
            0 => Dtype::F16,
            1 => Dtype::BF16,
            2 => Dtype::I32,
            3 => Dtype::I8,
            4 => Dtype::Q8_0,
            _ => Dtype::F32,
        }
    }
}

/// Tensors the program works on; outputs are stored back so later ops read them.
const SLOTS: usize = 6;

/// The largest output kept in a slot: larger ones are checked and dropped, so later steps
/// stay fast (a huge output read by every later op once made single inputs run for minutes
/// and the pool of freed buffers grow past the memory limit).
const KEEP_MAX_ELEMENTS: usize = 1 << 16;

fn make(b: &mut Bytes, rows: usize, cols: usize) -> Result<Tensor> {
    let dtype = b.dtype();
    let numel = rows.checked_mul(cols);
    match numel {
        Some(n) if n <= 4096 && dtype.is_float() => {
            let v: Vec<f32> = (0..n).map(|_| b.scalar()).collect();
            Tensor::from_slice_on(Device::Cpu, &v, rows, cols)?.to_dtype(dtype)
        }
        Some(n) if n <= 4096 => Tensor::zeros_on(Device::Cpu, rows, cols, dtype),
        // Zero-element tensors with huge dims are legal; anything else must be refused.
        _ => Tensor::zeros_on(Device::Cpu, rows, cols, dtype),
    }
}

/// Checks what every successful output must satisfy: its bytes read back in full.
fn consistent(t: &Tensor) {
    if t.is_committed() {
        let bytes = t.to_bytes().expect("a committed tensor reads back");
        assert_eq!(bytes.len(), t.storage_bytes());
        assert!(t.capacity_bytes() >= t.storage_bytes());
    }
}

impl Params for Bytes<'_> {
    fn usize(&mut self) -> usize {
        self.dim()
    }
    fn f32(&mut self) -> f32 {
        self.scalar()
    }
    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }
    fn dtype(&mut self) -> Dtype {
        Bytes::dtype(self)
    }
}

/// One step: an op of the op table on copies of some slots (so an op may also write a slot
/// that is one of its inputs), or a view, reshape or resize of a slot.
fn run(b: &mut Bytes, slots: &mut [Tensor]) -> Result<()> {
    let pick = |b: &mut Bytes| b.byte() as usize % SLOTS;
    let choice = b.byte();
    if choice >= 64 {
        let index = (usize::from(choice) << 8 | usize::from(b.byte())) % OP_TABLE.len();
        let entry = &OP_TABLE[index];
        let mut args = (0..entry.slots)
            .map(|_| slots[pick(b)].try_clone())
            .collect::<Result<Vec<_>>>()?;
        let keep = pick(b);
        if std::env::var_os("BROTENSOR_FUZZ_TRACE").is_some() {
            eprintln!("op {}", entry.name);
        }
        (entry.call)(&mut args, b)?;
        for t in &args {
            consistent(t);
        }
        // The last tensor is an output for most ops: later steps read it.
        if let Some(out) = args
            .pop()
            .filter(|t| t.is_committed() && t.numel() <= KEEP_MAX_ELEMENTS)
        {
            slots[keep] = out;
        }
        return Ok(());
    }
    let (i, j, k) = (pick(b), pick(b), pick(b));
    let x = &slots[i].try_clone()?;
    let y = &slots[j].try_clone()?;
    let (d1, d2, d3) = (b.dim(), b.dim(), b.dim());
    let out = match choice % 12 {
        0 => {
            slots[i] = make(b, d1, d2)?;
            return Ok(());
        }
        1 => {
            slots[i].reshape_(&[d1, d2])?;
            return Ok(());
        }
        2 => x.reshaped(d1, d2)?.try_clone()?,
        // Views: made from fuzzed arguments, materialised, kept in slots (so later ops read
        // views and try to write through them), and fed to broadcasting arithmetic.
        3 => {
            let rank = x.rank();
            let mut perm: Vec<usize> = (0..rank).collect();
            for r in 0..rank {
                perm.swap(r, b.byte() as usize % rank.max(1));
            }
            if b.byte() % 8 == 0 {
                perm.push(d1); // an invalid permutation now and then
            }
            x.permute(&perm)?.contiguous()?
        }
        4 => {
            let step = b.byte() as i8 as isize;
            x.slice(d1 % 4, d2, d3, step)?.contiguous()?
        }
        5 => {
            let dims = [d1 % 5, x.rows(), x.cols()];
            x.broadcast_to(&dims)?.contiguous()?
        }
        6 => x.flip(&[d1 % 3, d2 % 3])?.contiguous()?,
        7 => x.reshape(&[d1, d2, d3])?.contiguous()?,
        8 => {
            slots[k] = slots[i].transpose(0, d1 % 3)?;
            return Ok(());
        }
        9 => {
            slots[i].add_(y)?;
            return Ok(());
        }
        10 => {
            let row = y.narrow(0, d1, d2 % 3)?;
            let mut into = Tensor::default();
            ops::copy_into(&row.unsqueeze(d3 % 4)?, &mut into)?;
            ops::mul(x, &row)?
        }
        _ => {
            slots[i].resize(d1 % 64, d2 % 64, b.dtype())?;
            return Ok(());
        }
    };
    consistent(&out);
    if out.numel() <= KEEP_MAX_ELEMENTS {
        slots[k] = out;
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mut slots: Vec<Tensor> = (0..SLOTS)
        .map(|_| {
            let (r, c) = (b.dim() % 16, b.dim() % 16);
            make(&mut b, r, c).unwrap_or_default()
        })
        .collect();
    for _ in 0..8 {
        if b.0.is_empty() {
            break;
        }
        let _ = run(&mut b, &mut slots);
        for t in &slots {
            consistent(t);
        }
    }
});
