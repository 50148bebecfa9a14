//! The GGUF reader against a file written by the Python `gguf` package
//! (tests/fixtures/make_gguf.py), and against malformed input.

use brotensor::io::gguf::{self, GgufFile, Value};
use brotensor::{Device, Dtype, Error};
use brotensor_tests::gpu_devices;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mixed.gguf");

#[test]
fn reads_what_python_wrote() {
    let f = GgufFile::open(FIXTURE).unwrap();
    assert_eq!((f.version(), f.alignment()), (3, 32));
    let meta = |k: &str| {
        f.find_meta(k)
            .cloned()
            .unwrap_or_else(|| panic!("no `{k}`"))
    };
    assert_eq!(meta("general.architecture"), Value::String("llama".into()));
    assert_eq!(meta("test.u8"), Value::U8(200));
    assert_eq!(meta("test.i8"), Value::I8(-5));
    assert_eq!(meta("test.u16"), Value::U16(60000));
    assert_eq!(meta("test.i16"), Value::I16(-30000));
    assert_eq!(meta("llama.context_length"), Value::U32(2048));
    assert_eq!(meta("test.i32"), Value::I32(-123456));
    assert_eq!(meta("test.scale"), Value::F32(0.125));
    assert_eq!(meta("test.flag"), Value::Bool(true));
    assert_eq!(meta("test.name"), Value::String("brotensor \u{e9}".into()));
    assert_eq!(meta("test.u64"), Value::U64(1 << 40));
    assert_eq!(meta("test.i64"), Value::I64(-(1 << 40)));
    assert_eq!(meta("test.f64"), Value::F64(1.5));
    assert!(matches!(meta("test.ints"), Value::Array(v) if v.len() == 3));
    assert_eq!(
        meta("test.strings"),
        Value::Array(vec![Value::String("a".into()), Value::String("bc".into())])
    );
    assert!(
        matches!(meta("test.nested"), Value::Array(v) if matches!(&v[0], Value::Array(inner) if inner.len() == 2))
    );
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["alpha", "half", "q8", "q4_0", "cube"]);
    let alpha = f.get_tensor("alpha").unwrap();
    assert_eq!(
        (alpha.shape.as_slice(), alpha.dtype, alpha.nbytes),
        (&[3u64, 2][..], Some(Dtype::F32), 24)
    );
    let q8 = f.get_tensor("q8").unwrap();
    assert_eq!(
        (q8.type_name.as_str(), q8.dtype, q8.nbytes, q8.numel),
        ("Q8_0", Some(Dtype::Q8_0), 68, 64)
    );
    assert_eq!(gguf::shape_to_2d(&alpha.shape).unwrap(), (2, 3));
    assert_eq!(
        gguf::shape_to_2d(&f.get_tensor("cube").unwrap().shape).unwrap(),
        (6, 4)
    );
    assert_eq!(gguf::shape_to_2d(&[5]).unwrap(), (5, 1));
    assert!(gguf::shape_to_2d(&[]).is_err() && gguf::shape_to_2d(&[3, 0]).is_err());
    assert!(gguf::shape_to_2d(&[u64::MAX, 2, 2]).is_err());
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let t = gguf::upload_raw_on(dev, &f, alpha, 2, 3).unwrap();
        assert_eq!(
            t.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "{dev}"
        );
        let q = gguf::upload_raw_on(dev, &f, q8, 2, 32).unwrap();
        assert_eq!(
            (q.dtype(), q.to_bytes().unwrap()),
            (Dtype::Q8_0, f.data(q8).to_vec())
        );
        // A quantized tensor needs whole blocks per row.
        assert!(gguf::upload_raw_on(dev, &f, q8, 64, 1).is_err());
        assert!(gguf::upload_raw_on(dev, &f, alpha, 3, 3).is_err());
    }
}

/// A minimal v3 file: one F32 tensor of `dims`, `ty`, and `extra_kv` metadata bytes.
fn build(
    version: u32,
    kv: &[(&str, u32, Vec<u8>)],
    tensors: &[(&str, &[u64], u32, u64)],
    data: &[u8],
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    };
    for (k, ty, v) in kv {
        string(&mut b, k);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(v);
    }
    for (name, dims, ty, off) in tensors {
        string(&mut b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&off.to_le_bytes());
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.extend_from_slice(data);
    b
}

