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
=================  ==========================  ===============================================

Factories are resolved lazily through :mod:`primitives.registry`, so an unknown name fails with a
typed error listing the known names before any work starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from primitives import registry
from primitives.channel import Channel
from primitives.errors import InvalidParameterError, UnknownComponentError
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
    "broadcast": "ribbon",  # the users' broadcast encoding (fre_protocol.roles.broadcast)
}


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
        known = registry.names(family)
        if name not in known:
            raise UnknownComponentError(f"{family} must be one of {known}, got {name!r}")
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class Components:
    """The built components of one run (those that need run parameters are factories)."""

    names: Mapping[str, str]
    suite: Oprf
    sampler: Any
    shuffler: Shuffler
    channel: Channel
    make_sharing: Callable[[int], Any]  # modulus bits -> sharing scheme mod 2^bits
    make_encoder: Callable[[Any], Any]  # DDGConfig -> encoder
    make_dummy_generator: Callable[[float, float], Any]  # (epsilon0, delta0) -> generator

    def header(self) -> dict[str, str]:
        """``family -> registry name``, as written into transcript headers."""
        return dict(self.names)


def build_components(overrides: Mapping[str, str] | None = None, *, workers: int = 2) -> Components:
    """Resolve every family through the registry and build the components of a run."""
    names = component_names(overrides)
    from primitives.voprf import Mode

    group = registry.create("group", names["group"])
    suite = registry.resolve("oprf", names["oprf"])(names["oprf"], Mode.VOPRF, group=group, workers=workers)
    sampler = registry.create("discrete_gaussian", names["discrete_gaussian"])
    shuffler = registry.create("shuffler", names["shuffler"])
    channel = registry.create("channel", names["channel"])
    sharing_factory = registry.resolve("secret_sharing", names["secret_sharing"])
    encoder_factory = registry.resolve("ddg_encoder", names["ddg_encoder"])
    dummy_factory = registry.resolve("dummy_generator", names["dummy_generator"])

    def make_sharing(bits: int) -> Any:
        try:
            scheme = sharing_factory(bits=bits)
        except TypeError:
            raise InvalidParameterError(
                f"secret_sharing {names['secret_sharing']!r} cannot be built for a ring mod 2^{bits}"
            ) from None
        if int(scheme.modulus) != 1 << bits:
            # The DDG encoder wraps its integers mod 2^b: only a ring of the same size sums them.
            raise InvalidParameterError(
                f"secret_sharing must share mod 2^{bits} to aggregate DDG encodings, "
                f"got {names['secret_sharing']!r} with modulus {scheme.modulus}"
            )
        return scheme

    def make_encoder(config: Any) -> Any:
        return encoder_factory(config, sampler)

    def make_dummy_generator(epsilon0: float, delta0: float) -> Any:
        return dummy_factory(epsilon0, delta0, 1)

    return Components(
        names=names,
        suite=suite,
        sampler=sampler,
        shuffler=shuffler,
        channel=channel,
        make_sharing=make_sharing,
        make_encoder=make_encoder,
        make_dummy_generator=make_dummy_generator,
    )


__all__ = ["DEFAULT_COMPONENTS", "Components", "build_components", "component_names"]
