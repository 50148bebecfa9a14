//! The real models against references that are not our code, on the CPU and on every GPU, in
//! one test binary: one process compiles each GPU kernel once for all of them (software
//! devices keep no compiled kernels between processes), one link instead of eight, and the
//! test threads share the long tests. `cargo test -p brotensor-models --test real_models
//! whisper` runs one model's tests.

mod common;
mod dcgan;
mod digits;
mod models;
mod ocr;
mod ppocr;
mod silero;
mod terrain;
mod whisper;
