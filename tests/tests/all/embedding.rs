//! Tests of the embedding ops.
