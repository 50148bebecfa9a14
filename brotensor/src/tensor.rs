//! The one tensor type: rank 2, row-major, with a runtime dtype and device.

use half::{bf16, f16};

use crate::backend::Storage;
use crate::runtime::{backend, default_device};
use crate::{Device, Dtype, Error, Result};

/// A host element type that a tensor can be built from and read back as.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// The dtype of a tensor of these elements.
    const DTYPE: Dtype;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
}
impl Element for f16 {
    const DTYPE: Dtype = Dtype::F16;
}
impl Element for bf16 {
    const DTYPE: Dtype = Dtype::BF16;
}
impl Element for i8 {
    const DTYPE: Dtype = Dtype::I8;
}
impl Element for i32 {
    const DTYPE: Dtype = Dtype::I32;
}
impl Element for f64 {
    const DTYPE: Dtype = Dtype::F64;
}

/// A rank-2 row-major `(rows, cols)` buffer with a dtype and a device.
///
/// Rank 1 is `(n, 1)`; higher ranks are flattened by each op's shape contract. A tensor owns
/// its storage: [`Clone`] is a device-preserving deep copy. A [`Default`] tensor is
/// *uncommitted*: it has no storage, and as an op output it is a wildcard the op allocates
/// on the op's device. A committed tensor with zero elements is valid and distinct from it.
pub struct Tensor {
    rows: usize,
    cols: usize,
    dtype: Dtype,
    device: Device,
    storage: Option<Storage>,
    /// Identifies the current allocation (0 when uncommitted); changes only on reallocation.
    allocation: u64,
}

/// A fresh allocation identity.
fn next_allocation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for Tensor {
    /// An uncommitted `0 x 0` F32 tensor tagged with the CPU.
    fn default() -> Self {
        Tensor {
            rows: 0,
            cols: 0,
            dtype: Dtype::F32,
            device: Device::Cpu,
            storage: None,
            allocation: 0,
        }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &(self.rows, self.cols))
            .field("dtype", &self.dtype)
            .field("device", &self.device)
            .field("committed", &self.is_committed())
            .finish()
    }
}

/// Elements of a `rows x cols` tensor, or an error naming `op` if the product overflows.
pub(crate) fn checked_numel(op: &'static str, rows: usize, cols: usize) -> Result<usize> {
    crate::ops::checked_product(op, "rows x cols", &[rows, cols])
}

/// The most elements a tensor may hold on a GPU: kernels index elements with 32 bits.
pub const GPU_MAX_ELEMENTS: usize = u32::MAX as usize;

/// Errors unless `device` can index `numel` elements (GPU kernels index with 32 bits).
fn check_device_extent(op: &'static str, device: Device, numel: usize) -> Result<()> {
    if device.is_gpu() && numel > GPU_MAX_ELEMENTS {
        return Err(Error::shape(
            op,
            format!(
                "{numel} elements on {device}: GPU kernels index with 32 bits, so a GPU \
                 tensor holds at most {GPU_MAX_ELEMENTS} elements"
            ),
        ));
    }
    Ok(())
}

/// Storage bytes of a `rows x cols` `dtype` tensor on `device`, checked for overflow, whole
/// blocks and the device's index range.
fn device_bytes_for(
    op: &'static str,
    device: Device,
    rows: usize,
    cols: usize,
    dtype: Dtype,
) -> Result<usize> {
    let bytes = storage_bytes_for(op, rows, cols, dtype)?;
    check_device_extent(op, device, rows * cols)?;
    Ok(bytes)
}

fn storage_bytes_for(op: &'static str, rows: usize, cols: usize, dtype: Dtype) -> Result<usize> {
    let numel = checked_numel(op, rows, cols)?;
    if dtype.is_quant() && !cols.is_multiple_of(dtype.block_size()) {
        return Err(Error::shape(
            op,
            format!(
                "{dtype} rows must hold whole blocks: cols {cols} is not a multiple of {}",
                dtype.block_size()
            ),
        ));
    }
    dtype.storage_bytes(numel).map_err(|e| match e {
        Error::InvalidArgument { reason, .. } => Error::shape(op, reason),
        other => other,
    })
}

