//! Whisper tiny.en against references that are not our code
//! (`tests/fixtures/models/whisper_reference.json`, made by `make_whisper.py`): the log-mel
//! against a float64 numpy implementation of faster-whisper's front end, the encoder output
//! against CTranslate2's `Whisper.encode` (compute type float32) on that mel, and the
//! transcript (tokens, segment times and text) against faster-whisper's greedy decoding, on
//! the CPU and on every GPU (F32; the 16-bit dtypes on the encoder, a test each).

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::whisper::{Rules, Whisper, N_MELS, TIMESTAMP_BEGIN, VOCAB, WINDOW_FRAMES};
use brotensor_models::{audio, files};
use serde_json::Value;

use crate::common::{self, devices, floats};

/// The encoder input of the reference: the first 1600 mel frames, then zeros.
fn first_window(mel: &brotensor_models::whisper::Mel) -> Vec<f32> {
    let mut w = vec![0f32; N_MELS * WINDOW_FRAMES];
    let used = mel.frames - 1;
    for m in 0..N_MELS {
        w[m * WINDOW_FRAMES..][..used].copy_from_slice(&mel.values[m * mel.frames..][..used]);
    }
    w
}

/// The largest difference between encoder rows of `got (1500, 384)` and the reference's.
fn encoder_error(got: &Tensor, r: &Value) -> f64 {
    let got = got.to_dtype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(got.len(), 1500 * 384);
    let mut worst = 0f64;
    for (row, want) in r["encoder"]["rows"].as_object().unwrap() {
        let row: usize = row.parse().unwrap();
        for (j, w) in floats(want).iter().enumerate() {
            worst = worst.max((f64::from(got[row * 384 + j]) - w).abs());
        }
    }
    worst
}

