//! The attention ops: attention without the flash kernels: single-head, multi-head, self and cross attention, masks.
