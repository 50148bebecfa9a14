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
        let t = gguf::upload_raw_on(dev, &f, alpha).unwrap();
        assert_eq!(
            (t.dims(), t.to_vec::<f32>().unwrap()),
            (&[2usize, 3][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            "{dev}"
        );
        let q = gguf::upload_raw_on(dev, &f, q8).unwrap();
        assert_eq!(
            (q.dtype(), q.dims(), q.to_bytes().unwrap()),
            (Dtype::Q8_0, &[2usize, 32][..], f.data(q8).to_vec())
        );
    }
}

/// Every scalar and array the fixture script wrote, through the typed accessors of `Value`
/// and `GgufFile`.
#[test]
fn typed_metadata_reads() {
    let f = GgufFile::open(FIXTURE).unwrap();
    // Unsigned and signed integers of every width read as u64 when non-negative, as i64 when
    // they fit, and as f64 (exactly).
    for (key, want) in [
        ("test.u8", 200i64),
        ("test.i8", -5),
        ("test.u16", 60000),
        ("test.i16", -30000),
        ("llama.context_length", 2048),
        ("test.i32", -123456),
        ("test.u64", 1 << 40),
        ("test.i64", -(1 << 40)),
    ] {
        let v = f.meta(key).unwrap();
        assert_eq!(v.as_i64(), Some(want), "{key}");
        assert_eq!(f.meta_i64(key).unwrap(), want, "{key}");
        assert_eq!(v.as_u64(), u64::try_from(want).ok(), "{key}");
        assert_eq!(f.meta_f64(key).unwrap(), want as f64, "{key}");
        assert_eq!(
            (v.as_bool(), v.as_str(), v.as_array()),
            (None, None, None),
            "{key}"
        );
        if want < 0 {
            let e = f.meta_u64(key).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { op: "gguf", .. }),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "brotensor: gguf: `{key}` is {} {want}, not a non-negative integer",
                    v.type_name()
                )
            );
        } else {
            assert_eq!(f.meta_u64(key).unwrap(), want as u64, "{key}");
        }
    }
    assert_eq!(f.meta_u64("llama.context_length").unwrap(), 2048);
    assert_eq!(f.meta_f64("test.scale").unwrap(), 0.125);
    assert_eq!(f.meta_f64("test.f64").unwrap(), 1.5);
    assert!(f.meta_bool("test.flag").unwrap());
    assert_eq!(f.meta_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.meta_str("test.name").unwrap(), "brotensor \u{e9}");
    // Floats are not integers, and nothing else converts to a bool or a string.
    for key in ["test.scale", "test.f64"] {
        assert_eq!(
            (f.meta(key).unwrap().as_u64(), f.meta(key).unwrap().as_i64()),
            (None, None)
        );
        assert!(
            f.meta_u64(key).is_err() && f.meta_i64(key).is_err(),
            "{key}"
        );
    }
    assert!(f.meta_bool("test.u8").is_err());
    assert!(f.meta_str("test.flag").is_err());
    assert!(f.meta_f64("test.flag").is_err() && f.meta_f64("test.name").is_err());
    // Arrays: raw, and as typed views when every element converts.
    assert_eq!(f.meta_array("test.ints").unwrap().len(), 3);
    assert_eq!(f.meta_u64_array("test.ints").unwrap(), [1, 2, 3]);
    assert_eq!(f.meta_i64_array("test.ints").unwrap(), [1, 2, 3]);
    assert_eq!(f.meta_f64_array("test.ints").unwrap(), [1.0, 2.0, 3.0]);
    assert_eq!(f.meta_str_array("test.strings").unwrap(), ["a", "bc"]);
    let nested = f.meta_array("test.nested").unwrap();
    assert_eq!(
        nested.iter().map(|v| v.as_u64_array()).collect::<Vec<_>>(),
        [Some(vec![1, 2]), Some(vec![3])]
    );
    assert!(f.meta_u64_array("test.nested").is_err());
    assert!(f.meta_str_array("test.ints").is_err());
    assert!(f.meta_u64_array("test.strings").is_err());
    assert!(f.meta_array("test.name").is_err());
    assert_eq!(f.meta("test.u8").unwrap().as_u64_array(), None);
    assert_eq!(
        f.meta_str("test.strings").unwrap_err().to_string(),
        "brotensor: gguf: `test.strings` is an Array of 2 elements, not a String"
    );
    assert_eq!(
        f.meta_u64("test.name").unwrap_err().to_string(),
        "brotensor: gguf: `test.name` is a String of 12 bytes, not a non-negative integer"
    );
    // A missing key is an error naming it, from every typed read.
    let missing = "no.such.key";
    let want = "brotensor: gguf: `no.such.key`: no such metadata key";
    assert_eq!(f.meta(missing).unwrap_err().to_string(), want);
    for e in [
        f.meta_u64(missing).err(),
        f.meta_i64(missing).err(),
        f.meta_f64(missing).err(),
        f.meta_bool(missing).map(|_| ()).err(),
        f.meta_str(missing).map(|_| ()).err(),
        f.meta_array(missing).map(|_| ()).err(),
        f.meta_u64_array(missing).map(|_| ()).err(),
        f.meta_i64_array(missing).map(|_| ()).err(),
        f.meta_f64_array(missing).map(|_| ()).err(),
        f.meta_str_array(missing).map(|_| ()).err(),
    ] {
        assert_eq!(e.expect("missing").to_string(), want);
    }
}

