//! The safetensors reader and writer against a file written by the Python `safetensors`
//! package (tests/fixtures/make_safetensors.py), and against malformed input.

use std::collections::BTreeMap;

use brotensor::io::safetensors::{self as st, SafeTensors, StDtype, WriteEntry};
use brotensor::{Device, Dtype, Error};
use brotensor_tests::gpu_devices;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mixed.safetensors");

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(FIXTURE).expect("fixture present")
}

#[test]
fn reads_what_python_wrote() {
    let f = SafeTensors::open(FIXTURE).unwrap();
    assert_eq!(f.len(), 15);
    assert_eq!(
        f.metadata().get("note").map(String::as_str),
        Some("brotensor fixture")
    );
    let alpha = f.get("alpha").unwrap();
    assert_eq!((alpha.dtype, alpha.shape), (StDtype::F32, &[2usize, 3][..]));
    let values: Vec<f32> = alpha
        .data
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(values, vec![-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]);
    let cube = f.get("cube").unwrap();
    assert_eq!(cube.shape, &[2, 3, 4]);
    let flags = f.get("flags").unwrap();
    assert_eq!((flags.dtype, flags.data), (StDtype::BOOL, &[1u8, 0, 1][..]));
    let small = f.get("small.i8").unwrap();
    assert_eq!(
        small.data.iter().map(|&b| b as i8).collect::<Vec<_>>(),
        vec![-3, -2, -1, 0, 1, 2, 3, -3]
    );
    let empty = f.get("empty").unwrap();
    assert_eq!(
        (empty.shape, empty.data.len(), empty.numel()),
        (&[0usize, 4][..], 0, 0)
    );
    assert!(f.get("quoted \"name\"\\path").is_ok());
    assert!(f.find("missing").is_none());
    let e = f.get("missing").unwrap_err();
    assert_eq!(
        e.to_string(),
        "brotensor: safetensors::get: no tensor named `missing`"
    );
    // File order is data order.
    let offsets: Vec<*const u8> = f.tensors().map(|v| v.data.as_ptr()).collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn the_writer_reproduces_the_python_file_bit_for_bit() {
    let f = SafeTensors::open(FIXTURE).unwrap();
    let entries: Vec<WriteEntry> = f
        .tensors()
        .map(|v| WriteEntry {
            name: v.name,
            dtype: v.dtype,
            shape: v.shape,
            data: v.data,
        })
        .collect();
    let bytes = st::serialize(&entries, f.metadata()).unwrap();
    assert_eq!(bytes, fixture_bytes());
    // And a file of our own, through the filesystem, round-trips.
    let path =
        std::env::temp_dir().join(format!("brotensor-st-{}.safetensors", std::process::id()));
    let bf16 = [0x80u8, 0x3F, 0x00, 0x40]; // 1.0, 2.0
    let own = [
        WriteEntry {
            name: "w",
            dtype: StDtype::BF16,
            shape: &[2, 1],
            data: &bf16,
        },
        WriteEntry {
            name: "z",
            dtype: StDtype::F32,
            shape: &[0],
            data: &[],
        },
    ];
    st::write(&path, &own, &BTreeMap::new()).unwrap();
    let back = SafeTensors::open(&path).unwrap();
    assert_eq!(back.get("w").unwrap().data, &bf16);
    assert_eq!(back.get("z").unwrap().numel(), 0);
    std::fs::remove_file(&path).ok();
    assert_eq!(std::fs::read(&path).ok(), None);
}

#[test]
fn uploads_and_converts_on_every_device() {
    let f = SafeTensors::open(FIXTURE).unwrap();
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let alpha = st::upload_on(dev, &f.get("alpha").unwrap(), 3, 2).unwrap();
        assert_eq!(
            (alpha.shape(), alpha.dtype(), alpha.device()),
            ((3, 2), Dtype::F32, dev)
        );
        let half = st::upload_as_on(dev, &f.get("beta.half").unwrap(), 4, 1, Dtype::F32).unwrap();
        assert_eq!(
            half.to_vec::<f32>().unwrap(),
            vec![0.0, 0.25, 0.5, 0.75],
            "{dev}"
        );
        let narrowed = st::upload_as_on(dev, &f.get("alpha").unwrap(), 2, 3, Dtype::BF16).unwrap();
        assert_eq!(narrowed.dtype(), Dtype::BF16);
        // Wrong element counts and non-float dtypes are refused, naming the tensor.
        let e = st::upload_on(dev, &f.get("alpha").unwrap(), 4, 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "brotensor: safetensors::upload: `alpha` has 6 elements, not 4 x 2"
        );
        assert!(st::upload_on(dev, &f.get("idx.i64").unwrap(), 4, 1).is_err());
    }
    let e = st::upload_compute_checked(&f, "cube", 5, 5).unwrap_err();
    assert!(e.to_string().contains("tensor `cube`"), "{e}");
    let t = st::upload_compute_checked(&f, "cube", 6, 4).unwrap();
    assert_eq!(t.dtype(), brotensor::compute_dtype().unwrap());
}

