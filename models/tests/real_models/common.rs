//! What the real-model tests share: their fixtures and the devices they run on.

use brotensor::{Device, Dtype};
use brotensor_models::files;
use serde_json::Value;

/// The path of a fixture in `tests/fixtures/models/`.
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name)
}

/// The little-endian f32 values of a binary fixture of `tests/fixtures/models/`.
pub fn f32_fixture(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixture(name)).expect("fixture");
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// A JSON fixture of `tests/fixtures/models/`.
pub fn json(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

/// A JSON list of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("number list")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

/// The CPU and every GPU (failing when `BROTENSOR_REQUIRE_GPU` names a missing kind), after
/// making sure the model files are there.
pub fn devices() -> Vec<Device> {
    files::ensure_models().expect("the model files (scripts/fetch-models.sh)");
    let mut all = vec![Device::Cpu];
    all.extend(brotensor_tests::gpu_devices());
    all
}

/// The (device, dtype) pairs a model test runs: F32 everywhere, each of the 16-bit `dtypes`
/// on the GPUs that have it (a note names `model` and each one skipped).
pub fn targets(model: &str, dtypes: &[Dtype]) -> Vec<(Device, Dtype)> {
    let mut out = Vec::new();
    for device in devices() {
        for &dtype in dtypes {
            if device == Device::Cpu && dtype != Dtype::F32 {
                continue;
            }
            if !brotensor::supports_dtype(device, dtype).unwrap() {
                eprintln!("note: {device} has no {dtype}; {model} not run in it there");
                continue;
            }
            out.push((device, dtype));
        }
    }
    out
}
