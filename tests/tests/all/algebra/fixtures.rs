//! Every case of `tests/fixtures/algebra/cases.json` (numpy 2.4.6, `make_algebra.py`) on
//! every device: the ops against numpy's float64 / complex128 / exact results.

use brotensor::ops::{self, Comparison, GatherDims, ScatterDims};
use brotensor::{Device, Dtype, Result, Tensor};
use serde_json::Value;

use super::{build, check, devices, supported, values};

fn dtype(s: &str) -> Dtype {
    match s {
        "f32" => Dtype::F32,
        "f64" => Dtype::F64,
        "i64" => Dtype::I64,
        "c64" => Dtype::C64,
        "c128" => Dtype::C128,
        other => panic!("unknown dtype {other}"),
    }
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad number {other}"),
        },
        v => v.as_f64().expect("a number"),
    }
}

fn dims(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_i64().unwrap())
        .collect()
}

/// A fixture tensor: its dtype, dims and `(re, im)` values (i64 values exact).
struct Data {
    dtype: Dtype,
    dims: Vec<usize>,
    values: Vec<(f64, f64)>,
    exact_ints: Vec<i64>,
}

fn data(v: &Value) -> Data {
    let dtype = dtype(v["dtype"].as_str().unwrap());
    let raw = v["data"].as_array().unwrap();
    let values = if dtype.is_complex() {
        raw.chunks(2)
            .map(|p| (number(&p[0]), number(&p[1])))
            .collect()
    } else {
        raw.iter().map(|x| (number(x), 0.0)).collect()
    };
    let exact_ints = if dtype == Dtype::I64 {
        raw.iter().map(|x| x.as_i64().unwrap()).collect()
    } else {
        Vec::new()
    };
    Data {
        dtype,
        dims: dims(&v["dims"]),
        values,
        exact_ints,
    }
}

fn tensor(device: Device, d: &Data) -> Tensor {
    if d.dtype == Dtype::I64 {
        return Tensor::from_slice_nd_on(device, &d.exact_ints, &d.dims).unwrap();
    }
    build(device, d.dtype, &d.dims, &d.values)
}

/// Runs one case's op.
fn run(op: &str, p: &Value, t: &[Tensor]) -> Result<Tensor> {
    let u = |k: &str| p[k].as_u64().unwrap() as usize;
    Ok(match op {
        "exp" => ops::exp(&t[0])?,
        "log" => ops::log(&t[0])?,
        "sin" => ops::sin(&t[0])?,
        "cos" => ops::cos(&t[0])?,
        "tanh" => ops::tanh(&t[0])?,
        "sqrt" => ops::sqrt(&t[0])?,
        "rsqrt" => ops::rsqrt(&t[0])?,
        "expm1" => ops::expm1(&t[0])?,
        "log1p" => ops::log1p(&t[0])?,
        "abs" => ops::abs(&t[0])?,
        "sign" => ops::sign(&t[0])?,
        "neg" => ops::neg(&t[0])?,
        "conj" => ops::conj(&t[0])?,
        "add" => ops::add(&t[0], &t[1])?,
        "sub" => ops::sub(&t[0], &t[1])?,
        "mul" => ops::mul(&t[0], &t[1])?,
        "div" => ops::div(&t[0], &t[1])?,
        "maximum" => ops::maximum(&t[0], &t[1])?,
        "minimum" => ops::minimum(&t[0], &t[1])?,
        "pow" => ops::pow(&t[0], &t[1])?,
        "compare" => {
            let c = match p["direction"].as_str().unwrap() {
                "eq" => Comparison::Eq,
                "ne" => Comparison::Ne,
                "lt" => Comparison::Lt,
                "le" => Comparison::Le,
                "gt" => Comparison::Gt,
                _ => Comparison::Ge,
            };
            ops::compare(&t[0], &t[1], c)?
        }
        "select" => ops::select(&t[0], &t[1], &t[2])?,
        "clamp" => ops::clamp_between(&t[0], &t[1], &t[2])?,
        "transpose" => ops::transpose(&t[0], &dims(&p["perm"]))?,
        "broadcast_in_dim" => {
            ops::broadcast_in_dim(&t[0], &dims(&p["shape"]), &dims(&p["broadcast_dimensions"]))?
        }
        "reverse" => ops::reverse(&t[0], &dims(&p["axes"]))?,
        "concatenate" => ops::concatenate(&t.iter().collect::<Vec<_>>(), u("axis"))?,
        "convert" => ops::convert(&t[0], dtype(p["to"].as_str().unwrap()))?,
        "slice" => ops::slice(
            &t[0],
            &dims(&p["start"]),
            &dims(&p["limit"]),
            &dims(&p["strides"]),
        )?,
        "dynamic_slice" => {
            let starts = Tensor::from_slice_nd_on(
                t[0].device(),
                &ints(&p["start_indices"]),
                &[t[0].rank()],
            )?;
            ops::dynamic_slice(&t[0], &starts, &dims(&p["sizes"]))?
        }
        "pad" => {
            let interior: Vec<u64> = ints(&p["interior"]).into_iter().map(|v| v as u64).collect();
            ops::pad(&t[0], &ints(&p["low"]), &ints(&p["high"]), &interior)?
        }
        "gather" => {
            let g = GatherDims {
                offset_dims: dims(&p["offset_dims"]),
                collapsed_slice_dims: dims(&p["collapsed_slice_dims"]),
                start_index_map: dims(&p["start_index_map"]),
                index_vector_dim: u("index_vector_dim"),
            };
            ops::gather(&t[0], &t[1], &g, &dims(&p["slice_sizes"]))?
        }
        "scatter" => {
            let s = ScatterDims {
                update_window_dims: dims(&p["update_window_dims"]),
                inserted_window_dims: dims(&p["inserted_window_dims"]),
                scatter_dims_to_operand_dims: dims(&p["scatter_dims_to_operand_dims"]),
                index_vector_dim: u("index_vector_dim"),
            };
            ops::scatter_add(&t[0], &t[1], &t[2], &s)?
        }
        "extract_diagonal" => ops::extract_diagonal(&t[0], u("axis1"), u("axis2"))?,
        "embed_diagonal" => ops::embed_diagonal(&t[0], u("axis1"), u("axis2"))?,
        "tril" => ops::tril(&t[0], p["k"].as_i64().unwrap())?,
        "triu" => ops::triu(&t[0], p["k"].as_i64().unwrap())?,
        "reduce_sum" => ops::reduce_sum(&t[0], u("axis"))?,
        "reduce_prod" => ops::reduce_prod(&t[0], u("axis"))?,
        "reduce_max" => ops::reduce_max(&t[0], u("axis"))?,
        "reduce_min" => ops::reduce_min(&t[0], u("axis"))?,
        other => panic!("no runner for op {other}"),
    })
}

