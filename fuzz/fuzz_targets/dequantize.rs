//! Host dequantization of arbitrary blocks: never a panic; it succeeds exactly for float and
//! block dtypes given whole blocks, with one F32 per element.
#![no_main]

use brotensor::io::gguf::dequantize;
use brotensor::Dtype;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let dtype = Dtype::ALL[pick as usize % Dtype::ALL.len()];
    let (elems, block_bytes) = (dtype.block_size(), dtype.block_bytes());
    let decodable = dtype.is_float() || dtype.is_quant();
    match dequantize(dtype, bytes) {
        Ok(values) => {
            assert!(decodable && bytes.len() % block_bytes == 0, "{dtype}");
            assert_eq!(values.len(), bytes.len() / block_bytes * elems);
        }
        Err(_) => assert!(!decodable || bytes.len() % block_bytes != 0, "{dtype}"),
    }
});
