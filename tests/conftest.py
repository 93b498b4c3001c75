"""Suite-wide settings: offline model hubs, the test tiers, and skipping GPU tests where CUDA is
absent.

Tiers (Makefile: ``test-fast``, ``test-integration``, ``test-text``; ``test`` runs all three):
a test is ``text`` when it lives with the text pipeline or the experiments (they load models and
corpora), ``integration`` when it runs services, a Dask cluster or worker processes (by path here,
or marked by hand), and fast otherwise. ``@pytest.mark.fast`` keeps a test in the fast tier
whatever its path: one end-to-end equivalence test per driver stays there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Deterministic property tests without wall-clock deadlines: CI machines are small and shared.
settings.register_profile(
    "fre", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("fre")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tests that recompute an embedding and compare it with one computed inside a run need float32:
# under bfloat16 a text's embedding moves by ~1e-3 with the padding of the batch it sits in. The
# bfloat16 path is tested on its own (tests/fre_protocol/text/test_embedder.py).
os.environ.setdefault("FRE_E2T_EMBEDDER_PRECISION", "fp32")
# Under pytest-xdist (`make test` runs one worker per core) each worker keeps to one thread, so
# two workers do not fight over two cores with two BLAS/torch pools each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


ROOT = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def text_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One embedding cache for the whole test run: the text tests and the experiments embed each
    text once. Under pytest-xdist the workers share it (it lies beside their base folders): the
    cache writes each chunk under a unique temporary name and renames it into place."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("fre-e2t-cache")
    shared = tmp_path_factory.getbasetemp().parent / "fre-e2t-cache"
    shared.mkdir(exist_ok=True)
    return shared


TEXT_DIRS = ("fre_protocol/text", "fre_protocol/experiments")
INTEGRATION_PATHS = ("fre_protocol/drivers/net", "fre_protocol/drivers/test_dask.py")


def _tier_of(item: pytest.Item) -> str | None:
    try:
        rel = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if rel.startswith(TEXT_DIRS):
        return "text"
    if rel.startswith(INTEGRATION_PATHS):
        return "integration"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier_of(item)
        if item.get_closest_marker("fast") is not None:
            continue
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
    _skip_gpu_tests_without_cuda(items)


def _skip_gpu_tests_without_cuda(items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    try:
        import torch

        has_cuda = bool(torch.cuda.is_available())
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
