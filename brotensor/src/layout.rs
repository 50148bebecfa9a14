//! Shapes and strided layouts. A tensor's elements are addressed by a rank-0 to rank-8 shape,
//! one stride per dim (in elements, negative for flipped dims, 0 for broadcast dims) and an
//! offset into its storage. A fresh tensor is row-major with offset 0 (*dense*); views are
//! other layouts over the same storage.

use crate::{Error, Result};

/// The highest rank a tensor may have.
pub const MAX_RANK: usize = 8;

/// A shape, strides and offset (all in elements).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Layout {
    rank: usize,
    dims: [usize; MAX_RANK],
    strides: [isize; MAX_RANK],
    offset: usize,
}

/// Errors unless `dims` has at most [`MAX_RANK`] dims whose product fits in `usize` (and in
/// `isize`, so that every stride and offset does too); returns the element count.
pub(crate) fn checked_dims(op: &'static str, dims: &[usize]) -> Result<usize> {
    if dims.len() > MAX_RANK {
        return Err(Error::shape(
            op,
            format!(
                "rank {} ({dims:?}) is above the maximum rank {MAX_RANK}",
                dims.len()
            ),
        ));
    }
    let numel = crate::ops::checked_product(op, "the dims", dims)?;
    if numel > isize::MAX as usize {
        return Err(Error::shape(
            op,
            format!("{dims:?} holds more than isize::MAX elements"),
        ));
    }
    Ok(numel)
}

/// The product of `dims`: 0 when one of them is 0, whatever the others (a zero-element
/// view may order its dims so that a partial product of the others overflows: a transpose
/// of `[0, 2^63, 4]`), else the product, which a checked layout's dims never overflow (any
/// part of them included). Saturates instead of panicking where that does not hold.
pub(crate) fn dims_product(dims: &[usize]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    dims.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
}

/// Row-major strides of `dims`. Callers have checked the dims with [`checked_dims`], so no
/// partial product overflows.
fn row_major(dims: &[usize]) -> [isize; MAX_RANK] {
    let mut strides = [0isize; MAX_RANK];
    let mut step = 1usize;
    for d in (0..dims.len()).rev() {
        strides[d] = step as isize;
        step = step.saturating_mul(dims[d]);
    }
    strides
}

/// The shape numpy broadcasting gives two operands: dims aligned at the end, each pair equal
/// or one of them 1.
pub(crate) fn broadcast_dims(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |d: &[usize], i: usize| (i + d.len()).checked_sub(rank).map_or(1, |j| d[j]);
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(Error::shape(
                op,
                format!(
                    "shapes {} and {} do not broadcast: dim {i} is {x} vs {y}",
                    show_dims(a, "x"),
                    show_dims(b, "x")
                ),
            )),
        })
        .collect()
}

/// `dims` joined by `sep` for messages (`2x3x4` with `"x"`, `2 x 3 x 4` with `" x "`),
/// `scalar` for rank 0.
pub(crate) fn show_dims(dims: &[usize], sep: &str) -> String {
    if dims.is_empty() {
        return "scalar".into();
    }
    dims.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}

impl Layout {
    /// A dense row-major layout of `dims`.
    pub(crate) fn dense(op: &'static str, dims: &[usize]) -> Result<Layout> {
        checked_dims(op, dims)?;
        let mut d = [0usize; MAX_RANK];
        d[..dims.len()].copy_from_slice(dims);
        Ok(Layout {
            rank: dims.len(),
            dims: d,
            strides: row_major(dims),
            offset: 0,
        })
    }

