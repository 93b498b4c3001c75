"""One explicit registry of swappable components: stable string names → factories.

Names are written into transcript headers so any run can be rebuilt. Entries are
``"module:attribute"`` paths resolved on first use, so importing the registry imports no backend
(and a backend whose system library is missing fails only when it is asked for).

Three kinds of entry, each with an *origin* (written beside the name in transcript headers and
``release.json``):

* the built-in ones below (origin ``"built-in"``);
* plug-ins of other installed distributions, found through the entry-point group
  ``fre_e2t.components`` (entry name ``FAMILY.NAME``, value ``module:factory``), loaded once, on
  the first question asked of the registry, in whichever process asks it (origin
  ``"DIST VERSION"``);
* entries added at run time by :func:`register` (origin ``"register()"``). :func:`register` also
  records them in the environment variable :data:`ENV_VAR`, which every process started
  afterwards from this one inherits (worker processes, a local Dask cluster, the services of
  ``deploy-local``), and whose registry applies it on import. Already running processes (remote
  Dask workers) get them from :func:`registered` passed in their tasks' arguments
  (:func:`apply`).

A plug-in may not replace a built-in name, and a name two distributions claim is refused: both
are recorded in :func:`broken` and named when that entry is asked for.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from primitives.errors import ComponentPluginError, UnknownComponentError

#: The entry-point group other distributions declare their components in (``FAMILY.NAME = module:factory``).
ENTRY_POINT_GROUP = "fre_e2t.components"
#: The environment variable that carries :func:`register`'s entries to child processes (a JSON
#: list of ``[family, name, "module:attribute"]``).
ENV_VAR = "FRE_E2T_REGISTERED"
#: What a family or a name may be: what a transcript header accepts (transcripts.header).
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,127}")
BUILT_IN = "built-in"
REGISTERED = "register()"

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
        "additive-prime-field": "primitives.sharing.prime_field:for_ring",
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
        "prf-sort": "primitives.shuffle_prf:PrfSortShuffler",
    },
    "channel": {
        "sealed-box": "primitives.channel:SealedBoxChannel",
        "hpke": "primitives.channel_hpke:HpkeChannel",
    },
    "broadcast": {
        "full-list": "primitives.compact.broadcast:FullListBroadcast",
        "fuse": "primitives.compact.broadcast:FuseBroadcast",
        "ribbon": "primitives.compact.ribbon:RibbonBroadcast",
        "ribbon-32": "primitives.compact.ribbon:Ribbon32Broadcast",
        "ribbon-classes": "primitives.compact.ribbon_classes:RibbonClassesBroadcast",
    },
}


_BUILT_IN: dict[str, dict[str, str]] = {family: dict(entries) for family, entries in _ENTRIES.items()}


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an entry came from: ``built-in``, ``register()`` or a distribution and its version."""

    kind: str  # "built-in", "plugin" or "registered"
    target: str
    distribution: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        if self.kind == "plugin":
            return f"{self.distribution} {self.version}"
        return BUILT_IN if self.kind == "built-in" else REGISTERED


# family -> name -> origin of every entry that is not built in.
_ORIGINS: dict[str, dict[str, Origin]] = {}
# Plug-in entry points that could not be added (bad entry name, or a name already taken): each
# as (family or None, name or None, message naming the distribution).
_BROKEN: list[tuple[str | None, str | None, str]] = []
_LOADED = False
_LOCK = threading.RLock()


def _dist_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "an unknown distribution", "?"
    return str(dist.metadata["Name"] or dist.name), str(dist.version)


