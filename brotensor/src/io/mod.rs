//! Model files: safetensors (reader and writer) and GGUF (reader); and image files (PNG and
//! JPEG in, PNG out: [`image`], the `image` feature).
//!
//! # Mapped or copied
//!
//! Both readers have two ways in. `open` (the default) memory-maps the file: opening costs
//! almost nothing whatever the file's size, and tensor views point straight into the
//! operating system's page cache. `read` copies the whole file into memory first: it costs
//! the file's size in RAM and the time to read it, and in exchange later changes to the file
//! on disk cannot reach it. Both validate the file in the same way (one parser serves both)
//! and give the same tensors and metadata.
//!
//! A memory map is only as stable as the file behind it, and nothing in the operating system
//! stops another process (or this one) from changing that file while the map lives:
//!
//! - if the file is **truncated**, reading a page that no longer exists raises `SIGBUS` on
//!   Unix-like systems and the process dies; no `Result` can report it;
//! - if its bytes are **rewritten in place**, views already handed out as `&[u8]` change
//!   under the borrow, which Rust counts as undefined behaviour, and the changed bytes skip
//!   the validation done at open.
//!
//! brotensor cannot detect either. While a mapped reader is alive, treat its file as
//! read-only: to update a model, write the new file elsewhere and rename it over the old path
//! (on Unix-like systems an open map keeps the old contents), or use `read` when files may
//! change underneath.

use std::path::Path;

use crate::{Error, Result};

pub mod gguf;
#[cfg(feature = "image")]
pub mod image;
pub mod safetensors;

/// A model file's bytes: a read-only memory map of the file, or an owned copy. The parsers
/// see only `&[u8]`, so both readers validate either kind with the same code.
pub(crate) enum FileBytes {
    /// Mapped with `mmap`; valid while the file is not changed (see the module docs).
    Mapped(memmap2::Mmap),
    /// Copied into memory (`read`, `from_bytes`).
    Owned(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}

impl FileBytes {
    /// Maps the file at `path` read-only; errors name `op` and the path.
    pub(crate) fn map(op: &'static str, path: &Path) -> Result<FileBytes> {
        let file = std::fs::File::open(path).map_err(|e| io_error(op, path, e))?;
        // SAFETY: the map is read-only and owned by the reader that holds this value, which
        // lends views no longer than itself. As with every mmap, its contents stay valid only
        // while the file is neither truncated nor rewritten (the caveat the module docs and
        // every `open` state); the parsers check all offsets against the mapped length.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_error(op, path, e))?;
        Ok(FileBytes::Mapped(map))
    }

    /// Reads the whole file at `path` into memory; errors name `op` and the path.
    pub(crate) fn read(op: &'static str, path: &Path) -> Result<FileBytes> {
        std::fs::read(path)
            .map(FileBytes::Owned)
            .map_err(|e| io_error(op, path, e))
    }
}

fn io_error(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}
