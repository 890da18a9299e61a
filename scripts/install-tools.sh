#!/usr/bin/env bash
# Install the validators standbyc runs (kubeconform, promtool, pint) and, for the tests, the
# servers weight sync talks to (the Pushgateway and versitygw, built; nginx, from Debian) into
# .tools/bin, pull the pinned CRD source modules into the Go module cache, and build the
# offline schema directory. Idempotent: a tool whose stamp matches its pin is not rebuilt.
#
# Every version comes from compiler/data/pins.json. Network is needed here only; after
# this script, `standbyc validate` runs offline.
#
#   scripts/install-tools.sh                     # everything
#   PYTHON=.venv/bin/python scripts/install-tools.sh
#   scripts/install-tools.sh --validators-only   # what compile validates with: no Kyverno CLI, no
#                                                # kube-apiserver and etcd, no test servers
#                                                # (make demo, the plugin image)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/.tools/bin"
PINS="$ROOT/compiler/data/pins.json"
PYTHON="${PYTHON:-python3}"
mkdir -p "$BIN" "$ROOT/.cache"

log() { printf '==> %s\n' "$*" >&2; }
loud() { printf '\n!!! %s\n\n' "$*" >&2; }

pin_apt() { # the Debian packages of the servers the tests start
  "$PYTHON" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["test_servers_apt"]))' "$PINS"
}

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    loud "Go is not installed; install Go >= 1.24 (https://go.dev/doc/install) and re-run."
    exit 2
  fi
}

VALIDATORS_ONLY=0
[[ "${1:-}" == "--validators-only" ]] && VALIDATORS_ONLY=1

need_go

# The builds themselves (pins, sums, the go mod download fallback, the offline schemas) are
# standbyc's own `tools install`, the same command a wheel user runs.
install_args=(tools install --dir "$BIN")
[[ "$VALIDATORS_ONLY" == 0 ]] && install_args+=(--test-servers --optional)
(cd "$ROOT" && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m compiler "${install_args[@]}")

if [[ "$VALIDATORS_ONLY" == 0 ]]; then
  # For the tests only: nginx from Debian serves the weight store.
  if ! command -v nginx >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
      log "apt-get install $(pin_apt)"
      apt-get install -y -qq --no-install-recommends $(pin_apt) >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends $(pin_apt) >/dev/null; }
    else
      loud "nginx is missing (the weight-sync tests serve the store with it): apt-get install nginx-light"
      exit 1
    fi
  fi
fi

log "done; tools in $BIN"
(cd "$ROOT" && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m compiler doctor) || true
