"""``dateline build`` settings (``conf/build/<name>.yaml`` sets them with the builder's benchmark
and agent groups): where the release goes and what a build may do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BuildConfig:
    name: str = ""                     # the build (``build=livenews``)
    out: str | None = None             # the release folder (None: RUN_DIR/release)
    overwrite: bool = False            # replace an existing release (else: refused, nothing written)
    # The generator and the verifier are different models, decided by what each serves (weights ids:
    # engine/hosting/weights.py), never by name; true allows one model in both roles and marks the
    # release SELF-VERIFIED in its manifest and in everything that reads it.
    allow_same_model: bool = False