def _load_plugins() -> None:
    """Add the ``fre_e2t.components`` entry points and the inherited :data:`ENV_VAR` entries
    (once per process; the factories themselves are imported only when asked for)."""
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        _LOADED = True
        try:
            found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
        except Exception as exc:  # noqa: BLE001 - a broken installed metadata file must not stop a run
            _BROKEN.append((None, None, f"the entry points of {ENTRY_POINT_GROUP!r} could not be read: {exc}"))
            found = []
        seen: set[tuple[str, str, str]] = set()
        for ep in sorted(found, key=lambda e: (e.name, e.value)):
            dist, version = _dist_of(ep)
            if (ep.name, ep.value, dist) in seen:  # the same distribution found twice on the path
                continue
            seen.add((ep.name, ep.value, dist))
            family, dot, name = ep.name.partition(".")
            where = f"entry point {ep.name!r} = {ep.value!r} of {dist} {version} (group {ENTRY_POINT_GROUP!r})"
            if not dot or not IDENTIFIER.fullmatch(family) or not IDENTIFIER.fullmatch(name):
                _BROKEN.append((None, None, f"{where}: the entry name must be FAMILY.NAME, each 1-128 "
                                            "letters, digits or _ . : + - starting with a letter or digit"))
                continue
            # A family fre-e2t does not build yet is kept (the text side registers its families on
            # import; ``fre-e2t components`` shows every family).
            if ":" not in ep.value:
                _BROKEN.append((family, name, f"{where}: the value must be 'module:factory'"))
                continue
            if name in _ENTRIES.get(family, {}):
                owner = _ORIGINS.get(family, {}).get(name)
                taken = BUILT_IN if owner is None else str(owner)
                _BROKEN.append((family, name, f"{where}: {family} {name!r} is already registered ({taken}); ignored"))
                continue
            _ENTRIES.setdefault(family, {})[name] = ep.value
            _ORIGINS.setdefault(family, {})[name] = Origin("plugin", ep.value, dist, version)
        inherited = os.environ.get(ENV_VAR)
        if inherited:
            try:
                triples = [tuple(t) for t in json.loads(inherited)]
            except (TypeError, ValueError):
                _BROKEN.append((None, None, f"the environment variable {ENV_VAR} is not a JSON list of triples"))
                triples = []
            for triple in triples:
                if len(triple) == 3 and all(isinstance(v, str) for v in triple):
                    _add_registered(*triple, export=False)


def reload_plugins() -> None:
    """Forget the plug-ins found so far and look for them again: after a package was installed
    (or ``sys.path`` changed) in a running process. Entries added by :func:`register` stay."""
    global _LOADED
    with _LOCK:
        for family, entries in _ORIGINS.items():
            for name, found in list(entries.items()):
                if found.kind == "plugin":
                    del entries[name]
                    _ENTRIES[family].pop(name, None)
        _BROKEN.clear()
        importlib.invalidate_caches()
        _LOADED = False
    _load_plugins()


def _check_target(target: str, family: str = "x", name: str = "x") -> None:
    for label, text in (("family", family), ("name", name)):
        if not isinstance(text, str) or not IDENTIFIER.fullmatch(text):
            raise UnknownComponentError(
                f"a component {label} must be 1-128 letters, digits or _ . : + - starting with a letter or "
                f"digit, got {text!r}"
            )
    if not isinstance(target, str):
        raise UnknownComponentError(f"target must be 'module:attribute', got {target!r}")
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise UnknownComponentError(f"target must be 'module:attribute', got {target!r}")


def _add_registered(family: str, name: str, target: str, *, export: bool) -> None:
    _ENTRIES.setdefault(family, {})[name] = target
    _ORIGINS.setdefault(family, {})[name] = Origin("registered", target)
    if export:
        _export()


def _export() -> None:
    triples = registered()
    if triples:
        os.environ[ENV_VAR] = json.dumps([list(t) for t in triples])
    else:
        os.environ.pop(ENV_VAR, None)


def register(family: str, name: str, target: str, *, built_in: bool = False) -> None:
    """Add or replace an entry; ``target`` is ``"module:attribute"``. Lets users plug their own.

    The entry also reaches every process started from this one afterwards (through
    :data:`ENV_VAR`), so ``target`` must be importable there by its module path (not
    ``__main__``). ``built_in``: an entry of fre-e2t itself that its own module registers on
    import (the text components): recorded as built in, and not exported."""
    _check_target(target, family, name)
    _load_plugins()
    with _LOCK:
        if built_in:
            _ENTRIES.setdefault(family, {})[name] = target
            _BUILT_IN.setdefault(family, {})[name] = target
            _ORIGINS.get(family, {}).pop(name, None)
            return
        _add_registered(family, name, target, export=True)