/// A valid file with one tensor, for corrupting.
fn one_tensor(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn rejects(bytes: Vec<u8>, needle: &str) {
    match SafeTensors::from_bytes(bytes) {
        Err(Error::Format { reason, .. }) => {
            assert!(reason.contains(needle), "`{reason}` lacks `{needle}`")
        }
        other => panic!("expected a format error containing `{needle}`, got {other:?}"),
    }
}

#[test]
fn malformed_files_are_clean_errors() {
    // Every truncation of the Python file is refused (never a panic or an out-of-bounds read).
    let good = fixture_bytes();
    for cut in 0..good.len() {
        assert!(
            SafeTensors::from_bytes(good[..cut].to_vec()).is_err(),
            "prefix of {cut} bytes accepted"
        );
    }
    let ok = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    assert!(SafeTensors::from_bytes(one_tensor(ok, &[0; 8])).is_ok());
    rejects(vec![1, 2, 3], "too short");
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    rejects(huge, "exceeds");
    let mut past = 64u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}");
    rejects(past, "past the end");
    rejects(one_tensor("{not json", &[]), "not JSON");
    rejects(one_tensor("[1,2]", &[]), "not a JSON object");
    let mut bad_utf8 = 2u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(&[0xFF, 0xFE]);
    rejects(bad_utf8, "not UTF-8");
    rejects(
        one_tensor(&ok.replace("F32", "F31"), &[0; 8]),
        "unknown dtype `F31`",
    );
    rejects(
        one_tensor(&ok.replace("[0,8]", "[0,16]"), &[0; 8]),
        "not inside",
    );
    rejects(
        one_tensor(&ok.replace("[0,8]", "[8,0]"), &[0; 8]),
        "not inside",
    );
    rejects(
        one_tensor(&ok.replace("[2]", "[3]"), &[0; 8]),
        "nbytes/shape mismatch",
    );
    rejects(
        one_tensor(&ok.replace("[2]", "[-2]"), &[0; 8]),
        "not a non-negative integer",
    );
    rejects(
        one_tensor(
            &ok.replace("[2]", "[4294967296,4294967296,4294967296]"),
            &[0; 8],
        ),
        "overflows",
    );
    rejects(
        one_tensor(&ok.replace("[0,8]", "[0]"), &[0; 8]),
        "two values",
    );
    rejects(
        one_tensor(r#"{"a":{"dtype":"F32","shape":[2]}}"#, &[0; 8]),
        "has no `data_offsets`",
    );
    let two = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    rejects(one_tensor(two, &[0; 12]), "overlap");
    rejects(
        one_tensor(r#"{"__metadata__":{"k":1}}"#, &[]),
        "not a string",
    );
    // Writer errors.
    let dup = [
        WriteEntry {
            name: "a",
            dtype: StDtype::U8,
            shape: &[1],
            data: &[1],
        },
        WriteEntry {
            name: "a",
            dtype: StDtype::U8,
            shape: &[1],
            data: &[2],
        },
    ];
    assert!(st::serialize(&dup, &BTreeMap::new()).is_err());
    let short = [WriteEntry {
        name: "a",
        dtype: StDtype::F32,
        shape: &[2],
        data: &[0; 4],
    }];
    assert!(st::serialize(&short, &BTreeMap::new()).is_err());
    assert!(matches!(
        SafeTensors::open("/nonexistent/file.safetensors"),
        Err(Error::Io { .. })
    ));
}

/// Asserts that two readers hold the same tensors (names, dtypes, shapes, bytes, in order)
/// and the same metadata.
fn assert_same_contents(a: &SafeTensors, b: &SafeTensors) {
    assert_eq!(a.metadata(), b.metadata());
    assert_eq!(a.len(), b.len());
    for (x, y) in a.tensors().zip(b.tensors()) {
        assert_eq!(
            (x.name, x.dtype, x.shape, x.data),
            (y.name, y.dtype, y.shape, y.data)
        );
    }
}

#[test]
fn mapped_and_copying_readers_agree() {
    let mapped = SafeTensors::open(FIXTURE).unwrap();
    let copied = SafeTensors::read(FIXTURE).unwrap();
    assert_eq!(copied.len(), 15);
    assert_same_contents(&mapped, &copied);
    assert_same_contents(&copied, &SafeTensors::from_bytes(fixture_bytes()).unwrap());
    let e = SafeTensors::read("/nonexistent/file.safetensors").unwrap_err();
    assert!(
        matches!(&e, Error::Io { op: "safetensors", path, .. } if path == "/nonexistent/file.safetensors"),
        "{e}"
    );
    // The copying reader validates as the mapped one does.
    let path = std::env::temp_dir().join(format!(
        "brotensor-st-read-bad-{}.safetensors",
        std::process::id()
    ));
    std::fs::write(&path, &fixture_bytes()[..100]).unwrap();
    let e = SafeTensors::read(&path).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert!(matches!(e, Error::Format { .. }), "{e}");
}

#[test]
fn the_copying_reader_keeps_its_data_when_the_file_is_overwritten() {
    let path = std::env::temp_dir().join(format!(
        "brotensor-st-read-{}.safetensors",
        std::process::id()
    ));
    std::fs::copy(FIXTURE, &path).unwrap();
    let copied = SafeTensors::read(&path).unwrap();
    // Other bytes, shorter than before: a mapped reader would now see a truncated file.
    std::fs::write(&path, b"these bytes are not a safetensors file").unwrap();
    assert!(SafeTensors::open(&path).is_err(), "the file did change");
    std::fs::remove_file(&path).ok();
    assert_same_contents(&copied, &SafeTensors::open(FIXTURE).unwrap());
    // And its tensors still upload.
    let alpha = st::upload_on(Device::Cpu, &copied.get("alpha").unwrap(), 2, 3).unwrap();
    assert_eq!(
        alpha.to_vec::<f32>().unwrap(),
        vec![-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]
    );
}
