//! The rope ops: rotary position embeddings.
