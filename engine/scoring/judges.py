"""Who judged what: judge identities, and episode rows seen through one judge at a time.

A judge's identity is what changes its answers: the judging model (name, weights or endpoint),
the endpoint kind, sampling, and the version of the benchmark's judge prompts. Every judgement row
carries it, and metrics are computed once per identity (``judged_views``): re-judging a run with a
stronger model adds a second, separately labelled set of numbers instead of blending graders,
and a derived judgement (analyst claim verdicts) always comes from the judge that made the
judgement it depends on (the claims), because the stage only ever sees one judge's results.

A judge is *self-judged* for a configuration when the judging model is the model under test,
decided by what it is (:func:`same_model` over ``engine.hosting.weights.weights_id``: the same
folder content, or the same weights reported by the endpoint wherever it is served; the name
only when that cannot be told), not by the URL: those numbers say what the model thinks of
itself, not what it is worth, and every place that shows them says so. Self-judging happens only
when asked for (``judge=self``); the default is no judge.

The **evaluation settings** a judgement was made under (the benchmark's ``evaluation_fields``,
e.g. analyst's ``judge_max_tokens``) are part of the judge's identity and stored with every
judgement: changing one makes a new judge id, so the next run judges again instead of mixing, and
metrics of a judged view are computed under that view's own settings (``row["evaluation"]``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.config import stable_hash

# decided in engine/identity.py; re-exported here, where benchmarks and plugins import them from
from engine.identity import evaluation_settings as evaluation_settings  # noqa: F401 - re-exported
from engine.identity import prompt_version as prompt_version  # noqa: F401 - re-exported
from engine.identity import source_version as source_version  # noqa: F401 - re-exported

SELF_JUDGED = "self-judged"
# a build whose verifier is the generator's model (build.allow_same_model): its release says so everywhere
SELF_VERIFIED = "self-verified"


@dataclass(frozen=True)
class JudgeIdentity:
    id: str             # "<model>:<hash>": what judgements are keyed by
    model: str          # the judging model's name
    kind: str           # endpoint kind: self | hosted | openai_compatible
    prompt: str         # version of the benchmark's judge prompts ("" when it declares none)
    evaluation: str = ""    # the evaluation settings (JSON) the judgements are made under
    weights: str = ""       # weights id of the judging model

    def columns(self) -> dict[str, str]:
        """The identity columns of a judgement row."""
        return {"judge": self.id, "judge_model": self.model, "judge_kind": self.kind, "judge_prompt": self.prompt,
                "evaluation": self.evaluation, "judge_weights": self.weights}


def judge_identity(cfg: Any, prompt_version: str = "", *extra: Any,
                   evaluation: dict[str, Any] | None = None) -> JudgeIdentity:
    """The identity of ``cfg.judge`` (``cfg`` has ``judge`` and ``model``): a hosted judge is
    ``judge.hosted_model`` when set, else ``cfg.model`` (``self``, or a pairwise ``hosted``
    judge); ``extra`` adds what else changes its answers (e.g. constrained decoding) to the id,
    ``evaluation`` the benchmark's evaluation settings."""
    from engine.config import ModelConfig, judge_model_config
    from engine.hosting.weights import hosted_hash, weights_id

    j = cfg.judge
    m = judge_model_config(cfg.model, j)
    if m is not None:
        model = m.name
        # the id keeps hashing what it always did (judgements stay keyed as before)
        ident: dict[str, Any] = {"served": m.served_name or m.name, "path": m.path, "base_url": m.base_url,
                                 "weights": hosted_hash(m) if m.kind == "vllm" else weights_id(m)}
        weights = weights_id(m)
    else:
        model = j.model
        ident = {"model": j.model, "base_url": j.base_url}
        # what the judge's endpoint serves, asked as for a model under test (engine/hosting/weights.py)
        weights = weights_id(ModelConfig(name=j.model, kind="openai_compatible", base_url=j.base_url,
                                         api_key_env=j.api_key_env))
    prompt = [{"prompt": prompt_version}] if prompt_version else []    # ids made before prompt versions stay valid
    settings = [{"evaluation": evaluation}] if evaluation else []
    name = j.name or model
    return JudgeIdentity(f"{name}:{stable_hash(ident, j.temperature, *extra, *prompt, *settings, n=8)}", model,
                         j.kind, prompt_version, json.dumps(evaluation, sort_keys=True) if evaluation else "",
                         weights)


