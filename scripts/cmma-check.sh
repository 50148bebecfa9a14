#!/usr/bin/env bash
# Runs the GPU tests a second time on a software Vulkan device that has cooperative matrices,
# compiled through SPIR-V (`--features brotensor/vulkan-spirv`), and fails unless F16
# matmuls took the tensor-core (`cmma`) kernel there and every parity case ran on that device.
#
# Debian 12's lavapipe (Mesa 22.3) has no cooperative matrices; Mesa 26.1's has them (8 x 8 x 8
# fragments on 8-unit subgroups). So this builds a Debian 13 root with debootstrap, installs
# Mesa from trixie-backports in it, and runs the test binary (built here) inside it with
# chroot. Needs root and Debian's mirror; the root is kept for the next run. `--root-only`
# builds the root and stops; `--build-only` builds the test binary (into spirv/all in the target dir) and
# stops; `--run-only` runs that binary in the root without calling cargo, so test.sh can run
# it beside other cargo work.
#   BROTENSOR_CMMA_ROOT  where the root is kept (default: cmma-root in the target dir)
#
# A kernel the driver refuses shows up as "ComputePipeline with '<kernel>' label is invalid"
# and, since the panic kills cubecl's server thread, as failures of unrelated later tests.
# To see why: run the one test in the root with CUBECL_DEBUG_LOG=/tmp/cubecl.log, cut the
# kernel's ```spirv block out of that log, and run `spirv-as` and `spirv-val` (package
# spirv-tools) on it inside the root.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${BROTENSOR_CMMA_ROOT:-${CARGO_TARGET_DIR:-$PWD/target}/cmma-root}"
root="${root%/}"
mirror=http://deb.debian.org/debian

mode="${1:-}"
if [ "$mode" != --build-only ] && [ "$(id -u)" != 0 ]; then
  echo "cmma-check: FAIL: needs root (debootstrap and chroot)"
  exit 1
fi
# The SPIR-V test binary, built by this script and copied here.
spirv_bin="${CARGO_TARGET_DIR:-$PWD/target}/spirv/all"

if [ "$mode" = --build-only ] || [ -z "$mode" ]; then
  echo "cmma-check: building the test binary with the SPIR-V compiler"
  build_start=$SECONDS
  # The binary's path from cargo's JSON messages (stdout); progress and errors go to stderr.
  # --workspace, as test.sh builds: a `-p` selection would resolve other features for the
  # shared dependencies and rebuild them; this way only the Vulkan runtime and the crates
  # above it are compiled again (brotensor-tests pins the cubecl features the SPIR-V compiler
  # adds).
  if ! build=$(cargo test --workspace --features brotensor/vulkan-spirv --test all --no-run \
    --message-format=json); then
    echo "cmma-check: FAIL: the SPIR-V build failed"
    exit 1
  fi
  bin=$(echo "$build" | sed -n 's/.*"executable":"\([^"]*\/all-[0-9a-f]*\)".*/\1/p' | head -n 1)
  [ -n "$bin" ] || { echo "cmma-check: FAIL: no test binary"; exit 1; }
  mkdir -p "$(dirname "$spirv_bin")"
  cp "$bin" "$spirv_bin"
  echo "cmma-check: SPIR-V test binary built in $((SECONDS - build_start))s"
  [ "$mode" = --build-only ] && exit 0
fi

if [ ! -e "$root/.ready" ]; then
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  echo "cmma-check: building a Debian 13 root with Mesa from trixie-backports in $root"
  # A run killed half-way may have left file systems mounted inside.
  if [ -d "$root" ]; then
    findmnt -rn -o TARGET | awk -v r="$root/" 'index($0, r) == 1' | sort -r |
      xargs -r -n1 umount -l
  fi
  rm -rf --one-file-system "$root"
  mkdir -p "$(dirname "$root")"
  if ! debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.log" 2>&1; then
    tail -n 20 "$root.log"
    exit 1
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  echo "deb $mirror trixie-backports main" >"$root/etc/apt/sources.list.d/backports.list"
  chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t trixie-backports mesa-vulkan-drivers libvulkan1' >/dev/null
  touch "$root/.ready"
  echo "cmma-check: root ready in ${SECONDS}s"
fi
# --root-only: the root only (test.sh builds it while the tests build).
[ "$mode" = --root-only ] && exit 0

[ -x "$spirv_bin" ] || { echo "cmma-check: FAIL: no SPIR-V test binary at $spirv_bin (--build-only makes it)"; exit 1; }

# The binary at /opt/brotensor; the fixtures at the path compiled into it.
mkdir -p "$root/opt/brotensor" "$root$PWD/tests" "$root/tmp/xdg"
chmod 700 "$root/tmp/xdg"
cp "$spirv_bin" "$root/opt/brotensor/all"
rm -rf "$root$PWD/tests/fixtures"
cp -r tests/fixtures "$root$PWD/tests/fixtures"
ledger="$root/tmp/parity-ledger"
: >"$ledger"

# The child-process tests (default device, CPU tier, host pool) re-run the binary through
# /proc/self/exe.
skip=()
if mount -t proc proc "$root/proc" 2>/dev/null; then
  trap 'umount "$root/proc" 2>/dev/null || umount -l "$root/proc"' EXIT
else
  echo "cmma-check: cannot mount /proc in the root: the child-process tests NOT RUN here (they run in the main suite)"
  skip=(--skip default_device:: --skip cpu_tier:: --skip internals::host_pool_freed)
fi

run_start=$SECONDS
chroot "$root" env -i PATH=/usr/bin:/bin HOME=/tmp XDG_RUNTIME_DIR=/tmp/xdg \
  BROTENSOR_REQUIRE_GPU=wgpu BROTENSOR_REQUIRE_MATRIX_UNITS=F16 \
  BROTENSOR_PARITY_LOG=/tmp/parity-ledger \
  /opt/brotensor/all --test-threads=2 "${skip[@]}"

# Which kernel each device's matmuls took, then every parity case on the Vulkan device.
chroot "$root" env -i PATH=/usr/bin:/bin XDG_RUNTIME_DIR=/tmp/xdg \
  /opt/brotensor/all --exact parity_linear::matrix_units_only_for_16_bit_gpu_matmuls --nocapture 2>&1 |
  grep '^matmul' || true
if ! summary=$(scripts/ledger.sh "$ledger" wgpu); then
  echo "$summary"
  exit 1
fi
echo "$summary" | tail -n 1
echo "cmma-check: the suite ran on Mesa 26 in $((SECONDS - run_start))s"
echo "cmma-check: ok (Mesa $(chroot "$root" dpkg-query -W -f '${Version}' mesa-vulkan-drivers))"
