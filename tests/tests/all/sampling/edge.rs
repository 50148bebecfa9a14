//! `sample_logits` where the softmax weights are not finite numbers: `+inf` logits, rows
//! with no finite logit, and temperatures whose reciprocal overflows. The contract: `+inf`
//! logits share all the probability, a row of only `-inf` or NaN picks what the argmax
//! picks (index 0), and a non-finite `1 / temperature` is greedy decoding.

use super::{devices, sampled};
use brotensor::Device;

const V: usize = 9;

/// Row 0: `+inf` at 3 and 7; row 1: all `-inf`; row 2: all NaN; row 3: NaN and `-inf`.
fn rows() -> Vec<f32> {
    let mut x = vec![0.0f32; 4 * V];
    for (j, v) in x[..V].iter_mut().enumerate() {
        *v = match j {
            3 | 7 => f32::INFINITY,
            _ => j as f32,
        };
    }
    x[V..2 * V].fill(f32::NEG_INFINITY);
    x[2 * V..3 * V].fill(f32::NAN);
    for (j, v) in x[3 * V..].iter_mut().enumerate() {
        *v = if j % 2 == 0 {
            f32::NEG_INFINITY
        } else {
            f32::NAN
        };
    }
    x
}

#[test]
fn infinite_logits_share_the_draw_and_empty_rows_pick_the_argmax() {
    let x = rows();
    let mut cpu = Vec::new();
    for counter in 0..48u64 {
        cpu.push(sampled(
            Device::Cpu,
            &x,
            (4, V),
            (4, V, 0.8, 0, 1.0, 21, counter * 4, 0.0, false),
        ));
    }
    let first = cpu.iter().filter(|ids| ids[0] == 3).count();
    for ids in &cpu {
        assert!(ids[0] == 3 || ids[0] == 7, "+inf row picked {}", ids[0]);
        // All -inf, all NaN: index 0; NaN ranks above -inf: the first NaN, index 1.
        assert_eq!(ids[1..], [0, 0, 1], "rows without a finite logit");
    }
    assert!(
        (8..=40).contains(&first),
        "the two +inf tokens should share the draws: {first} of 48 picked 3"
    );
    for device in devices() {
        for (counter, want) in cpu.iter().enumerate() {
            let got = sampled(
                device,
                &x,
                (4, V),
                (4, V, 0.8, 0, 1.0, 21, counter as u64 * 4, 0.0, false),
            );
            assert_eq!(&got, want, "on {device}, counter {}", counter * 4);
        }
    }
}

#[test]
fn an_overflowing_inverse_temperature_is_greedy() {
    // 1 / 1e-39 overflows f32 to +inf: argmax, the lowest index among the tied largest.
    let x = [0.5f32, 1.0, 3.0, -2.0, 0.0, 3.0, 2.9, 1.0, 3.0];
    for device in devices() {
        for counter in [0u64, 1, 77, u64::MAX] {
            for t in [1e-39f32, f32::MIN_POSITIVE / 4.0] {
                let got = sampled(
                    device,
                    &x,
                    (1, V),
                    (1, V, t, 0, 1.0, 5, counter, 0.0, false),
                );
                assert_eq!(
                    got,
                    [2],
                    "on {device}, temperature {t:e}, counter {counter}"
                );
            }
        }
    }
}
