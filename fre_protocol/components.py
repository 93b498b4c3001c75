"""Building the protocol's swappable components from registry names (design §5).

A run is described by a mapping ``family -> registry name`` (the defaults below); the same mapping
is written into the transcript header, so any run can be rebuilt from its transcript. Families:

=================  ==========================  ===============================================
family             default                     used for
=================  ==========================  ===============================================
group              ristretto255-sodium         the VOPRF's prime-order group backend
oprf               ristretto255-SHA512         RFC 9497 suite, VOPRF mode (tags, DLEQ proofs)
secret_sharing     additive-ring2k-seeded      two shares mod 2^b, one seed-compressed
discrete_gaussian  fast-vectorized             DDG noise (and dropout top-up noise)
ddg_encoder        ddg                         rotation, rounding, noise, mod 2^b; decoding
dummy_generator    tsdlap                      S_tag's dummy-tag padding (design §4.5)
shuffler           uniform                     the proxy's permutation of each batch
channel            sealed-box                  user → server sealing (X25519 sealed boxes)
broadcast          ribbon-classes              the released tags and count classes as users download them
=================  ==========================  ===============================================

Factories are resolved lazily through :mod:`primitives.registry`, so an unknown name fails with a
typed error listing the known names before any work starts. Other distributions add names through
the entry-point group ``fre_e2t.components`` (docs/library.md, "Writing a primitive"); each
component's origin (``built-in``, ``DIST VERSION`` or ``register()``) is written beside its name
(:meth:`Components.origins`), and the entries added by ``registry.register()`` travel to worker
processes with :attr:`Components.registered`. Each component (or, for the families built later
from round parameters, its factory class and then each product) is checked against its family's
Protocol (:mod:`primitives.contracts`): a missing method or a wrong arity fails with
:class:`~primitives.errors.ComponentContractError` naming the family, the name and the method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from primitives import contracts, registry
from primitives.channel import Channel
from primitives.contracts import check_component, check_factory
from primitives.ddg.encoder import DDGConfig, Encoder
from primitives.dummies import DummyGenerator
from primitives.errors import InvalidParameterError, UnknownComponentError
from primitives.noise.base import DiscreteGaussianSampler
from primitives.sharing import SecretSharing
from primitives.shuffle import Shuffler
from primitives.voprf import Oprf

DEFAULT_COMPONENTS: dict[str, str] = {
    "group": "ristretto255-sodium",
    "oprf": "ristretto255-SHA512",
    "secret_sharing": "additive-ring2k-seeded",
    "discrete_gaussian": "fast-vectorized",
    "ddg_encoder": "ddg",
    "dummy_generator": "tsdlap",
    "shuffler": "uniform",
    "channel": "sealed-box",
    # The users' broadcast encoding (fre_protocol.roles.broadcast): 27-bit fingerprints, so an
    # unreleased tag passes with probability 2^-27, and 8-bit count classes, so each bucket's
    # noise is sized from its count's class floor (docs/threat-model.md, "The compact broadcast").
    "broadcast": "ribbon-classes",
}


#: The Protocol each family's components implement (``module:Class``), shown by ``fre-e2t components``.
FAMILY_PROTOCOLS = contracts.FAMILY_PROTOCOLS


def parse_component(text: str) -> tuple[str, str]:
    """``FAMILY=NAME`` (the ``--component`` flag) as ``(family, name)``; InvalidParameterError otherwise."""
    family, eq, name = text.partition("=")
    if not eq or not family.strip() or not name.strip():
        raise InvalidParameterError(f"--component must be FAMILY=NAME, got {text!r}")
    return family.strip(), name.strip()


def component_names(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The defaults with ``overrides`` applied; families and names are checked against the
    registry (UnknownComponentError names the known ones)."""
    names = dict(DEFAULT_COMPONENTS)
    for family, name in (overrides or {}).items():
        if family not in DEFAULT_COMPONENTS:
            raise UnknownComponentError(
                f"component family must be one of {sorted(DEFAULT_COMPONENTS)}, got {family!r}"
            )
        names[family] = name
    for family, name in names.items():
        registry.origin(family, name)  # UnknownComponentError listing the known names (plug-ins included)
    return names


