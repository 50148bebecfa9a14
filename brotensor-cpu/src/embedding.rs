//! CPU reference of the embedding category: embedding lookups and row gathers/scatters.