def unregister(family: str, name: str) -> None:
    """Remove an entry added by :func:`register` (built-in and plug-in entries stay)."""
    _load_plugins()
    with _LOCK:
        origin = _ORIGINS.get(family, {}).get(name)
        if origin is None or origin.kind != "registered":
            raise UnknownComponentError(f"{family} {name!r} was not added by register()")
        del _ORIGINS[family][name]
        if name in _BUILT_IN.get(family, {}):
            _ENTRIES[family][name] = _BUILT_IN[family][name]
        else:
            del _ENTRIES[family][name]
        _export()


def registered() -> tuple[tuple[str, str, str], ...]:
    """The entries added by :func:`register` in this process, as ``(family, name, target)``
    triples: what a process that did not inherit them needs (:func:`apply`)."""
    _load_plugins()
    return tuple(
        (family, name, origin.target)
        for family in sorted(_ORIGINS)
        for name, origin in sorted(_ORIGINS[family].items())
        if origin.kind == "registered"
    )


def apply(triples: Iterable[Iterable[str]]) -> None:
    """Register ``(family, name, target)`` triples from another process (:func:`registered`);
    entries already the same are left alone."""
    _load_plugins()
    with _LOCK:
        for family, name, target in (tuple(t) for t in triples):
            if _ENTRIES.get(family, {}).get(name) != target:
                _check_target(target, family, name)
                _add_registered(family, name, target, export=False)


def families() -> list[str]:
    _load_plugins()
    return sorted(_ENTRIES)


def names(family: str) -> list[str]:
    _load_plugins()
    if family not in _ENTRIES:
        raise UnknownComponentError(
            f"family must be one of {sorted(_ENTRIES)}, got {family!r}"
        )
    return sorted(_ENTRIES[family])


def origin(family: str, name: str) -> Origin:
    """Where ``name`` of ``family`` comes from (built in, a plug-in distribution or :func:`register`)."""
    _check_known(family, name)
    found = _ORIGINS.get(family, {}).get(name)
    return found if found is not None else Origin("built-in", _ENTRIES[family][name])


def broken() -> list[str]:
    """Why each plug-in entry point that could not be added was refused (one line each)."""
    _load_plugins()
    return [message for _, _, message in _BROKEN]


def _check_known(family: str, name: str) -> None:
    known = names(family)
    if name not in _ENTRIES[family]:
        why = [m for f, n, m in _BROKEN if f == family and n == name]
        if why:
            raise ComponentPluginError(why[0])
        raise UnknownComponentError(f"{family} must be one of {known}, got {name!r}")


def resolve(family: str, name: str) -> Callable[..., Any]:
    """The factory registered as ``name`` in ``family``; a typed error lists the known names,
    and a plug-in that cannot be imported names its distribution."""
    _check_known(family, name)
    target = _ENTRIES[family][name]
    module_name, _, attribute = target.partition(":")
    found = _ORIGINS.get(family, {}).get(name)
    if found is None:  # built in: an ImportError here is a missing system library, reported as is
        factory: Callable[..., Any] = getattr(importlib.import_module(module_name), attribute)
        return factory
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        source = f"plug-in of {found}" if found.kind == "plugin" else "entry added by register()"
        raise ComponentPluginError(
            f"{family} {name!r} ({source}, {target!r}) cannot be loaded in this process (pid {os.getpid()}): "
            f"{type(exc).__name__}: {exc} — install the package providing it where the components are "
            "built (every worker and service)"
        ) from None
    if not callable(obj):
        raise ComponentPluginError(f"{family} {name!r} ({target!r}, {found}) is not callable")
    return obj  # type: ignore[no-any-return]


def create(family: str, name: str, /, **kwargs: Any) -> Any:
    """Build the component registered as ``name`` (``kwargs`` go to its factory)."""
    return resolve(family, name)(**kwargs)
