"""Regenerate tests/engine/scoring/data/confseq_predmix_vectors.json: confseq's own predictable-mixture
empirical-Bernstein CS (an independent implementation of engine/scoring/anytime.py's family) on
fixed inputs. Dev-only: confseq is not a dependency (its distribution needs a C++ build); its
predmix module is pure Python, so this takes it from a checkout of github.com/gostevehoward/confseq:

    python scripts/confseq_vectors.py /path/to/confseq/src
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np

CASES = [(50, 50, 0.05, "bern"), (300, 200, 0.05, "bern"), (1000, 400, 0.01, "unif"), (120, 120, 0.1, "three")]
OUT = Path(__file__).resolve().parent.parent / "tests/engine/scoring/data/confseq_predmix_vectors.json"


def main(src: str) -> None:
    sys.modules.setdefault("multiprocess", types.ModuleType("multiprocess"))   # only its parallel helpers use it
    sys.path.insert(0, src)
    from confseq.predmix import predmix_empbern_twosided_cs

    out = []
    for seed, (n_total, t, alpha, kind) in enumerate(CASES):
        rng = np.random.default_rng(seed)
        x = ((rng.random(t) < 0.3).astype(float) if kind == "bern" else rng.random(t) if kind == "unif"
             else rng.choice([0.0, 0.5, 1.0], size=t))
        lo, hi = predmix_empbern_twosided_cs(x, alpha=alpha, truncation=0.5, running_intersection=True, N=n_total)
        out.append({"x": x.tolist(), "n_total": n_total, "alpha": alpha,
                    "lo": np.asarray(lo).tolist(), "hi": np.asarray(hi).tolist()})
    OUT.write_text(json.dumps({"source": "confseq.predmix.predmix_empbern_twosided_cs(x, alpha, truncation=0.5, "
                                         "running_intersection=True, N=n_total)", "cases": out}))


if __name__ == "__main__":
    main(sys.argv[1])
