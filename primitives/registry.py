"""One explicit registry of swappable components: stable string names → factories.

Names are written into transcript headers so any run can be rebuilt. Entries are
``"module:attribute"`` paths resolved on first use, so importing the registry imports no backend
(and a backend whose system library is missing fails only when it is asked for).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from primitives.errors import UnknownComponentError

# family -> name -> "module:attribute" of a factory (a class or a function returning the component).
_ENTRIES: dict[str, dict[str, str]] = {
    "group": {
        "ristretto255-sodium": "primitives.group.ristretto255_sodium:SodiumRistretto255",
        "ristretto255-pure": "primitives.group.ristretto255_pure:PureRistretto255",
    },
    "oprf": {
        "ristretto255-SHA512": "primitives.voprf:get_suite",
    },
    "secret_sharing": {
        "additive-ring2k": "primitives.sharing.ring2k:AdditiveRing2k",
        "additive-ring2k-seeded": "primitives.sharing.seeded:SeedCompressedRing2k",
        "additive-prime-field": "primitives.sharing.prime_field:AdditivePrimeField",
    },
    "discrete_gaussian": {
        "cks-exact": "primitives.noise.cks_exact:ExactDiscreteGaussian",
        "fast-vectorized": "primitives.noise.fast:FastDiscreteGaussian",
    },
    "ddg_encoder": {
        "ddg": "primitives.ddg.encoder:DDGEncoder",
    },
    "dummy_generator": {
        "tsdlap": "primitives.dummies.tsdlap:TSDLapDummyGenerator",
    },
    "shuffler": {
        "uniform": "primitives.shuffle:UniformShuffler",
    },
    "channel": {
        "sealed-box": "primitives.channel:SealedBoxChannel",
    },
    "broadcast": {
        "full-list": "primitives.compact.broadcast:FullListBroadcast",
        "fuse": "primitives.compact.broadcast:FuseBroadcast",
        "ribbon": "primitives.compact.ribbon:RibbonBroadcast",
        "ribbon-32": "primitives.compact.ribbon:Ribbon32Broadcast",
    },
}


def register(family: str, name: str, target: str) -> None:
    """Add or replace an entry; ``target`` is ``"module:attribute"``. Lets users plug their own."""
    _ENTRIES.setdefault(family, {})[name] = target


def families() -> list[str]:
    return sorted(_ENTRIES)


def names(family: str) -> list[str]:
    if family not in _ENTRIES:
        raise UnknownComponentError(
            f"family must be one of {sorted(_ENTRIES)}, got {family!r}"
        )
    return sorted(_ENTRIES[family])


def resolve(family: str, name: str) -> Callable[..., Any]:
    """The factory registered as ``name`` in ``family``; a typed error lists the known names."""
    known = names(family)
    if name not in _ENTRIES[family]:
        raise UnknownComponentError(f"{family} must be one of {known}, got {name!r}")
    module_name, _, attribute = _ENTRIES[family][name].partition(":")
    factory: Callable[..., Any] = getattr(importlib.import_module(module_name), attribute)
    return factory


def create(family: str, name: str, /, **kwargs: Any) -> Any:
    """Build the component registered as ``name`` (``kwargs`` go to its factory)."""
    return resolve(family, name)(**kwargs)
