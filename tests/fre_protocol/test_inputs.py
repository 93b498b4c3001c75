"""Reading embeddings from .npy files: the mapped view equals the file's array, and the pages
a check or a window has read are handed back, so the input never stays resident whole."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.inputs import EmbeddingShards, load_embeddings, open_embeddings, release_pages
from primitives.errors import InvalidInputError


def _resident_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


@pytest.mark.parametrize("order", ["C", "F"])
def test_mapped_view_equals_the_file(tmp_path: Path, order: str) -> None:
    a = np.asarray(np.random.default_rng(1).standard_normal((300, 17)), dtype=np.float32, order=order)
    np.save(tmp_path / "x.npy", a)
    x = load_embeddings(tmp_path / "x.npy")
    assert x.dtype == np.float32 and not x.flags.writeable
    np.testing.assert_array_equal(x, a)
    release_pages(x)
    np.testing.assert_array_equal(x[100:120], a[100:120])  # read back after the pages went


def test_object_arrays_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "o.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(InvalidInputError, match="not a readable .npy"):
        load_embeddings(tmp_path / "o.npy")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_the_input_does_not_stay_resident(tmp_path: Path) -> None:
    # 96 MiB on disk in two shards; checking every value reads every page. Kept resident, the
    # check would add ~96 MiB; handed back, what remains is small (the page tables, a block of
    # the check's temporaries). False-failure risk: none from chance, only from a kernel that
    # ignores MADV_DONTNEED on file mappings.
    rows, d = 16384, 768
    for k in range(2):
        np.save(tmp_path / f"part{k}.npy", np.full((rows, d), k + 0.5, dtype=np.float32))
    before = _resident_mib()
    x = open_embeddings(tmp_path)
    assert isinstance(x, EmbeddingShards) and x.shape == (2 * rows, d)
    after_check = _resident_mib()
    block = np.array(x.rows(rows - 10, rows + 10))
    release_pages(x)
    after_window = _resident_mib()
    assert after_check - before < 24, (before, after_check)
    assert after_window - before < 24, (before, after_window)
    assert block[:10].min() == 0.5 and block[10:].min() == 1.5
