"""Issue 28 (M6) on the networked services: a share one server accepts and the other refuses.

The in-process drivers' test is ``tests/fre_protocol/test_equivalence.py::
test_a_share_one_server_refuses_is_left_out_by_every_driver``; here the same fault (the first
participant of participant chunk 0 sends one server a share one byte short) goes through a local
deployment (three service processes, the users' client in this process, where the fault is
patched in) and must publish what the runner publishes with the same fault.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from net_rounds import PARAMS, SEED, assert_same_release, needs_net, round_settings
from share_faults import faulty_share

from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.drivers.net.deploy import DeployOptions, deploy_local
from fre_protocol.roles.config import RoundSpec
from mechanism.population import Population
from mechanism.release import Release
from mechanism.seeds import SeedPlan

needs_net()


@pytest.mark.parametrize("refused_by", ["S_tag", "S_syn"])
def test_a_share_one_server_refuses_is_left_out_by_the_services(
    refused_by: str, tmp_path: Path, small_population: Population, reference_release: Release,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = small_population.embeddings
    faulty_share(monkeypatch, refused_by)
    ref = run_protocol(x, RoundSpec(params=PARAMS, seeds=SeedPlan.from_seed(SEED), noise=False)).release
    short = {t: n - ref.diagnostics["contributors"][t] for t, n in reference_release.diagnostics["contributors"].items()}
    assert sorted(short.values()) == [0] * (len(ref) - 1) + [1]
    deploy_local(x, round_settings(f"faulty-{refused_by}"), tmp_path, DeployOptions(test_seed=SEED))
    got = Release.load(tmp_path)
    assert_same_release(got, ref)
    assert got.diagnostics["contributors"] == ref.diagnostics["contributors"]
