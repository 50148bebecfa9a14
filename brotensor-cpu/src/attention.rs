//! CPU reference of the attention category: attention without the flash kernels: single-head, multi-head, self and cross attention, masks.
