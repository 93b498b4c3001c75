"""Swapping a primitive for real (issue 33 A): ``--component FAMILY=NAME``, ``fre-e2t components``,
plug-ins of other packages through the ``fre_e2t.components`` entry points in every process that
builds components, and their origin in transcript headers, ``release.json`` and the audit.

The example plug-in (examples/fre-e2t-example-plugin) is installed with pip into a temporary
``--target`` directory, never imported by hand: this process finds it by putting that directory on
``sys.path`` (and asking the registry to look again), the CLI runs find it through ``PYTHONPATH``,
as every child process they start does. No global environment is modified.

Reference: the built-in release of the same small population (seeded, noise off); every driver
with the plug-in's shuffler must publish it exactly (the proxy's order is not part of what the
servers compute).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import main
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives import registry
from primitives.errors import ComponentPluginError, UnknownComponentError
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "fre-e2t-example-plugin"
DIST = "fre-e2t-example-plugin 0.1.0"
SEED = 2024
FLAGS = ["--epsilon", "inf", "--threshold", "20", "--noise", "off", "--seed", str(SEED)]
PLUGIN = ["--component", "shuffler=sort-by-prf"]


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plug-in installed by pip into a fresh ``--target`` directory (built from a copy,
    so the source tree gets no build/ or egg-info)."""
    pytest.importorskip("setuptools", reason="building the example plug-in needs setuptools")
    root = tmp_path_factory.mktemp("plugin")
    source = root / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"pip could not install the example plug-in: {done.stderr[-500:]}")
    assert any(target.glob("fre_e2t_example_plugin-0.1.0.dist-info")), sorted(p.name for p in target.iterdir())
    return target


