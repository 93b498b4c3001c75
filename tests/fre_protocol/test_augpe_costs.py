"""A distributed Aug-PE's per-user costs (paper App. B.1, Table 17): closed forms, the measured
scan, and the comparison with Fre-E2T's user costs."""

from __future__ import annotations

import math

import pytest

from fre_protocol.augpe_costs import (
    FRE_PAPER_DOWNLOAD_BYTES,
    PAPER_SETTING,
    augpe_user_costs,
    comparison_markdown,
    cost_comparison,
    measure_scan,
    vote_index_bytes,
)
from fre_protocol.costs import PAPER as FRE_PAPER
from primitives.errors import InvalidParameterError


def test_bytes_closed_form() -> None:
    c = augpe_user_costs(10, 3, 4, 16, n_private_sample=2, measure=False, text_bytes=100, include_paper=False)
    assert c["setting"]["n_candidates"] == 30
    assert c["download_bytes_per_iteration"] == 30 * 16 * 4
    assert c["download_bytes_per_run"] == 4 * 30 * 16 * 4
    # first iteration: all 30; then 20 new embeddings and 10 one-byte kept indices, 3 times
    assert c["download_bytes_per_run_incremental"] == 30 * 64 + 3 * (20 * 64 + 10)
    assert c["download_text_bytes_per_iteration"] == 3000
    assert c["upload_bytes_per_iteration"] == 2  # two records, one byte each for 30 candidates
    assert c["upload_bytes_per_run"] == 8
    assert c["upload_one_hot_bytes_per_iteration"] == 30 * 4
    assert c["synchronous_rounds"] == 4
    assert math.isnan(c["scan_s_per_iteration"]) and "paper_setting" not in c


def test_paper_setting_in_numbers() -> None:
    """N_cand = 21,000 float32 embeddings of d = 768: 64.5 MB per iteration, 1.29 GB per run."""
    c = augpe_user_costs(**PAPER_SETTING, measure=False)
    assert c["setting"]["n_candidates"] == 21_000
    assert c["download_bytes_per_iteration"] == 64_512_000
    assert c["download_bytes_per_run"] == 20 * 64_512_000
    assert c["upload_bytes_per_iteration"] == 2  # 21,000 < 2^16
    assert c["text_embed_s_per_iteration_h100"] == pytest.approx(6.09)
    assert "paper_setting" not in c  # it is the paper's setting


@pytest.mark.parametrize(("n", "nbytes"), [(1, 1), (2, 1), (256, 1), (257, 2), (65_536, 2), (65_537, 3)])
def test_vote_index_bytes(n: int, nbytes: int) -> None:
    assert vote_index_bytes(n) == nbytes


def test_ratio_at_the_paper_setting_is_at_least_ten_thousand() -> None:
    """The paper's claim: Aug-PE's download is >= 10^4 times Fre-E2T's 6.1 kB, per iteration."""
    c = augpe_user_costs(**PAPER_SETTING, measure=False)
    rows = cost_comparison(c, FRE_PAPER)
    download = rows[0]
    assert download["fre_e2t"] == FRE_PAPER_DOWNLOAD_BYTES
    assert download["ratio_per_iteration"] == pytest.approx(64_512_000 / 6100)
    assert download["ratio_per_iteration"] >= 1e4
    assert download["ratio_per_run"] >= 2e5


def test_comparison_reads_a_measured_summary() -> None:
    """summarize()/measure() report bytes and ms; the rows divide Aug-PE by those."""
    fre = {"download_bytes": 2000.0, "upload_bytes": 4000.0, "user_online_ms": 0.5}
    c = augpe_user_costs(100, 2, 5, 8, measure=False, include_paper=False)
    rows = {r["quantity"]: r for r in cost_comparison(c, fre)}
    down = rows["user download (candidate embeddings)"]
    assert down["ratio_per_iteration"] == pytest.approx(200 * 8 * 4 / 2000)
    assert down["ratio_per_run"] == pytest.approx(5 * 200 * 8 * 4 / 2000)
    assert rows["user upload (vote index)"]["fre_e2t"] == 4000.0
    assert rows["user online compute (nearest-candidate scan)"]["fre_e2t"] == pytest.approx(5e-4)
    table = comparison_markdown(list(rows.values()))
    assert table.count("\n") == len(rows) + 2 and "Aug-PE, per run" in table
    with pytest.raises(InvalidParameterError, match="download_bytes or download_kB"):
        cost_comparison(c, {"user_online_ms": 1.0})


def test_scan_is_measured_and_scales_per_run() -> None:
    c = augpe_user_costs(500, 4, 3, 32, repeats=3, include_paper=False)
    assert c["scan_s_per_iteration"] > 0  # measured (not NaN); how fast is the benchmarks' business
    assert c["scan_s_per_run"] == pytest.approx(3 * c["scan_s_per_iteration"])
    assert c["scan_cpu_s_per_iteration"] >= 0 and c["scan_repeats"] == 3
    wall, cpu = measure_scan(100, 8, 3, repeats=2)
    assert wall > 0 and cpu >= 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_syn": 0}, "n_syn"),
        ({"variations": 1}, "variations must be an integer >= 2"),
        ({"iterations": 0}, "iterations"),
        ({"dim": 2.5}, "dim"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], match: str) -> None:
    args = {"n_syn": 10, "variations": 2, "iterations": 2, "dim": 4} | kwargs
    with pytest.raises(InvalidParameterError, match=match):
        augpe_user_costs(**args, measure=False)  # type: ignore[arg-type]
