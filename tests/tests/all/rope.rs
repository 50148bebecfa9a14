//! Tests of the rope ops.
