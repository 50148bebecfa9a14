#!/usr/bin/env bash
# Runs every test with a wgpu device required (the software Vulkan device where there is no
# GPU), then proves from the parity ledger that every parity case ran on a wgpu device.
#   BROTENSOR_REQUIRE_GPU  which GPU kind must exist (default: wgpu; "" to allow skipping)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

export BROTENSOR_REQUIRE_GPU="${BROTENSOR_REQUIRE_GPU-wgpu}"
ledger="$(mktemp)"
trap 'rm -f "$ledger"' EXIT
export BROTENSOR_PARITY_LOG="$ledger"

cargo fmt --all -- --check
cargo test --workspace --all-targets
cargo test --workspace --doc

echo
echo "parity ledger: which devices ran each case (dtypes per device)"
awk -F'\t' '
  { key = $1; dev = $2; dt = $3
    if (!(key in seen)) { order[++n] = key; seen[key] = 1 }
    if (index(runs[key, dev], dt) == 0) runs[key, dev] = runs[key, dev] (runs[key, dev] ? "/" : "") dt
    if (!((key, dev) in has)) { has[key, dev] = 1; devs[key] = devs[key] " " dev } }
  END {
    for (i = 1; i <= n; i++) {
      k = order[i]; line = ""
      split(devs[k], ds, " ")
      for (j in ds) if (ds[j] != "") line = line sprintf(" %s[%s]", ds[j], runs[k, ds[j]])
      printf "  %-28s%s\n", k, line
    }
  }' "$ledger"

cases=$(cut -f1 "$ledger" | sort -u | wc -l)
if [ "$cases" -eq 0 ]; then
  echo "FAIL: no parity case ran"; exit 1
fi
if [ -n "$BROTENSOR_REQUIRE_GPU" ]; then
  kind="$BROTENSOR_REQUIRE_GPU"; [ "$kind" = any ] && kind='(wgpu|cuda)'
  missing=$(cut -f1 "$ledger" | sort -u | while read -r c; do
    grep -P "^\Q$c\E\t" "$ledger" | cut -f2 | grep -Eq "^$kind:" || echo "$c"
  done)
  if [ -n "$missing" ]; then
    echo "FAIL: parity cases that never ran on a $BROTENSOR_REQUIRE_GPU device:"; echo "$missing"
    exit 1
  fi
  echo "all $cases parity cases ran on a $BROTENSOR_REQUIRE_GPU device"
fi
