"""``fre-e2t experiment downstream``: which grid the per-class runs use, and that the page says so."""

from __future__ import annotations

from pathlib import Path

from fre_protocol.experiments.context import Context, ExperimentConfig
from fre_protocol.experiments.downstream import CLASS_K, QUICK_K, class_params, settings


def _ctx(tmp_path: Path, **config: object) -> Context:
    return Context(ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", **config))  # type: ignore[arg-type]


def test_per_class_runs_use_a_coarser_grid_than_the_corpus_unless_k_is_given(tmp_path: Path) -> None:
    default = _ctx(tmp_path)
    assert default.params(8.0).k == 10 and class_params(default, 8.0).k == CLASS_K == 3
    # only the grid changes: the budget, radius and threshold are the run's
    assert class_params(default, 8.0).to_dict() | {"k": 10} == default.params(8.0).to_dict()
    assert class_params(_ctx(tmp_path, quick=True), 8.0).k == QUICK_K
    assert class_params(_ctx(tmp_path, params={"k": 6}), 8.0).k == 6
    recorded = settings(_ctx(tmp_path, epsilons=(4.0, float("inf"))))
    assert [p["k"] for p in recorded["params_by_epsilon"].values()] == [CLASS_K, CLASS_K]
