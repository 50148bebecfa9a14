#!/usr/bin/env bash
# Makes sure a Vulkan driver is present, so that the wgpu backend has a device: on a machine
# with no Vulkan ICD, installs Mesa's software Vulkan driver (lavapipe) when run as root.
# Sourced by the other scripts; safe to run twice.
set -euo pipefail

have_icd() {
  # No pipeline: under pipefail, `ls` failing on one missing folder would hide the other.
  local f
  for f in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; do
    [ -e "$f" ] && return 0
  done
  return 1
}

# `grep -c`, not `grep -q`: an early exit would kill ldconfig with SIGPIPE, and under
# pipefail the pipeline would then read as "no loader" and reinstall on every run.
if ! have_icd || [ "$(ldconfig -p 2>/dev/null | grep -c libvulkan.so.1)" = 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing the Mesa Vulkan drivers (software device for wgpu)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  else
    echo "setup: no Vulkan driver found and cannot install one (not root or no apt-get);"
    echo "       install mesa-vulkan-drivers and libvulkan1, or run on a machine with a GPU driver"
  fi
fi

# Mesa warns on every start without a runtime dir.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/brotensor-xdg-$(id -u)}"
mkdir -p "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"

# The MPI engine's tests (feature `distributed`) need Open MPI and libclang (for the `mpi`
# crate's bindings): installed here when root with apt-get. `BROTENSOR_FEATURES` is the
# feature list every test build of the scripts uses (one feature set, so no step rebuilds
# another's crates); empty where MPI cannot be had, which CI refuses.
if ! command -v mpicc >/dev/null || ! ldconfig -p 2>/dev/null | grep -c libclang >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Open MPI and libclang (the MPI engine's tests)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      openmpi-bin libopenmpi-dev libclang-dev >/dev/null
  fi
fi
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  export BROTENSOR_FEATURES="${BROTENSOR_FEATURES-brotensor-tests/distributed,brotensor-models/distributed}"
else
  if [ "${CI:-}" = true ]; then
    echo "setup: FAIL: CI needs Open MPI (openmpi-bin libopenmpi-dev libclang-dev) for the MPI tests"
    exit 1
  fi
  echo "setup: no Open MPI (mpicc, mpirun): the MPI engine's tests are NOT BUILT; install"
  echo "       openmpi-bin libopenmpi-dev libclang-dev to run them"
  export BROTENSOR_FEATURES="${BROTENSOR_FEATURES-}"
fi
