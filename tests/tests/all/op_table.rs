//! The wrong-device test, generated over the op table: for every public op, each committed
//! operand in turn on a second device must give `Error::DeviceMismatch` naming that operand,
//! never a panic and never `Ok`. The operands come from the op's own declaration (what its
//! dispatch records), not from a list in this test; an op that passes a tensor it does not
//! declare fails here, and so does an op that checks anything before its device rule.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use brotensor::internals::{recording, Declared};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::op_table::{OpEntry, Params, OP_TABLE};

/// Small, valid-looking arguments: the device rule must hold whatever they are.
struct Fixed;

impl Params for Fixed {
    fn usize(&mut self) -> usize {
        2
    }
    fn f32(&mut self) -> f32 {
        0.5
    }
    fn bool(&mut self) -> bool {
        false
    }
    fn dtype(&mut self) -> Dtype {
        Dtype::F32
    }
}

/// `n` distinct committed `2 x 2` F32 tensors on the CPU.
fn cpu_slots(n: usize) -> Vec<Tensor> {
    (0..n)
        .map(|i| {
            let v: Vec<f32> = (0..4).map(|j| (i * 4 + j) as f32 * 0.25 + 0.5).collect();
            Tensor::from_slice_on(Device::Cpu, &v, 2, 2).unwrap()
        })
        .collect()
}

/// Runs `entry` on `slots`, catching a panic; returns the result and every dispatch made.
fn run(
    entry: &OpEntry,
    slots: &mut [Tensor],
) -> (
    std::thread::Result<brotensor::Result<()>>,
    Vec<Vec<Declared>>,
) {
    recording(|| catch_unwind(AssertUnwindSafe(|| (entry.call)(slots, &mut Fixed))))
}

/// The operands `entry`'s op declared, with the slot each one is, or why that fails.
fn declared(entry: &OpEntry) -> Result<Vec<(Declared, usize)>, String> {
    let mut slots = cpu_slots(entry.slots);
    let ids: Vec<Option<u64>> = slots.iter().map(Tensor::allocation_id).collect();
    let (result, calls) = run(entry, &mut slots);
    if result.is_err() {
        return Err("panicked on the CPU".into());
    }
    let Some(first) = calls.into_iter().next() else {
        // One tensor has no other device to disagree with: it may check arguments first.
        return match entry.slots {
            1 => Ok(Vec::new()),
            _ => Err("returned without dispatching (a check ran before the device rule)".into()),
        };
    };
    let mut out = Vec::new();
    for d in first {
        if let Some(slot) = ids
            .iter()
            .position(|id| id.is_some() && *id == d.allocation)
        {
            out.push((d, slot));
        }
    }
    for slot in 0..entry.slots {
        if !out.iter().any(|(_, s)| *s == slot) {
            return Err(format!("passes slot {slot} but does not declare it"));
        }
    }
    Ok(out)
}

#[test]
fn every_operand_of_every_op_on_another_device_is_refused_by_name() {
    let Some(gpu) = brotensor_tests::gpu_devices().into_iter().next() else {
        // gpu_devices() already failed if BROTENSOR_REQUIRE_GPU asks for one (CI does).
        eprintln!("op_table wrong-device test: SKIPPED (no GPU device: only one device)");
        return;
    };
    let mut failures = Vec::new();
    let mut cases = 0;
    let mut names = BTreeSet::new();
    for entry in OP_TABLE {
        assert!(
            names.insert(entry.name),
            "{} is in the table twice",
            entry.name
        );
        let operands = match declared(entry) {
            Ok(o) => o,
            Err(why) => {
                failures.push(format!("{}: {why}", entry.name));
                continue;
            }
        };
        // With one operand there is no other device to disagree with.
        if operands.len() < 2 {
            continue;
        }
        for (k, (d, slot)) in operands.iter().enumerate() {
            // Moving the first operand moves the op: the next one is then the odd one out.
            let (expected, expected_device, found) = if k == 0 {
                (operands[1].0.name, gpu, Device::Cpu)
            } else {
                (d.name, Device::Cpu, gpu)
            };
            let mut slots = cpu_slots(entry.slots);
            slots[*slot] = slots[*slot].to(gpu).unwrap();
            cases += 1;
            let (result, _) = run(entry, &mut slots);
            let what = format!("{} with `{}` on {gpu}", entry.name, d.name);
            match result {
                Err(_) => failures.push(format!("{what}: panicked")),
                Ok(Ok(())) => failures.push(format!("{what}: returned Ok")),
                Ok(Err(Error::DeviceMismatch {
                    op,
                    operand,
                    expected: e,
                    found: f,
                })) if op == d.op && operand == expected && e == expected_device && f == found => {}
                Ok(Err(other)) => failures.push(format!(
                    "{what}: expected DeviceMismatch naming `{expected}` under `{}`, got: {other}",
                    d.op
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} wrong-device cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(cases > 500, "only {cases} cases: the op table lost entries");
}

/// Every `ops::` function the coverage table names, and every `pub fn` under
/// brotensor/src/ops that takes a tensor, is in the op table (or is one of the host-only
/// functions listed here, which take no tensor).
#[test]
fn the_op_table_lists_every_public_op() {
    const HOST_ONLY: &[&str] = &[
        "quantize_int8_per_row_host",
        "mse_scalar",
        "softmax_xent_segment",
        "hann_window",
    ];
    // Both texts are built into the binary (tests/build.rs gathers the op sources): the test
    // also runs inside scripts/cmma-check.sh's root, which holds no sources.
    let coverage = include_str!("../../../docs/op-coverage.md");
    let ops_sources = include_str!(concat!(env!("OUT_DIR"), "/ops_sources.rs.txt"));
    let mut wanted = BTreeSet::new();
    for line in coverage.lines().filter(|l| l.starts_with('|')) {
        for piece in line.split("`ops::").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            wanted.insert(name);
        }
    }
    for piece in ops_sources.split("\npub fn ").skip(1) {
        let name: String = piece
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let params = piece.split(" -> ").next().unwrap_or("");
        if params.contains("Tensor") || params.contains("Projections") {
            wanted.insert(name);
        }
    }
    let listed: BTreeSet<&str> = OP_TABLE.iter().map(|e| e.name).collect();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|n| !listed.contains(n.as_str()) && !HOST_ONLY.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "public ops missing from tests/src/op_table.rs: {missing:?}"
    );
}
