//! The one tensor type: N-d (rank 0 to 8) with a runtime dtype and device; views share
//! their base's storage.

use half::{bf16, f16};

use std::any::Any;
use std::sync::{Arc, OnceLock};

use crate::backend::Storage;
use crate::layout::{checked_dims, show_dims, Layout};
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
impl Element for i64 {
    const DTYPE: Dtype = Dtype::I64;
}
impl Element for crate::Complex<f32> {
    const DTYPE: Dtype = Dtype::C64;
}
impl Element for crate::Complex<f64> {
    const DTYPE: Dtype = Dtype::C128;
}

/// An N-d tensor (rank 0 to [`MAX_RANK`](crate::MAX_RANK)) with a dtype and a device.
///
/// A fresh tensor is row-major and dense. Views ([`Tensor::permute`], [`Tensor::slice`],
/// [`Tensor::broadcast_to`], [`Tensor::reshape`], ...) are tensors that share their base's
/// storage under another layout, with no copy. [`rows`](Tensor::rows) and
/// [`cols`](Tensor::cols) are the matrix view every C++-contract op works on: all leading
/// dims folded into rows, the last dim as cols.
///
/// A tensor owns its storage (shared with its views): [`Clone`] is a device-preserving deep
/// copy. An op writes only into a tensor that holds its storage alone and is dense; writing
/// into a view, or into a tensor while a view of it lives, is an error. A [`Default`] tensor
/// is *uncommitted*: it has no storage, and as an op output it is a wildcard the op allocates
/// on the op's device. A committed tensor with zero elements is valid and distinct from it.
pub struct Tensor {
    layout: Layout,
    dtype: Dtype,
    device: Device,
    storage: Option<Arc<Storage>>,
    /// A dense copy of a non-dense view, made once by the first op that reads the view.
    dense: OnceLock<Storage>,
    /// A form of the elements an op derived and keeps for reuse (the CPU's packed weights),
    /// made at first use and dropped whenever the elements, shape or storage change.
    derived: OnceLock<Arc<dyn Any + Send + Sync>>,
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
            layout: Layout::dense("default", &[0, 0]).expect("a 0 x 0 shape is valid"),
            dtype: Dtype::F32,
            device: Device::Cpu,
            storage: None,
            dense: OnceLock::new(),
            derived: OnceLock::new(),
            allocation: 0,
        }
    }
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

/// Storage bytes of a dense `dims` `dtype` tensor on `device`, checked for overflow, whole
/// blocks and the device's index range.
fn device_bytes_for(
    op: &'static str,
    device: Device,
    dims: &[usize],
    dtype: Dtype,
) -> Result<usize> {
    let bytes = storage_bytes_for(op, dims, dtype)?;
    check_device_extent(op, device, dims.iter().product())?;
    Ok(bytes)
}