@pytest.fixture
def installed(site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plug-in visible to this process (and to the processes it spawns) for one test."""
    monkeypatch.syspath_prepend(str(site))
    registry.reload_plugins()
    yield site
    monkeypatch.undo()
    registry.reload_plugins()


@pytest.fixture(scope="module")
def x_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """130 users in 8 dimensions, three tight clusters of 40 and 10 rare points (tests/support/net_rounds.py)."""
    pop = synthetic_population(3, 40, 10, 8, 0.5, RandomSource.seeded(11, "net/population"), spread=0.02)
    path = tmp_path_factory.mktemp("data") / "x.npy"
    np.save(path, pop.embeddings)
    return path


@pytest.fixture(scope="module")
def reference(x_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The built-in components' release (runner, seeded, noise off)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(["simulate", "--embeddings", str(x_path), *FLAGS, "--out", str(out), "--no-progress"]) == 0
    release = Release.load(out)
    assert len(release) >= 2
    return release


def cli(args: list[str], *, path: Path | None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``fre-e2t ARGS`` in a fresh interpreter, with ``path`` (the plug-in's site) on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != registry.ENV_VAR}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), str(path) if path else "") if p)
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "fre_protocol.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False, cwd=REPO)


def assert_plugin_release(out: Path, reference: Release) -> None:
    got = Release.load(out)
    assert got.ids == reference.ids
    assert got.counts.tolist() == reference.counts.tolist()
    np.testing.assert_array_equal(got.centroids, reference.centroids)
    doc = json.loads((out / "release.json").read_text())
    assert doc["info"]["components"]["shuffler"] == "sort-by-prf"  # the plain names, as before
    assert doc["info"]["component_origins"]["shuffler"]["origin"] == DIST
    assert doc["info"]["component_origins"]["channel"] == {"name": "sealed-box", "origin": "built-in"}


def assert_header(store_path: Path) -> None:
    with TranscriptStore.open(store_path) as store:
        header = store.header
    assert header.components["shuffler"] == "sort-by-prf"
    assert header.extra["component_origins"]["shuffler"]["name"] == "sort-by-prf"
    assert header.extra["component_origins"]["shuffler"]["origin"] == DIST


def assert_audit(out: Path, site: Path) -> None:
    """The audit names the plug-in with its version; without the plug-in installed it still passes,
    with one warning line naming what is missing."""
    with_plugin = cli(["audit", str(out)], path=site)
    assert with_plugin.returncode == 0, with_plugin.stdout[-2000:] + with_plugin.stderr[-2000:]
    assert f"shuffler=sort-by-prf ({DIST})" in with_plugin.stdout
    assert "warning:" not in with_plugin.stdout
    without = cli(["audit", str(out)], path=None)
    assert without.returncode == 0, without.stdout[-2000:] + without.stderr[-2000:]
    warnings = [line for line in without.stdout.splitlines() if line.strip().startswith("warning:")]
    assert len(warnings) == 1 and "sort-by-prf" in warnings[0] and "not installed" in warnings[0], warnings


# -- the registry -----------------------------------------------------------------------------------
def test_the_plugin_is_found_by_its_entry_point_with_its_origin(installed: Path) -> None:
    assert "sort-by-prf" in registry.names("shuffler")
    assert str(registry.origin("shuffler", "sort-by-prf")) == DIST
    assert str(registry.origin("shuffler", "uniform")) == "built-in"
    assert str(registry.origin("channel", "sealed-box-alias")) == DIST
    shuffler = registry.create("shuffler", "sort-by-prf")
    from primitives.shuffle import Shuffler, UniformShuffler

    assert isinstance(shuffler, Shuffler)
    for method in ("shuffle", "strip_and_shuffle"):  # the same methods as the built-in
        assert callable(getattr(shuffler, method)) and hasattr(UniformShuffler, method)
    items = list(range(50))
    out = shuffler.shuffle(items, RandomSource.seeded(1))
    assert sorted(out) == items and out != items and items == list(range(50))
    assert shuffler.strip_and_shuffle([("who", 1), ("else", 2)], RandomSource.seeded(1)) in ([1, 2], [2, 1])


def test_the_plugin_shuffler_is_uniform_enough(installed: Path) -> None:
    """8,000 shuffles of 8 items (fresh keys, so not reproducible): where item 0 lands (8 cells) and
    where items 0 and 1 land jointly (56 cells, which catches a rigid structure such as a rotation),
    each a chi-square goodness-of-fit test at alpha = 1e-6."""
    from chi_square import chi2_sf

    shuffler = registry.create("shuffler", "sort-by-prf")
    size, trials = 8, 8000
    outs = [shuffler.shuffle(list(range(size)), None) for _ in range(trials)]
    first = np.array([o.index(0) for o in outs])
    second = np.array([o.index(1) for o in outs])
    for cells, n_cells in ((first, size), (first * (size - 1) + np.where(second > first, second - 1, second), size * (size - 1))):
        counts = np.bincount(cells, minlength=n_cells)
        expected = trials / n_cells
        stat = float(((counts - expected) ** 2 / expected).sum())
        assert chi2_sf(stat, n_cells - 1) > 1e-6, (n_cells, stat)


def test_in_process_runner_with_the_plugin(installed: Path, x_path: Path, reference: Release, tmp_path: Path) -> None:
    """The default tier's plug-in run: the in-process runner from the command line, then the audit."""
    out = tmp_path / "run"
    assert main(["simulate", "--embeddings", str(x_path), *FLAGS, *PLUGIN, "--out", str(out), "--no-progress"]) == 0
    assert_plugin_release(out, reference)
    assert_header(out / "transcript.sqlite")
    from fre_protocol.audit import audit_run, render

    report = audit_run(out)
    assert report.passed, [f.name for f in report.findings if not f.passed]
    text = render(report)
    assert f"shuffler=sort-by-prf ({DIST})" in text and "warning:" not in text


def test_a_broken_entry_point_names_its_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point whose module is missing fails when asked for, naming its distribution; one
    that claims a built-in name, or is not FAMILY.NAME, is refused and listed by registry.broken()."""
    info = tmp_path / "broken_plugin-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 2.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [fre_e2t.components]
        shuffler.missing-module = no_such_module_for_fre_tests:Shuffler
        shuffler.uniform = no_such_module_for_fre_tests:Shuffler
        no-family-here = no_such_module_for_fre_tests:Shuffler
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reload_plugins()
    try:
        assert str(registry.origin("shuffler", "missing-module")) == "broken-plugin 2.0"
        with pytest.raises(ComponentPluginError, match="broken-plugin 2.0") as info_:
            registry.resolve("shuffler", "missing-module")
        assert isinstance(info_.value, UnknownComponentError)
        assert str(registry.origin("shuffler", "uniform")) == "built-in"  # a plug-in never replaces a built-in
        broken = registry.broken()
        assert any("shuffler.uniform" in m and "broken-plugin 2.0" in m and "already registered" in m for m in broken)
        assert any("no-family-here" in m and "FAMILY.NAME" in m for m in broken)
    finally:
        monkeypatch.undo()
        registry.reload_plugins()
    assert "missing-module" not in registry.names("shuffler")


def test_register_entries_travel_as_triples_to_a_process_that_did_not_inherit_them() -> None:
    """A worker started elsewhere (a remote Dask worker) gets the run's register() entries in its
    tasks' arguments: components_for adds them before building."""
    code = textwrap.dedent(f"""
        import os
        from primitives import registry
        assert {registry.ENV_VAR!r} not in os.environ
        from fre_protocol.drivers.chunk_tasks import components_for
        comps = components_for({{"channel": "sealed-box-alias-t"}}, 1,
                               (("channel", "sealed-box-alias-t", "primitives.channel:SealedBoxChannel"),))
        print(comps.origins()["channel"]["origin"])
    """)
    env = {k: v for k, v in os.environ.items() if k != registry.ENV_VAR}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "register()"


def test_register_reaches_processes_started_afterwards(monkeypatch: pytest.MonkeyPatch) -> None:
    """register() records its entries in the environment, which a process started later inherits."""
    monkeypatch.delenv(registry.ENV_VAR, raising=False)
    registry.register("channel", "sealed-box-alias-env", "primitives.channel:SealedBoxChannel")
    try:
        assert "sealed-box-alias-env" in os.environ[registry.ENV_VAR]
        code = "from primitives import registry; print(registry.origin('channel', 'sealed-box-alias-env'))"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "register()"
    finally:
        registry.unregister("channel", "sealed-box-alias-env")
    assert registry.ENV_VAR not in os.environ


# -- the command line -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("shuffler=no-such-shuffler", "shuffler must be one of ['prf-sort', 'uniform'"),
        ("no_such_family=x", "component family must be one of"),
        ("shuffler", "must be FAMILY=NAME"),
    ],
)
def test_an_unknown_component_stops_before_any_work(
    flag: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--demo", "--out", str(out), "--component", flag])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not out.exists()


@pytest.mark.parametrize("command", ["simulate", "deploy-local", "serve", "users", "costs", "synthesize"])
def test_every_command_that_builds_components_takes_the_flag(command: str) -> None:
    from fre_protocol.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    parser = sub.choices[command]
    assert "--component" in parser._option_string_actions, command


def test_components_lists_families_protocols_and_origins(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["components"]) == 0
    text = capsys.readouterr().out
    assert "shuffler  (Protocol primitives.shuffle.Shuffler)" in text
    assert any(line.split()[:2] == ["sort-by-prf", "fre-e2t-example-plugin"] for line in text.splitlines())
    assert any(line.split()[:3] == ["uniform", "built-in", "[default]"] for line in text.splitlines())
    assert main(["components", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["families"]["shuffler"]["names"]["sort-by-prf"] == DIST
    assert set(data["families"]) >= {"group", "oprf", "secret_sharing", "discrete_gaussian", "ddg_encoder",
                                      "dummy_generator", "shuffler", "channel", "broadcast"}


def test_components_check_runs_the_conformance_suite(capsys: pytest.CaptureFixture[str]) -> None:
    """A built-in passes (exit 0, every property listed); a registered shuffler that is not
    uniform fails it (exit 1) with the failing property named; a name nobody registered is the
    one-line usage error (exit 2)."""
    from primitives import registry

    assert main(["components", "--check", "shuffler=uniform"]) == 0
    out = capsys.readouterr().out
    assert "shuffler 'uniform' (fast): ok" in out and "false-failure probability" in out
    registry.register("shuffler", "biased-test", "tests.primitives.test_conformance_suite:BiasedShuffler")
    try:
        assert main(["components", "--check", "biased-test"]) == 1
        out = capsys.readouterr().out
        assert "FAILED" in out and "FAIL" in out.split("FAILED", 1)[1]
    finally:
        registry.unregister("shuffler", "biased-test")
    assert main(["components", "--check", "shuffler=nope"]) == 2  # the one-line usage error


# -- every process that builds components (slow: worker processes, Dask, services) ----------------
@pytest.mark.integration
def test_streaming_with_user_processes_finds_the_plugin(site: Path, x_path: Path, reference: Release, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = cli(["simulate", "--embeddings", str(x_path), *FLAGS, *PLUGIN, "--out", str(out),
                "--driver", "streaming-processes", "--processes", "2"], path=site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_plugin_release(out, reference)
    assert_header(out / "transcript.sqlite")
    assert_audit(out, site)


@pytest.mark.integration
def test_a_local_dask_cluster_finds_the_plugin(site: Path, x_path: Path, reference: Release, tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="the dask driver needs the dask extra")
    out = tmp_path / "run"
    done = cli(["simulate", "--embeddings", str(x_path), *FLAGS, *PLUGIN, "--out", str(out),
                "--driver", "dask", "--processes", "2"], path=site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_plugin_release(out, reference)
    assert_header(out / "transcript.sqlite")
    assert_audit(out, site)


@pytest.mark.integration
def test_every_service_of_deploy_local_finds_the_plugin(site: Path, x_path: Path, reference: Release, tmp_path: Path) -> None:
    for module in ("starlette", "uvicorn", "httpx"):
        pytest.importorskip(module, reason=f"the networked deployment needs {module} (the 'net' extra)")
    out = tmp_path / "run"
    done = cli(["deploy-local", "--embeddings", str(x_path), *FLAGS, *PLUGIN, "--out", str(out)], path=site, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_plugin_release(out, reference)
    from fre_protocol.drivers.net.deploy import stores_of

    for path in stores_of(out).values():  # each service wrote its own store's header
        assert_header(path)
    assert_audit(out, site)


@pytest.mark.integration
def test_register_reaches_the_user_processes(x_path: Path, reference: Release) -> None:
    """The reported failure: a name added by registry.register() reached threads only, and worker
    processes refused it (UnknownComponentError … got 'sealed-box-alias')."""
    from fre_protocol.drivers.streaming import run_streaming
    from fre_protocol.drivers.user_processes import in_worker_processes
    from fre_protocol.roles.config import RoundSpec

    registry.register("channel", "sealed-box-alias", "primitives.channel:SealedBoxChannel")
    try:
        spec = RoundSpec(params=FreParams.paper(math.inf, threshold=20), seeds=SeedPlan.from_seed(SEED), noise=False,
                         components={"channel": "sealed-box-alias"})
        got = run_streaming(np.load(x_path), spec, players=in_worker_processes(2)).release
    finally:
        registry.unregister("channel", "sealed-box-alias")
    assert got.ids == reference.ids
    np.testing.assert_array_equal(got.centroids, reference.centroids)
    assert got.info["component_origins"]["channel"]["origin"] == "register()"


def test_the_library_guide_runs_as_written() -> None:
    """docs/library.md's Python examples are doctests (run_protocol, register(), the origins)."""
    import doctest

    result = doctest.testfile(str(REPO / "docs" / "library.md"), module_relative=False,
                              optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0, result


def test_serve_and_users_apply_the_flag_over_the_configuration() -> None:
    from fre_protocol.cli import build_parser
    from fre_protocol.cli.common import with_components
    from fre_protocol.drivers.net.round import RoundSettings

    settings = RoundSettings(round_id="r1", params=FreParams.paper(math.inf, threshold=20),
                             public_seed=SeedPlan.from_seed(SEED).public_seed, rng_mode="seeded", dim=8)
    args = build_parser().parse_args(["users", "--config", "c.json", "--embeddings", "x.npy", "--credentials", "k",
                                      "--component", "secret_sharing=additive-ring2k"])
    changed = with_components(settings, args)
    assert changed.components["secret_sharing"] == "additive-ring2k"
    assert {f: n for f, n in changed.components.items() if f != "secret_sharing"} == {
        f: n for f, n in settings.components.items() if f != "secret_sharing"}
    plain = build_parser().parse_args(["serve", "tag", "--config", "c.json"])
    assert with_components(settings, plain) is settings


def test_an_older_transcript_is_read_with_its_names_only() -> None:
    """A header from before origins were recorded (no extra.component_origins): the audit shows the
    names, notes that no origin was recorded, and warns only about names not installed."""
    from fre_protocol.audit import component_lines
    from fre_protocol.components import DEFAULT_COMPONENTS
    from transcripts import TranscriptHeader

    old = TranscriptHeader(rng_mode="seeded", components=dict(DEFAULT_COMPONENTS), extra={"dim": 8})
    described, warnings = component_lines(old)
    assert "shuffler=uniform" in described and "origins not recorded" in described and warnings == []
    gone = TranscriptHeader(rng_mode="seeded", components={**DEFAULT_COMPONENTS, "shuffler": "retired-one"})
    described, warnings = component_lines(gone)
    assert len(warnings) == 1 and "shuffler 'retired-one' is not installed here" in warnings[0]
    elsewhere = TranscriptHeader(
        rng_mode="seeded", components=dict(DEFAULT_COMPONENTS),
        extra={"component_origins": {"shuffler": {"name": "uniform", "origin": "someone-else 9.9"}}},
    )
    assert component_lines(elsewhere)[1][0].startswith("shuffler 'uniform' was someone-else 9.9 in the run, is built-in here")


def test_a_worker_without_the_plugin_says_to_install_it() -> None:
    """A worker whose environment lacks a plug-in the driver named (a remote Dask worker) stops
    with a ComponentPluginError that says where and what to install."""
    from fre_protocol.drivers.chunk_tasks import components_for

    with pytest.raises(ComponentPluginError, match="must be installed on every worker"):
        components_for({"shuffler": "not-installed-anywhere"}, 1)


def test_names_a_header_cannot_hold_are_refused_at_registration() -> None:
    with pytest.raises(UnknownComponentError, match="name must be"):
        registry.register("shuffler", "has space", "primitives.shuffle:UniformShuffler")
    assert "has space" not in registry.names("shuffler")


def test_a_plain_argparse_parser_checks_the_flag_when_read() -> None:
    """add_component_flag on a plain ArgumentParser (a command embedded elsewhere): the names are
    checked by components_of, with the same typed error."""
    import argparse

    from fre_protocol.cli.common import add_component_flag, components_of

    parser = argparse.ArgumentParser()
    add_component_flag(parser)
    assert components_of(parser.parse_args([])) is None
    assert components_of(parser.parse_args(["--component", "shuffler=uniform"])) == {"shuffler": "uniform"}
    with pytest.raises(UnknownComponentError, match="uniform"):
        components_of(parser.parse_args(["--component", "shuffler=nope"]))


def test_costs_runs_with_the_plugin(site: Path, tmp_path: Path) -> None:
    """``fre-e2t costs --component``: the measured run's header and release.json name the plug-in."""
    out = tmp_path / "costs"
    done = cli(["costs", "--num-users", "50", "--dim", "8", "--epsilon", "inf", "--batched-run", "0", "--no-cover-run",
                *PLUGIN, "--out", str(out)], path=site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_header(out / "transcript.sqlite")
    doc = json.loads((out / "release.json").read_text())
    assert doc["info"]["component_origins"]["shuffler"]["origin"] == DIST


@pytest.mark.integration
def test_register_reaches_each_service_of_a_local_deployment(x_path: Path, reference: Release, tmp_path: Path) -> None:
    """deploy_local's services are processes started after register(): they inherit its entries."""
    for module in ("starlette", "uvicorn", "httpx"):
        pytest.importorskip(module, reason=f"the networked deployment needs {module} (the 'net' extra)")
    from fre_protocol.components import component_names
    from fre_protocol.drivers.net.deploy import DeployOptions, deploy_local
    from fre_protocol.drivers.net.round import RoundSettings

    registry.register("channel", "sealed-box-alias", "primitives.channel:SealedBoxChannel")
    try:
        settings = RoundSettings(
            round_id="alias", params=FreParams.paper(math.inf, threshold=20), public_seed=SeedPlan.from_seed(SEED).public_seed,
            rng_mode="seeded", dim=8, noise=False, window_count=64, window_seconds=0.1,
            components=component_names({"channel": "sealed-box-alias"}),
        )
        summary = deploy_local(np.load(x_path), settings, tmp_path, DeployOptions(test_seed=SEED))
    finally:
        registry.unregister("channel", "sealed-box-alias")
    assert summary["users"]["failures"] == {}
    got = Release.load(tmp_path)
    assert got.ids == reference.ids and got.counts.tolist() == reference.counts.tolist()
    np.testing.assert_array_equal(got.centroids, reference.centroids)
    assert got.info["component_origins"]["channel"]["origin"] == "register()"
