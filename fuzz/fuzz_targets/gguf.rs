//! Any byte string given to the GGUF reader either fails with an `Error` or yields tensor
//! infos whose byte ranges lie inside the file; small tensors are dequantized as a user would.
#![no_main]

use brotensor::io::gguf::{dequantize, dequantize_tensor, shape_to_2d, upload_raw, GgufFile};
use libfuzzer_sys::fuzz_target;

/// Tensors up to this many elements are dequantized (bounds the work per input).
const MAX_DEQUANT_ELEMS: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    assert!(file.alignment().is_power_of_two());
    for (key, value) in file.metadata() {
        assert!(file.find_meta(key).is_some());
        let _ = format!("{value:?}");
        // Every typed read either converts or errors; an integer read agrees with the value
        // the key finds (the first entry when a file repeats a key).
        if let Some(v) = file.find_meta(key).and_then(|v| v.as_u64()) {
            assert_eq!(file.meta_u64(key).ok(), Some(v), "{key}");
        }
        let _ = value.as_i64();
        let _ = (file.meta_i64(key), file.meta_f64(key), file.meta_bool(key));
        let _ = (
            file.meta_str(key),
            file.meta_str_array(key),
            file.meta_f64_array(key),
        );
    }
    for info in file.tensors() {
        let bytes = file.data(info);
        assert_eq!(bytes.len(), info.nbytes);
        assert!(info.offset + info.nbytes <= data.len());
        if let Ok((rows, cols)) = shape_to_2d(&info.shape) {
            assert_eq!((rows as u64).checked_mul(cols as u64), Some(info.numel));
        }
        // numpy-order dims are the ggml shape reversed, when they fit.
        if let Ok(dims) = info.dims() {
            let back: Vec<u64> = dims.iter().rev().map(|&d| d as u64).collect();
            assert_eq!(back, info.shape, "{}", info.name);
        }
        if let Some(dtype) = info.dtype {
            if info.numel <= MAX_DEQUANT_ELEMS {
                // The shaped forms: an N-d tensor of the info's dims, or an error.
                if let (Ok(t), Ok(dims)) = (upload_raw(&file, info), info.dims()) {
                    assert_eq!(t.dims(), dims, "{}", info.name);
                }
                if let Ok(t) = dequantize_tensor(&file, info) {
                    assert_eq!(t.numel() as u64, info.numel, "{}", info.name);
                }
                if let Ok(values) = dequantize(dtype, bytes) {
                    assert_eq!(values.len() as u64, info.numel, "{}", info.name);
                }
            }
        }
    }
});
