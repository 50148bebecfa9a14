//! CPU reference of the rope category: rotary position embeddings.