def component_origins(names: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``family -> {"name", "origin"}`` (plus ``"target"`` for an entry that is not built in):
    what transcript headers and ``release.json`` record beside the plain names."""
    out: dict[str, dict[str, str]] = {}
    for family, name in sorted(names.items()):
        found = registry.origin(family, name)
        entry = {"name": name, "origin": str(found)}
        if found.kind != "built-in":
            entry["target"] = found.target
        out[family] = entry
    return out


def installed_problems(origins: Mapping[str, Any] | None, names: Mapping[str, str]) -> list[str]:
    """One line per component a recorded run names that this process cannot build the same:
    not registered here, or registered from another origin (e.g. another version of the plug-in).
    ``origins`` is the recorded ``component_origins`` (None for a transcript from before they were
    recorded: then only the names are checked)."""
    problems: list[str] = []
    for family, name in sorted(names.items()):
        recorded = (origins or {}).get(family)
        recorded_origin = recorded.get("origin") if isinstance(recorded, Mapping) else None
        try:
            here = str(registry.origin(family, name))
        except UnknownComponentError:
            problems.append(
                f"{family} {name!r}" + (f" ({recorded_origin})" if recorded_origin else "")
                + " is not installed here"
            )
            continue
        if recorded_origin and recorded_origin != here:
            problems.append(f"{family} {name!r} was {recorded_origin} in the run, is {here} here")
    return problems


@dataclass(frozen=True, slots=True, kw_only=True)
class Components:
    """The built components of one run (those that need run parameters are factories)."""

    names: Mapping[str, str]
    suite: Oprf
    sampler: DiscreteGaussianSampler
    shuffler: Shuffler
    channel: Channel
    make_sharing: Callable[[int], SecretSharing]  # modulus bits -> sharing scheme mod 2^bits
    make_encoder: Callable[[DDGConfig], Encoder]  # DDGConfig -> encoder
    make_dummy_generator: Callable[[float, float], DummyGenerator]  # (epsilon0, delta0) -> generator
    # family -> {"name", "origin"[, "target"]}: where each was resolved from when it was built.
    built_from: Mapping[str, Mapping[str, str]] | None = None

    def header(self) -> dict[str, str]:
        """``family -> registry name``, as written into transcript headers."""
        return dict(self.names)

    def origins(self) -> dict[str, dict[str, str]]:
        """``family -> {"name", "origin"[, "target"]}`` (:func:`component_origins`), written
        beside :meth:`header` (transcript header ``extra["component_origins"]``, ``release.json``):
        as resolved when the components were built."""
        if self.built_from is None:
            return component_origins(self.names)
        return {family: dict(entry) for family, entry in self.built_from.items()}

    @property
    def registered(self) -> tuple[tuple[str, str, str], ...]:
        """The ``registry.register()`` entries among this run's names, as ``(family, name,
        target)``: what a worker process that did not inherit them is given (:func:`build_components`'s
        ``registered``)."""
        return tuple(t for t in registry.registered() if self.names.get(t[0]) == t[1])


def build_components(
    overrides: Mapping[str, str] | None = None,
    *,
    workers: int = 2,
    registered: Iterable[Iterable[str]] = (),
) -> Components:
    """Resolve every family through the registry and build the components of a run.
    ``registered``: ``registry.register()`` entries of another process (:attr:`Components.registered`),
    added here first."""
    if registered:
        registry.apply(registered)
    names = component_names(overrides)
    built_from = component_origins(names)
    from primitives.voprf import Mode

    def built(family: str, component: Any) -> Any:
        return check_component(family, names[family], component)

    group = built("group", registry.create("group", names["group"]))
    suite = built("oprf", registry.resolve("oprf", names["oprf"])(names["oprf"], Mode.VOPRF, group=group, workers=workers))
    sampler = built("discrete_gaussian", registry.create("discrete_gaussian", names["discrete_gaussian"]))
    shuffler = built("shuffler", registry.create("shuffler", names["shuffler"]))
    channel = built("channel", registry.create("channel", names["channel"]))
    sharing_factory = registry.resolve("secret_sharing", names["secret_sharing"])
    encoder_factory = registry.resolve("ddg_encoder", names["ddg_encoder"])
    dummy_factory = registry.resolve("dummy_generator", names["dummy_generator"])
    for family, factory in (
        ("secret_sharing", sharing_factory), ("ddg_encoder", encoder_factory), ("dummy_generator", dummy_factory)
    ):
        check_factory(family, names[family], factory)

    def make_sharing(bits: int) -> SecretSharing:
        try:
            scheme = sharing_factory(bits=bits)
        except TypeError:
            raise InvalidParameterError(
                f"secret_sharing {names['secret_sharing']!r} cannot be built for a ring mod 2^{bits}"
            ) from None
        if int(getattr(scheme, "ring_modulus", scheme.modulus)) != 1 << bits:
            # The DDG encoder wraps its integers mod 2^b: reconstruction must answer mod 2^b.
            raise InvalidParameterError(
                f"secret_sharing must reconstruct mod 2^{bits} to aggregate DDG encodings, "
                f"got {names['secret_sharing']!r} reconstructing mod {getattr(scheme, 'ring_modulus', scheme.modulus)}"
            )
        return built("secret_sharing", scheme)

    def make_encoder(config: DDGConfig) -> Encoder:
        return built("ddg_encoder", encoder_factory(config, sampler))

    def make_dummy_generator(epsilon0: float, delta0: float) -> DummyGenerator:
        return built("dummy_generator", dummy_factory(epsilon0, delta0, 1))

    return Components(
        names=names,
        built_from=built_from,
        suite=suite,
        sampler=sampler,
        shuffler=shuffler,
        channel=channel,
        make_sharing=make_sharing,
        make_encoder=make_encoder,
        make_dummy_generator=make_dummy_generator,
    )


__all__ = [
    "DEFAULT_COMPONENTS", "FAMILY_PROTOCOLS", "Components", "build_components", "component_names",
    "component_origins", "installed_problems", "parse_component",
]