    /// A layout with explicit strides and offset over the same storage as `self` (a
    /// broadcast, a diagonal). Errors when the rank or a stride count is wrong or it reaches
    /// outside the elements `self` reaches.
    pub(crate) fn restrided(
        &self,
        op: &'static str,
        dims: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Layout> {
        checked_dims(op, dims)?;
        if strides.len() != dims.len() {
            return Err(Error::invalid(op, "one stride per dim"));
        }
        let mut out = Layout::dense(op, dims)?;
        out.strides[..dims.len()].copy_from_slice(strides);
        out.offset = offset;
        let reach = |l: &Layout| brotensor_cpu::strided::span(l.dims(), l.strides(), l.offset);
        if !dims.contains(&0) {
            let inside = match (reach(&out), reach(self)) {
                (Some((lo, hi)), Some((a, b))) => lo >= a && hi <= b,
                _ => false,
            };
            if !inside {
                return Err(Error::invalid(op, "the view reaches outside its tensor"));
            }
        }
        Ok(out)
    }

    /// The dims.
    pub(crate) fn dims(&self) -> &[usize] {
        &self.dims[..self.rank]
    }

    /// The strides, in elements.
    pub(crate) fn strides(&self) -> &[isize] {
        &self.strides[..self.rank]
    }

    /// The storage index of the first element.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// Elements (checked at construction).
    pub(crate) fn numel(&self) -> usize {
        dims_product(self.dims())
    }

    /// The matrix view: every leading dim folded into rows, the last dim as cols (rank 0 is
    /// `1 x 1`). A zero-element view whose leading dims multiply past `usize` (possible only
    /// with 0 columns) reports `usize::MAX` rows.
    pub(crate) fn rows_cols(&self) -> (usize, usize) {
        match self.dims().split_last() {
            None => (1, 1),
            Some((&cols, lead)) => (dims_product(lead), cols),
        }
    }

    /// Whether the elements are row-major and gap-free (size-1 dims may have any stride).
    pub(crate) fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut step = 1isize;
        for d in (0..self.rank).rev() {
            if self.dims[d] != 1 && self.strides[d] != step {
                return false;
            }
            step *= self.dims[d] as isize;
        }
        true
    }

    /// Whether this is the layout of a fresh tensor: contiguous from storage index 0.
    pub(crate) fn is_dense(&self) -> bool {
        self.offset == 0 && self.is_contiguous()
    }

    fn check_dim(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.rank {
            return Err(Error::shape(
                op,
                format!(
                    "dim {dim} is out of range for rank {} {:?}",
                    self.rank,
                    self.dims()
                ),
            ));
        }
        Ok(())
    }

    /// The dims reordered: output dim `i` is input dim `perm[i]`.
    pub(crate) fn permute(&self, op: &'static str, perm: &[usize]) -> Result<Layout> {
        let mut seen = [false; MAX_RANK];
        let valid = perm.len() == self.rank
            && perm
                .iter()
                .all(|&p| p < self.rank && !std::mem::replace(&mut seen[p], true));
        if !valid {
            return Err(Error::shape(
                op,
                format!(
                    "{perm:?} is not a permutation of the {} dims of {:?}",
                    self.rank,
                    self.dims()
                ),
            ));
        }
        let mut out = *self;
        for (i, &p) in perm.iter().enumerate() {
            out.dims[i] = self.dims[p];
            out.strides[i] = self.strides[p];
        }
        Ok(out)
    }

    /// Every `step`-th index of `dim` in `start..end`, walked backwards from the range's last
    /// index when `step` is negative (numpy's `x[start:end][::step]`).
    pub(crate) fn slice(
        &self,
        op: &'static str,
        dim: usize,
        start: usize,
        end: usize,
        step: isize,
    ) -> Result<Layout> {
        self.check_dim(op, dim)?;
        let n = self.dims[dim];
        if start > end || end > n {
            return Err(Error::shape(
                op,
                format!("range {start}..{end} is out of bounds for dim {dim} of size {n}"),
            ));
        }
        if step == 0 {
            return Err(Error::invalid(op, "the step must not be 0"));
        }
        let len = end - start;
        let mag = step.unsigned_abs();
        let count = len.div_ceil(mag);
        let mut out = *self;
        out.dims[dim] = count;
        if count == 0 {
            return Ok(out);
        }
        let first = if step > 0 { start } else { end - 1 };
        // In range for a layout with elements (its span covers every index of `dim`); a
        // zero-element layout may carry strides whose products overflow: refused.
        let offset = isize::try_from(first)
            .ok()
            .and_then(|f| f.checked_mul(self.strides[dim]))
            .and_then(|d| (self.offset as isize).checked_add(d));
        match (offset, self.strides[dim].checked_mul(step)) {
            (Some(offset), Some(stride)) => {
                out.offset = offset as usize;
                out.strides[dim] = stride;
                Ok(out)
            }
            _ => Err(Error::shape(
                op,
                format!(
                    "a view of dims {:?} along dim {dim} overflows its offset or stride",
                    self.dims()
                ),
            )),
        }
    }

