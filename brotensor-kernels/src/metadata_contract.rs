//! Test-only: the metadata contract of the kernels, checked on their sources.
//!
//! Shapes, strides, starts, paddings, offsets and lengths are run-time kernel arguments, so
//! one compiled kernel serves every size. `#[comptime]` parameters (each value compiles its
//! own kernel) are only for the rank, axis mappings (permutations, broadcast dims, gather and
//! scatter dimension numbers, the reduced axis) and algorithm settings (tile sizes,
//! instruction and op selectors, flags, vector and pack widths). The test reads every `.rs`
//! file under `src/`, finds every `#[comptime]` parameter of a `#[cube]` function, and fails
//! on any whose name is not in [`ALLOWED`], where each name is listed with its meaning. A
//! new name goes into [`ALLOWED`] only if it is one of the kinds above; a size belongs among
//! the kernel's run-time arguments.

/// The `#[comptime]` parameter names the kernels may use, each with what it is.
const ALLOWED: &[(&str, &str)] = &[
    // Rank and axis mappings.
    (
        "rank",
        "rank of the strided gather/scatter index map (strided.rs)",
    ),
    ("trans", "operand transpose: an axis mapping (matmul.rs)"),
    ("trans_a", "A's transpose: an axis mapping (matmul.rs)"),
    ("trans_b", "B's transpose: an axis mapping (matmul.rs)"),
    // Instruction and op selectors.
    (
        "instr",
        "element-wise instruction (UnaryInstr / BinaryInstr)",
    ),
    (
        "act",
        "epilogue activation selector, 0..=5 (matmul, quant GEMM)",
    ),
    ("kind", "GGUF block type selector of the quantized decoders"),
    (
        "angle",
        "phase instead of magnitude in the complex-to-real map (spectral.rs)",
    ),
    (
        "mode",
        "padding mode selector, zero / reflect / replicate (pad.rs)",
    ),
    (
        "op",
        "reduction selector (sum, prod, max, min) of algebra/reduce.rs",
    ),
    // Tile sizes, hardware widths and pack widths.
    (
        "rq",
        "query rows per unit of flash attention (4, 2 or 1, by head size)",
    ),
    (
        "dpu",
        "output columns per unit of flash attention (8 to 64, by head size)",
    ),
    (
        "rows",
        "rows of C per cube of the scalar GEMM tiles (32, 64 or 128)",
    ),
    (
        "per",
        "side of one unit's register block of C (8 dense, 4 quantized)",
    ),
    (
        "width_a",
        "row length of the staged A tile a register-tile step reads",
    ),
    (
        "width_b",
        "row length of the staged B tile a register-tile step reads",
    ),
    ("frag", "side of the square tensor-core fragments (16 or 8)"),
    (
        "radix",
        "FFT butterfly radix, 1 2 3 4 5 7 8 11 13: an unrolled algorithm setting (fft.rs)",
    ),
    (
        "plane",
        "units per plane the tensor-core kernel is built for",
    ),
    (
        "depth",
        "unrolled depth of one register-tile step (BK, or a quant block's 32)",
    ),
    ("pack", "elements packed in one 32-bit word (pack width)"),
    (
        "words",
        "32-bit words per element of the structural kernels (1, 2 or 4)",
    ),
    (
        "t",
        "byte 0..8 of an unrolled 8-byte register run in the quant decoders",
    ),
    // Flags.
    (
        "complex",
        "flag: elements are (re, im) pairs (algebra/reduce.rs)",
    ),
    (
        "int64",
        "flag: the elements are i64, shuffled as f64 bits (algebra/reduce.rs)",
    ),
    ("from_complex", "flag: the conversion's source is complex"),
    (
        "to_complex",
        "flag: the conversion's destination is complex",
    ),
    (
        "check_range",
        "flag: flag float values outside an integer range",
    ),
    (
        "wide",
        "flag: f64 scaling constants in the complex division",
    ),
    ("lower", "flag: keep the lower triangle (else the upper)"),
    (
        "soft",
        "flag: 64-bit transcendental functions from arithmetic (algebra/soft64.rs)",
    ),
    (
        "cosine",
        "flag: the cosine (else the sine) of algebra/soft64.rs",
    ),
    (
        "unordered_true",
        "flag: a comparison with a NaN operand is true (ne)",
    ),
    ("accumulate", "flag: add the product to C"),
    ("has_bias", "flag: add a bias in the epilogue"),
    (
        "has_mask",
        "flag: scale deformable samples by a mask (conv.rs)",
    ),
    ("masked", "flag: an additive mask is read"),
    ("inverse", "flag: the FFT stage turns by e^{+i} (fft.rs)"),
    (
        "has_rec",
        "flag: the LSTM step adds a recurrent product (lstm.rs)",
    ),
    (
        "prev_mode",
        "selector of the LSTM step's previous cell state: zero, initial, own rows (lstm.rs)",
    ),
    (
        "halve_pairs",
        "flag: halve the half-spectrum bins that stand for a conjugate pair (fft.rs)",
    ),
    (
        "weighted",
        "flag: double the paired bins and clear the edge bins' imaginary parts (fft.rs)",
    ),
    (
        "over_envelope",
        "flag: STFT frames of the signal gradient over the window envelope (fft.rs)",
    ),
    (
        "transpose_framing",
        "flag: overlap-add over the reflect padding's preimages (fft.rs)",
    ),
    ("causal", "flag: causal masking"),
    ("split", "flag: split-K flash attention writes partials"),
    ("partition", "flag: window partition (else the inverse)"),
    (
        "caches",
        "flag: LayerNorm keeps xhat, mean, rstd for the backward",
    ),
    ("keep", "flag: RMSNorm keeps rrms for the backward"),
    (
        "from_tensor",
        "flag: sampling reads its counter from a tensor",
    ),
    (
        "per_row",
        "flag: one broadcast value per row (else per column run)",
    ),
    ("multiply", "flag: broadcast multiplies (else adds)"),
    ("per_head", "flag: RoPE tables per head"),
    ("inverse", "flag: the inverse rotation (RoPE backward)"),
    (
        "half_split",
        "flag: RoPE pairs split in halves (else interleaved)",
    ),
    (
        "with_b",
        "flag: the column sum multiplies by a second operand",
    ),
    (
        "with_scale",
        "flag: the column sum multiplies by a per-row scale",
    ),
    ("min", "flag: the K-quant min (else the scale)"),
    (
        "silu",
        "flag: GroupNorm's output passes through SiLU (norm.rs)",
    ),
    (
        "one_plus",
        "flag: the row affine scales by 1 + scale (diffusion.rs)",
    ),
    (
        "has_shift",
        "flag: the row affine adds a shift (diffusion.rs)",
    ),
    (
        "has_p",
        "flag: the sampler step reads a third input (diffusion.rs)",
    ),
    (
        "has_z",
        "flag: the sampler step writes a second output (diffusion.rs)",
    ),
    (
        "has_master",
        "flag: the optimizer step updates an FP32 master copy (optim.rs)",
    ),
    (
        "leaky",
        "flag: leaky ReLU (else linear) in bias_act (stylegan.rs)",
    ),
    (
        "has_clamp",
        "flag: bias_act clamps its output (stylegan.rs)",
    ),
    (
        "backward",
        "flag: bias_act's input gradient (else its forward)",
    ),
    ("demod", "flag: demodulated weights (stylegan.rs)"),
    (
        "flip_filter",
        "flag: upfirdn2d correlates with the filter as stored (else flipped)",
    ),
];

