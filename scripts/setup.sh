#!/usr/bin/env bash
# Installs what mhc needs to build and test on a fresh Debian machine (idempotent), from Debian's
# packages and PyPI only. Needs root (or sudo) for apt-get.
set -euo pipefail

apt_packages=(cmake g++ make libgtest-dev nlohmann-json3-dev libcli11-dev clang python3 python3-pip python3-venv python3-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