fn storage_bytes_for(op: &'static str, dims: &[usize], dtype: Dtype) -> Result<usize> {
    let numel = checked_dims(op, dims)?;
    let cols = dims.last().copied().unwrap_or(1);
    if dtype.is_quant() && !cols.is_multiple_of(dtype.block_size()) {
        return Err(Error::shape(
            op,
            format!(
                "{dtype} rows must hold whole blocks: the last dim {cols} is not a multiple of {}",
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
    fn committed(layout: Layout, dtype: Dtype, device: Device, storage: Storage) -> Tensor {
        Tensor {
            layout,
            dtype,
            device,
            storage: Some(Arc::new(storage)),
            dense: OnceLock::new(),
            derived: OnceLock::new(),
            allocation: next_allocation(),
        }
    }

    /// A zero-filled `rows x cols` tensor on the default device.
    pub fn zeros(rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::zeros_nd_on(default_device(), &[rows, cols], dtype)
    }

    /// A zero-filled `rows x cols` tensor on `device`.
    pub fn zeros_on(device: Device, rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::zeros_nd_on(device, &[rows, cols], dtype)
    }

    /// A zero-filled tensor of shape `dims` on the default device.
    pub fn zeros_nd(dims: &[usize], dtype: Dtype) -> Result<Tensor> {
        Tensor::zeros_nd_on(default_device(), dims, dtype)
    }

    /// A zero-filled tensor of shape `dims` on `device`.
    pub fn zeros_nd_on(device: Device, dims: &[usize], dtype: Dtype) -> Result<Tensor> {
        let mut t = Tensor::empty_nd_on(device, dims, dtype)?;
        t.zero()?;
        Ok(t)
    }

    /// A `rows x cols` tensor on the default device; contents undefined.
    pub fn empty(rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::empty_nd_on(default_device(), &[rows, cols], dtype)
    }

    /// A `rows x cols` tensor on `device`; contents undefined.
    pub fn empty_on(device: Device, rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::empty_nd_on(device, &[rows, cols], dtype)
    }

    /// A tensor of shape `dims` on `device`; contents undefined.
    pub fn empty_nd_on(device: Device, dims: &[usize], dtype: Dtype) -> Result<Tensor> {
        let bytes = device_bytes_for("empty", device, dims, dtype)?;
        let storage = backend("empty", device)?.alloc(bytes)?;
        Ok(Tensor::committed(
            Layout::dense("empty", dims)?,
            dtype,
            device,
            storage,
        ))
    }

    /// A `rows x cols` tensor on the default device holding `data` (row-major).
    pub fn from_slice<T: Element>(data: &[T], rows: usize, cols: usize) -> Result<Tensor> {
        Tensor::from_slice_nd_on(default_device(), data, &[rows, cols])
    }

    /// A `rows x cols` tensor on `device` holding `data` (row-major); `data.len()` must be
    /// `rows * cols`.
    pub fn from_slice_on<T: Element>(
        device: Device,
        data: &[T],
        rows: usize,
        cols: usize,
    ) -> Result<Tensor> {
        Tensor::from_slice_nd_on(device, data, &[rows, cols])
    }

    /// A tensor of shape `dims` on the default device holding `data` (row-major).
    pub fn from_slice_nd<T: Element>(data: &[T], dims: &[usize]) -> Result<Tensor> {
        Tensor::from_slice_nd_on(default_device(), data, dims)
    }

    /// A tensor of shape `dims` on `device` holding `data` (row-major); `data.len()` must be
    /// the product of `dims` (1 for rank 0).
    ///
    /// ```
    /// use brotensor::{Device, Tensor};
    /// let x = Tensor::from_slice_nd_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 1, 3])?;
    /// assert_eq!((x.rank(), x.dims()), (3, &[2, 1, 3][..]));
    /// assert_eq!(x.shape(), (2, 3)); // the matrix view: leading dims folded
    /// # Ok::<(), brotensor::Error>(())
    /// ```
    pub fn from_slice_nd_on<T: Element>(
        device: Device,
        data: &[T],
        dims: &[usize],
    ) -> Result<Tensor> {
        let numel = checked_dims("from_slice", dims)?;
        if data.len() != numel {
            return Err(Error::shape(
                "from_slice",
                format!(
                    "{} elements given for a {} tensor",
                    data.len(),
                    show_dims(dims, " x ")
                ),
            ));
        }
        Tensor::upload(
            "from_slice",
            device,
            bytemuck::cast_slice(data),
            dims,
            T::DTYPE,
        )
    }

    /// A tensor from raw bytes on the default device. Works for every dtype, including the
    /// GGUF block carriers; `bytes.len()` must equal the dtype's storage size for
    /// `rows * cols` elements, and block dtypes need `cols` to be a whole number of blocks.
    pub fn from_raw_bytes(bytes: &[u8], rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
        Tensor::upload(
            "from_raw_bytes",
            default_device(),
            bytes,
            &[rows, cols],
            dtype,
        )
    }

    /// [`Tensor::from_raw_bytes`] on `device`.
    pub fn from_raw_bytes_on(
        device: Device,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        dtype: Dtype,
    ) -> Result<Tensor> {
        Tensor::upload("from_raw_bytes", device, bytes, &[rows, cols], dtype)
    }

    /// [`Tensor::from_raw_bytes_on`] for a tensor of shape `dims` (block dtypes need the last
    /// dim to be a whole number of blocks).
    pub fn from_raw_bytes_nd_on(
        device: Device,
        bytes: &[u8],
        dims: &[usize],
        dtype: Dtype,
    ) -> Result<Tensor> {
        Tensor::upload("from_raw_bytes", device, bytes, dims, dtype)
    }

    fn upload(
        op: &'static str,
        device: Device,
        bytes: &[u8],
        dims: &[usize],
        dtype: Dtype,
    ) -> Result<Tensor> {
        let expected = device_bytes_for(op, device, dims, dtype)?;
        if bytes.len() != expected {
            return Err(Error::invalid(
                op,
                format!(
                    "{} bytes given; a {} {dtype} tensor takes {expected}",
                    bytes.len(),
                    show_dims(dims, " x ")
                ),
            ));
        }
        let storage = backend(op, device)?.upload(bytes)?;
        Ok(Tensor::committed(
            Layout::dense(op, dims)?,
            dtype,
            device,
            storage,
        ))
    }

    /// The dims (empty for rank 0).
    pub fn dims(&self) -> &[usize] {
        self.layout.dims()
    }

    /// The number of dims (0 to [`MAX_RANK`](crate::MAX_RANK)).
    pub fn rank(&self) -> usize {
        self.layout.dims().len()
    }

    /// Each dim's step through the storage, in elements (0 for a broadcast dim, negative for
    /// a flipped one). A fresh tensor's strides are row-major.
    pub fn strides(&self) -> &[isize] {
        self.layout.strides()
    }

    /// Whether the elements lie row-major and gap-free in the storage (fresh tensors and
    /// reshapes of them; see [`Tensor::contiguous`]).
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// Rows of the matrix view: the product of every dim but the last (1 for rank 0 and 1).
    pub fn rows(&self) -> usize {
        self.layout.rows_cols().0
    }

    /// Columns of the matrix view: the last dim (1 for rank 0).
    pub fn cols(&self) -> usize {
        self.layout.rows_cols().1
    }

    /// The matrix view `(rows, cols)`; [`Tensor::dims`] gives the full shape.
    pub fn shape(&self) -> (usize, usize) {
        self.layout.rows_cols()
    }

    /// Elements (the product of the dims).
    pub fn numel(&self) -> usize {
        self.layout.numel()
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

    /// Bytes the elements occupy when dense.
    pub fn storage_bytes(&self) -> usize {
        // The shape was validated when the storage was sized, so this cannot fail.
        self.dtype
            .storage_bytes(self.numel())
            .expect("a committed shape is always a valid size")
    }

    /// Bytes the allocation can hold (the high-water mark of [`Tensor::resize`]); 0 when
    /// uncommitted.
    pub fn capacity_bytes(&self) -> usize {
        self.storage.as_deref().map_or(0, Storage::capacity)
    }

    /// An identity of the current allocation, unique in the process: it changes only when
    /// the tensor is reallocated (`None` when uncommitted); views share their base's. Lets a
    /// caller check that a loop of `_out` / in-place ops keeps reusing one buffer.
    pub fn allocation_id(&self) -> Option<u64> {
        self.storage.as_ref().map(|_| self.allocation)
    }

    /// Gives this tensor the shape `dims` in place, keeping its elements in row-major order.
    /// Errors unless `dims` holds exactly the tensor's elements and its layout allows it
    /// without moving them (else call [`Tensor::contiguous`] first).
    pub fn reshape_(&mut self, dims: &[usize]) -> Result<()> {
        self.layout = self.reshaped_layout("reshape", dims)?;
        self.dense = OnceLock::new();
        self.derived = OnceLock::new();
        Ok(())
    }

    /// A view of the same elements as `rows x cols` (row-major order unchanged); see
    /// [`Tensor::reshape`].
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
    pub fn reshaped(&self, rows: usize, cols: usize) -> Result<Tensor> {
        let layout = self.reshaped_layout("reshaped", &[rows, cols])?;
        Ok(self.view(layout))
    }

    /// The layout of this tensor under `dims`, or an error when the sizes differ or the
    /// strides need a copy.
    pub(crate) fn reshaped_layout(&self, op: &'static str, dims: &[usize]) -> Result<Layout> {
        let layout = self.layout.reshape(op, dims)?.ok_or_else(|| {
            Error::shape(
                op,
                format!(
                    "the {:?} view with strides {:?} cannot be seen as {dims:?} without a \
                     copy: call contiguous() first",
                    self.dims(),
                    self.strides()
                ),
            )
        })?;
        storage_bytes_for(op, dims, self.dtype)?;
        Ok(layout)
    }

    /// Reshapes to `rows x cols` of `dtype`; see [`Tensor::resize_nd`].
    pub fn resize(&mut self, rows: usize, cols: usize, dtype: Dtype) -> Result<()> {
        self.resize_nd(&[rows, cols], dtype)
    }

    /// Gives this tensor the shape `dims` and `dtype`, dense. Contents are undefined
    /// afterwards. The allocation is kept while the new size fits in it, so a buffer reused in
    /// a loop never moves; an uncommitted tensor is allocated on its device. Errors when the
    /// tensor is a view or has live views (see [`Tensor`]).
    pub fn resize_nd(&mut self, dims: &[usize], dtype: Dtype) -> Result<()> {
        self.resize_for("resize", dims, dtype)
    }

    /// [`Tensor::resize_nd`] as part of `op` (an op sizing its output).
    pub(crate) fn resize_for(
        &mut self,
        op: &'static str,
        dims: &[usize],
        dtype: Dtype,
    ) -> Result<()> {
        let bytes = device_bytes_for(op, self.device, dims, dtype)?;
        let layout = Layout::dense(op, dims)?;
        let fits = match &self.storage {
            Some(s) => {
                self.check_writable(op, "out")?;
                s.capacity() >= bytes
            }
            None => false,
        };
        if !fits {
            self.storage = Some(Arc::new(backend(op, self.device)?.alloc(bytes)?));
            self.allocation = next_allocation();
        }
        self.layout = layout;
        self.dense = OnceLock::new();
        self.derived = OnceLock::new();
        self.dtype = dtype;
        Ok(())
    }

    /// Errors unless an op may write this tensor's elements in place: it owns its storage
    /// alone (no live view shares it) and is dense.
    pub(crate) fn check_writable(&self, op: &'static str, name: &'static str) -> Result<()> {
        let Some(storage) = &self.storage else {
            return Ok(());
        };
        if !self.layout.is_dense() {
            return Err(Error::invalid(
                op,
                format!(
                    "`{name}` is a view (dims {:?}, strides {:?}); ops do not write through \
                     views: write into a fresh tensor, or make this one with contiguous()",
                    self.dims(),
                    self.strides()
                ),
            ));
        }
        if Arc::strong_count(storage) > 1 {
            return Err(Error::invalid(
                op,
                format!(
                    "`{name}` shares its storage with a live view; drop the views (or write \
                     into a copy) first"
                ),
            ));
        }
        Ok(())
    }

    /// Sets every byte to zero (commits a `0 x 0` buffer if uncommitted). Errors on a view
    /// or a tensor with live views.
    pub fn zero(&mut self) -> Result<()> {
        let bytes = self.storage_bytes();
        let be = backend("zero", self.device)?;
        self.check_writable("zero", "self")?;
        self.derived = OnceLock::new();
        match self.storage.as_mut().map(Arc::get_mut) {
            Some(Some(s)) => be.zero(s, bytes),
            Some(None) => unreachable!("check_writable refused shared storage"),
            None => {
                self.storage = Some(Arc::new(be.alloc(0)?));
                self.allocation = next_allocation();
                Ok(())
            }
        }
    }

    /// A copy on `device` (a deep copy when it is the tensor's own device), dense. Between
    /// two CUDA devices it is a peer copy (`cuMemcpyPeer`, no NCCL needed); between other
    /// devices it bounces through host memory. An uncommitted tensor stays uncommitted.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        if self.storage.is_none() {
            return Ok(Tensor {
                device,
                ..Tensor::default()
            });
        }
        let bytes = self.storage_bytes();
        check_device_extent("to", device, self.numel())?;
        let layout = Layout::dense("to", self.dims())?;
        let src = self.dense_storage("to")?;
        let storage = if device == self.device {
            let be = backend("to", device)?;
            let mut dst = be.alloc(bytes)?;
            be.copy(src, &mut dst, bytes)?;
            dst
        } else {
            match (self.device, device) {
                #[cfg(feature = "cuda")]
                (Device::Cuda(from), Device::Cuda(to)) => {
                    let mut dst = backend("to", device)?.alloc(bytes)?;
                    crate::backend::peer::cuda_copy("to", (from, src), (to, &mut dst), bytes)?;
                    dst
                }
                _ => {
                    let host = backend("to", self.device)?.download(src, bytes)?;
                    backend("to", device)?.upload(&host)?
                }
            }
        };
        Ok(Tensor::committed(layout, self.dtype, device, storage))
    }

    /// A device-preserving deep copy; the fallible form of [`Clone::clone`].
    pub fn try_clone(&self) -> Result<Tensor> {
        self.to(self.device)
    }

    /// The elements in row-major order of [`dims`](Tensor::dims) as a host vector of `T`
    /// (whose dtype must be the tensor's). Waits for every queued write to the tensor. An
    /// uncommitted tensor reads as empty.
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

    /// The raw contents in row-major order (`storage_bytes()` bytes). Waits for queued
    /// writes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.storage.is_none() {
            return Ok(Vec::new());
        }
        let src = self.dense_storage("to_bytes")?;
        backend("to_bytes", self.device)?.download(src, self.storage_bytes())
    }

    // ---- crate-internal access for the views, ops and backends ----

    /// Copies `src`'s elements into this tensor's own storage (same device, dims and
    /// dtype; this tensor dense and not shared), so the allocation and its id stay: the
    /// in-place write of the collectives that compute on the host.
    pub(crate) fn overwrite_with(&mut self, op: &'static str, src: &Tensor) -> Result<()> {
        if src.device != self.device || src.dtype != self.dtype || src.dims() != self.dims() {
            return Err(Error::invalid(
                op,
                format!(
                    "internal: overwrite of a {:?} {} tensor on {} with a {:?} {} one on {}",
                    self.dims(),
                    self.dtype,
                    self.device,
                    src.dims(),
                    src.dtype,
                    src.device
                ),
            ));
        }
        if self.numel() == 0 {
            return Ok(());
        }
        self.check_writable(op, "tensor")?;
        let bytes = self.storage_bytes();
        let be = backend(op, self.device)?;
        let from = src.dense_storage(op)?;
        let to = self
            .storage_mut()
            .ok_or_else(|| Error::invalid(op, "`tensor` has no storage of its own"))?;
        be.copy(from, to, bytes)
    }

    /// A tensor sharing this one's storage under `layout`.
    pub(crate) fn view(&self, layout: Layout) -> Tensor {
        Tensor {
            layout,
            dtype: self.dtype,
            device: self.device,
            storage: self.storage.clone(),
            dense: OnceLock::new(),
            derived: OnceLock::new(),
            allocation: self.allocation,
        }
    }

    /// What `make` derives from this tensor's current elements (made at the first call and
    /// kept until they change), or `None` when an earlier call kept a derived form of
    /// another type. One form per tensor, found by its type alone: callers check that it
    /// fits their use (its shape, its direction) before trusting it.
    pub(crate) fn derived<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<Arc<T>> {
        let kept = self
            .derived
            .get_or_init(|| Arc::new(make()) as Arc<dyn Any + Send + Sync>);
        Arc::clone(kept).downcast::<T>().ok()
    }

    /// The storage this tensor (or the base it views) owns, whatever the layout.
    pub(crate) fn base_storage(&self) -> Option<&Storage> {
        self.storage.as_deref()
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The elements as dense storage: the tensor's own when it is dense, else a copy made
    /// once by the strided-copy kernel and kept with the view.
    pub(crate) fn dense_storage(&self, op: &'static str) -> Result<&Storage> {
        let base = self
            .storage
            .as_deref()
            .ok_or_else(|| Error::invalid(op, "the tensor has no storage"))?;
        if self.layout.is_dense() {
            return Ok(base);
        }
        if let Some(s) = self.dense.get() {
            return Ok(s);
        }
        let be = backend(op, self.device)?;
        let mut dst = be.alloc(self.storage_bytes())?;
        be.strided_copy(op, base, &self.layout, self.dtype, &mut dst)?;
        // Another thread may have won the race; either copy holds the same elements.
        let _ = self.dense.set(dst);
        Ok(self.dense.get().expect("set above"))
    }

    /// The tensor's storage for a backend: dense storage (after [`Tensor::dense_storage`]
    /// ran in dispatch), `None` when uncommitted or not yet materialised.
    pub(crate) fn storage(&self) -> Option<&Storage> {
        let base = self.storage.as_deref()?;
        if self.layout.is_dense() {
            Some(base)
        } else {
            self.dense.get()
        }
    }

    /// The storage for writing: `None` unless committed, dense and not shared (ops check
    /// [`Tensor::check_writable`] first).
    pub(crate) fn storage_mut(&mut self) -> Option<&mut Storage> {
        if !self.layout.is_dense() {
            return None;
        }
        // The caller may change the elements: what was derived from them goes.
        self.derived = OnceLock::new();
        self.storage.as_mut().and_then(Arc::get_mut)
    }

    /// Makes an uncommitted tensor take `device` (an op's output adoption).
    pub(crate) fn adopt(&mut self, device: Device) {
        if self.storage.is_none() {
            self.device = device;
        }
    }

    /// The CPU contents as `&[T]`. Callers guarantee a committed host tensor of `T` whose
    /// dense storage dispatch made, or an uncommitted one (no elements: empty).
    pub(crate) fn host<T: Element>(&self) -> &[T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        let n = self.numel();
        match self.storage() {
            Some(Storage::Host(h)) => &bytemuck::cast_slice(h.bytes())[..n],
            // An uncommitted input reads as empty.
            None if n == 0 => &[],
            _ => panic!("host(): not a committed dense CPU tensor"),
        }
    }

    /// The CPU contents as `&[W]` for a plain word type `W` of the dtype's element size (the
    /// structural ops move elements without looking at them). Callers guarantee a committed
    /// dense host tensor.
    pub(crate) fn host_words<W: bytemuck::Pod>(&self) -> &[W] {
        assert_eq!(Some(std::mem::size_of::<W>()), self.dtype.size_bytes());
        let n = self.numel();
        match self.storage() {
            Some(Storage::Host(h)) => &bytemuck::cast_slice(h.bytes())[..n],
            // An uncommitted input reads as empty.
            None if n == 0 => &[],
            _ => panic!("host_words(): not a committed dense CPU tensor"),
        }
    }

    /// [`Tensor::host_words`] for writing; callers guarantee a writable host tensor.
    pub(crate) fn host_words_mut<W: bytemuck::Pod>(&mut self) -> &mut [W] {
        assert_eq!(Some(std::mem::size_of::<W>()), self.dtype.size_bytes());
        let n = self.numel();
        match self.storage_mut() {
            Some(Storage::Host(h)) => &mut bytemuck::cast_slice_mut(h.bytes_mut())[..n],
            _ => panic!("host_words_mut(): not a committed writable CPU tensor"),
        }
    }

    /// The CPU storage of this tensor's base as `&[T]`, whatever the layout (for backends
    /// that read views in place). Callers guarantee a committed host tensor of `T`.
    pub(crate) fn base_host<T: Element>(&self) -> &[T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        match self.storage.as_deref() {
            Some(Storage::Host(h)) => bytemuck::cast_slice(h.bytes()),
            _ => panic!("base_host(): not a committed CPU tensor"),
        }
    }

    /// The CPU contents as `&mut [T]`. Callers guarantee a committed, writable host tensor
    /// of `T` (see [`Tensor::check_writable`]).
    pub(crate) fn host_mut<T: Element>(&mut self) -> &mut [T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        let n = self.numel();
        match self.storage_mut() {
            Some(Storage::Host(h)) => &mut bytemuck::cast_slice_mut(h.bytes_mut())[..n],
            _ => panic!("host_mut(): not a committed writable CPU tensor"),
        }
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
