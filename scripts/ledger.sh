#!/usr/bin/env bash
# Summarizes a parity ledger (lines: case<TAB>device<TAB>dtype) and, with a device kind
# (wgpu, cuda or any), fails unless every case ran on a device of that kind.
# Usage: scripts/ledger.sh LEDGER [KIND]
set -euo pipefail
ledger="$1"
kind="${2:-}"

echo "parity ledger: which devices ran each case (dtypes per device)"
awk -F'\t' '
  { key = $1; dev = $2; dt = $3
    if (!(key in seen)) { order[++n] = key; seen[key] = 1 }
    if (!((key, dev) in has)) { has[key, dev] = 1; devs[key] = devs[key] " " dev }
    if (index("/" runs[key, dev] "/", "/" dt "/") == 0)
      runs[key, dev] = runs[key, dev] (runs[key, dev] == "" ? "" : "/") dt }
  END {
    for (i = 1; i <= n; i++) {
      k = order[i]; line = ""
      m = split(devs[k], ds, " ")
      for (j = 1; j <= m; j++) if (ds[j] != "") line = line sprintf(" %s[%s]", ds[j], runs[k, ds[j]])
      printf "  %-28s%s\n", k, line
    }
  }' "$ledger"

cases=$(cut -f1 "$ledger" | sort -u | wc -l)
if [ "$cases" -eq 0 ]; then
  echo "FAIL: no parity case ran"
  exit 1
fi
if [ -n "$kind" ]; then
  pattern="$kind"
  [ "$kind" = any ] && pattern='(wgpu|cuda)'
  missing=$(awk -F'\t' -v p="^$pattern:" '
    { cases[$1] = 1; if ($2 ~ p) ran[$1] = 1 }
    END { for (c in cases) if (!(c in ran)) print "  " c }' "$ledger")
  if [ -n "$missing" ]; then
    echo "FAIL: parity cases that never ran on a $kind device:"
    echo "$missing"
    exit 1
  fi
  echo "all $cases parity cases ran on a $kind device"
fi
