//! Tests of the concat ops.
