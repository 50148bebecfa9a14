//! Error cases of the contracts.
