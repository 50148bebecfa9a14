//! Model files: safetensors (mmap reader and writer).

pub mod safetensors;
