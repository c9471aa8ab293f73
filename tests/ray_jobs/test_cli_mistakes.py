"""Issue 35: every command-line mistake is one line on stderr and exit status 2 (Hydra composition
errors included, with "did you mean"); every subcommand's ``--help`` works, exits 0 and documents
its own options; a run dir knows its benchmark; a refused run creates nothing.

In process (``ray_jobs.cli.main.main``), so that argparse, Hydra's compose and the checks are the real
ones; nothing here starts Ray (a config that composed cleanly would start a run: none does).
"""

from __future__ import annotations

import os
import signal

import pytest

from engine.benchmarks import get_benchmark
from engine.storage import EpisodeStore
from ray_jobs.cli import main as cli
from tests.factories import episode_row

COMMANDS = ["run", "build", "estimate", "pairwise", "analyst-checklists", "metrics", "tables", "report", "show", "repair",
            "export", "race-replay", "convert-realtimeqa", "doctor"]


def call(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:                    # argparse's --help and its errors
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_command_list_is_every_subcommand():
    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_exits_0_and_documents_its_own_options(capsys, command):
    rc, out, err = call(capsys, command, "--help")
    assert rc == 0 and out.startswith(f"usage: dateline {command}"), (rc, out[:300], err[-500:])
    own = {"estimate": "--tasks N", "report": "--score-failures", "convert-realtimeqa": "--on-bad-rows",
           "metrics": "--judge", "export": "--to", "doctor": "--no-probe", "race-replay": "--orders"}
    if command in own:
        assert own[command] in out


@pytest.mark.parametrize(("argv", "first"), [
    (["run", "benchmark.limt=3"], "dateline run: ConfigError: benchmark.limt: no such field (did you mean benchmark.limit?)"),
    (["run", "benchmark=newsagnt"], "dateline run: ConfigError: benchmark=newsagnt: no such option of benchmark "
                                    "(did you mean newsagent?)"),
    (["run", "modle=x"], "dateline run: ConfigError: modle: no such config group or field (did you mean model?)"),
    (["run", "-m", "agent=newsagent,newsagnt"], "dateline run: ConfigError: agent=newsagnt: no such option of agent"),
    (["run", "benchmark.limit=abc"], "dateline run: ConfigError: benchmark.limit: Value 'abc' of type 'str' could "
                                     "not be converted to Integer"),
    (["run", "model.name"], "dateline run: ConfigError: cannot parse an override"),
    (["estimate", "benchmark.limt=3"], "dateline estimate: ConfigError: benchmark.limt: no such field"),
    (["estimate", "--tasks", "x"], "dateline estimate: argument --tasks: invalid int value: 'x'"),
    (["pairwise", "both_order=true"], "dateline pairwise: ConfigError: both_order: no such config group or field "
                                      "(did you mean both_orders?)"),
    (["bogus"], "dateline: argument COMMAND: invalid choice: 'bogus'"),
    (["metrics"], "dateline metrics: the following arguments are required: run_dir"),
    (["report"], "dateline report: the following arguments are required: paths"),
    (["convert-realtimeqa"], "dateline convert-realtimeqa: the following arguments are required: src, out"),
    (["export", "x", "--to", "nope"], "dateline export: argument --to: invalid choice: 'nope'"),
    (["--log-level", "LOUD", "run"], "dateline: argument --log-level: invalid choice: 'LOUD'"),
    (["run", "+model.max_retrys=3"], "dateline run: ConfigError: model.max_retrys: no such field (did you mean "
                                     "model.max_retries?)"),
    (["doctor", "--no-probe", "modle=x"], "dateline doctor: ConfigError: modle: no such config group or field"),
    (["race-replay", "nowhere"], "dateline race-replay: no run dir at nowhere"),
    (["pairwise", "runs=[nowhere]"], "dateline pairwise: ConfigError: runs: "),
])
def test_a_mistake_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, first):
    monkeypatch.chdir(tmp_path)
    rc, out, err = call(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(first), (rc, err)
    assert os.listdir(tmp_path) == []                  # nothing created


@pytest.mark.slow
def test_a_run_dir_knows_its_benchmark(capsys, tmp_path):
    store = EpisodeStore(tmp_path / "r", get_benchmark("newsagent").episode_fields)
    store.write_batch([episode_row("newsagent")], [])
    rc, out, err = call(capsys, "metrics", str(tmp_path / "r"))
    assert rc == 0 and "| episodes " in out and "newsagent" not in err, err
    for command in ("metrics", "tables"):
        rc, out, err = call(capsys, command, str(tmp_path / "r"), "livenews")
        assert rc == 2 and err.strip() == (f"dateline {command}: {tmp_path / 'r'} has no livenews episodes (it has: "
                                           "newsagent); leave the benchmark out: the run dir knows it"), err


@pytest.mark.slow
@pytest.mark.parametrize("bad", [["run.max_failures=-1"], ["benchmark.data_dir=nope"], ["model.path=/nonexistent"],
                                 ["benchmark=livenews", "agent=newsagent"]])
def test_a_refused_run_creates_nothing(capsys, tmp_path, monkeypatch, bad):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATELINE_WORKDIR", raising=False)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    rc, out, err = call(capsys, "run", *bad)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "ConfigError" in err, err
    assert os.listdir(tmp_path) == []
    # in process (a notebook, a test): the caller's signal handlers are given back
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
