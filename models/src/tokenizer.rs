//! The two tokenizers, built with the Hugging Face `tokenizers` crate (no hand-written
//! tokenization): MiniLM's WordPiece from its `tokenizer.json`, and SmolLM2's GPT-2 style
//! byte-level BPE from the GGUF metadata (`tokenizer.ggml.*`).

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use brotensor::io::gguf::GgufFile;
use serde_json::{json, Map, Value};
use tokenizers::Tokenizer;

/// MiniLM's tokenizer from its `tokenizer.json` (lower-casing WordPiece that adds `[CLS]`
/// and `[SEP]`, truncating as the file says). The file also pads every input to 128 tokens;
/// that is turned off, since the model packs sentences without padding.
pub fn from_json_file(path: &Path) -> anyhow::Result<Tokenizer> {
    let mut tokenizer =
        Tokenizer::from_file(path).map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

/// ggml's token type of a control token (`<|im_start|>`, `<|endoftext|>`, ...).
const CONTROL: i64 = 3;
/// ggml's token type of a user-defined token.
const USER_DEFINED: i64 = 4;

/// A GGUF file's byte-level BPE (`tokenizer.ggml.model == "gpt2"`): its vocabulary and merge
/// ranks, the pre-tokenization llama.cpp uses for SmolLM's `tokenizer.ggml.pre` ("smollm":
/// every digit on its own, then the GPT-2 split), control and user-defined tokens matched
/// whole in the text, and no BOS/EOS added (the caller adds BOS when
/// [`gguf_adds_bos`] says so).
pub fn from_gguf(file: &GgufFile) -> anyhow::Result<Tokenizer> {
    let model = file.meta_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        bail!("tokenizer.ggml.model is `{model}`; only the GPT-2 style BPE (`gpt2`) is built here");
    }
    let pre = file
        .find_meta("tokenizer.ggml.pre")
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    if !matches!(pre, "smollm" | "starcoder" | "refact" | "default" | "gpt-2") {
        bail!("tokenizer.ggml.pre `{pre}` is not one this tokenizer reproduces");
    }
    let tokens = file.meta_str_array("tokenizer.ggml.tokens")?;
    let merges = file.meta_str_array("tokenizer.ggml.merges")?;
    let types = file
        .meta_i64_array("tokenizer.ggml.token_type")
        .unwrap_or_default();

    let mut vocab = Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        vocab.insert(token.to_string(), json!(id));
        let ty = types.get(id).copied().unwrap_or(1);
        if ty == CONTROL || ty == USER_DEFINED {
            added.push(json!({
                "id": id, "content": token, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": ty == CONTROL,
            }));
        }
    }
    // "smollm" (like "starcoder" and "refact") splits each digit first; "gpt-2" does not.
    let digits = !matches!(pre, "default" | "gpt-2");
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true,
    });
    let pre_tokenizer = if digits {
        json!({
            "type": "Sequence",
            "pretokenizers": [{ "type": "Digits", "individual_digits": true }, byte_level],
        })
    } else {
        byte_level
    };
    let spec = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true,
        },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
            "byte_fallback": false, "ignore_merges": false,
            "vocab": Value::Object(vocab), "merges": merges,
        },
    });
    let text = serde_json::to_string(&spec)?;
    text.parse::<Tokenizer>()
        .map_err(|e| anyhow!("building the GGUF tokenizer: {e}"))
}

/// Whether the GGUF's tokenizer wants a BOS token before the text, and its id.
pub fn gguf_adds_bos(file: &GgufFile) -> anyhow::Result<Option<u32>> {
    let add = file
        .find_meta("tokenizer.ggml.add_bos_token")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if !add {
        return Ok(None);
    }
    let id = file.meta_u64("tokenizer.ggml.bos_token_id")?;
    Ok(Some(u32::try_from(id).context("bos_token_id")?))
}

/// Token ids of `text` (special tokens in the text are matched whole).
pub fn encode(tokenizer: &Tokenizer, text: &str, add_special: bool) -> anyhow::Result<Vec<u32>> {
    let enc = tokenizer
        .encode(text, add_special)
        .map_err(|e| anyhow!("tokenizing {text:?}: {e}"))?;
    Ok(enc.get_ids().to_vec())
}

/// The text of `ids`, special tokens kept.
pub fn decode(tokenizer: &Tokenizer, ids: &[u32]) -> anyhow::Result<String> {
    tokenizer
        .decode(ids, false)
        .map_err(|e| anyhow!("decoding {ids:?}: {e}"))
}