/// One `#[comptime]` parameter in a source text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ComptimeParam {
    /// 1-based line of the parameter's name.
    line: usize,
    /// The function whose parameter it is.
    function: String,
    /// The parameter's name.
    name: String,
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `src` with comments and string and character literals blanked to spaces (newlines kept,
/// so lines keep their numbers), so that only code is scanned.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (i == 0
                || !is_ident(c[i - 1])
                || (c[i - 1] == 'b' && (i < 2 || !is_ident(c[i - 2]))))
            && matches!(next, Some('"') | Some('#'))
        {
            // A raw string: r, hashes, the quoted text, the same hashes.
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            out.extend(c[i..=j].iter());
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')) {
                    out.extend(c[j..=j + hashes].iter());
                    j += hashes + 1;
                    break;
                }
                out.push(blank(c[j]));
                j += 1;
            }
            i = j;
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' && i + 1 < c.len() {
                    out.push(' ');
                    i += 1;
                }
                out.push(blank(c[i]));
                i += 1;
            }
            if i < c.len() {
                out.push('"');
                i += 1;
            }
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime or label.
            let end = if next == Some('\\') {
                (i + 2..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.extend(c[i..=end].iter().map(|&ch| blank(ch)));
                    i = end + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// Every `#[comptime]` parameter of a `#[cube]` function in `src`, or a message (with its
/// 1-based line) for an attribute the scan cannot place: one not before `name: Type`, not
/// in a function's parameter list, or in a function without a `#[cube]` attribute.
fn comptime_params(src: &str) -> Result<Vec<ComptimeParam>, (usize, String)> {
    let code: Vec<char> = code_only(src).chars().collect();
    let line_of = |at: usize| code[..at].iter().filter(|&&ch| ch == '\n').count() + 1;
    let skip_ws = |mut at: usize| {
        while at < code.len() && code[at].is_whitespace() {
            at += 1;
        }
        at
    };
    let word_at = |at: usize| {
        let mut end = at;
        while end < code.len() && (is_ident(code[end]) || (end == at && code[end] == '$')) {
            end += 1;
        }
        (code[at..end].iter().collect::<String>(), end)
    };
    let mut params = Vec::new();
    let mut i = 0;
    while i + 1 < code.len() {
        if !(code[i] == '#' && code[i + 1] == '[') {
            i += 1;
            continue;
        }
        let attr = i;
        let (word, after) = word_at(skip_ws(i + 2));
        let close = skip_ws(after);
        if word != "comptime" || code.get(close) != Some(&']') {
            i += 2;
            continue;
        }
        i = close + 1;
        // The parameter: `[mut] name: Type`.
        let (mut name, mut end) = word_at(skip_ws(i));
        if name == "mut" {
            (name, end) = word_at(skip_ws(end));
        }
        if name.is_empty() || code.get(skip_ws(end)) != Some(&':') {
            return Err((
                line_of(attr),
                "#[comptime] not followed by `name: Type`".to_string(),
            ));
        }
        let line = line_of(end - 1);
        // The enclosing function: the last `fn NAME` before the attribute, whose parameter
        // list is still open there.
        let fn_at = (0..attr).rev().find(|&j| {
            code[j] == 'f'
                && code.get(j + 1) == Some(&'n')
                && code.get(j + 2).is_some_and(|ch| ch.is_whitespace())
                && (j == 0 || !is_ident(code[j - 1]))
        });
        let Some(fn_at) = fn_at else {
            return Err((line, format!("#[comptime] {name} is in no function")));
        };
        let (function, _) = word_at(skip_ws(fn_at + 2));
        let open = (fn_at..attr).find(|&j| code[j] == '(');
        let mut depth = 0i32;
        let mut inside = open.is_some();
        for &ch in &code[open.unwrap_or(attr)..attr] {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                '{' | ';' => inside = false,
                _ => {}
            }
        }
        if !inside || depth <= 0 {
            return Err((
                line,
                format!("#[comptime] {name} is not in the parameter list of fn {function}"),
            ));
        }
        // The function's attributes: the text since the previous item's end.
        let item_start = (0..fn_at)
            .rev()
            .find(|&j| matches!(code[j], '}' | ';' | '{'))
            .map_or(0, |j| j + 1);
        let prelude: String = code[item_start..fn_at]
            .iter()
            .filter(|ch| !ch.is_whitespace())
            .collect();
        if !prelude.contains("#[cube]") && !prelude.contains("#[cube(") {
            return Err((
                line,
                format!("#[comptime] {name} is in fn {function}, which is not #[cube]"),
            ));
        }
        params.push(ComptimeParam {
            line,
            function,
            name,
        });
    }
    Ok(params)
}

/// The `.rs` files under `dir`, subfolders included, as `(path relative to the crate, text)`.
fn sources(dir: &std::path::Path, root: &std::path::Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(sources(&path, root));
        } else if path.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let rel = path.strip_prefix(root).unwrap_or(&path);
            files.push((rel.display().to_string(), text));
        }
    }
    files
}

