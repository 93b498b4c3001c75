"""Every command runs on the install it needs, or says so first: the embeddings-only commands on
the core install (none of the text extra's libraries importable), the text commands stopping with
one line that names the text extra. Each command runs in a fresh Python whose PYTHONPATH starts
with tests/support/core_install (its sitecustomize hides torch, sentence-transformers,
transformers, matplotlib, scikit-learn, sacrebleu and vec2text)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mechanism.population import synthetic_population
from primitives.randomness import RandomSource

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = ROOT / "tests" / "support" / "core_install"
TEXT_EXTRA_LINE = "needs the text extra, which is not installed (no torch, sentence_transformers, transformers"


def core_run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BLOCKER), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "fre_protocol.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("core-install")
    pop = synthetic_population(2, 125, 30, 32, 0.5, RandomSource.seeded(25, "core-install"), spread=0.005)
    np.save(folder / "x.npy", pop.embeddings)
    return folder


def test_the_blocker_hides_the_text_extra(work: Path) -> None:
    code = ("import importlib.util as u; import numpy; "
            "print([m for m in ('torch', 'sentence_transformers', 'matplotlib', 'sklearn') if u.find_spec(m)])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BLOCKER), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=work, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


EMBEDDINGS_ONLY = {
    "account": ["account", "--epsilon", "8", "--json"],
    "certs": ["certs", "--out", "pki"],
    "mechanism": ["mechanism", "--embeddings", "x.npy", "--epsilon", "inf", "--seed", "1", "--out", "mech"],
    "simulate+audit": ["simulate", "--embeddings", "x.npy", "--epsilon", "inf", "--seed", "1", "--out", "sim"],
    "components": ["components"],
    "costs": ["costs", "--num-users", "50", "--dim", "8", "--epsilon", "inf", "--batched-run", "0", "--no-cover-run"],
    # baselines died in its plot (matplotlib) after computing every table; utility plots too
    "experiment --embeddings": ["experiment", "utility,baselines", "--embeddings", "x.npy", "--out", "exp",
                                "--epsilons", "inf", "--seeds", "1", "--threshold", "50", "--k", "4"],
    # d = 32 embeddings of no model: the round names no embedder.
    "deploy-local": ["deploy-local", "--embeddings", "x.npy", "--embedder", "none", "--epsilon", "inf",
                     "--threshold", "50", "--seed", "1", "--window", "64", "--window-seconds", "0.1", "--out", "deploy"],
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.integration) if n == "deploy-local" else n
                                  for n in EMBEDDINGS_ONLY])  # deploy-local starts three services
def test_embeddings_only_commands_run_on_the_core_install(name: str, work: Path) -> None:
    if name == "deploy-local":
        pytest.importorskip("uvicorn", reason="deploy-local needs the net extra")
    done = core_run(EMBEDDINGS_ONLY[name], work)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    if name == "simulate+audit":
        audit = core_run(["audit", "sim"], work)
        assert audit.returncode == 0 and "Traceback" not in audit.stderr, audit.stdout + audit.stderr
    if name.startswith("experiment"):
        assert (work / "exp" / "baselines.md").is_file() and not list((work / "exp").glob("*.png"))
        assert "baselines.png skipped (matplotlib, of the text extra, is not installed)" in done.stdout


TEXT_COMMANDS = {
    "synthesize": ["synthesize", "--corpus", "healthtweets", "--epsilon", "8", "--out", "syn"],
    "invert": ["invert", "--embeddings", "x.npy", "--out", "inv"],
    "bench-inversion": ["bench-inversion", "--out", "bench"],
    "experiment": ["experiment", "utility", "--out", "exp-text"],
}


@pytest.mark.parametrize("name", list(TEXT_COMMANDS))
def test_text_commands_name_the_missing_extra_first(name: str, work: Path) -> None:
    argv = TEXT_COMMANDS[name]
    done = core_run(argv, work)
    err = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"fre-e2t {name}: error: ") and TEXT_EXTRA_LINE in err
    assert "pip install 'fre-e2t[text]'" in err and "fre-e2t setup-data" in err
    assert not (work / argv[argv.index("--out") + 1]).exists()  # before any work


def test_every_help_builds_on_the_core_install(work: Path) -> None:
    """What ``fre-e2t CMD --help`` prints, for every command, in one core-install process."""
    code = ("from fre_protocol.cli import build_parser; import argparse; p = build_parser(); "
            "sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)); "
            "print(p.format_help()); [print(c.format_help()) for c in sub.choices.values()]")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BLOCKER), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=work, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    from fre_protocol.cli import COMMANDS

    assert done.stdout.count("usage: fre-e2t") == 1 + len(COMMANDS)  # the top level, then each command