    /// The dims (rank at least 1) broadcast to `dims` by numpy's rules: new leading dims and
    /// size-1 dims repeat with stride 0.
    pub(crate) fn broadcast_to(&self, op: &'static str, dims: &[usize]) -> Result<Layout> {
        checked_dims(op, dims)?;
        let fits = broadcast_dims(op, self.dims(), dims).map(|b| b == dims);
        if !matches!(fits, Ok(true)) {
            return Err(Error::shape(
                op,
                format!("{:?} cannot be broadcast to {dims:?}", self.dims()),
            ));
        }
        let lead = dims.len() - self.rank;
        let mut out = Layout {
            rank: dims.len(),
            dims: [0; MAX_RANK],
            strides: [0; MAX_RANK],
            offset: self.offset,
        };
        out.dims[..dims.len()].copy_from_slice(dims);
        for i in 0..self.rank {
            out.strides[lead + i] = if self.dims[i] == dims[lead + i] {
                self.strides[i]
            } else {
                0
            };
        }
        Ok(out)
    }

    /// `dims` reversed.
    pub(crate) fn flip(&self, op: &'static str, dims: &[usize]) -> Result<Layout> {
        let mut out = *self;
        let mut seen = [false; MAX_RANK];
        for &d in dims {
            self.check_dim(op, d)?;
            if std::mem::replace(&mut seen[d], true) {
                return Err(Error::shape(op, format!("dim {d} is listed twice")));
            }
            out = out.slice(op, d, 0, self.dims[d], -1)?;
        }
        Ok(out)
    }

    /// A size-1 dim inserted before `dim` (`dim == rank` appends).
    pub(crate) fn unsqueeze(&self, op: &'static str, dim: usize) -> Result<Layout> {
        if dim > self.rank || self.rank == MAX_RANK {
            return Err(Error::shape(
                op,
                format!(
                    "cannot insert dim {dim} into rank {} {:?}",
                    self.rank,
                    self.dims()
                ),
            ));
        }
        let mut out = *self;
        out.rank += 1;
        for i in (dim + 1..out.rank).rev() {
            out.dims[i] = self.dims[i - 1];
            out.strides[i] = self.strides[i - 1];
        }
        out.dims[dim] = 1;
        out.strides[dim] = if dim < self.rank {
            // Saturating as in `row_major`: only a zero-element layout can reach the bound,
            // and it never reads through its strides.
            self.strides[dim].saturating_mul(self.dims[dim] as isize)
        } else {
            1
        };
        Ok(out)
    }

    /// `dim` (of size 1) removed.
    pub(crate) fn squeeze(&self, op: &'static str, dim: usize) -> Result<Layout> {
        self.check_dim(op, dim)?;
        if self.dims[dim] != 1 {
            return Err(Error::shape(
                op,
                format!(
                    "dim {dim} of {:?} has size {}, not 1",
                    self.dims(),
                    self.dims[dim]
                ),
            ));
        }
        let mut out = *self;
        out.rank -= 1;
        for i in dim..out.rank {
            out.dims[i] = self.dims[i + 1];
            out.strides[i] = self.strides[i + 1];
        }
        out.dims[out.rank] = 0;
        out.strides[out.rank] = 0;
        Ok(out)
    }

