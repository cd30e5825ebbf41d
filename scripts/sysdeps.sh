#!/usr/bin/env bash
# Install the Debian packages Subgraph Lens needs when they are missing.
# Usage: scripts/sysdeps.sh graphviz [chromium] [postgresql] [python3-venv]
set -euo pipefail
declare -A probe=(
  [graphviz]="command -v dot"
  [chromium]="command -v chromium"
  [python3-venv]="python3 -c 'import ensurepip, venv'"
  [postgresql]="ls /usr/lib/postgresql/*/bin/initdb"
)
missing=()
for pkg in "$@"; do
  bash -c "${probe[$pkg]:-command -v $pkg}" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "Subgraph Lens needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
