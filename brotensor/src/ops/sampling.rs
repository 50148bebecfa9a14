//! The sampling ops: token sampling and the Philox random-number ops.
