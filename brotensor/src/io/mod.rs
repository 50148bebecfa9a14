//! Model files: safetensors (mmap reader and writer) and GGUF (mmap reader).

pub mod gguf;
pub mod safetensors;
