"""Inverters: retrieval from a public pool (exactness, privacy of the private corpus) and the
vec2text adapter's wiring against mocked vec2text model objects."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fre_protocol.text import Inversion, Inverter
from fre_protocol.text.inverter_retrieval import RetrievalInverter, contains_only_pool_texts
from fre_protocol.text.inverter_vec2text import Vec2TextInverter
from fre_protocol.text.public_pool import PublicPool
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = RandomSource.seeded(seed, "test/rows").normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class TableEmbedder:
    """A deterministic fake embedder: a fixed vector per known text, a hash-seeded one otherwise."""

    model_id = "fake/table"

    def __init__(self, table: dict[str, np.ndarray], d: int) -> None:
        self.table, self.d, self.calls = table, d, 0

    def embed(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        self.calls += 1
        rows = []
        for t in texts:
            if t in self.table:
                rows.append(self.table[t])
            else:
                v = RandomSource.seeded(t, "fake").normal(self.d)
                rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32)


def make_pool(n: int = 300, d: int = 16, seed: int = 1) -> tuple[PublicPool, np.ndarray]:
    pool = PublicPool(texts=tuple(f"public text {i}" for i in range(n)), sources=("news",) * n)
    return pool, unit_rows(n, d, seed).astype(np.float32)


def test_centroid_equal_to_a_pool_embedding_returns_that_text() -> None:
    pool, emb = make_pool()
    inv = RetrievalInverter(None, pool, pool_embeddings=emb)
    assert isinstance(inv, Inverter)
    picks = [0, 17, 299, 123]
    out = inv.invert(emb[picks].astype(np.float64))
    assert [o.texts[0] for o in out] == [pool.texts[i] for i in picks]
    assert all(o.distances is not None and o.distances[0] < 1e-3 for o in out)
    assert all(o.sources == ("news",) for o in out)


@given(seed=st.integers(0, 10_000), k=st.integers(1, 7), block=st.integers(1, 9))
def test_topk_equals_brute_force(seed: int, k: int, block: int) -> None:
    pool, emb = make_pool(n=60, d=8, seed=seed)
    centroids = 0.7 * unit_rows(11, 8, seed + 1)  # DP centroids are not unit norm
    inv = RetrievalInverter(None, pool, pool_embeddings=emb, block=block)
    idx, dist = inv.nearest(centroids, k)
    brute = np.linalg.norm(centroids[:, None, :] - emb[None, :, :].astype(np.float64), axis=2)
    expect = np.sort(brute, axis=1)[:, :k]
    assert np.allclose(dist, expect, atol=1e-5)
    assert np.all(np.diff(dist, axis=1) >= -1e-12)  # nearest first
    got = np.take_along_axis(brute, idx, axis=1)
    assert np.allclose(got, expect, atol=1e-5)


def test_never_returns_a_private_text() -> None:
    """Centroids sitting exactly on private texts still come back as public texts only."""
    d = 16
    pool, emb = make_pool(d=d)
    private_texts = [f"private secret {i}" for i in range(40)]
    private = unit_rows(40, d, seed=99)
    table = dict(zip(pool.texts, emb, strict=True)) | dict(zip(private_texts, private, strict=True))
    inv = RetrievalInverter(TableEmbedder(table, d), pool)
    out = inv.invert(private.astype(np.float64), num_texts=5)
    returned = {t for o in out for t in o.texts}
    assert returned <= set(pool.texts)
    assert not returned & set(private_texts)
    assert contains_only_pool_texts(out, pool)
    assert all(len(o.texts) == 5 and len(set(o.texts)) == 5 for o in out)


def test_refinement_takes_a_closer_pair_and_stays_public() -> None:
    d = 8
    # The pool seed is arbitrary; it is chosen so that texts 4 and 9 are both among the 8 nearest
    # pool texts to their midpoint (refine_candidates below), so the pair is a candidate at all.
    pool, emb = make_pool(n=50, d=d, seed=4)
    a, b = emb[4].astype(np.float64), emb[9].astype(np.float64)
    centroid = (a + b) / 2
    pair = {f"{pool.texts[4]} {pool.texts[9]}": (centroid / np.linalg.norm(centroid)).astype(np.float32),
            f"{pool.texts[9]} {pool.texts[4]}": (centroid / np.linalg.norm(centroid)).astype(np.float32)}
    table = dict(zip(pool.texts, emb, strict=True)) | pair
    plain = RetrievalInverter(TableEmbedder(table, d), pool).invert(centroid[None, :])[0]
    refined = RetrievalInverter(TableEmbedder(table, d), pool, refine=True, refine_candidates=8).invert(
        centroid[None, :]
    )[0]
    assert refined.distances is not None and plain.distances is not None
    # the joined pair embeds at the normalized midpoint: 1 − cos(θ/2) < sin(θ/2) = distance to a
    assert refined.sources is not None and refined.sources[0] == "pool-pair"
    assert refined.texts[0] in pair
    assert refined.distances[0] < plain.distances[0]
    assert contains_only_pool_texts([refined], pool)


def test_retrieval_input_checks() -> None:
    pool, emb = make_pool(n=10, d=4)
    inv = RetrievalInverter(None, pool, pool_embeddings=emb)
    assert inv.invert(np.zeros((0, 4))) == []
    with pytest.raises(InvalidInputError, match="dimension"):
        inv.invert(np.zeros((2, 5)))
    with pytest.raises(InvalidInputError, match="finite"):
        inv.invert(np.full((1, 4), np.nan))
    with pytest.raises(InvalidParameterError, match="num_texts"):
        inv.invert(np.zeros((1, 4)), num_texts=0)
    with pytest.raises(InvalidInputError, match="pool embeddings must have shape"):
        RetrievalInverter(None, pool, pool_embeddings=emb[:5])
    with pytest.raises(InvalidParameterError, match="embedder"):
        RetrievalInverter(None, pool)
    with pytest.raises(InvalidInputError):
        Inversion(texts=())


# -- vec2text adapter (mocked model objects) ---------------------------------------------------------
class FakeVec2Text:
    """Stands in for the vec2text package: records how the adapter calls the real API."""

    def __init__(self, *, hub_available: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        outer = self

        class _Model:
            def __init__(self, kind: str, path: str) -> None:
                self.kind, self.path = kind, path

            @classmethod
            def _make(cls, kind: str) -> Any:
                def from_pretrained(path: str) -> _Model:
                    outer.calls.append((f"{kind}.from_pretrained", path))
                    return cls(kind, path)

                return from_pretrained

        def load_corrector(inversion: Any, corrector: Any) -> Any:
            outer.calls.append(("load_corrector", (inversion.path, corrector.path)))
            return {"corrector": (inversion.kind, corrector.kind)}

        def load_pretrained_corrector(name: str) -> Any:
            outer.calls.append(("load_pretrained_corrector", name))
            if not hub_available:
                raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")
            return {"corrector": "hub"}

        def invert_embeddings(*, embeddings: Any, corrector: Any, num_steps: Any, sequence_beam_width: int) -> list[str]:
            outer.calls.append(("invert_embeddings", (tuple(embeddings.shape), num_steps, sequence_beam_width)))
            return [f"text {float(row[0]):.2f}" for row in embeddings]

        self.models = types.SimpleNamespace(
            InversionModel=types.SimpleNamespace(from_pretrained=_Model._make("InversionModel")),
            CorrectorEncoderModel=types.SimpleNamespace(from_pretrained=_Model._make("CorrectorEncoderModel")),
            model_utils=types.SimpleNamespace(device="cpu"),
        )
        self.api = types.SimpleNamespace(
            load_corrector=load_corrector,
            load_pretrained_corrector=load_pretrained_corrector,
            invert_embeddings=invert_embeddings,
        )


def weights_dir(tmp_path: Path) -> Path:
    for sub in ("inversion", "corrector"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "config.json").write_text("{}")
    return tmp_path


def test_vec2text_refuses_other_embedders() -> None:
    with pytest.raises(InvalidParameterError, match="only fits gtr-t5-base"):
        Vec2TextInverter("sentence-transformers/all-MiniLM-L6-v2", module=FakeVec2Text())  # type: ignore[arg-type]


def test_vec2text_refuses_absent_weights(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="not available.*--vec2text-dir"):
        Vec2TextInverter("sentence-transformers/gtr-t5-base", model_dir=tmp_path / "nowhere")
    (tmp_path / "inversion").mkdir()
    with pytest.raises(InvalidParameterError, match="holds no config.json"):
        Vec2TextInverter("sentence-transformers/gtr-t5-base", model_dir=tmp_path)
    fake = FakeVec2Text(hub_available=False)
    inv = Vec2TextInverter("sentence-transformers/gtr-t5-base", module=fake)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="not available offline|not available"):
        inv.load()
    assert fake.calls == [("load_pretrained_corrector", "gtr-base")]


def test_vec2text_loads_a_local_folder_and_inverts_in_batches(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    fake = FakeVec2Text()
    folder = weights_dir(tmp_path)
    inv = Vec2TextInverter(
        "sentence-transformers/gtr-t5-base", model_dir=folder, num_steps=5, sequence_beam_width=2,
        batch_size=2, module=fake,  # type: ignore[arg-type]
    )
    centroids = np.zeros((3, 768))
    centroids[:, 0] = [0.25, 0.5, 0.75]
    out = inv.invert(centroids)
    assert [o.texts for o in out] == [("text 0.25",), ("text 0.50",), ("text 0.75",)]
    assert fake.calls[:3] == [
        ("InversionModel.from_pretrained", str(folder / "inversion")),
        ("CorrectorEncoderModel.from_pretrained", str(folder / "corrector")),
        ("load_corrector", (str(folder / "inversion"), str(folder / "corrector"))),
    ]
    assert fake.calls[3:] == [("invert_embeddings", ((2, 768), 5, 2)), ("invert_embeddings", ((1, 768), 5, 2))]
    inv.invert(centroids[:1])
    assert sum(1 for c in fake.calls if c[0] == "load_corrector") == 1  # loaded once
    with pytest.raises(InvalidParameterError, match="one text per centroid"):
        inv.invert(centroids, num_texts=2)
    with pytest.raises(InvalidInputError, match="dimension 768"):
        inv.invert(np.zeros((1, 384)))


def test_vec2text_option_checks() -> None:
    gtr = "sentence-transformers/gtr-t5-base"
    with pytest.raises(InvalidParameterError, match="needs num_steps"):
        Vec2TextInverter(gtr, num_steps=None, sequence_beam_width=2)
    with pytest.raises(InvalidParameterError, match="num_steps"):
        Vec2TextInverter(gtr, num_steps=0)
    with pytest.raises(InvalidParameterError, match="batch_size"):
        Vec2TextInverter(gtr, batch_size=0)


# -- the public pool is not the private input ----------------------------------------------------

PRIVATE_TEXTS = [f"Private note number {i} about a clinic visit on a Tuesday." for i in range(40)]
PUBLIC_TEXTS = [f"Public headline {i}: the city council meets again next week." for i in range(200)]


def _write(path: Path, texts: list[str]) -> Path:
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path


def test_pool_file_that_is_a_copy_of_the_private_input_is_refused(tmp_path: Path) -> None:
    """Another path to the same bytes is still the private input (the path check alone missed it)."""
    from fre_protocol.text.inverters import PoolOptions

    private = _write(tmp_path / "private.txt", PRIVATE_TEXTS)
    copy = _write(tmp_path / "copy.txt", PRIVATE_TEXTS)
    with pytest.raises(InvalidParameterError, match="copy of the private input"):
        PoolOptions(sources=(), files=(str(copy),)).build(private_input=private, private_texts=PRIVATE_TEXTS)


def test_pool_file_sharing_private_texts_is_refused(tmp_path: Path) -> None:
    """A public file with the private texts mixed in (reformatted: case and spacing) is refused,
    naming how many of its texts are private and the allowed fraction."""
    from fre_protocol.text.inverters import MAX_SHARED_FRACTION, PoolOptions

    leaked = [" ".join(t.upper().split()) + "  " for t in PRIVATE_TEXTS[:10]]
    pool_file = _write(tmp_path / "pool.txt", PUBLIC_TEXTS + leaked)
    with pytest.raises(InvalidParameterError, match=r"10 of its 210 texts .* private corpus"):
        PoolOptions(sources=(), files=(str(pool_file),)).build(private_texts=PRIVATE_TEXTS)
    # At most the stated fraction is tolerated (a public text that a user also happened to write).
    allowed = int(MAX_SHARED_FRACTION * len(PUBLIC_TEXTS))
    ok = _write(tmp_path / "ok.txt", PUBLIC_TEXTS + PRIVATE_TEXTS[:allowed])
    pool = PoolOptions(sources=(), files=(str(ok),)).build(private_texts=PRIVATE_TEXTS)
    assert len(pool) == len(PUBLIC_TEXTS) + allowed


def test_disjoint_pool_file_is_accepted(tmp_path: Path) -> None:
    from fre_protocol.text.inverters import PoolOptions

    private = _write(tmp_path / "private.txt", PRIVATE_TEXTS)
    pool_file = _write(tmp_path / "pool.txt", PUBLIC_TEXTS)
    pool = PoolOptions(sources=(), files=(str(pool_file),)).build(private_input=private, private_texts=PRIVATE_TEXTS)
    assert pool.texts == tuple(PUBLIC_TEXTS)
