#!/usr/bin/env bash
# Install the validators standbyc runs (kubeconform, promtool, pint) and, for the tests, the
# servers weight sync talks to (the Pushgateway, built; nginx, from Debian) into .tools/bin, pull
# the pinned CRD source modules into the Go module cache, and build the offline schema
# directory. Idempotent: a tool whose stamp matches its pin is not rebuilt.
#
# Every version comes from compiler/data/pins.json. Network is needed here only; after
# this script, `standbyc validate` runs offline.
#
#   scripts/install-tools.sh                     # everything
#   PYTHON=.venv/bin/python scripts/install-tools.sh
#   scripts/install-tools.sh --validators-only   # no test servers (the Argo CD plugin image)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/.tools/bin"
PINS="$ROOT/compiler/data/pins.json"
PYTHON="${PYTHON:-python3}"
mkdir -p "$BIN" "$ROOT/.cache"
export GOFLAGS=-mod=mod
export GOBIN="$BIN"

log() { printf '==> %s\n' "$*" >&2; }
loud() { printf '\n!!! %s\n\n' "$*" >&2; }

pin() { # pin TOOL FIELD -> the field of .tools.TOOL (or .test_tools.TOOL) in pins.json
  "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); t={**d["tools"], **d["test_tools"]}; print(t[sys.argv[2]].get(sys.argv[3]) or "")' \
    "$PINS" "$1" "$2"
}

pin_apt() { # the Debian packages of the servers the tests start
  "$PYTHON" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["test_servers_apt"]))' "$PINS"
}

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    loud "Go is not installed; install Go >= 1.24 (https://go.dev/doc/install) and re-run."
    exit 2
  fi
}

# Go builds print their version from a variable the release process sets; set it here too
# so `standbyc doctor` can report real versions.
ldflags_for() {
  case "$1" in
    kubeconform) echo "-X main.version=$(pin kubeconform version)" ;;
    pint) echo "-X main.version=$(pin pint version)" ;;
    promtool) echo "-X github.com/prometheus/common/version.Version=$(pin promtool release)" ;;
    pushgateway) echo "-X github.com/prometheus/common/version.Version=$(pin pushgateway release)" ;;
  esac
}

stamp_ok() { [[ -x "$BIN/$1" && -f "$BIN/.$1.pin" && "$(cat "$BIN/.$1.pin")" == "$2" ]]; }

# go_tool NAME: `go install MODULE/PKG@VERSION`; if the proxy refuses that (it refuses the
# version *list* of some modules, which `go install pkg@version` reads to check for
# deprecation), download the pinned zip and build inside it.
go_tool() {
  local name="$1" module version pkg flags stamp dir info sum want
  module="$(pin "$name" module)"
  version="$(pin "$name" version)"
  pkg="$(pin "$name" package)"
  want="$(pin "$name" sum)"
  stamp="$module@$version"
  if stamp_ok "$name" "$stamp"; then
    log "$name $version already installed"
    return 0
  fi
  flags="$(ldflags_for "$name")"
  local path="$module${pkg#.}"  # ./cmd/x -> MODULE/cmd/x; . -> MODULE
  log "go install $path@$version"
  local err="$ROOT/.cache/go-install-$name.log"
  if go install -ldflags "$flags" "$path@$version" 2>"$err"; then
    echo "$stamp" >"$BIN/.$name.pin"
    return 0
  fi
  loud "go install of $name failed; the exact error:
$(sed 's/^/    /' "$err")
Falling back to: go mod download $module@$version, then go install $pkg inside it."
  info="$(go mod download -json "$module@$version")" || return 1
  dir="$("$PYTHON" -c 'import json,sys; print(json.load(sys.stdin).get("Dir", ""))' <<<"$info")"
  sum="$("$PYTHON" -c 'import json,sys; print(json.load(sys.stdin).get("Sum", ""))' <<<"$info")"
  if [[ "$sum" != "$want" ]]; then
    loud "$module@$version has sum $sum, pins.json says $want"
    return 1
  fi
  (cd "$dir" && go install -ldflags "$flags" "$pkg") || return 1
  echo "$stamp" >"$BIN/.$name.pin"
}

VALIDATORS_ONLY=0
[[ "${1:-}" == "--validators-only" ]] && VALIDATORS_ONLY=1

need_go

go_tool kubeconform || { loud "kubeconform could not be installed"; exit 1; }

if ! go_tool promtool; then
  # Prometheus 3.x could not be built; the best real alternative a registry offers is
  # Debian's prometheus package (promtool 2.42).
  apt_pin="$(pin promtool fallback_apt)"
  loud "promtool $(pin promtool release) could not be built; installing Debian's $apt_pin instead."
  if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
    apt-get install -y --no-install-recommends "$apt_pin" || apt-get install -y --no-install-recommends prometheus
    ln -sf "$(command -v promtool)" "$BIN/promtool"
    echo "debian:$apt_pin" >"$BIN/.promtool.pin"
  else
    loud "no apt-get (or not root): install promtool by hand (apt-get install prometheus)"
    exit 1
  fi
fi

if ! go_tool pint; then
  loud "pint could not be installed. Validation still runs (kubeconform + promtool), but
the extra pint lint is SKIPPED until pint is installed. See the error above."
fi

if [[ "$VALIDATORS_ONLY" == 0 ]]; then
# For the tests only: the servers weight sync talks to, run for real on 127.0.0.1.
# The Pushgateway's version list is not served (`go install ...@v1.11.1` is refused), so
# go_tool builds it from the pinned module zip after checking its sum.
go_tool pushgateway || { loud "the Pushgateway (for the weight-sync tests) could not be built"; exit 1; }
# An S3-compatible server with a POSIX back end (Apache-2.0): the store as an object store.
go_tool versitygw || { loud "versitygw (for the object-store test) could not be built"; exit 1; }
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

# The CRDs the schema build converts: pulled into the Go module cache now, so that the
# build (and any later rebuild) runs offline with GOPROXY=off.
"$PYTHON" - "$PINS" <<'EOF' | while read -r mod; do
import json, sys
for crd in json.load(open(sys.argv[1]))["crds"]:
    if crd.get("module"):
        print(f'{crd["module"]}@{crd["version"]}')
EOF
  log "go mod download $mod"
  (cd "$ROOT/.cache" && go mod download -json "$mod" >/dev/null)
done

log "building the offline schema directory"
(cd "$ROOT" && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m compiler schemas build --if-stale)
log "done; tools in $BIN"
(cd "$ROOT" && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m compiler doctor) || true
