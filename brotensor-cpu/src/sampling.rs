//! CPU reference of the sampling category: token sampling and the Philox random-number ops.
