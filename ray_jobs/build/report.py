"""A release's dataset card (``card.md``) and build report (``report.html`` and ``report.md``, in the
report's page style): yield per stage, rejection reasons, verifier agreement, kept and rejected
examples with their reasons, tokens and cost. Both are made from the manifest and the verdicts
only, so they say what the release holds and nothing else."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.build.protocol import Verdict
from ray_jobs.outputs.report.page import Page

EXAMPLES = 5


def _models(m: dict[str, Any]) -> list[str]:
    g, v = m["models"]["generator"], m["models"]["verifier"]
    return [f"generator: {g['name']} ({', '.join(g['identity']) or 'identity unknown'})",
            f"verifier: {v['name']} ({v['identity'] or 'identity unknown'})"]


def _marks(m: dict[str, Any]) -> str:
    if not m.get("self_verified"):
        return ""
    return ("SELF-VERIFIED: the verifier is the generator's own model (build.allow_same_model=true). The answer "
            "check and the guideline check are the model agreeing with itself, not an independent verification.")


def write_card(path: Path, m: dict[str, Any]) -> None:
    splits = m.get("splits") or {}
    lines = [f"# {m['builder']} release ({m['created']})", ""]
    if _marks(m):
        lines += [f"**{_marks(m)}**", ""]
    lines += ["Questions drafted from dated news articles by the generator and kept when the verifier, reading "
              "the same article, gave the same answer and found every guideline met, unless a stage is switched "
              "off below (LiveNewsBench, section 2). Run it with `dateline run benchmark=livenews benchmark.data_dir=<this folder>` "
              "(`benchmark.split=test` for the test split).", "", "## Models", ""]
    lines += [f"- {x}" for x in _models(m)] + ["", "## Splits", "", "| split | questions | first event | last event |",
                                                "|---|---|---|---|"]
    lines += [f"| {s} | {r.get('n', 0)} | {r.get('from') or ''} | {r.get('to') or ''} |" for s, r in splits.items()]
    lines += ["", f"Kept {m['kept']} of {m['items']} items; sets: "
              + ", ".join(f"{k} {n}" for k, n in sorted((m.get('sets') or {}).items())) + ".", ""]
    if m.get("review"):
        r = m["review"]
        lines += [f"Human review ({r['file']}): {r['accepted']} accepted, {r['rejected']} rejected, "
                  f"{r['unreviewed']} not reviewed; the verified subset is questions_verified.jsonl.", ""]
    if m.get("stages_off"):
        lines += [f"**Stages switched off: {', '.join(m['stages_off'])}.** Their filter did not run: the "
                  "release holds pairs the paper's pipeline would have checked there.", ""]
    lines += ["## Inputs", ""] + [f"- {i['path']} ({i['bytes']} bytes, sha256 {i['sha256'][:16]})" for i in m["inputs"]]
    lines += ["", "## Prompt versions", ""] + [f"- {k}: {v}" for k, v in sorted(m["prompts"].items())]
    lines += ["", "The manifest (manifest.json) has the counts per stage and reason; stages.parquet has every call."]
    path.write_text("\n".join(lines) + "\n")


def _agreement(verdicts: Sequence[Verdict]) -> tuple[int, int]:
    """(answers compared, found the same): the verifier's agreement with the generator."""
    graded = [v for v in verdicts if v.kept or v.stage in ("match", "adherence", "dedupe") and not v.pending]
    return len(graded), sum(1 for v in graded if v.kept or v.stage != "match")


def write_report(path: Path, m: dict[str, Any], verdicts: Sequence[Verdict]) -> None:
    page = Page(path.parent)
    if _marks(m):
        page.strong(_marks(m))
    page.para("; ".join(_models(m)))
    if m.get("stages_off"):
        page.strong(f"Stages switched off: {', '.join(m['stages_off'])} (their filter did not run).")
    page.heading("Yield per stage")
    rows = [[name, s.get("model") or "-", s.get("in", ""), s.get("passed", ""),
             ", ".join(f"{k} {n}" for k, n in s.get("rejected", {}).items()) or "-", s.get("pending", 0) or "-"]
            for name, s in m["stages"].items()]
    page.table(["stage", "model", "in", "passed", "rejected (reason n)", "pending"], rows)
    n, same = _agreement(verdicts)
    page.para(f"Verifier agreement: of {n} drafted answers the verifier's own answer was compared with, "
              f"{same} matched ({same / n:.0%})." if n else "Verifier agreement: no answer was compared.")
    page.heading("Splits")
    page.table(["split", "questions", "first event", "last event"],
               [[s, r.get("n", 0), r.get("from") or "", r.get("to") or ""] for s, r in (m.get("splits") or {}).items()])
    page.heading("Kept pairs (examples)")
    kept = [v for v in verdicts if v.kept][:EXAMPLES]
    page.table(["id", "set", "question", "answer", "verifier's answer"],
               [[v.item_id, v.set, v.record.get("question", ""), v.record.get("answer", ""),
                 v.record.get("verifier_answer", "")] for v in kept])
    page.heading("Rejected items (examples, one per reason)")
    seen: dict[str, Verdict] = {}
    for v in verdicts:
        if not v.kept and not v.pending:
            seen.setdefault(f"{v.stage}:{v.reason}", v)
    page.table(["stage", "reason", "id", "question", "answer", "detail"],
               [[v.stage, v.reason, v.item_id, v.record.get("question") or "", v.record.get("answer") or "",
                 json.dumps({k: x for k, x in v.record.items() if k in ("verifier_answer", "grade", "rules", "duplicate_of")},
                            ensure_ascii=False)] for v in seen.values()])
    page.heading("Tokens and cost")
    page.table(["model", "calls", "stored calls reused", "tokens in", "tokens out"],
               [[role, u["calls"], u["stored_calls_reused"], u["tokens_in"], u["tokens_out"]]
                for role, u in sorted(m["usage"].items())])
    if m.get("cost"):
        page.para("Spend: " + ", ".join(f"{k} {v}" for k, v in m["cost"].items()))
    page.write_named(path.stem, f"Build report: {m['builder']} ({m['created']})")
