#!/usr/bin/env bash
# Builds the CPU kernels for AArch64 and runs their tests under user-mode emulation
# (qemu-aarch64): brotensor-cpu's unit tests (every hand-written kernel lives there: the NEON
# sixteen-lane GGUF GEMV kernels included) on the NEON tier, then the tests of the quantized
# kernels again capped to the scalar tier (on AArch64 the tier selects only the quantized
# register kernels, NEON or portable: every other test would run the same code in the same
# binary a second time). The integration suite and the models are not run here: they need the
# GPU runtimes built for AArch64 too, which the CI time budget has no room for; the brotensor
# glue over these kernels has no architecture-specific code (test.sh checks that it builds
# without the GPU runtimes).
# Needs a cross linker, an AArch64 C library and qemu-user (Debian: gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross, qemu-user; installed here when root with apt-get) and the Rust
# target (rustup target add aarch64-unknown-linux-gnu; added here when missing);
# `--setup-only` installs those and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "aarch64-check: installing the cross linker and qemu-user"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null; }
  else
    echo "aarch64-check: FAIL: needs aarch64-linux-gnu-gcc and qemu-aarch64 (root with apt-get installs them)"
    exit 1
  fi
fi
if ! rustup target list --installed | grep -qx "$target" && ! rustup target add "$target"; then
  # The standard library for the target comes from rustup's server, not from a registry:
  # where the machine cannot reach it, say so loudly rather than fail the whole run.
  echo "aarch64-check: NOT RUN: rustup could not add $target (the NEON kernels were NOT tested)"
  exit 0
fi
# --setup-only: the tools and the target only (test.sh fetches them while the tests build).
[ "${1:-}" = --setup-only ] && exit 0

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for tier in neon scalar; do
  t0=$SECONDS
  filter=()
  [ "$tier" = scalar ] && filter=(quant)
  # The unit tests only (--lib): the integration tests would build the library a second
  # time, as a dependency, for one float64 norm check that runs natively.
  if ! BROTENSOR_CPU_TIER=$tier cargo test -q -p brotensor-cpu --lib --target "$target" -- --nocapture \
    "${filter[@]}" >"$log" 2>&1; then
    cat "$log"
    echo "aarch64-check: FAIL: brotensor-cpu's tests under qemu-aarch64, BROTENSOR_CPU_TIER=$tier"
    exit 1
  fi
  # The NEON run must have run the NEON kernels, not skipped them.
  if [ "$tier" = neon ] && grep -q "tier was NOT tested" "$log"; then
    grep "NOT tested" "$log"
    echo "aarch64-check: FAIL: a NEON kernel test skipped on the NEON tier"
    exit 1
  fi
  echo "aarch64-check: $tier: $(grep -h '^test result' "$log" | awk '{p += $4; f += $6} END {print p " passed, " f " failed"}') in $((SECONDS - t0))s"
done
echo "aarch64-check: ok (brotensor-cpu's tests on NEON, the quantized kernels' on scalar too, under $(qemu-aarch64 --version | head -n 1))"
