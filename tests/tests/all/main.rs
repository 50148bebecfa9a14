//! brotensor's integration tests, in one binary (so the GPU check kit carries one file).

mod buffer_stability;
mod cast_rounding;
mod concurrency;
mod coverage_gaps;
mod custom_kernel;
mod default_device;
mod dispatch;
mod gguf;
mod parity_activation;
mod parity_elementwise;
mod parity_linear;
mod parity_norm;
mod parity_reduction;
mod reference_activation;
mod reference_elementwise;
mod reference_linear;
mod reference_loss;
mod reference_norm;
mod reference_reduction;
mod regressions;
mod reshaped_views;
mod safetensors;
mod sizes;
mod tensor_errors;
mod views;
mod zero_element;