/// The parameters among `params` whose names [`ALLOWED`] does not list.
fn violations(params: &[ComptimeParam]) -> Vec<&ComptimeParam> {
    params
        .iter()
        .filter(|p| !ALLOWED.iter().any(|(name, _)| *name == p.name))
        .collect()
}

#[test]
fn comptime_parameters_are_not_metadata() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = 0;
    let mut errors = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for (file, text) in sources(&root.join("src"), root) {
        match comptime_params(&text) {
            Err((line, message)) => errors.push(format!("{file}:{line}: {message}")),
            Ok(params) => {
                found += params.len();
                used.extend(params.iter().map(|p| p.name.clone()));
                for p in violations(&params) {
                    errors.push(format!(
                        "{file}:{}: fn {}: #[comptime] {} is not an allowed comptime \
                         parameter",
                        p.line, p.function, p.name
                    ));
                }
            }
        }
    }
    assert!(
        errors.is_empty(),
        "comptime parameters outside the metadata contract (shapes, strides, starts, \
         paddings, offsets and lengths are run-time arguments; comptime is for the rank, axis \
         mappings and algorithm settings: if this one is such a setting, add its name with \
         its meaning to ALLOWED in metadata_contract.rs):\n{}",
        errors.join("\n")
    );
    assert!(
        found > 0,
        "no #[comptime] parameter found under src/: the scan is broken"
    );
    let unused: Vec<&str> = ALLOWED
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !used.contains(*name))
        .collect();
    eprintln!(
        "metadata contract: {found} #[comptime] parameters, {} names, all allowed{}",
        used.len(),
        if unused.is_empty() {
            String::new()
        } else {
            format!(" (allowed but unused: {})", unused.join(", "))
        }
    );
}

