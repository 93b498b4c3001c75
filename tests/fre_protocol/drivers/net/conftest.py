"""Shared fixtures of the networked-deployment tests: the small seeded population, the
in-process release every deployment of it must reproduce, and live deployments whose service
processes are killed when the test ends, pass or fail (helpers: tests/support/net_rounds.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from net_rounds import PARAMS, SEED, population

from fre_protocol.roles.config import RoundSpec
from mechanism.population import Population
from mechanism.seeds import SeedPlan

if TYPE_CHECKING:
    from fre_protocol.drivers.net.deploy import Deployment
    from fre_protocol.drivers.net.round import RoundSettings
    from mechanism.release import Release


@pytest.fixture(scope="session")
def small_population() -> Population:
    return population()


@pytest.fixture(scope="session")
def reference_release(small_population: Population) -> Release:
    """The in-process runner's release of the small population (seeded, noise off): what every
    deployment of it, disturbed or not, must publish exactly."""
    from fre_protocol.drivers.inprocess import run_protocol

    return run_protocol(small_population.embeddings, RoundSpec(params=PARAMS, seeds=SeedPlan.from_seed(SEED), noise=False)).release


@pytest.fixture
def deployments() -> Iterator[list[Deployment]]:
    """Deployments a test registers here are SIGKILLed at teardown, whatever happened."""
    from fre_protocol.drivers.net.deploy import stop_all

    started: list[Deployment] = []
    yield started
    for dep in started:
        stop_all(dep, kill=True)


@pytest.fixture
def live_deployment(tmp_path: Path, deployments: list[Deployment]) -> Callable[..., Deployment]:
    """``start(settings)``: configs, certificates and the three services running (the proxy
    ready once it has assembled the round document from the servers' keys; with ``web_root`` it
    also serves the join page)."""
    from fre_protocol.drivers.net.deploy import start_service, write_configs

    def start(settings: RoundSettings, *, name: str = "run", web_root: Path | None = None) -> Deployment:
        out = tmp_path / name
        shutil.rmtree(out, ignore_errors=True)
        dep = write_configs(out, settings, test_seed=SEED if settings.rng_mode == "seeded" else None,
                            web_root=web_root)
        deployments.append(dep)
        for role in ("S_tag", "S_syn", "proxy"):
            start_service(dep, role)
        return dep

    return start
