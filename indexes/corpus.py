"""What a shared index holds: dated documents (sentences, objects, pages)."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str
    date: dt.date

    @property
    def content_hash(self) -> str:
        return content_hash(self.text)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
