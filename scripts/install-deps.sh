#!/usr/bin/env bash
# Installs Kiln's build and test dependencies from Debian 12 packages (idempotent: only
# what is missing is installed). Run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libflatbuffers-dev flatbuffers-compiler
  libzstd-dev libxxhash-dev
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers
  libcli11-dev nlohmann-json3-dev zlib1g-dev libzip-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  clang libclang-rt-14-dev
  graphviz
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[kiln] dependencies: all ${#packages[@]} packages present"
  exit 0
fi

echo "[kiln] installing ${#missing[@]} missing packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
