"""Who judged what: judge identities, and episode rows seen through one judge at a time.

A judge's identity is what changes its answers: the judging model (name, weights or endpoint),
the endpoint kind, sampling, and the version of the benchmark's judge prompts. Every judgement row
carries it, and metrics are computed once per identity (``judged_views``): re-judging a run with a
stronger model adds a second, separately labelled set of numbers instead of blending graders,
and a derived judgement (analyst claim verdicts) always comes from the judge that made the
judgement it depends on (the claims), because the stage only ever sees one judge's results.

A judge is *self-judged* for a configuration when the judging model is the model under test:
those numbers say what the model thinks of itself, not what it is worth, and every place that
shows them says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import stable_hash

SELF_JUDGED = "self-judged"


@dataclass(frozen=True)
class JudgeIdentity:
    id: str             # "<model>:<hash>": what judgements are keyed by
    model: str          # the judging model's name
    kind: str           # endpoint kind: hosted | openai_compatible
    prompt: str         # version of the benchmark's judge prompts ("" when it declares none)

    def columns(self) -> dict[str, str]:
        """The identity columns of a judgement row."""
        return {"judge": self.id, "judge_model": self.model, "judge_kind": self.kind, "judge_prompt": self.prompt}


def judge_identity(cfg: Any, prompt_version: str = "", *extra: Any) -> JudgeIdentity:
    """The identity of ``cfg.judge`` (``cfg`` has ``judge`` and ``model``): a hosted judge is
    ``judge.hosted_model`` when set, else ``cfg.model``; ``extra`` adds what else changes its
    answers (e.g. constrained decoding) to the id."""
    j = cfg.judge
    if j.kind == "hosted":
        m = j.hosted_model or cfg.model
        model = m.name
        ident: dict[str, Any] = {"served": m.served_name or m.name, "path": m.path, "base_url": m.base_url}
    else:
        model = j.model
        ident = {"model": j.model, "base_url": j.base_url}
    prompt = [{"prompt": prompt_version}] if prompt_version else []    # ids made before prompt versions stay valid
    name = j.name or model
    return JudgeIdentity(f"{name}:{stable_hash(ident, j.temperature, *extra, *prompt, n=8)}", model, j.kind,
                         prompt_version)


def prompt_version(*texts: str) -> str:
    """A short version of judge prompts: a hash of their text, so any edit makes a new judge."""
    return stable_hash(*texts, n=8)


@dataclass
class JudgedView:
    """One configuration's episode rows with the judgements of one judge (``row["judgements"]``:
    ``{key: value or None}``; a missing key was not judged)."""
    judge: str                  # judge id; "" when nothing of these rows was judged
    judge_model: str
    self_judged: bool
    rows: list[dict[str, Any]]

    @property
    def label(self) -> str:
        if not self.judge:
            return "no judge"
        return f"{self.judge} ({SELF_JUDGED})" if self.self_judged else self.judge


def matches(judge_id: str, info: dict[str, str], select: str) -> bool:
    """``select`` names a judge by its id, an id prefix, or its model name."""
    return judge_id == select or judge_id.startswith(select) or info.get("model") == select


def judged_views(rows: list[dict[str, Any]], by_judge: dict[str, dict[str, dict[str, str | None]]],
                 judges: dict[str, dict[str, str]], select: str | None = None) -> list[JudgedView]:
    """The rows of one configuration, once per judge that judged any of them (sorted by id), or
    once with no judgements when none did. ``select`` keeps one judge (see :func:`matches`); a
    configuration judged only by others then gives no view."""
    eids = {r["episode_id"] for r in rows}
    present = sorted(j for j, d in by_judge.items() if eids & d.keys())
    if not present:
        return [JudgedView("", "", False, [dict(r, judgements={}) for r in rows])]
    if select is not None:
        present = [j for j in present if matches(j, judges.get(j, {}), select)]
    models = {r["model"] for r in rows}
    out = []
    for j in present:
        jm = judges.get(j, {}).get("model") or j.rsplit(":", 1)[0]
        out.append(JudgedView(j, jm, jm in models,
                              [dict(r, judgements=by_judge[j].get(r["episode_id"], {})) for r in rows]))
    return out


def self_judged_note(judge_model: str) -> str:
    """The sentence every self-judged table carries."""
    return (f"{judge_model} judged its own outputs. These judge-based numbers say what the model under test "
            f"thinks of itself; they are not measurements of quality.")
