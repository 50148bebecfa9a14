//! The projected ops and the KV cache.