/// The tolerance of a case: 0 (exact) for data movement, conversions and integers, else
/// relative to the output's scale by the output's precision.
fn tolerance(op: &str, out: Dtype) -> f64 {
    let moves = matches!(
        op,
        "transpose"
            | "broadcast_in_dim"
            | "reverse"
            | "concatenate"
            | "slice"
            | "dynamic_slice"
            | "pad"
            | "gather"
            | "extract_diagonal"
            | "embed_diagonal"
            | "tril"
            | "triu"
    );
    // Exact up to the reference's own rounding of an f32 value.
    let selects = matches!(
        op,
        "neg"
            | "conj"
            | "abs"
            | "sign"
            | "compare"
            | "select"
            | "maximum"
            | "minimum"
            | "clamp"
            | "convert"
    );
    let single = matches!(out, Dtype::F32 | Dtype::C64);
    match (moves || out == Dtype::I64, op.starts_with("reduce"), single) {
        (true, _, _) => 0.0,
        _ if selects => 1e-15,
        (_, true, true) => 5e-5,
        (_, false, true) => 1e-5,
        (_, _, false) => 1e-12,
    }
}

#[test]
fn numpy_fixtures_on_every_device() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/algebra/cases.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(
        cases.len() > 1000,
        "the fixture file holds {} cases",
        cases.len()
    );
    for device in devices() {
        let (mut ran, mut unsupported) = (0, Vec::new());
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let op = case["op"].as_str().unwrap();
            let inputs: Vec<Data> = case["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .map(data)
                .collect();
            let want = data(&case["output"]);
            let dtypes = inputs.iter().map(|d| d.dtype).chain([want.dtype]);
            if let Some(d) = dtypes.clone().find(|&d| !supported(device, d)) {
                unsupported.push(format!("{name} ({d})"));
                continue;
            }
            let t: Vec<Tensor> = inputs.iter().map(|d| tensor(device, d)).collect();
            let result = run(op, &case["params"], &t);
            let got = result.unwrap_or_else(|e| panic!("{name} on {device}: {e}"));
            let tag = format!("{name} on {device}");
            assert_eq!(got.dims(), &want.dims[..], "{tag}: dims");
            assert_eq!(got.dtype(), want.dtype, "{tag}: dtype");
            if want.dtype == Dtype::I64 {
                assert_eq!(got.to_vec::<i64>().unwrap(), want.exact_ints, "{tag}");
            } else {
                check(&tag, &want.values, &values(&got), tolerance(op, want.dtype));
            }
            ran += 1;
        }
        eprintln!(
            "algebra fixtures on {device}: {ran} cases matched numpy, {} skipped as \
             unsupported dtypes{}",
            unsupported.len(),
            if unsupported.is_empty() {
                String::new()
            } else {
                format!(": {}", unsupported.join(", "))
            }
        );
        assert!(ran > 900, "{device}: only {ran} cases ran");
    }
}