impl Tensor {
    fn committed(
        rows: usize,
        cols: usize,
        dtype: Dtype,
        device: Device,
        storage: Storage,
    ) -> Tensor {
        Tensor {
            rows,
            cols,
            dtype,
            device,
            storage: Some(storage),
            allocation: next_allocation(),
        }
    }

    /// A zero-filled `rows x cols` tensor on the default device.
    pub fn zeros(rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::zeros_on(default_device(), rows, cols, dtype)
    }

    /// A zero-filled `rows x cols` tensor on `device`.
    pub fn zeros_on(device: Device, rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        let mut t = Tensor::empty_on(device, rows, cols, dtype)?;
        t.zero()?;
        Ok(t)
    }

    /// A `rows x cols` tensor on the default device; contents undefined.
    pub fn empty(rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::empty_on(default_device(), rows, cols, dtype)
    }

    /// A `rows x cols` tensor on `device`; contents undefined.
    pub fn empty_on(device: Device, rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        let bytes = device_bytes_for("empty", device, rows, cols, dtype)?;
        let storage = backend("empty", device)?.alloc(bytes)?;
        Ok(Tensor::committed(rows, cols, dtype, device, storage))
    }

    /// A `rows x cols` tensor on the default device holding `data` (row-major).
    pub fn from_slice<T: Element>(data: &[T], rows: usize, cols: usize) -> Result<Tensor> {
        Tensor::from_slice_on(default_device(), data, rows, cols)
    }

    /// A `rows x cols` tensor on `device` holding `data` (row-major); `data.len()` must be
    /// `rows * cols`.
    pub fn from_slice_on<T: Element>(
        device: Device,
        data: &[T],
        rows: usize,
        cols: usize,
    ) -> Result<Tensor> {
        let numel = checked_numel("from_slice", rows, cols)?;
        if data.len() != numel {
            return Err(Error::shape(
                "from_slice",
                format!("{} elements given for a {rows} x {cols} tensor", data.len()),
            ));
        }
        Tensor::upload(
            "from_slice",
            device,
            bytemuck::cast_slice(data),
            rows,
            cols,
            T::DTYPE,
        )
    }

    /// A tensor from raw bytes on the default device. Works for every dtype, including the
    /// GGUF block carriers; `bytes.len()` must equal the dtype's storage size for
    /// `rows * cols` elements, and block dtypes need `cols` to be a whole number of blocks.
    pub fn from_raw_bytes(bytes: &[u8], rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::from_raw_bytes_on(default_device(), bytes, rows, cols, dtype)
    }

    /// [`Tensor::from_raw_bytes`] on `device`.
    pub fn from_raw_bytes_on(
        device: Device,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        dtype: Dtype,
    ) -> Result<Tensor> {
        Tensor::upload("from_raw_bytes", device, bytes, rows, cols, dtype)
    }

