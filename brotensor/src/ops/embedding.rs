//! The embedding ops: embedding lookups and row gathers/scatters.
