"""The two-server, two-phase Fre-E2T protocol: roles, messages, drivers, text pipeline, CLI.

Threat model (docs/threat-model.md): honest-but-curious, non-colluding servers; neighbours
differ by one user. Per party:

* the **proxy** sees who sends what, when, to which server — never a payload (sealed); phase-2
  cover traffic makes every online user send the same number and sizes of messages;
* **S_tag** sees blinded elements, one uniform share of each contribution and the public
  broadcast; it sends S_syn an aggregate only over at least ⌈τ⌉ contributions (or tops up the
  noise itself), once per tag, because S_syn holds the other shares;
* **S_syn** sees every tag count — heavy ones exact, the rest padded by TSDLap dummies, charged
  as ``histogram_release`` — and noisy sums of at least ⌈τ⌉ users; it withholds a decoded sum
  longer than honest users can make it (a malicious user's offset share);
* S_tag's VOPRF answers any blinded element: a deployment limits it to one evaluation per user
  credential per round.

What a run publishes (release, centroids, ledger, synthetic texts) is a function of the DP
outputs and public data only (:mod:`fre_protocol.published`); the rest is operator-private.

Heavy ML dependencies (torch, sentence-transformers) are imported only inside
``fre_protocol.text``, lazily, so ``import fre_protocol`` works with the core install.
"""

from __future__ import annotations

from typing import Any

# The public protocol API, resolved on first use so that `import fre_protocol` stays light.
_LAZY = {
    "run_protocol": "fre_protocol.drivers.inprocess",
    "ProtocolResult": "fre_protocol.drivers.local",
    "ProtocolConfig": "fre_protocol.roles.config",
    "RoundSpec": "fre_protocol.roles.config",
    "RunOptions": "fre_protocol.roles.config",
    "audit_run": "fre_protocol.audit",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fre_protocol' has no attribute {name!r}")


__all__ = ["ProtocolConfig", "ProtocolResult", "RoundSpec", "RunOptions", "audit_run", "run_protocol"]