    /// The same elements in row-major order under `dims`, without moving them, where the
    /// strides allow it; `Ok(None)` where only a copy can give that shape.
    pub(crate) fn reshape(&self, op: &'static str, dims: &[usize]) -> Result<Option<Layout>> {
        let numel = checked_dims(op, dims)?;
        if numel != self.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "{:?} has {} elements, {dims:?} has {numel}",
                    self.dims(),
                    self.numel()
                ),
            ));
        }
        let mut out = Layout::dense(op, dims)?;
        out.offset = self.offset;
        if self.is_contiguous() {
            return Ok(Some(out));
        }
        // Size-1 dims never move an address: drop them. Split the rest into runs that are
        // contiguous among themselves; each run must be covered exactly by consecutive new
        // dims, which then take strides inside the run.
        let (old_dims, old_strides): (Vec<usize>, Vec<isize>) = self
            .dims()
            .iter()
            .zip(self.strides())
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (n, s))
            .unzip();
        let mut new_at = dims.len();
        let mut end = old_dims.len();
        while end > 0 {
            let inner = old_strides[end - 1];
            let mut run = old_dims[end - 1];
            let mut begin = end - 1;
            while begin > 0 && old_strides[begin - 1] == inner * run as isize {
                begin -= 1;
                run *= old_dims[begin];
            }
            let mut covered = 1usize;
            while new_at > 0 && (covered < run || dims[new_at - 1] == 1) {
                new_at -= 1;
                out.strides[new_at] = inner * covered as isize;
                covered *= dims[new_at];
            }
            if covered != run {
                return Ok(None);
            }
            end = begin;
        }
        // Leading size-1 new dims left over take any stride.
        Ok(Some(out))
    }
}

/// How an operand of an element-wise op is read row by row, over output rows of a width it
/// may fix (see [`Layout::row_pattern`]). Offsets are storage indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowPattern {
    /// Contiguous elements from `offset`, row-major like the output (any row width).
    Dense { offset: usize },
    /// One row of `cols` contiguous values from `offset`, read by every output row.
    Row { offset: usize, cols: usize },
    /// One value per output row of `cols` (consecutive storage values from `offset`).
    PerRow { offset: usize, cols: usize },
    /// One value for every element (any row width).
    Scalar { offset: usize },
}

impl RowPattern {
    /// The output row width this pattern needs, if it fixes one.
    pub(crate) fn cols(&self) -> Option<usize> {
        match *self {
            RowPattern::Row { cols, .. } | RowPattern::PerRow { cols, .. } => Some(cols),
            RowPattern::Dense { .. } | RowPattern::Scalar { .. } => None,
        }
    }
}

/// The row patterns of two operands of one dims and the output row width they share, or
/// `None` when either needs a copy or they fix different widths.
pub(crate) fn shared_row_patterns(
    x: &Layout,
    y: &Layout,
) -> Option<(RowPattern, RowPattern, usize)> {
    let (px, py) = (x.row_pattern()?, y.row_pattern()?);
    let cols = match (px.cols(), py.cols()) {
        (Some(a), Some(b)) if a != b => return None,
        (Some(c), _) | (_, Some(c)) => c,
        (None, None) => x.rows_cols().1,
    };
    Some((px, py, cols))
}

impl Layout {
    /// This layout as a [`RowPattern`], when it is one (after size-1 dims are dropped and
    /// contiguous neighbours merged); `None` for other strides, which need a copy.
    pub(crate) fn row_pattern(&self) -> Option<RowPattern> {
        let offset = self.offset;
        if self.is_contiguous() {
            return Some(RowPattern::Dense { offset });
        }
        let (dims, strides) = brotensor_cpu::strided::simplify(self.dims(), self.strides());
        let merged: Vec<(usize, isize)> = dims.into_iter().zip(strides).collect();
        match merged[..] {
            [(_, 0)] => Some(RowPattern::Scalar { offset }),
            [(_, 0), (cols, 1)] => Some(RowPattern::Row { offset, cols }),
            [(_, 1), (cols, 0)] => Some(RowPattern::PerRow { offset, cols }),
            _ => None,
        }
    }
}

