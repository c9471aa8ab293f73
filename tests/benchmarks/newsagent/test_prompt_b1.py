"""The default agent prompt is appendix B.1 verbatim; ``prompt_variant=extended`` is opt-in.

``paper_b1_prompt.txt`` is transcribed from the paper (parts I-V, in order) with the PDF
artifacts removed: the box titles "Agent Prompt (Part N): ..." (labels of the figure's blocks,
not prompt text), the code fences, the stray "- " before the search example's fence, the
Figure 5 caption and Table 3 that the extraction interleaves into parts III and V, and the
"- " bullet that the extraction drops before the insert example's "Example:" is restored (as
under search). Line breaks and indentation are as extracted; the comparison is on words.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.benchmarks.newsagent import prompts
from engine.errors import ConfigError
from ray_jobs.config.compose import compose

PAPER = (Path(__file__).parent / "paper_b1_prompt.txt").read_text()


@pytest.mark.parametrize("two_step", [False, True])
def test_default_prompt_is_the_paper_word_for_word(two_step):
    got = prompts.system_prompt(two_step=two_step).split()
    want = PAPER.split()
    assert got == want


def test_default_prompt_has_no_headers_or_extra_examples():
    p = prompts.system_prompt(two_step=True)
    for extra in ("Agent Prompt", "Part I", "Constraints:", "Available actions:", "Action output:",
                  '"Action": "remove"', '"Action": "terminate"', "2-step"):
        assert extra not in p


def test_extended_variant_adds_headers_examples_and_two_step_note():
    one = prompts.system_prompt(two_step=False, variant="extended")
    two = prompts.system_prompt(two_step=True, variant="extended")
    assert one.split() != PAPER.split()
    for extra in ("Constraints:", "Available actions:", '"Action": "remove"', '"Action": "terminate"'):
        assert extra in one
    assert "2-step setting" not in one and two == one + prompts.TWO_STEP_NOTE
    # the extended prompt is the paper's plus additions: every paper word survives, in order
    it = iter(one.split())
    assert all(w in it for w in PAPER.split())


def test_two_step_choose_turn_says_what_to_output():
    """The 2-step system prompt is the shared one, so the choose turn's user message carries the
    2-step instruction, and the argument turns have their own."""
    assert '"Thought"' in prompts.TWO_STEP_CHOOSE and '"Action"' in prompts.TWO_STEP_CHOOSE
    assert "separate step" in prompts.TWO_STEP_CHOOSE
    assert set(prompts.TWO_STEP_ARGS) == {"search", "insert", "remove"}


def test_examples_in_the_default_prompt_parse():
    """The JSON examples the model sees are valid actions for the environment's parser."""
    from engine.benchmarks.newsagent.environment import parse_action
    blocks = prompts.SYSTEM_PROMPT.split("Example:")[1:]
    kinds = [parse_action(b).kind for b in blocks]
    assert kinds == ["search", "insert"]
    json.loads(prompts._OUTPUT)


def test_prompt_variant_is_validated():
    assert compose(["agent.prompt_variant=extended"]).agent.prompt_variant == "extended"
    assert compose().agent.prompt_variant == "paper"
    with pytest.raises(ConfigError, match="agent.prompt_variant"):
        compose(["agent.prompt_variant=fancy"])
    with pytest.raises(ValueError):
        prompts.system_prompt(two_step=False, variant="fancy")