/// Edge values of the conversions, on values built in memory.
#[test]
fn value_conversions_at_their_limits() {
    assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
    assert_eq!(Value::U64(u64::MAX).as_i64(), None);
    assert_eq!(Value::U64(i64::MAX as u64).as_i64(), Some(i64::MAX));
    assert_eq!(Value::I64(i64::MIN).as_i64(), Some(i64::MIN));
    assert_eq!(Value::I64(-1).as_u64(), None);
    assert_eq!(Value::I8(0).as_u64(), Some(0));
    // f64 takes integers up to 2^53 in magnitude, exactly, and no further.
    assert_eq!(Value::I64(1 << 53).as_f64(), Some(9007199254740992.0));
    assert_eq!(Value::I64(-(1 << 53)).as_f64(), Some(-9007199254740992.0));
    assert_eq!(Value::I64((1 << 53) + 1).as_f64(), None);
    assert_eq!(Value::U64(u64::MAX).as_f64(), None);
    assert_eq!(Value::F32(0.1).as_f64(), Some(f64::from(0.1f32)));
    assert_eq!(Value::Bool(true).as_u64(), None);
    assert_eq!(Value::Bool(false).as_f64(), None);
    assert_eq!(Value::U8(1).as_bool(), None);
    assert_eq!(Value::Array(vec![]).as_str_array(), Some(vec![]));
    assert_eq!(
        Value::Array(vec![Value::U8(1), Value::I8(-1)]).as_u64_array(),
        None
    );
    assert_eq!(
        Value::Array(vec![Value::U8(1), Value::I8(-1)]).as_i64_array(),
        Some(vec![1, -1])
    );
    assert_eq!(
        Value::Array(vec![Value::F32(0.5), Value::U16(2)]).as_f64_array(),
        Some(vec![0.5, 2.0])
    );
    assert_eq!(Value::String("x".into()).as_str_array(), None);
    assert_eq!(
        [
            Value::U8(0),
            Value::I16(0),
            Value::F64(0.0),
            Value::Bool(true),
            Value::String(String::new()),
            Value::Array(vec![])
        ]
        .iter()
        .map(Value::type_name)
        .collect::<Vec<_>>(),
        ["U8", "I16", "F64", "Bool", "String", "Array"]
    );
}