fn rejects(bytes: Vec<u8>, needle: &str) {
    match GgufFile::from_bytes(bytes) {
        Err(Error::Format { reason, .. }) => {
            assert!(reason.contains(needle), "`{reason}` lacks `{needle}`")
        }
        other => panic!("expected a format error containing `{needle}`, got {other:?}"),
    }
}

#[test]
fn malformed_files_are_clean_errors() {
    let good = std::fs::read(FIXTURE).unwrap();
    for cut in 0..good.len() {
        if let Ok(f) = GgufFile::from_bytes(good[..cut].to_vec()) {
            panic!("prefix of {cut} bytes accepted: {f:?}");
        }
    }
    let t = [("t", &[2u64][..], 0u32, 0u64)];
    assert!(GgufFile::from_bytes(build(3, &[], &t, &[0; 8])).is_ok());
    let mut magic = build(3, &[], &t, &[0; 8]);
    magic[0] = b'X';
    rejects(magic, "bad magic");
    rejects(build(1, &[], &t, &[0; 8]), "version 1");
    rejects(build(4, &[], &t, &[0; 8]), "version 4");
    rejects(
        build(3, &[("k", 13, vec![])], &t, &[0; 8]),
        "unknown value type 13",
    );
    rejects(
        build(3, &[("k", 7, vec![2])], &t, &[0; 8]),
        "neither 0 nor 1",
    );
    let mut huge_array = 4u32.to_le_bytes().to_vec();
    huge_array.extend_from_slice(&u64::MAX.to_le_bytes());
    rejects(build(3, &[("k", 9, huge_array)], &t, &[0; 8]), "bytes left");
    rejects(
        build(3, &[("k", 8, u64::MAX.to_le_bytes().to_vec())], &t, &[0; 8]),
        "truncated",
    );
    rejects(
        build(
            3,
            &[("general.alignment", 4, 3u32.to_le_bytes().to_vec())],
            &t,
            &[0; 8],
        ),
        "power-of-two",
    );
    rejects(
        build(
            3,
            &[("general.alignment", 10, 32u64.to_le_bytes().to_vec())],
            &t,
            &[0; 8],
        ),
        "power-of-two",
    );
    rejects(build(3, &[], &[("t", &[], 0, 0)], &[]), "n_dims 0");
    rejects(build(3, &[], &[("t", &[1; 9], 0, 0)], &[]), "n_dims 9");
    rejects(build(3, &[], &[("t", &[0], 0, 0)], &[]), "must be positive");
    rejects(
        build(3, &[], &[("t", &[1 << 40, 1 << 40], 0, 0)], &[]),
        "overflows",
    );
    rejects(
        build(3, &[], &[("t", &[33], 8, 0)], &[0; 64]),
        "whole number of Q8_0 blocks",
    );
    rejects(
        build(3, &[], &[("t", &[2], 0, 4096)], &[0; 8]),
        "past the end",
    );
    rejects(
        build(3, &[], &[("t", &[2], 0, u64::MAX)], &[0; 8]),
        "overflows",
    );
    let mut many = build(3, &[], &t, &[0; 8]);
    many[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    rejects(many, "cannot fit");
    // Unknown and not-yet-carried types are listed with their names, not refused.
    let f = GgufFile::from_bytes(build(
        3,
        &[],
        &[("iq", &[256], 16, 0), ("odd", &[4], 99, 0)],
        &[0; 66],
    ))
    .unwrap();
    let iq = f.get_tensor("iq").unwrap();
    assert_eq!(
        (iq.type_name.as_str(), iq.dtype, iq.nbytes),
        ("IQ2_XXS", None, 66)
    );
    assert_eq!(f.get_tensor("odd").unwrap().type_name, "unknown(99)");
    let e = gguf::upload_raw(&f, iq, 1, 256).unwrap_err();
    assert!(e.to_string().contains("IQ2_XXS"), "{e}");
    assert!(matches!(
        GgufFile::open("/nonexistent.gguf"),
        Err(Error::Io { .. })
    ));
}

#[test]
fn dequantization_matches_the_gguf_package_bit_for_bit() {
    let f = GgufFile::open(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/quants.gguf")).unwrap();
    let mut checked = 0;
    for info in f.tensors().iter().filter(|t| !t.name.ends_with(".deq")) {
        let want_info = f.get_tensor(&format!("{}.deq", info.name)).unwrap();
        let want: Vec<u32> = f
            .data(want_info)
            .chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let got = gguf::dequantize(info.dtype.unwrap(), f.data(info)).unwrap();
        assert_eq!(got.len(), want.len(), "{}", info.name);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                *w,
                "{} element {i}: {g} vs {}",
                info.name,
                f32::from_bits(*w)
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 13, "every block type in the fixture");
    // Q8_1 and Q8_K (which the package does not dequantize), from their definitions.
    let mut q81 = vec![0u8; 36];
    q81[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    q81[4] = 0xFE; // -2
    q81[35] = 7;
    let y = gguf::dequantize(Dtype::Q8_1, &q81).unwrap();
    assert_eq!((y[0], y[31], y[1]), (-1.0, 3.5, 0.0));
    let mut q8k = vec![0u8; 292];
    q8k[..4].copy_from_slice(&0.25f32.to_le_bytes());
    q8k[4] = 0x80; // -128
    q8k[259] = 4;
    let y = gguf::dequantize(Dtype::Q8_K, &q8k).unwrap();
    assert_eq!((y[0], y[255], y.len()), (-32.0, 1.0, 256));
    assert!(gguf::dequantize(Dtype::Q4_K, &[0; 100]).is_err());
    assert!(gguf::dequantize(Dtype::I32, &[0; 4]).is_err());
}

/// Asserts that two readers hold the same header, metadata, tensor table and tensor bytes.
fn assert_same_contents(a: &GgufFile, b: &GgufFile) {
    assert_eq!((a.version(), a.alignment()), (b.version(), b.alignment()));
    assert_eq!(a.metadata(), b.metadata());
    assert_eq!(a.tensors().len(), b.tensors().len());
    for (x, y) in a.tensors().iter().zip(b.tensors()) {
        assert_eq!(
            (&x.name, &x.shape, x.ggml_type, &x.type_name, x.dtype),
            (&y.name, &y.shape, y.ggml_type, &y.type_name, y.dtype)
        );
        assert_eq!((x.numel, x.offset, x.nbytes), (y.numel, y.offset, y.nbytes));
        assert_eq!(a.data(x), b.data(y), "`{}`", x.name);
    }
}

#[test]
fn mapped_and_copying_readers_agree() {
    let quants = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/quants.gguf");
    for path in [FIXTURE, quants] {
        let mapped = GgufFile::open(path).unwrap();
        let copied = GgufFile::read(path).unwrap();
        assert_same_contents(&mapped, &copied);
        let owned = GgufFile::from_bytes(std::fs::read(path).unwrap()).unwrap();
        assert_same_contents(&copied, &owned);
    }
    assert_eq!(GgufFile::read(FIXTURE).unwrap().tensors().len(), 5);
    let e = GgufFile::read("/nonexistent.gguf").unwrap_err();
    assert!(
        matches!(&e, Error::Io { op: "gguf", path, .. } if path == "/nonexistent.gguf"),
        "{e}"
    );
    // The copying reader validates as the mapped one does.
    let path = std::env::temp_dir().join(format!(
        "brotensor-gguf-read-bad-{}.gguf",
        std::process::id()
    ));
    std::fs::write(&path, &std::fs::read(FIXTURE).unwrap()[..40]).unwrap();
    let e = GgufFile::read(&path).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert!(matches!(e, Error::Format { .. }), "{e}");
}

#[test]
fn the_copying_reader_keeps_its_data_when_the_file_is_overwritten() {
    let path =
        std::env::temp_dir().join(format!("brotensor-gguf-read-{}.gguf", std::process::id()));
    std::fs::copy(FIXTURE, &path).unwrap();
    let copied = GgufFile::read(&path).unwrap();
    // Other bytes, shorter than before: a mapped reader would now see a truncated file.
    std::fs::write(&path, b"GGUF, but only in name").unwrap();
    assert!(GgufFile::open(&path).is_err(), "the file did change");
    std::fs::remove_file(&path).ok();
    assert_same_contents(&copied, &GgufFile::open(FIXTURE).unwrap());
    let alpha = copied.get_tensor("alpha").unwrap();
    let t = gguf::upload_raw_on(Device::Cpu, &copied, alpha, 2, 3).unwrap();
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
}
