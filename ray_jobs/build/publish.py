"""A build's publish step: one point's drafts and checks -> verdicts -> the release folder.

The release is written to a staging folder beside it and moved into place whole (an existing
release is refused unless ``build.overwrite=true``). It holds what the builder writes (for
livenews: a dataset folder ``dateline run`` reads), and:

* ``stages.parquet``: every stage call, one row each (item, stage, prompt version, model and its
  identity, output, verdict, tokens, whether a stored call answered it);
* ``manifest.json``: the inputs' hashes, the two models and their identities, the prompt versions,
  counts per stage and reason, the date ranges of the splits, tokens and cost, SELF-VERIFIED;
* ``card.md``: the dataset card; ``report.html``: the build report (:mod:`ray_jobs.build.report`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.build.adapter import BuildBenchmark
from engine.build.memo import COLUMN
from engine.build.protocol import Verdict, stage_of
from engine.config import Config, judge_model_config, to_plain
from engine.errors import ConfigError
from engine.inputs.paths import data_path
from engine.scoring.judges import SELF_VERIFIED, same_model
from engine.storage import EpisodeStore
from ray_jobs.build.report import write_card, write_report
from ray_jobs.config.point import resolve
from ray_jobs.judging.stream import MALFORMED, run_judge_identity
from ray_jobs.run.info import RunInfo

STAGE_FIELDS = ["item_id", "episode_id", "stage", "model_role", "prompt_version", "model", "model_identity", "output",
                "verdict", "tokens_in", "tokens_out", "memo"]


# intake counts that are tallies, not reasons an article was left out
INTAKE_TALLIES = ("read", "items", "assigned", "groups")


def release_dir(cfg: Config) -> Path:
    assert cfg.build is not None
    return Path(cfg.build.out) if cfg.build.out else Path(str(resolve(cfg).run_dir)) / "release"


def point_rows(cfg: Config) -> tuple[BuildBenchmark, list[dict[str, Any]], list[dict[str, Any]], str]:
    """The point's draft rows with their checks (``row["judgements"]``), its judgement rows and
    the verifier's weights id."""
    spec = resolve(cfg)
    bench = spec.bench
    assert isinstance(bench, BuildBenchmark)
    store = EpisodeStore(spec.run_dir, bench.episode_fields)
    judge = run_judge_identity(cfg, bench)
    rows = store.episodes(config_hash=spec.config_hash).to_pylist()
    judged = store.judgements_by_judge(bench.parse_judgement, config_hash=spec.config_hash).get(judge.id, {})
    evaluation = json.loads(judge.evaluation) if judge.evaluation else {}
    eids = {r["episode_id"] for r in rows}
    jrows = [r for r in store.judgement_rows(judge=judge.id, ok=None) if r["episode_id"] in eids]
    retry = failed_at_endpoint(jrows)
    for r in rows:
        eid = r["episode_id"]
        # a check whose call failed at the endpoint has no answer yet (the next run asks it again):
        # its item is pending, not rejected as unreadable
        r["judgements"] = {k: v for k, v in judged.get(eid, {}).items() if v is not None or (eid, k) not in retry}
        r["evaluation"] = evaluation
    return bench, rows, jrows, judge.weights


