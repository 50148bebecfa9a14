//! Tests of the attention ops.