/// A kernel with a comptime length (`cols`), a comptime rank written over two lines, and
/// mentions of `#[comptime]` in comments and strings that are not parameters. (Its kernel
/// is a plain `#[cube]` function: `cuda_lowering`'s line scan would take a launched one for
/// a kernel of the library.)
const SAMPLE: &str = r##"
/// Docs may say #[comptime] rows: u32 without declaring it.
#[cube]
#[allow(clippy::too_many_arguments)]
fn sum_kernel<'a, F: Float>(
    x: &Array<F>,
    #[comptime] cols: u32,
    #[comptime]
    mut rank: usize,
) {
    let quote = '"';
    let text = "#[comptime] len: u32";
    let raw = r#"#[comptime] size: u32"#;
    /* #[comptime] block: u32 */
}

#[cube]
fn helper(v: u32, #[comptime] pack: u32) -> u32 {
    v
}
"##;

#[test]
fn the_scan_flags_a_comptime_length() {
    let params = comptime_params(SAMPLE).expect("the sample scans");
    let named: Vec<(usize, &str, &str)> = params
        .iter()
        .map(|p| (p.line, p.function.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            (7, "sum_kernel", "cols"),
            (9, "sum_kernel", "rank"),
            (18, "helper", "pack")
        ]
    );
    let bad: Vec<&str> = violations(&params)
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(bad, ["cols"]);
}

#[test]
fn the_scan_rejects_what_it_cannot_place() {
    let not_cube = "fn plain(#[comptime] rank: usize) {}";
    assert!(comptime_params(not_cube)
        .unwrap_err()
        .1
        .contains("not #[cube]"));
    let no_name = "#[cube]\nfn k(\n    #[comptime] (a, b): (u32, u32),\n) {}";
    assert_eq!(comptime_params(no_name).unwrap_err().0, 3);
}
