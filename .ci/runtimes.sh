#!/usr/bin/env bash
# Install the cluster runtimes the connector tests start on loopback: Debian's Slurm (slurm-wlm, slurmrestd,
# munge, the JWT plugin) and the `runtimes` extra (ray, kubernetes) from uv.lock into the virtualenv (`make runtimes`). Idempotent: packages
# already present are not fetched again. Starts no daemon (the pytest fixtures in tests/runtimes do that).
# Usage: .ci/runtimes.sh [VENV]   (VENV defaults to .venv next to this script's repository root)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"

APT_PACKAGES=(slurm-wlm slurmrestd munge slurm-wlm-jwt-plugin)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "runtimes.sh: apt-get not found; cannot install ${missing[*]} (Slurm tests will skip)" >&2
  else
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y "${missing[@]}" \
      || { $SUDO apt-get update && $SUDO apt-get install -y "${missing[@]}"; }
  fi
else
  echo "runtimes.sh: ${APT_PACKAGES[*]} already installed"
fi

if "$VENV/bin/python" -c "import ray, kubernetes" 2>/dev/null; then
  echo "runtimes.sh: ray and kubernetes already in $VENV"
else
  make -C "$ROOT" runtimes VENV="$VENV"   # the runtimes extra from uv.lock
fi
