"""The two-server, two-phase Fre-E2T protocol: parties, messages, runner, text pipeline, CLI.

Heavy ML dependencies (torch, sentence-transformers) are imported only inside
``fre_protocol.text``, lazily, so ``import fre_protocol`` works with the core install.
"""

from __future__ import annotations

from typing import Any

# The public protocol API, resolved on first use so that `import fre_protocol` stays light.
_LAZY = {
    "run_protocol": "fre_protocol.runner",
    "ProtocolResult": "fre_protocol.runner",
    "ProtocolConfig": "fre_protocol.runner",
    "audit_run": "fre_protocol.audit",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fre_protocol' has no attribute {name!r}")


__all__ = ["ProtocolConfig", "ProtocolResult", "audit_run", "run_protocol"]
