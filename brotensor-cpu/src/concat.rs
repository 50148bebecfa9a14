//! CPU reference of the concat category: row and channel concatenation, splits and strided device copies.