    fn upload(
        op: &'static str,
        device: Device,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        dtype: Dtype,
    ) -> Result<Tensor> {
        let expected = device_bytes_for(op, device, rows, cols, dtype)?;
        if bytes.len() != expected {
            return Err(Error::invalid(
                op,
                format!(
                    "{} bytes given; a {rows} x {cols} {dtype} tensor takes {expected}",
                    bytes.len()
                ),
            ));
        }
        let storage = backend(op, device)?.upload(bytes)?;
        Ok(Tensor::committed(rows, cols, dtype, device, storage))
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Elements (`rows * cols`).
    pub fn numel(&self) -> usize {
        self.rows * self.cols
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The device the storage lives on (for an uncommitted tensor: where it will be
    /// allocated unless an op adopts it elsewhere).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether the tensor has storage.
    pub fn is_committed(&self) -> bool {
        self.storage.is_some()
    }

    /// Bytes the contents occupy.
    pub fn storage_bytes(&self) -> usize {
        // The shape was validated when the storage was sized, so this cannot fail.
        self.dtype
            .storage_bytes(self.numel())
            .expect("a committed shape is always a valid size")
    }

    /// Bytes the allocation can hold (the high-water mark of [`Tensor::resize`]); 0 when
    /// uncommitted.
    pub fn capacity_bytes(&self) -> usize {
        self.storage.as_ref().map_or(0, Storage::capacity)
    }

    /// An identity of the current allocation, unique in the process: it changes only when
    /// the tensor is reallocated (`None` when uncommitted). Lets a caller check that a loop of
    /// `_out` / in-place ops keeps reusing one buffer.
    pub fn allocation_id(&self) -> Option<u64> {
        self.storage.as_ref().map(|_| self.allocation)
    }

    /// Views the same elements as `rows x cols` (row-major order unchanged). Errors unless
    /// `rows * cols` equals the element count (and, for block dtypes, `cols` holds whole
    /// blocks).
    pub fn reshape(&mut self, rows: usize, cols: usize) -> Result<()> {
        self.check_reshape("reshape", rows, cols)?;
        self.rows = rows;
        self.cols = cols;
        Ok(())
    }

    /// The same elements seen as `rows x cols`, borrowed without a copy: the view reads this
    /// tensor's buffer and derefs to `&Tensor`, so it can be any op's input while `self`
    /// stays untouched. Errors as [`Tensor::reshape`] does.
    ///
    /// ```
    /// use brotensor::{ops, Device, Tensor};
    /// let x = Tensor::from_slice_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3)?;
    /// let pairs = x.reshaped(3, 2)?; // three rows of two
    /// let mut sums = Tensor::default();
    /// ops::sum_rows(&pairs, &mut sums)?;
    /// assert_eq!(sums.to_vec::<f32>()?, [3.0, 7.0, 11.0]);
    /// assert_eq!(x.shape(), (2, 3));
    /// # Ok::<(), brotensor::Error>(())
    /// ```
    pub fn reshaped(&self, rows: usize, cols: usize) -> Result<Reshaped<'_>> {
        self.check_reshape("reshaped", rows, cols)?;
        // SAFETY: the alias is a bitwise copy of `self` that is never dropped (ManuallyDrop),
        // so its buffer is released once, by `self`. It is reachable only as `&Tensor`
        // (`Reshaped` has `Deref` and no `DerefMut`), and the `'_` borrow keeps `self`
        // shared and alive while it exists, so the buffer is neither written nor freed
        // under it. A tensor has no interior mutability, so the two cannot drift apart.
        let mut alias = std::mem::ManuallyDrop::new(unsafe { std::ptr::read(self) });
        alias.rows = rows;
        alias.cols = cols;
        Ok(Reshaped {
            alias,
            _source: std::marker::PhantomData,
        })
    }

    /// Errors unless `rows x cols` holds exactly this tensor's elements in its dtype.
    fn check_reshape(&self, op: &'static str, rows: usize, cols: usize) -> Result<()> {
        let numel = checked_numel(op, rows, cols)?;
        if numel != self.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "{}x{} has {} elements, not {rows}x{cols}",
                    self.rows,
                    self.cols,
                    self.numel()
                ),
            ));
        }
        storage_bytes_for(op, rows, cols, self.dtype)?;
        Ok(())
    }

    /// Reshapes to `rows x cols` of `dtype`. Contents are undefined afterwards. The
    /// allocation is kept while the new size fits in it, so a buffer reused in a loop never
    /// moves; an uncommitted tensor is allocated on its device.
    pub fn resize(&mut self, rows: usize, cols: usize, dtype: Dtype) -> Result<()> {
        let bytes = device_bytes_for("resize", self.device, rows, cols, dtype)?;
        let fits = self.storage.as_ref().is_some_and(|s| s.capacity() >= bytes);
        if !fits {
            self.storage = Some(backend("resize", self.device)?.alloc(bytes)?);
            self.allocation = next_allocation();
        }
        self.rows = rows;
        self.cols = cols;
        self.dtype = dtype;
        Ok(())
    }

    /// Sets every byte to zero (commits a `0 x 0` buffer if uncommitted).
    pub fn zero(&mut self) -> Result<()> {
        let bytes = self.storage_bytes();
        let be = backend("zero", self.device)?;
        match self.storage.as_mut() {
            Some(s) => be.zero(s, bytes),
            None => {
                self.storage = Some(be.alloc(0)?);
                self.allocation = next_allocation();
                Ok(())
            }
        }
    }

    /// A copy on `device` (a deep copy when it is the tensor's own device). Crossing
    /// runtimes bounces through host memory. An uncommitted tensor stays uncommitted.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        let Some(storage) = &self.storage else {
            return Ok(Tensor {
                device,
                ..Tensor::default()
            });
        };
        let bytes = self.storage_bytes();
        check_device_extent("to", device, self.numel())?;
        let storage = if device == self.device {
            let be = backend("to", device)?;
            let mut dst = be.alloc(bytes)?;
            be.copy(storage, &mut dst, bytes)?;
            dst
        } else {
            let host = backend("to", self.device)?.download(storage, bytes)?;
            backend("to", device)?.upload(&host)?
        };
        Ok(Tensor::committed(
            self.rows, self.cols, self.dtype, device, storage,
        ))
    }

    /// A device-preserving deep copy; the fallible form of [`Clone::clone`].
    pub fn try_clone(&self) -> Result<Tensor> {
        self.to(self.device)
    }

    /// The contents as a host vector of `T` (whose dtype must be the tensor's). Waits for
    /// every queued write to the tensor. An uncommitted tensor reads as empty.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::Dtype {
                op: "to_vec",
                operand: "self",
                expected: format!(
                    "to_vec::<{}> reads {} tensors",
                    std::any::type_name::<T>(),
                    T::DTYPE
                ),
                found: self.dtype,
            });
        }
        let bytes = self.to_bytes()?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The raw contents (`storage_bytes()` bytes). Waits for queued writes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        match &self.storage {
            None => Ok(Vec::new()),
            Some(s) => backend("to_bytes", self.device)?.download(s, self.storage_bytes()),
        }
    }

    // ---- crate-internal access for the ops and backends ----

    pub(crate) fn storage(&self) -> Option<&Storage> {
        self.storage.as_ref()
    }

    pub(crate) fn storage_mut(&mut self) -> Option<&mut Storage> {
        self.storage.as_mut()
    }

    /// Makes an uncommitted tensor take `device` (an op's output adoption).
    pub(crate) fn adopt(&mut self, device: Device) {
        if self.storage.is_none() {
            self.device = device;
        }
    }

    /// The CPU contents as `&[T]`. Callers guarantee a committed host tensor of `T`.
    pub(crate) fn host<T: Element>(&self) -> &[T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        let n = self.numel();
        match &self.storage {
            Some(Storage::Host(h)) => &bytemuck::cast_slice(h.bytes())[..n],
            _ => panic!("host(): not a committed CPU tensor"),
        }
    }

    /// The CPU contents as `&mut [T]`. Callers guarantee a committed host tensor of `T`.
    pub(crate) fn host_mut<T: Element>(&mut self) -> &mut [T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        let n = self.numel();
        match &mut self.storage {
            Some(Storage::Host(h)) => &mut bytemuck::cast_slice_mut(h.bytes_mut())[..n],
            _ => panic!("host_mut(): not a committed CPU tensor"),
        }
    }
}

/// A tensor borrowed under another shape, from [`Tensor::reshaped`]; derefs to `&Tensor`.
pub struct Reshaped<'a> {
    alias: std::mem::ManuallyDrop<Tensor>,
    _source: std::marker::PhantomData<&'a Tensor>,
}

impl std::ops::Deref for Reshaped<'_> {
    type Target = Tensor;

    fn deref(&self) -> &Tensor {
        &self.alias
    }
}

impl std::fmt::Debug for Reshaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Reshaped").field(&*self.alias).finish()
    }
}

impl Clone for Tensor {
    /// A device-preserving deep copy.
    ///
    /// # Panics
    /// If the device's runtime fails the copy (a lost device). Use [`Tensor::try_clone`] to
    /// get that as an error.
    fn clone(&self) -> Self {
        self.try_clone()
            .unwrap_or_else(|e| panic!("Tensor::clone failed: {e}"))
    }
}
