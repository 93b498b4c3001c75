"""Known-answer vector files shipped with the package (``fre_protocol/testing/vectors/``), read
only after their recorded sha256 matches, so a changed file fails loudly instead of silently
testing something else. Provenance of each file is in the README beside it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent / "vectors"

#: sha256 of each packaged vector file, as recorded in its README.
SHA256 = {
    "rfc9180/x25519-sha256-aes128gcm-base.json": "00d0b43b3abc20bfc291fb9f321c8592f3c2c58524109dbfcb18dcba0aa28793",
    "rfc9497/ristretto255-sha512.json": "c7ae504cbb9c4b3b6775c63438e9e86e5cc1a5a4ccaafee656b2e073a3f12e33",
}


def load(relative: str) -> dict[str, Any]:
    """The parsed vector file ``relative`` (under ``fre_protocol/testing/vectors``), after checking
    its sha256."""
    if relative not in SHA256:
        raise KeyError(f"no packaged vector file {relative!r}; known: {sorted(SHA256)}")
    data = (ROOT / relative).read_bytes()
    if hashlib.sha256(data).hexdigest() != SHA256[relative]:
        raise AssertionError(f"{relative} changed: its sha256 is not the recorded one")
    loaded: dict[str, Any] = json.loads(data)
    return loaded
