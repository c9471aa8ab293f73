"""Build the bundled livenews sample (LiveNewsBench JSON Lines layout) from the RealTimeQA slice.

    python scripts/make_livenews_sample.py ../shared/data/realtimeqa engine/benchmarks/livenews/sample_data

Deterministic: the first question of every week whose search results hold the gold answer's
text, up to 12; each question's search results become pages (text cut to 400 words, so the
sample stays small); the question's own article domain goes in ``second_level_domain``.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from indexes.web import registered_domain


def main(src: str, out: str, n: int = 12, words: int = 400) -> None:
    src_p, out_p = Path(src), Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    questions, pages, seen = [], [], set()
    for qa in sorted(src_p.glob("*_qa.jsonl.gz")):
        gcs = {json.loads(line)["question_id"]: json.loads(line)
               for line in gzip.open(qa.with_name(qa.name.replace("_qa", "_gcs")), "rt")}
        for line in gzip.open(qa, "rt"):
            q = json.loads(line)
            gold = q["choices"][int(q["answer"][0])]
            results = gcs.get(q["question_id"], {}).get("search_result", [])
            if not any(gold.lower() in (r.get("text") or "").lower() for r in results):
                continue
            questions.append({"id": q["question_id"], "question": q["question_sentence"], "answer": gold,
                              "event_date": q["question_date"].replace("/", "-"),
                              "second_level_domain": registered_domain(q["question_url"]),
                              "choices": q["choices"]})
            for r in results:
                if r.get("url") and r.get("text") and r["url"] not in seen:
                    seen.add(r["url"])
                    pages.append({"url": r["url"], "title": r.get("title") or "",
                                  "text": " ".join(r["text"].split()[:words]),
                                  "publish_date": (r.get("publish_date") or "")[:10] or None})
            break
        if len(questions) >= n:
            break
    with open(out_p / "questions.jsonl", "w") as f:
        f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in questions)
    with open(out_p / "pages.jsonl", "w") as f:
        f.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in pages)
    print(f"{len(questions)} questions, {len(pages)} pages -> {out_p}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
