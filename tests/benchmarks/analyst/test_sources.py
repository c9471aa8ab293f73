"""Sources as text and token-bounded chunks: no chunk ever exceeds the budget, with the byte
counter and with the served model's real tokenizer; no text is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.benchmarks.analyst.sources import (
    ByteCounter,
    SourceText,
    chunk_sources,
    chunk_text,
    read_table,
    source_texts,
    summarise_table,
    token_counter,
)
from engine.errors import DataError

words = st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), min_size=1, max_size=30)
docs = st.lists(st.one_of(words, st.sampled_from(["\n", "\n\n", " ", "é" * 50, "x" * 300])), max_size=120).map("".join)


def _words(t: str) -> list[str]:
    return t.split()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(docs, st.integers(min_value=4, max_value=200))
def test_chunks_fit_the_budget_and_lose_nothing_bytes(text, budget):
    count = ByteCounter()
    chunks = chunk_text(text, budget, count)
    assert all(count(c) <= budget for c in chunks)
    # every non-space character survives, in order (long words may be cut across chunks)
    assert "".join("".join(c.split()) for c in chunks) == "".join(text.split())


@pytest.fixture(scope="module")
def model_tokens(model_dir):
    return token_counter(str(model_dir))


# the model's own tokenizer needs the prepared model folder: `real` by the marker's definition
# (without the folder these skipped, so the fast tier ran differently from machine to machine)
@pytest.mark.real
@settings(max_examples=60, deadline=None)
@given(docs, st.integers(min_value=8, max_value=120))
def test_chunks_fit_the_budget_with_the_model_tokenizer(model_tokens, text, budget):
    chunks = chunk_text(text, budget, model_tokens)
    assert all(model_tokens(c) <= budget for c in chunks)
    assert "".join("".join(c.split()) for c in chunks) == "".join(text.split())


@pytest.mark.real
def test_chunk_sources_packs_small_sources_and_labels_chunks(model_tokens):
    srcs = [SourceText("a.md", "alpha " * 10), SourceText("b.md", "beta " * 10), SourceText("big.md", "gamma " * 400)]
    chunks = chunk_sources(srcs, 120, model_tokens)
    assert chunks[0].startswith("## Source: a.md") and "## Source: b.md" in chunks[0]
    assert all(model_tokens(c) <= 120 for c in chunks)
    assert sum(c.count("## Source: big.md") for c in chunks) >= 2
    assert sum(c.count("gamma") for c in chunks) == 400
    assert model_tokens.name.startswith("hf:")


def test_tables_are_summarised_with_a_preview(tmp_path):
    rows = [["year", "state", "value"]] + [[str(2000 + i), "CA" if i % 2 else "NY", f"{i * 1.5}"] for i in range(60)]
    (tmp_path / "t.csv").write_text("\n".join(",".join(r) for r in rows) + "\n")
    header, body = read_table(tmp_path / "t.csv")
    text = summarise_table("t.csv", header, body, preview_rows=5, full_rows=40)
    assert "60 rows x 3 columns" in text
    assert "- value: numeric, 60 values, min 0, mean 44.25, max 88.5" in text
    assert "- state: text, 2 distinct of 60" in text
    assert text.count("\n| 20") == 5
    small = summarise_table("s.csv", header, body[:3])
    assert small.count("\n| 20") == 3 and "Column summary" not in small


def test_source_errors_name_the_file_and_row(tmp_path):
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n3\n")
    with pytest.raises(DataError, match=r"bad.csv, row 3: 1 cells, the header has 2"):
        read_table(tmp_path / "bad.csv")
    (tmp_path / "bad.csv").unlink()
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    with pytest.raises(DataError, match=r"x.pdf: unsupported source type '.pdf'"):
        source_texts(tmp_path)


@pytest.mark.real            # a fresh interpreter importing transformers: slow, and it reads the model
def test_episodes_loading_the_tokenizer_at_once_all_get_it(model_dir):
    """Episodes of a worker start together and load the tokenizer in threads; in a fresh process
    (transformers not yet imported) concurrent first imports used to fail with ImportError."""
    import subprocess
    import sys

    d = model_dir
    code = ("import asyncio, sys\nfrom engine.benchmarks.analyst.sources import token_counter\n"
            "async def main():\n"
            "    got = await asyncio.gather(*(asyncio.to_thread(token_counter, sys.argv[1]) for _ in range(4)),\n"
            "                               return_exceptions=True)\n"
            "    print([type(x).__name__ for x in got], len({id(x) for x in got}))\n"
            "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("]")[0] == "['HFTokenCounter', 'HFTokenCounter', 'HFTokenCounter', 'HFTokenCounter'"
    assert out.stdout.split()[-1] == "1"           # one counter, loaded once
