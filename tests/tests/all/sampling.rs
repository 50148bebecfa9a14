//! Tests of the sampling ops.
