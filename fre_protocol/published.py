"""What a run publishes, field by field, and the check that it publishes nothing else.

A run directory holds published files — ``release.json``, ``centroids.npy``, ``ledger.json``,
``synthetic.jsonl`` — beside operator-private ones (the transcript, ``diagnostics.private.json``,
``summary.json``, ``evaluation.json``, ``report.html``). Every published field must be a function
of the DP outputs, the public parameters and public randomness: ask of each one "does it change
between neighbouring populations?". The allow-lists below name every field that passed that
question; :func:`check_published` (run by ``fre-e2t audit``) fails on any other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fre_protocol.roles.ledger import DISHONEST_TERM, DROPOUTS_TERM
from mechanism.accounting import DUMMY_PADDING, HISTOGRAM_RELEASE
from mechanism.ledger import CENTROID_GAUSSIAN, HEAVY_HITTERS, SENSITIVITY_FAILURE
from mechanism.release import PUBLIC_INFO_KEYS
from mechanism.run_files import LEDGER_FILE, RELEASE_FILE, SYNTHETIC_FILE
from transcripts.audit import AuditFinding

#: Top-level keys of ``release.json``.
RELEASE_KEYS = frozenset({"buckets", "ledger", "params", "seeds", "noise", "info", "centroids", "format_version"})
#: Keys of one released bucket: its public id (a bucket index or a VOPRF tag) and its DP count.
BUCKET_KEYS = frozenset({"id", "count"})
#: Public seeds: the public seed always, the test seed only in (explicit, recorded) test mode.
SEED_KEYS = frozenset({"public_seed", "rng_mode", "test_seed"})
#: Ledger terms a run may state: the accountant's terms (the DDG's is named by primitives.ddg),
#: the dropout record and the dishonest-fraction calibration (public parameters only).
LEDGER_TERMS = frozenset({
    HEAVY_HITTERS, DUMMY_PADDING, HISTOGRAM_RELEASE, SENSITIVITY_FAILURE,
    CENTROID_GAUSSIAN, "centroid_ddg", DROPOUTS_TERM, DISHONEST_TERM,
})
#: Top-level keys of ``ledger.json`` besides the flat quantities (which are all numbers).
LEDGER_KEYS = frozenset({"composition", "aggregation", "params", "terms", "source", "unit"})
#: Keys of one line of ``synthetic.jsonl``: the text, which centroid it inverts (id, DP count,
#: index), how it was made (public pool or model) and its distance to that centroid. ``seed``,
#: ``seed_distance`` and ``seed_source`` (guided inversion): the text the search started from (a
#: public-pool text near the DP centroid, or the draft a generator trained on public text only
#: wrote from it), its distance to that centroid and which of the two it is — a function of the
#: DP centroid and public data alone, so post-processing of the release like the synthetic text.
SYNTHETIC_FIELDS = frozenset({
    "text", "bucket_id", "bucket_count", "centroid_index", "kind", "rank", "source",
    "paraphrase_of", "distance_to_centroid", "seed", "seed_distance", "seed_source",
})


def _unknown(keys: Iterable[str], allowed: Iterable[str]) -> list[str]:
    return sorted(set(keys) - set(allowed))


def release_document_problems(doc: Mapping[str, Any]) -> list[str]:
    """Fields of a ``release.json`` document outside the allow-lists (empty: all public)."""
    problems = [f"release.json: {k}" for k in _unknown(doc, RELEASE_KEYS)]
    problems += [f"release.json info: {k}" for k in _unknown(doc.get("info", {}), PUBLIC_INFO_KEYS)]
    problems += [f"release.json seeds: {k}" for k in _unknown(doc.get("seeds", {}), SEED_KEYS)]
    for bucket in doc.get("buckets", []):
        problems += [f"release.json bucket: {k}" for k in _unknown(bucket, BUCKET_KEYS)]
    problems += ledger_problems(doc.get("ledger", {}), "release.json ledger")
    return problems


def ledger_problems(ledger: Mapping[str, Any], where: str = "ledger.json") -> list[str]:
    """Ledger keys that are neither a flat number nor an allowed key, and unknown term names."""
    problems = [
        f"{where}: {k}"
        for k, v in ledger.items()
        if k not in LEDGER_KEYS and not isinstance(v, int | float | str | None)
    ]
    problems += [
        f"{where} term: {t.get('name')}" for t in ledger.get("terms", []) if t.get("name") not in LEDGER_TERMS
    ]
    return problems


def check_published(run_dir: str | Path) -> list[AuditFinding]:
    """One finding per published file present in ``run_dir``: every field on the allow-list."""
    out = Path(run_dir)
    findings: list[AuditFinding] = []
    readers = {
        RELEASE_FILE: lambda text: release_document_problems(json.loads(text)),
        LEDGER_FILE: lambda text: ledger_problems(json.loads(text)),
        SYNTHETIC_FILE: lambda text: sorted(
            {f"synthetic.jsonl: {k}" for line in text.splitlines() if line.strip()
             for k in _unknown(json.loads(line), SYNTHETIC_FIELDS)}
        ),
    }
    for name, problems_of in readers.items():
        path = out / name
        if not path.is_file():
            continue
        try:
            problems = problems_of(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
            problems = [f"{name} is unreadable ({type(exc).__name__})"]
        findings.append(
            AuditFinding(
                name=f"published:{name}",
                passed=not problems,
                detail=(
                    "every field is on the public allow-list"
                    if not problems
                    else f"fields outside the public allow-list: {', '.join(problems[:8])}"
                ),
                data={"problems": problems},
            )
        )
    return findings


__all__ = [
    "BUCKET_KEYS",
    "LEDGER_FILE",
    "LEDGER_KEYS",
    "LEDGER_TERMS",
    "RELEASE_KEYS",
    "SEED_KEYS",
    "SYNTHETIC_FIELDS",
    "SYNTHETIC_FILE",
    "check_published",
    "ledger_problems",
    "release_document_problems",
]