#[cfg(feature = "internals")]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
    use super::*;

    fn dense(d: &[usize]) -> Layout {
        Layout::dense("t", d).unwrap()
    }

    pub fn row_major_strides_and_matrix_view() {
        let l = dense(&[2, 3, 4]);
        assert_eq!(l.strides(), [12, 4, 1]);
        assert_eq!(l.rows_cols(), (6, 4));
        assert_eq!(dense(&[]).rows_cols(), (1, 1));
        assert_eq!(dense(&[0, 5]).rows_cols(), (0, 5));
        assert!(Layout::dense("t", &[1; 9]).is_err());
        assert!(Layout::dense("t", &[usize::MAX, 2]).is_err());
    }

    pub fn views_compose() {
        let l = dense(&[4, 6]);
        let t = l.permute("t", &[1, 0]).unwrap();
        assert_eq!((t.dims(), t.strides()), (&[6, 4][..], &[1isize, 6][..]));
        assert!(!t.is_contiguous());
        let s = l.slice("t", 1, 1, 6, 2).unwrap();
        assert_eq!(
            (s.dims(), s.strides(), s.offset()),
            (&[4, 3][..], &[6isize, 2][..], 1)
        );
        let r = l.slice("t", 1, 0, 5, -2).unwrap();
        assert_eq!((r.dims()[1], r.strides()[1], r.offset()), (3, -2, 4));
        let b = dense(&[3, 1]).broadcast_to("t", &[2, 3, 5]).unwrap();
        assert_eq!(b.strides(), [0, 1, 0]);
        assert!(dense(&[3, 2]).broadcast_to("t", &[3, 4]).is_err());
        let u = l.unsqueeze("t", 1).unwrap();
        assert_eq!(
            (u.dims(), u.strides()),
            (&[4, 1, 6][..], &[6isize, 6, 1][..])
        );
        assert_eq!(u.squeeze("t", 1).unwrap(), l);
        assert!(l.permute("t", &[0, 0]).is_err());
        assert!(l.slice("t", 2, 0, 1, 1).is_err());
        assert!(l.slice("t", 0, 2, 5, 1).is_err());
    }

    pub fn reshape_views_where_strides_allow() {
        // A transposed matrix cannot be flattened without a copy...
        let t = dense(&[4, 6]).permute("t", &[1, 0]).unwrap();
        assert_eq!(t.reshape("t", &[24]).unwrap(), None);
        // ...but its dims can be split.
        let s = t.reshape("t", &[2, 3, 4]).unwrap().unwrap();
        assert_eq!(s.strides(), [3, 1, 6]);
        // Row slices stay reshapeable when the rows are whole.
        let rows = dense(&[4, 6]).slice("t", 0, 1, 3, 1).unwrap();
        let flat = rows.reshape("t", &[12]).unwrap().unwrap();
        assert_eq!((flat.strides(), flat.offset()), (&[1isize][..], 6));
        assert!(dense(&[4, 6]).reshape("t", &[5, 5]).is_err());
    }

    pub fn row_patterns_of_broadcasts() {
        let out = [4, 3, 5];
        let row = dense(&[5]).broadcast_to("t", &out).unwrap();
        assert_eq!(
            row.row_pattern(),
            Some(RowPattern::Row { offset: 0, cols: 5 })
        );
        let plane = dense(&[3, 5]).broadcast_to("t", &out).unwrap();
        assert_eq!(
            plane.row_pattern(),
            Some(RowPattern::Row {
                offset: 0,
                cols: 15
            })
        );
        let col = dense(&[4, 3, 1]).broadcast_to("t", &out).unwrap();
        assert_eq!(
            col.row_pattern(),
            Some(RowPattern::PerRow { offset: 0, cols: 5 })
        );
        let one = dense(&[1]).broadcast_to("t", &out).unwrap();
        assert_eq!(one.row_pattern(), Some(RowPattern::Scalar { offset: 0 }));
        assert_eq!(
            dense(&out).row_pattern(),
            Some(RowPattern::Dense { offset: 0 })
        );
        // A middle-dim broadcast repeats neither one row nor one value per row.
        let mid = dense(&[4, 1, 5]).broadcast_to("t", &out).unwrap();
        assert_eq!(mid.row_pattern(), None);
        assert_eq!(
            dense(&[3, 4]).permute("t", &[1, 0]).unwrap().row_pattern(),
            None
        );
    }

    pub fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_dims("t", &[3, 1], &[4]).unwrap(), [3, 4]);
        assert_eq!(broadcast_dims("t", &[], &[2, 2]).unwrap(), [2, 2]);
        assert!(broadcast_dims("t", &[3], &[4]).is_err());
    }
}