/// `dims()` is numpy order (what make_gguf.py passed to numpy), `shape` is ggml order, and an
/// upload takes its N-d shape from the info.
#[test]
fn dims_are_numpy_order_and_uploads_take_them() {
    let f = GgufFile::open(FIXTURE).unwrap();
    let want: [(&str, &[usize]); 5] = [
        ("alpha", &[2, 3]),
        ("half", &[2, 4]),
        ("q8", &[2, 32]),
        ("q4_0", &[2, 32]),
        ("cube", &[2, 3, 4]),
    ];
    for (name, dims) in want {
        let info = f.get_tensor(name).unwrap();
        assert_eq!(info.dims().unwrap(), dims, "{name}");
        let reversed: Vec<u64> = dims.iter().rev().map(|&d| d as u64).collect();
        assert_eq!(
            info.shape, reversed,
            "{name}: ggml order is innermost first"
        );
    }
    let cube = f.get_tensor("cube").unwrap();
    let half = f.get_tensor("half").unwrap();
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let t = gguf::upload_raw_on(dev, &f, cube).unwrap();
        assert_eq!(
            (t.dims(), t.rank(), t.dtype()),
            (&[2usize, 3, 4][..], 3, Dtype::F32)
        );
        assert_eq!(
            (t.rows(), t.cols()),
            gguf::shape_to_2d(&cube.shape).unwrap()
        );
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0; 24], "{dev}");
        let h = gguf::upload_raw_on(dev, &f, half).unwrap();
        assert_eq!((h.dims(), h.dtype()), (&[2usize, 4][..], Dtype::F16));
        assert_eq!(h.to_bytes().unwrap(), f.data(half), "{dev}");
    }
    // The default-device form gives the same tensor.
    let t = gguf::upload_raw(&f, cube).unwrap();
    assert_eq!(t.dims(), [2, 3, 4]);
    // An info edited to a shape its bytes cannot fill is an error, not a panic.
    let mut odd = f.get_tensor("q8").unwrap().clone();
    odd.shape = vec![16, 4];
    assert!(
        gguf::upload_raw_on(Device::Cpu, &f, &odd).is_err(),
        "half a Q8_0 block per row"
    );
    odd.shape = vec![32, 3];
    assert!(
        gguf::upload_raw_on(Device::Cpu, &f, &odd).is_err(),
        "too few bytes"
    );
    odd.shape = vec![u64::MAX];
    match odd.dims() {
        Ok(d) => assert_eq!(d, [usize::MAX]),
        Err(e) => assert!(e.to_string().starts_with("brotensor: gguf::dims: "), "{e}"),
    }
    assert!(gguf::upload_raw_on(Device::Cpu, &f, &odd).is_err());
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
    let e = gguf::upload_raw(&f, iq).unwrap_err();
    assert!(e.to_string().contains("IQ2_XXS"), "{e}");
    assert_eq!(iq.dims().unwrap(), [256]);
    let e = gguf::dequantize_tensor_on(Device::Cpu, &f, iq).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("brotensor: gguf::dequantize_tensor: `iq` is IQ2_XXS"),
        "{e}"
    );
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
        // The shaped form: an F32 tensor of the info's dims, holding the same bits, on
        // every device.
        assert_eq!(info.dims().unwrap(), [2, 256], "{}", info.name);
        for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
            let t = gguf::dequantize_tensor_on(dev, &f, info).unwrap();
            assert_eq!((t.dims(), t.dtype()), (&[2usize, 256][..], Dtype::F32));
            let bits: Vec<u32> = t
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert!(
                bits == want,
                "{} on {dev}: shaped dequantization differs",
                info.name
            );
        }
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
    // Float tensors dequantize too (F32 unchanged, F16 widened), and keep their dims.
    let mixed = GgufFile::open(FIXTURE).unwrap();
    let alpha = gguf::dequantize_tensor(&mixed, mixed.get_tensor("alpha").unwrap()).unwrap();
    assert_eq!(
        (alpha.dims(), alpha.to_vec::<f32>().unwrap()),
        (&[2usize, 3][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    );
    let half = gguf::dequantize_tensor(&mixed, mixed.get_tensor("half").unwrap()).unwrap();
    assert_eq!(
        (half.dims(), half.dtype(), half.to_vec::<f32>().unwrap()),
        (
            &[2usize, 4][..],
            Dtype::F32,
            (0..8).map(|i| i as f32).collect::<Vec<_>>()
        )
    );
    let q4 = mixed.get_tensor("q4_0").unwrap();
    assert_eq!(
        gguf::dequantize_tensor(&mixed, q4)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        gguf::dequantize(Dtype::Q4_0, mixed.data(q4)).unwrap()
    );
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
    let t = gguf::upload_raw_on(Device::Cpu, &copied, alpha).unwrap();
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
}
