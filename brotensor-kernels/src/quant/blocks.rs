//! The block layouts of the GGUF weight types as #[cube] decoders (one per type).