#[test]
fn whisper_matches_faster_whisper_and_ctranslate2() {
    let r = common::json("whisper_reference.json");
    let samples = audio::read_wav_16k(&audio::test_speech_path()).unwrap();
    assert_eq!(
        samples.len() as u64,
        r["audio"]["samples"].as_u64().unwrap()
    );
    let want_tokens: Vec<u32> = r["decode"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let want_segments = r["segments"].as_array().unwrap();
    let mut runs = 0;
    for device in devices() {
        let model = Whisper::load(&files::whisper_dir(), device, Dtype::F32).unwrap();
        // The log-mel: every 50th frame against float64 (values in [-0.75, 1.25]).
        let mel = model.log_mel(&samples).unwrap();
        assert_eq!(mel.frames, 1601, "{device}: mel frames");
        let mut mel_err = 0f64;
        for (frame, want) in r["mel"]["frames_every_50"].as_object().unwrap() {
            let f: usize = frame.parse().unwrap();
            for (m, w) in floats(want).iter().enumerate() {
                mel_err = mel_err.max((f64::from(mel.values[m * mel.frames + f]) - w).abs());
            }
        }
        assert!(mel_err <= 1e-4, "{device}: mel max error {mel_err:e}");
        // The encoder (max |x| 11.9; CTranslate2 in F32 is itself 1.9e-4 from float64), on
        // the window the transcription encodes (the audio is one window: 1600 frames), and
        // the transcript: faster-whisper's tokens, times and text.
        let mut enc_err = None;
        let t0 = std::time::Instant::now();
        let segments = model
            .transcribe(&samples, |seek, _, encoded| {
                if seek == 0 {
                    enc_err = Some(encoder_error(encoded, &r));
                }
            })
            .unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let enc_err = enc_err.expect("the first window was encoded");
        assert!(enc_err <= 2e-3, "{device}: encoder max error {enc_err:e}");
        let tokens: Vec<u32> = segments.iter().flat_map(|s| s.tokens.clone()).collect();
        assert_eq!(tokens, want_tokens[..tokens.len()], "{device}: tokens");
        assert_eq!(
            segments.len(),
            want_segments.len(),
            "{device}: segments {segments:?}"
        );
        for (got, want) in segments.iter().zip(want_segments) {
            assert_eq!(got.text, want["text"].as_str().unwrap(), "{device}");
            assert!(
                (got.start - want["start"].as_f64().unwrap()).abs() < 1e-9,
                "{device}"
            );
            assert!(
                (got.end - want["end"].as_f64().unwrap()).abs() < 1e-9,
                "{device}"
            );
        }
        println!("{device} F32: mel error {mel_err:.1e}, encoder error {enc_err:.1e}, transcript identical ({secs:.1} s)");
        runs += 1;
    }
    assert!(runs >= 2, "Whisper ran on {runs} devices");
}

/// The encoder in a 16-bit `dtype` on every GPU that has it, within that dtype's rounding
/// (`bound`) of CTranslate2's F32 encoder (a test of its own per dtype, so the test threads
/// run them beside the F32 transcription).
fn encoder_16_bit(dtype: Dtype, bound: f64) {
    let r = common::json("whisper_reference.json");
    let samples = audio::read_wav_16k(&audio::test_speech_path()).unwrap();
    let mut runs = 0;
    for device in devices() {
        if device == Device::Cpu || !brotensor::supports_dtype(device, dtype).unwrap() {
            continue;
        }
        let model = Whisper::load(&files::whisper_dir(), device, dtype).unwrap();
        let mel = model.log_mel(&samples).unwrap();
        let err = encoder_error(&model.encode(&first_window(&mel)).unwrap(), &r);
        assert!(err <= bound, "{device} {dtype}: encoder max error {err:e}");
        println!("{device} {dtype}: encoder error {err:.1e}");
        runs += 1;
    }
    if runs == 0 {
        println!("NOTE: no GPU here has {dtype}: the {dtype} encoder was NOT tested");
    }
}

#[test]
fn whisper_f16_encoder_follows_ctranslate2() {
    encoder_16_bit(Dtype::F16, 0.1);
}

#[test]
fn whisper_bf16_encoder_follows_ctranslate2() {
    encoder_16_bit(Dtype::BF16, 0.5);
}

/// The timestamp rules on hand-made logits.
#[test]
fn decoding_rules_follow_ctranslate2() {
    let rules = Rules {
        suppress: vec![1, 2],
        suppress_begin: vec![220, 50256],
    };
    let tb = TIMESTAMP_BEGIN as usize;
    let allowed =
        |l: &[f32]| -> Vec<usize> { (0..VOCAB).filter(|&i| l[i] > f32::NEG_INFINITY).collect() };
    // Step 0: only timestamps 0.00 ..= 1.00 s.
    let mut l = vec![0f32; VOCAB];
    rules.apply(&mut l, &[]);
    assert_eq!(allowed(&l), (tb..=tb + 50).collect::<Vec<_>>());
    // After the first timestamp: text (not the suppressed) or the end; no timestamp.
    let mut l = vec![0f32; VOCAB];
    rules.apply(&mut l, &[TIMESTAMP_BEGIN]);
    let a = allowed(&l);
    assert!(a.contains(&0) && a.contains(&50256) && !a.contains(&1) && !a.contains(&tb));
    // After text: a timestamp is forced when the timestamps' summed probability beats
    // every text token; earlier timestamps stay off.
    let mut l = vec![f32::NEG_INFINITY; VOCAB];
    l[10] = 0.0;
    l[tb + 5..tb + 10].fill(-1.0); // 5 x e^-1 = 1.84 > e^0
    l[tb + 2] = 5.0;
    let text = [TIMESTAMP_BEGIN + 3, 10];
    rules.apply(&mut l, &text);
    assert_eq!(allowed(&l), (tb + 5..tb + 10).collect::<Vec<_>>());
    // ... and not when a text token beats them.
    let mut l = vec![f32::NEG_INFINITY; VOCAB];
    l[10] = 2.0;
    l[tb + 5] = 0.0;
    rules.apply(&mut l, &text);
    assert_eq!(allowed(&l), [10, tb + 5]);
    // A lone timestamp after text: the end or a timestamp not before it.
    let mut l = vec![0f32; VOCAB];
    l[tb..].fill(-20.0); // too unlikely to force a timestamp
    rules.apply(&mut l, &[TIMESTAMP_BEGIN, 10, TIMESTAMP_BEGIN + 7]);
    let a = allowed(&l);
    assert!(
        a.contains(&50256) && !a.contains(&10) && !a.contains(&(tb + 6)) && a.contains(&(tb + 7))
    );
    // A closed pair: no timestamp next.
    let mut l = vec![0f32; VOCAB];
    rules.apply(
        &mut l,
        &[
            TIMESTAMP_BEGIN,
            10,
            TIMESTAMP_BEGIN + 7,
            TIMESTAMP_BEGIN + 7,
        ],
    );
    assert!(allowed(&l).iter().all(|&i| i < tb));
}

#[test]
fn whisper_refuses_bad_input() {
    files::ensure_models().expect("the model files");
    let model = Whisper::load(&files::whisper_dir(), Device::Cpu, Dtype::F32).unwrap();
    assert!(model
        .encode(&[0.0; 80])
        .unwrap_err()
        .to_string()
        .contains("3000"));
    assert!(model.log_mel(&[0.0]).is_err());
    assert!(Whisper::load(&files::whisper_dir(), Device::Cpu, Dtype::BF16).is_err());
}