@dataclass
class JudgedView:
    """One configuration's episode rows with the judgements of one judge (``row["judgements"]``:
    ``{key: value or None}``; a missing key was not judged), ``row["judge"]`` (the judge id, ""
    for none) and ``row["evaluation"]`` (the evaluation settings of that judge's judgements, or
    ``evaluation`` given for an unjudged view; ``{}`` when unknown)."""
    judge: str                  # judge id; "" when nothing of these rows was judged
    judge_model: str
    self_judged: bool
    rows: list[dict[str, Any]]
    evaluation: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        if not self.judge:
            return "no judge"
        return f"{self.judge} ({SELF_JUDGED})" if self.self_judged else self.judge


def matches(judge_id: str, info: dict[str, str], select: str) -> bool:
    """``select`` names a judge by its id, an id prefix, or its model name."""
    return judge_id == select or judge_id.startswith(select) or info.get("model") == select


def same_model(judge_weights: str | None, judge_names: Iterable[str], model_weights: Iterable[str | None],
               model_names: Iterable[str]) -> bool:
    """Whether a judge is one of the models (engine/hosting/weights.py ``weights_id``): the same
    weights id; or, unless both sides are ids of one strong kind (two hosted fingerprints, or two
    endpoints that reported what they serve) that differ, the same name. So a judge on another
    URL, port or replica of the server under test is caught by what the server reports, and one
    whose endpoint cannot say is caught by its name, as before weights ids existed."""
    from engine.hosting.weights import HOSTED, NAMED, SERVED

    def bare(w: str) -> str:
        return next((w[len(p):] for p in (HOSTED, SERVED, NAMED) if w.startswith(p)), w)

    jw = judge_weights or ""
    mws = {w for w in model_weights if w}
    if jw and bare(jw) in {bare(w) for w in mws}:
        return True
    for strong in (HOSTED, SERVED):
        if jw.startswith(strong) and mws and all(w.startswith(strong) for w in mws):
            return False
    return bool({n for n in judge_names if n} & {n for n in model_names if n})


def is_self_judged(judge_info: dict[str, str], rows: list[dict[str, Any]]) -> bool:
    """The judge is the model under test (:func:`same_model`: weights ids, then names)."""
    return same_model(judge_info.get("weights"), [judge_info.get("model", "")], [r.get("weights_id") for r in rows],
                      [r["model"] for r in rows])


def judged_views(rows: list[dict[str, Any]], by_judge: dict[str, dict[str, dict[str, str | None]]],
                 judges: dict[str, dict[str, str]], select: str | None = None,
                 evaluation: dict[str, Any] | None = None,
                 also: dict[str, dict[str, str]] | None = None) -> list[JudgedView]:
    """The rows of one configuration, once per judge that judged any of them and per judge in
    ``also`` (judges of the configurations it is compared with: ``{id: info}``; they see it with no
    judgements), sorted by id, or once with no judgements when there is none (its rows get
    ``evaluation``). ``select`` keeps one judge (see :func:`matches`); a configuration judged only
    by others then gives no view."""
    eids = {r["episode_id"] for r in rows}
    present = sorted({j for j, d in by_judge.items() if eids & d.keys()} | set(also or {}))
    judges = {**(also or {}), **judges}
    if not present:
        ev = dict(evaluation or {})
        return [JudgedView("", "", False, [dict(r, judgements={}, judge="", evaluation=ev) for r in rows], ev)]
    if select is not None:
        present = [j for j in present if matches(j, judges.get(j, {}), select)]
    out = []
    for j in present:
        info = judges.get(j, {})
        jm = info.get("model") or j.rsplit(":", 1)[0]
        ev = json.loads(info["evaluation"]) if info.get("evaluation") else dict(evaluation or {})
        out.append(JudgedView(j, jm, is_self_judged({**info, "model": jm}, rows),
                              [dict(r, judgements=by_judge.get(j, {}).get(r["episode_id"], {}), judge=j,
                                    evaluation=ev)
                               for r in rows], ev))
    return out


def self_judged_note(judge_model: str) -> str:
    """The sentence every self-judged table carries."""
    return (f"{judge_model} judged its own outputs. These judge-based numbers say what the model under test "
            f"thinks of itself; they are not measurements of quality. (The judge counts as the model under test "
            "when both report the same weights, or when they share a served name and an endpoint does not report "
            "its weights: dateline cannot tell those apart, so it never counts them as independent.)")
