"""The README's examples run as written: every fenced command that needs no model runs, in README
order, on a scratch copy of the repository (its tracked and untracked-unignored files; the venv
and the cache linked), and must exit 0.

A command is left out only for one of the reasons in :func:`why_not_here`, each printed: it needs a
model (a ``dateline run`` / ``estimate`` / ``pairwise`` of a model agent: the real-model tests run
those), it is one of the two README commands (CI runs command 2; command 1 is timed on a fresh
clone), a perf script (``perf/``, run on its own), it starts or joins a Ray cluster
(``tests/e2e/test_ray_job_submit.py`` does), or it reads ``../shared`` when that is not there.

The run dirs that the reading commands (``metrics``, ``tables``, ``report``, ``show``, ``export``,
``repair``) refer to but only a model run would create are made first, with the model replaced by
a scripted OpenAI-compatible server (``runs/newsagent-sample``, ``runs/livenews-sample``,
``runs/analyst-sample``, ``runs/pairwise``); everything else comes from the README's own commands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO, livenews_responder

pytestmark = pytest.mark.ray

MODEL_COMMANDS = ("run", "build", "estimate", "pairwise", "analyst-checklists")


def fenced(readme: str) -> list[tuple[str, str]]:
    """(language, command) for each command of each fenced bash block (continuations joined,
    comment lines dropped) and each python block (whole)."""
    out = []
    for lang, body in re.findall(r"```(bash|python)\n(.*?)```", readme, re.S):
        if lang == "python":
            out.append((lang, body))
            continue
        body = re.sub(r"\\\n\s*", " ", body)
        out += [(lang, line.strip()) for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return out


def why_not_here(lang: str, cmd: str, shared: bool) -> str | None:
    """Why a command does not run here, or None when it runs."""
    if lang == "python":
        return None
    words = shlex.split(cmd, comments=True)
    if words[:2] in (["bash", "scripts/run.sh"], ["bash", "scripts/test.sh"]):
        return "one of the two README commands"
    if (words[0] == "python" or words[0].endswith("bin/python")) and len(words) > 1 and words[1].startswith("perf/"):
        return "perf script"
    if words[0].startswith("python3") and words[1:3] == ["-m", "venv"]:
        return "installs dateline into a new venv (tests/e2e/test_installed_wheel.py installs the wheel)"
    if words[0] in ("ray", "source", "kubectl", "docker"):
        return "starts or joins a Ray cluster"
    if words[0].endswith("bin/python") and words[1:3] == ["-m", "pytest"]:
        return "the test suite itself"
    if words[0].endswith("bin/dateline"):
        sub = next((w for w in words[1:] if not w.startswith("-")), "")
        if sub in MODEL_COMMANDS and "agent=newsagent_rule_based" not in words and not {"-h", "--help"} & set(words):
            return "needs a model"
        if sub == "doctor" and "--no-probe" not in words:
            return "needs a model (its probe starts vLLM: tests/hosting/test_machine.py runs it)"
        if any(w.startswith("../shared/") for w in words) and not shared:
            return "../shared is not here"
        return None
    raise AssertionError(f"README command of an unknown kind (classify it in {__file__}): {cmd}")


def scratch_copy(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    for link in (".venv", ".cache"):
        if (REPO / link).exists():
            os.symlink(REPO / link, dst / link)


def universal_responder():
    """The model and judges as the seed runs need them: livenews's scripted agent and grader, a
    pairwise judge preferring the first article, free text for everything else."""
    live = livenews_responder(grade="Buffalo Bills")

    def respond(messages, req):
        text = messages[0]["content"]
        if "First Article:" in text and "Second Article:" in text:
            from engine.benchmarks.newsagent.pairwise import DIMENSIONS

            return json.dumps({d: {"winner": "first", "reasoning": "scripted"} for d in DIMENSIONS})
        if "Gold target:" in text or "type: Search" in text or "```action" in text:
            return live(messages, req)
        return "A short scripted report.\n\n## Summary\n\nNothing to add."
    return respond


def test_every_model_free_readme_command_runs_as_written(tmp_path):
    """Why it takes minutes (about 4 on 2 busy cores): each of the README's 23 model-free commands runs
    as written, in a scratch copy, one after another (runs, reports, exports, race-replay), since
    several read what an earlier one wrote."""
    readme = (REPO / "README.md").read_text()
    commands = fenced(readme)
    root = tmp_path / "scratch"
    repo = root / "repo"
    repo.mkdir(parents=True)
    scratch_copy(repo)
    shared = (REPO.parent / "shared" / "data" / "realtimeqa").is_dir()
    if shared:
        os.symlink(REPO.parent / "shared", root / "shared")
    env = {**os.environ, "PYTHONPATH": str(repo), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true", "NO_COLOR": "1",
           "MLFLOW_TRACKING_URI": "", "DATELINE_LOG_LEVEL": "WARNING"}
    env.pop("MLFLOW_TRACKING_URI")
    dateline = [str(repo / ".venv/bin/dateline")]

    def sh(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)

    # the scratch copy runs its own code, not the checkout the venv was installed from
    where = sh([sys.executable, "-c", "import engine.inputs.paths; print(engine.inputs.paths.PACKAGE_ROOT)"])
    assert where.stdout.strip() == str(repo), where.stderr

    with FakeOpenAI(universal_responder()) as srv:
        # run.order=data: the seeds stand in for the README's full runs with their first tasks (the
        # README's examples name those tasks), a few of them for speed
        scripted = ["model=openai_compatible", "model.name=scripted", f"model.base_url={srv.base_url}",
                    "model.api_key_env=", "run.progress=false", "cluster.num_cpus=4", "run.order=data"]
        judge = ["judge=openai_compatible", f"judge.base_url={srv.base_url}", "judge.model=grader", "judge.api_key_env="]
        seeds = [
            ["run", "-m", "agent=newsagent,newsagent_rule_based", "benchmark.limit=3", *scripted],
            ["run", "benchmark=livenews", "agent=livenews", "benchmark.limit=3", "benchmark.judge_probes=false",
             *scripted, *judge],
            ["run", "benchmark=analyst", "agent=analyst", "benchmark.limit=1", *scripted],
            ["pairwise", "runs=[runs/newsagent-sample]", "out=runs/pairwise", *[j.replace("judge.model=grader", "judge.model=pw") for j in judge]],
        ]
        for seed in seeds:
            out = sh(dateline + seed)
            assert out.returncode == 0, f"seed {seed[:3]} failed:\n{out.stderr[-3000:]}"

    ran, skipped, failed = [], [], []
    for lang, cmd in commands:
        reason = why_not_here(lang, cmd, shared)
        if reason:
            skipped.append((reason, cmd))
            continue
        if lang == "python":
            script = tmp_path / f"readme-{len(ran)}.py"
            script.write_text(cmd)
            out = sh([str(repo / ".venv/bin/python"), str(script)])
        else:
            out = sh(["bash", "-c", cmd])
        ran.append(cmd)
        if out.returncode != 0:
            failed.append(f"$ {cmd}\n(exit {out.returncode})\n{out.stderr[-1500:]}")
    print(f"\nran {len(ran)} README commands; left out {len(skipped)}:")
    for reason, cmd in skipped:
        print(f"  [{reason}] {cmd[:110]}")
    assert not failed, "\n\n".join(failed)
    # the classification leaves most of the README to run (19, 20 where ../shared is)
    assert len(ran) >= 19 + shared, ran
    # what the commands made is where the README says
    assert (repo / "runs/newsagent-compare/leaderboard.html").is_file()
    assert (repo / "runs/report/report.html").is_file() and (repo / "mlruns").is_dir()
    assert list((repo / "wandb").glob("offline-run-*"))
    assert list((repo / "runs/livenews-sample/_inspect").glob("livenews_*.eval"))     # export --to inspect
