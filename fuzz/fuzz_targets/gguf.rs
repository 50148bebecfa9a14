//! Any byte string given to the GGUF reader either fails with an `Error` or yields tensor
//! infos whose byte ranges lie inside the file; small tensors are dequantized as a user would.
#![no_main]

use brotensor::io::gguf::{dequantize, shape_to_2d, GgufFile};
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
    }
    for info in file.tensors() {
        let bytes = file.data(info);
        assert_eq!(bytes.len(), info.nbytes);
        assert!(info.offset + info.nbytes <= data.len());
        if let Ok((rows, cols)) = shape_to_2d(&info.shape) {
            assert_eq!((rows as u64).checked_mul(cols as u64), Some(info.numel));
        }
        if let Some(dtype) = info.dtype {
            if info.numel <= MAX_DEQUANT_ELEMS {
                if let Ok(values) = dequantize(dtype, bytes) {
                    assert_eq!(values.len() as u64, info.numel, "{}", info.name);
                }
            }
        }
    }
});