def failed_at_endpoint(jrows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(episode, key) of the checks with no answer whose newest attempt failed at the endpoint (a
    timeout, a server down), not with a malformed answer: as ``ray_jobs.judging.stream.settled``
    reads them, the next run asks these again."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    answered = {(j["episode_id"], j["key"]) for j in jrows if j.get("ok")}
    for j in jrows:
        k = (j["episode_id"], j["key"])
        if k not in answered and (k not in last or j["batch_id"] > last[k]["batch_id"]):
            last[k] = j
    return {k for k, j in last.items() if not (j.get("error") or "").startswith(MALFORMED)}


def publish_point(cfg: Config, info: RunInfo) -> Path:
    assert cfg.build is not None
    out = release_dir(cfg)
    if out.exists() and not cfg.build.overwrite:
        raise ConfigError(f"build.out: the release {out} exists; pass build.overwrite=true to replace it "
                          "(the build's records stay in the run dir either way)")
    bench, rows, jrows, judge_weights = point_rows(cfg)
    jm = judge_model_config(cfg.model, cfg.judge)
    self_verified = same_model(judge_weights, [jm.name if jm else ""], [r.get("weights_id") for r in rows],
                               [r["model"] for r in rows])
    if self_verified and not cfg.build.allow_same_model:
        raise ConfigError(f"judge: the verifier served the same weights as the generator ({judge_weights}); "
                          "pass build.allow_same_model=true to publish a SELF-VERIFIED release")
    stage = out.with_name(f".{out.name}.staging")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    verdicts, extra = bench.builder.publish([bench.verdict(r) for r in rows], cfg, stage)
    records = stage_records(rows, jrows, verdicts)
    pq.write_table(pa.Table.from_pylist(records, schema=_stage_schema()), stage / "stages.parquet")
    manifest = build_manifest(cfg, bench, rows, verdicts, records, extra, info, self_verified, judge_weights)
    (stage / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    write_card(stage / "card.md", manifest)
    write_report(stage / "report.html", manifest, verdicts)
    if out.exists():
        shutil.rmtree(out)
    stage.rename(out)
    return out


def _stage_schema() -> pa.Schema:
    return pa.schema([pa.field(n, pa.bool_() if n == "memo" else pa.int64() if n.startswith("tokens") else pa.string())
                      for n in STAGE_FIELDS])


def stage_records(rows: list[dict[str, Any]], jrows: list[dict[str, Any]], verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """One record per stage call: the generator's (each draft's ``stage_calls``) and the
    verifier's (its judgement rows: the newest attempt per key)."""
    by_item = {v.episode_id: v for v in verdicts}
    out: list[dict[str, Any]] = []
    for r in rows:
        v = by_item.get(r["episode_id"])
        for c in json.loads(r.get(COLUMN) or "[]"):
            out.append({"item_id": r["task_id"], "episode_id": r["episode_id"], "stage": c["stage"],
                        "model_role": "generator", "prompt_version": c["version"], "model": r["model"],
                        "model_identity": r.get("weights_id") or "", "output": c["output"],
                        "verdict": _decided(v, c["stage"]), "tokens_in": c["tokens_in"], "tokens_out": c["tokens_out"],
                        "memo": bool(c.get("memo"))})
    item_of = {r["episode_id"]: r["task_id"] for r in rows}
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for j in jrows:
        k = (j["episode_id"], j["key"])
        if k not in newest or (j.get("ok"), j["batch_id"]) > (newest[k].get("ok"), newest[k]["batch_id"]):
            newest[k] = j
    for (eid, key), j in sorted(newest.items()):
        out.append({"item_id": item_of.get(eid, ""), "episode_id": eid, "stage": stage_of(key), "model_role": "verifier",
                    "prompt_version": key.split("@", 1)[-1], "model": j.get("judge_model") or "",
                    "model_identity": j.get("judge_weights") or "", "output": j.get("raw_output") or "",
                    "verdict": j.get("value") if j.get("ok") else None, "tokens_in": j.get("tokens_in") or 0,
                    "tokens_out": j.get("tokens_out") or 0, "memo": False})
    return out


def _decided(v: Verdict | None, stage: str) -> str | None:
    if v is None or v.pending:
        return None
    if v.stage == stage:
        return v.reason
    return "passed"


def stage_counts(bench: BuildBenchmark, verdicts: list[Verdict], intake: dict[str, int]) -> dict[str, Any]:
    """Per stage, in order: items in, passed, rejected by reason, pending."""
    out: dict[str, Any] = {}
    left = len(verdicts)
    for s in bench.builder.stages:
        here = [v for v in verdicts if v.stage == s.name and not v.kept]
        rejected = Counter(v.reason for v in here if not v.pending)
        pending = sum(1 for v in here if v.pending)
        entry: dict[str, Any] = {"model": s.model, "version": s.version, "what": s.doc, "in": left,
                                 "rejected": dict(sorted(rejected.items())), "pending": pending}
        if s.name == "intake":
            dropped = {k: n for k, n in intake.items() if k not in INTAKE_TALLIES and n}
            # in = passed + every row left out, by reason (quarantined rows and unusable dump
            # results never became articles, so "read" alone would not add up)
            entry = {"model": "", "version": "", "what": s.doc, "counts": intake, "rejected": dropped, "pending": 0,
                     "passed": intake.get("items", left)}
            entry["in"] = entry["passed"] + sum(dropped.values())
            # benchmark.limit / task_ids drafted fewer items than the intake passed (or the run
            # stopped before some): the model stages start from the items drafted
            if entry["passed"] > left:
                entry["not_drafted"] = entry["passed"] - left
            out[s.name] = entry
            continue
        left -= sum(rejected.values()) + pending
        entry["passed"] = left
        out[s.name] = entry
    return out


def _file_hashes(paths: list[str]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        root = data_path(p)
        files = sorted(x for x in root.rglob("*") if x.is_file()) if root.is_dir() else [root]
        for f in files:
            h = hashlib.sha256()
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            out.append({"path": str(f), "bytes": f.stat().st_size, "sha256": h.hexdigest()})
    return out


def build_manifest(cfg: Config, bench: BuildBenchmark, rows: list[dict[str, Any]], verdicts: list[Verdict],
                   records: list[dict[str, Any]], extra: dict[str, Any], info: RunInfo, self_verified: bool,
                   judge_weights: str) -> dict[str, Any]:
    b = to_plain(cfg.benchmark)
    inputs = [*(b.get("articles") or []), *([b["events"]] if b.get("events") else []),
              *([b["review"]] if b.get("review") else [])]
    jm = judge_model_config(cfg.model, cfg.judge)
    tokens: dict[str, dict[str, int]] = {}
    for r in records:
        t = tokens.setdefault(r["model_role"], {"calls": 0, "stored_calls_reused": 0, "tokens_in": 0, "tokens_out": 0})
        t["calls" if not r["memo"] else "stored_calls_reused"] += 1
        t["tokens_in"] += r["tokens_in"] or 0
        t["tokens_out"] += r["tokens_out"] or 0
    budget = info.get("budget") or {}
    return {
        "build": cfg.build.name if cfg.build else "", "builder": bench.name,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "marks": [SELF_VERIFIED.upper()] if self_verified else [], "self_verified": self_verified,
        "inputs": _file_hashes(inputs),
        "settings": {"benchmark": b, "draft": to_plain(cfg.agent)},
        "models": {"generator": {"name": cfg.model.name, "served_name": cfg.model.served_name,
                                 "identity": sorted({r.get("weights_id") or "" for r in rows})},
                   "verifier": {"name": jm.name if jm else cfg.judge.model, "identity": judge_weights}},
        "prompts": {s.name: s.version for s in bench.builder.stages if s.version},
        "draft_prompt_version": bench.prompt_version,
        "stages": stage_counts(bench, verdicts, extra.get("intake", {})),
        "sets": dict(Counter(v.set for v in verdicts if v.kept)),
        "kept": sum(v.kept for v in verdicts), "items": len(verdicts),
        "pending": sum(v.pending for v in verdicts),
        "usage": tokens, "cost": {k: budget.get(k) for k in ("spent_usd", "spent_tokens") if k in budget},
        **{k: v for k, v in extra.items() if k != "intake"},
    }
