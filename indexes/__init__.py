"""Embeddings, the time-aware FAISS index and the index service actor."""

from indexes.corpus import Document
from indexes.time_index import SearchHit, TimeAwareIndex

__all__ = ["Document", "SearchHit", "TimeAwareIndex"]
