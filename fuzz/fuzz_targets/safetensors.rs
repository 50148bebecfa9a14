//! Any byte string given to the safetensors reader either fails with an `Error` or yields a
//! file whose every view is consistent, and which the writer reproduces.
#![no_main]

use std::collections::BTreeMap;

use brotensor::io::safetensors::{serialize, SafeTensors, WriteEntry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = SafeTensors::from_bytes(data.to_vec()) else {
        return;
    };
    let views: Vec<_> = file.tensors().collect();
    assert_eq!(views.len(), file.len());
    for v in &views {
        assert_eq!(v.data.len(), v.numel() * v.dtype.size_bytes(), "{}", v.name);
        let again = file.get(v.name).expect("a listed tensor is found by name");
        assert_eq!(again.data.as_ptr(), v.data.as_ptr());
    }
    // Whatever was accepted must survive a write and a re-read unchanged.
    let entries: Vec<_> = views
        .iter()
        .map(|v| WriteEntry {
            name: v.name,
            dtype: v.dtype,
            shape: v.shape,
            data: v.data,
        })
        .collect();
    let metadata: BTreeMap<String, String> = file.metadata().clone();
    let bytes = serialize(&entries, &metadata).expect("an accepted file re-serializes");
    let back = SafeTensors::from_bytes(bytes).expect("a written file re-opens");
    assert_eq!(back.metadata(), &metadata);
    let back_views: Vec<_> = back.tensors().collect();
    assert_eq!(back_views.len(), views.len());
    for (a, b) in views.iter().zip(&back_views) {
        assert_eq!((a.name, a.dtype, a.shape, a.data), (b.name, b.dtype, b.shape, b.data));
    }
});
