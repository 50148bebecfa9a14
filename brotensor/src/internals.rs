//! Crate internals for the workspace's own tests (the `internals` feature, which only
//! `brotensor-tests` turns on): each module's `checks`, the assertions that were its unit
//! tests. The tests call them from `tests/tests/all/internals.rs`, so the library is built
//! once for every test target instead of a second time as its own test harness (about five
//! CPU-minutes of a cold CI build). Not an API.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use crate::backend::checks::algebra as backend_algebra;
pub use crate::backend::checks::elementwise as backend_elementwise;
pub use crate::backend::checks::host_pool;
pub use crate::device::checks as device;
pub use crate::display::checks as display;
pub use crate::dtype::checks as dtype;
pub use crate::layout::checks as layout;
pub use crate::ops::declared::{recording, Declared};
pub use crate::ops::Role;
