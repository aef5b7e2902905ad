#!/usr/bin/env bash
# Installs the system packages bkchaos needs, from Debian, only when missing.
# Called by `make setup` (and so by `make run` and `make test`); safe to run again.
set -euo pipefail

packages=()
need() { dpkg -s "$1" >/dev/null 2>&1 || packages+=("$1"); }

need zookeeper                 # the metadata store, as in BookKeeper
need debootstrap               # builds the container image's root filesystem
need chromium                  # the browser tests of reports (driven by playwright)
need libfaketime               # the clock nemesis preloads it into bookies and agents
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
python3 -c 'import ensurepip, venv' 2>/dev/null || packages+=(python3-venv)

if [ ${#packages[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "bkchaos needs these Debian packages: ${packages[*]}" >&2
    echo "install them as root: apt-get install -y ${packages[*]}" >&2
    exit 254
  fi
fi

echo "installing Debian packages: ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
