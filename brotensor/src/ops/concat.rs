//! The concat ops: row and channel concatenation, splits and strided device copies.
