//! Silero VAD against ONNX Runtime running the package's own ONNX graph on the committed
//! speech (`tests/fixtures/models/silero_reference.json`, made by `make_silero.py`, which also
//! checks ORT against a float64 numpy forward to 1.3e-6 and writes the segments the
//! package's rules give), on the CPU and on every GPU in every dtype it has.

use brotensor::{Device, Dtype};
use brotensor_models::silero::{
    speech_segments, Segment, SegmentRules, SileroVad, CHUNK, FILE_BLOCK,
};
use brotensor_models::{audio, files};

use crate::common::{self, targets};

fn max_error(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "chunk count");
    got.iter()
        .zip(want)
        .map(|(&g, w)| (f64::from(g) - w).abs())
        .fold(0.0, f64::max)
}

#[test]
fn silero_matches_onnx_runtime_and_finds_the_same_segments() {
    let r = common::json("silero_reference.json");
    let want: Vec<f64> = r["ort_probs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let want_segments: Vec<Segment> = r["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Segment {
            start: s["start"].as_u64().unwrap() as usize,
            end: s["end"].as_u64().unwrap() as usize,
        })
        .collect();
    let samples = audio::read_wav_16k(&audio::test_speech_path()).unwrap();
    assert_eq!(samples.len() as u64, r["n_samples"].as_u64().unwrap());
    assert_eq!(want.len(), samples.len().div_ceil(CHUNK));
    // The reference spans speech (p near 1) and noise (p near 0): a zeroed, halved or
    // shifted output cannot stay within the bounds below.
    assert!(want.iter().any(|&p| p > 0.9) && want.iter().any(|&p| p < 0.05));
    let mut runs = 0;
    for (device, dtype) in targets("Silero", &[Dtype::F32, Dtype::F16, Dtype::BF16]) {
        let model = SileroVad::load(&files::silero_weights(), device, dtype).unwrap();
        let probs = model.probabilities(&samples).unwrap();
        let err = max_error(&probs, &want);
        // F32: ORT is within 1.3e-6 of float64, and so must we be, up to FP32 rounding
        // over 501 LSTM steps. 16-bit convolutions move it by a few 1e-3.
        let bound = if dtype == Dtype::F32 { 1e-4 } else { 3e-2 };
        assert!(err <= bound, "{device} {dtype}: max |p - ORT| = {err:e}");
        if dtype == Dtype::F32 {
            let found = speech_segments(&probs, samples.len(), &SegmentRules::default());
            assert_eq!(found, want_segments, "{device}: segments");
            if device == Device::Cpu {
                stream_matches_file(&model, &samples);
            }
        }
        println!("{device} {dtype}: max |p - ORT| = {err:.1e}");
        runs += 1;
    }
    assert!(runs >= 2, "Silero ran in only {runs} device/dtype pairs");
}

/// The streaming form (one chunk at a time, `lstm_cell`) gives the file form's probabilities
/// (blocks of `FILE_BLOCK` chunks, the LSTM state carried across blocks) on the speech twice
/// over, which spans two blocks.
fn stream_matches_file(model: &SileroVad, speech: &[f32]) {
    let twice: Vec<f32> = speech.iter().chain(speech).copied().collect();
    let usable = twice.len() / CHUNK * CHUNK;
    assert!(usable / CHUNK > FILE_BLOCK);
    let file = model.probabilities(&twice[..usable]).unwrap();
    let mut stream = model.stream().unwrap();
    for (i, chunk) in twice[..usable].chunks_exact(CHUNK).enumerate() {
        let p = stream.push(chunk).unwrap();
        assert!(
            (p - file[i]).abs() <= 1e-5,
            "stream chunk {i}: {p} vs {}",
            file[i]
        );
    }
}

#[test]
fn silero_refuses_a_chunk_of_the_wrong_length() {
    files::ensure_models().expect("the model files");
    let model = SileroVad::load(&files::silero_weights(), Device::Cpu, Dtype::F32).unwrap();
    let mut stream = model.stream().unwrap();
    let err = stream.push(&[0.0; 500]).unwrap_err().to_string();
    assert!(err.contains("512"), "{err}");
    assert!(model.probabilities(&[]).unwrap().is_empty());
    assert!(SileroVad::load(&files::silero_weights(), Device::Cpu, Dtype::F16).is_err());
}

/// The STFT runs as `ops::stft` only because the stored basis is a Hann-windowed DFT: a
/// weights file whose basis is not (one value changed) is refused at load.
#[test]
fn silero_refuses_an_stft_basis_that_is_not_a_windowed_dft() {
    use brotensor::io::safetensors::{serialize, SafeTensors, WriteEntry};
    files::ensure_models().expect("the model files");
    let file = SafeTensors::read(files::silero_weights()).unwrap();
    let name = "model.stft.forward_basis_buffer";
    let mut changed = file.get(name).unwrap().data.to_vec();
    changed[4 * 300..4 * 301].copy_from_slice(&0.25f32.to_le_bytes());
    let entries: Vec<WriteEntry> = file
        .tensors()
        .map(|t| WriteEntry {
            name: t.name,
            dtype: t.dtype,
            shape: t.shape,
            data: if t.name == name { &changed } else { t.data },
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("silero-basis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.safetensors");
    std::fs::write(&path, serialize(&entries, &Default::default()).unwrap()).unwrap();
    let err = SileroVad::load(&path, Device::Cpu, Dtype::F32)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("not a Hann-windowed"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn segments_follow_the_package_rules() {
    let rules = SegmentRules::default();
    // 20 chunks of speech, 2 of weak silence (not enough to end it), 10 more of speech, then
    // silence: one segment, padded by 480 samples on both sides.
    let mut p = vec![0.9f32; 20];
    p.extend([0.1; 2]);
    p.extend([0.9; 10]);
    p.extend([0.0; 10]);
    let n = p.len() * CHUNK;
    assert_eq!(
        speech_segments(&p, n, &rules),
        [Segment {
            start: 0,
            end: 32 * CHUNK + 480
        }]
    );
    // Too short to count (4 chunks = 2048 samples < 4000).
    let short = [0.0, 0.9, 0.9, 0.9, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0];
    assert!(speech_segments(&short, short.len() * CHUNK, &rules).is_empty());
    // Five silent chunks (2048 samples >= 1600) split the speech; the second segment is
    // still open at the end; the 2560-sample gap (>= 2 pads) takes a full pad on each side.
    let mut two = vec![0.9f32; 10];
    two.extend([0.0; 5]);
    two.extend([0.9; 10]);
    two.extend([0.0; 4]);
    assert_eq!(
        speech_segments(&two, two.len() * CHUNK, &rules),
        [
            Segment {
                start: 0,
                end: 10 * CHUNK + 480
            },
            Segment {
                start: 15 * CHUNK - 480,
                end: 29 * CHUNK
            },
        ]
    );
}
