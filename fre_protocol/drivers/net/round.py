"""A round's configuration: the public document every party and user checks, and each
service's own (private) configuration file.

The **round document** is public: the round id, the privacy parameters, the public seed, the
protocol configuration, the component names, the embedder whose embeddings the round takes (when
it names one), the batching window, the deadlines and the servers' public keys for this round. Its SHA-256 over canonical JSON is the round's
fingerprint, which S_tag and S_syn each sign with their role certificate's key
(:mod:`fre_protocol.drivers.net.signing`): a user refuses to send anything when the document the proxy
serves differs from the settings it was given or lacks either server's valid signature, and each
server refuses a document that does not carry its own key. The
**service configuration** adds what only the operator knows: where it listens, its TLS files,
its peers, its state directory and, in test mode only, the seed that makes every secret
reproducible.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fre_protocol.components import component_names
from fre_protocol.roles.config import ProtocolConfig
from fre_protocol.roles.release import PublicPlan
from fre_protocol.roles.round import Phase2Plan, ServerPlan
from mechanism.contributions import TEXT_UNIT, PrivacyUnit
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError, VerificationError

SERVICE_ROLES = ("S_tag", "S_syn", "proxy")
_ROUND_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


_EMBEDDER_KEYS = ("dim", "name", "normalize")


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedderSpec:
    """The model a round's embeddings come from: public configuration, the same for neighbouring
    populations. A device embeds its text with this model and no other.

    ``name`` is the model id as :mod:`fre_protocol.text.embedder` names it
    (``sentence-transformers/all-MiniLM-L6-v2`` for the packaged default; ``local:NAME:FINGERPRINT``
    for a model folder, its fingerprint a content hash of the folder); ``dim`` its output
    dimension, which must be the round's; ``normalize`` whether each row is scaled to unit norm
    (the round's clipping and grid are set for the rows the model gives).
    """

    name: str
    dim: int
    normalize: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 256 or not self.name.isprintable():
            raise InvalidParameterError(f"embedder name must be 1-256 printable characters, got {self.name!r}")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise InvalidParameterError(f"embedder dim must be an integer >= 1, got {self.dim!r}")
        if not isinstance(self.normalize, bool):
            raise InvalidParameterError(f"embedder normalize must be true or false, got {self.normalize!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dim": self.dim, "normalize": self.normalize}

    @classmethod
    def from_dict(cls, data: Any) -> EmbedderSpec:
        """Exactly the keys :meth:`to_dict` writes, of its types (the document's signed bytes are
        re-encoded from what is read here, so nothing may be dropped or coerced)."""
        if not isinstance(data, dict):
            raise InvalidParameterError(
                f"embedder must be an object with keys {list(_EMBEDDER_KEYS)}, got {type(data).__name__}"
            )
        if sorted(data) != list(_EMBEDDER_KEYS):
            raise InvalidParameterError(f"embedder must have exactly the keys {list(_EMBEDDER_KEYS)}, got {sorted(data)}")
        return cls(name=data["name"], dim=data["dim"], normalize=data["normalize"])

    def __str__(self) -> str:
        return f"{self.name} (d = {self.dim}{', unit norm' if self.normalize else ''})"


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundSettings:
    """The public settings of one round (everything but the keys)."""

    round_id: str
    params: FreParams
    public_seed: bytes
    rng_mode: str
    dim: int
    noise: bool = True
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    components: dict[str, str] = field(default_factory=component_names)
    window_count: int = 1024
    window_seconds: float = 0.5
    phase1_deadline: float | None = None
    phase2_deadline: float | None = None
    # Whom the round protects; its cap c is how many requests of each kind a credential may send.
    unit: PrivacyUnit = TEXT_UNIT
    # The model its embeddings come from (None: the round names none, as documents did before
    # this field; a device must then bring its embedding).
    embedder: EmbedderSpec | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.unit, PrivacyUnit):
            raise InvalidParameterError(f"unit must be a PrivacyUnit, got {type(self.unit).__name__}")
        if not isinstance(self.round_id, str) or not _ROUND_ID.match(self.round_id):
            raise InvalidParameterError(
                f"round_id must be 1-64 characters of letters, digits, '.', '_' or '-', got {self.round_id!r}"
            )
        if not isinstance(self.public_seed, bytes) or len(self.public_seed) != 32:
            raise InvalidParameterError(f"public_seed must be 32 bytes, got {self.public_seed!r}")
        if self.rng_mode not in ("crypto", "seeded"):
            raise InvalidParameterError(f"rng_mode must be 'crypto' or 'seeded', got {self.rng_mode!r}")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise InvalidParameterError(f"dim must be an integer >= 1, got {self.dim!r}")
        if isinstance(self.window_count, bool) or not isinstance(self.window_count, int) or self.window_count < 1:
            raise InvalidParameterError(f"window_count must be an integer >= 1, got {self.window_count!r}")
        if not (isinstance(self.window_seconds, int | float) and 0 < self.window_seconds <= 3600):
            raise InvalidParameterError(f"window_seconds must be in (0, 3600], got {self.window_seconds!r}")
        for name in ("phase1_deadline", "phase2_deadline"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
                raise InvalidParameterError(f"{name} must be None or a unix time in seconds, got {value!r}")
        if self.embedder is not None:
            if not isinstance(self.embedder, EmbedderSpec):
                raise InvalidParameterError(
                    f"embedder must be an EmbedderSpec or None, got {type(self.embedder).__name__}"
                )
            if self.embedder.dim != self.dim:
                raise InvalidParameterError(
                    f"embedder {self.embedder.name!r} gives {self.embedder.dim}-dimensional embeddings, "
                    f"but the round's dim is {self.dim}: they must be equal"
                )

    def seeds(self, test_seed: int | None) -> SeedPlan:
        """This party's seed plan: the round's public seed; secrets seeded only in test mode."""
        if self.rng_mode == "seeded":
            if test_seed is None:
                raise InvalidParameterError("a seeded round needs test_seed in the service configuration")
            plan = SeedPlan.from_seed(test_seed)
            if plan.public_seed != self.public_seed:
                raise VerificationError("test_seed does not give the round's public seed")
            return plan
        return SeedPlan(public_seed=self.public_seed)

    def to_dict(self) -> dict[str, Any]:
        # A round that names no embedder has no "embedder" key: its document's bytes (and digest)
        # are those it had before the field existed.
        embedder = {} if self.embedder is None else {"embedder": self.embedder.to_dict()}
        return {
            "round_id": self.round_id,
            "params": self.params.to_dict(),
            "public_seed": self.public_seed.hex(),
            "rng_mode": self.rng_mode,
            "dim": self.dim,
            "noise": self.noise,
            "protocol": self.protocol.to_dict(),
            "components": dict(sorted(self.components.items())),
            "window": {"count": self.window_count, "seconds": self.window_seconds},
            "deadlines": {"phase1": self.phase1_deadline, "phase2": self.phase2_deadline},
            "unit": self.unit.to_dict(),
            **embedder,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundSettings:
        try:
            return cls(
                round_id=data["round_id"],
                params=FreParams.from_dict(dict(data["params"])),
                public_seed=bytes.fromhex(data["public_seed"]),
                rng_mode=data["rng_mode"],
                dim=int(data["dim"]),
                noise=bool(data.get("noise", True)),
                protocol=ProtocolConfig.from_dict(data.get("protocol", {})),
                components=component_names(data.get("components")),
                window_count=int(data.get("window", {}).get("count", 1024)),
                window_seconds=float(data.get("window", {}).get("seconds", 0.5)),
                phase1_deadline=data.get("deadlines", {}).get("phase1"),
                phase2_deadline=data.get("deadlines", {}).get("phase2"),
                unit=PrivacyUnit.from_dict(data.get("unit", {})),
                embedder=EmbedderSpec.from_dict(data["embedder"]) if "embedder" in data else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidParameterError):
                raise
            raise InvalidParameterError(f"round settings are malformed: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundDocument:
    """The public round document: settings plus the servers' public keys for this round."""

    settings: RoundSettings
    voprf_public_key: bytes
    tag_box_key: bytes
    syn_box_key: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.settings.to_dict(),
            "public_keys": {
                "voprf": self.voprf_public_key.hex(),
                "S_tag_box": self.tag_box_key.hex(),
                "S_syn_box": self.syn_box_key.hex(),
            },
        }

    def encode(self) -> bytes:
        return canonical_json(self.to_dict())

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.encode()).hexdigest()

    @classmethod
    def decode(cls, data: bytes) -> RoundDocument:
        """The document in ``data`` (its ``signatures``, if any, are not part of it and are not
        checked here: see :class:`fre_protocol.drivers.net.signing.SignedRoundDocument`)."""
        try:
            return cls.from_dict(json.loads(data))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidParameterError):
                raise
            raise InvalidParameterError(f"round document is malformed: {type(exc).__name__}: {exc}") from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundDocument:
        try:
            doc = {k: v for k, v in data.items() if k != "signatures"}
            keys = doc.pop("public_keys")
            return cls(
                settings=RoundSettings.from_dict(doc),
                voprf_public_key=bytes.fromhex(keys["voprf"]),
                tag_box_key=bytes.fromhex(keys["S_tag_box"]),
                syn_box_key=bytes.fromhex(keys["S_syn_box"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, InvalidParameterError):
                raise
            raise InvalidParameterError(f"round document is malformed: {type(exc).__name__}: {exc}") from None

    def check_settings(self, expected: RoundSettings) -> None:
        """VerificationError naming the first field where the served document differs from
        the settings this party was given (a user or server then sends nothing)."""
        mine, theirs = expected.to_dict(), self.settings.to_dict()
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                raise VerificationError(
                    f"round document differs from the expected settings in {key!r}: "
                    f"expected {mine.get(key)!r}, got {theirs.get(key)!r}"
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceConfig:
    """One service's configuration file (operator-private: it names key files and, in test
    mode, the test seed)."""

    role: str
    host: str
    port: int
    state_dir: Path
    ca: Path
    cert: Path
    key: Path
    peers: dict[str, str]
    round: RoundSettings
    test_seed: int | None = None
    credential_key: Path | None = None
    #: The proxy only: the built web client (clients/web/dist) whose join page it serves at ``/``
    #: and ``/web/...`` (see web_static.py); None serves no page.
    web_root: Path | None = None

    def __post_init__(self) -> None:
        if self.role not in SERVICE_ROLES:
            raise InvalidParameterError(f"role must be one of {list(SERVICE_ROLES)}, got {self.role!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port < 65536:
            raise InvalidParameterError(f"port must be an integer in [0, 65535], got {self.port!r}")
        missing = [r for r in SERVICE_ROLES if r != self.role and r not in self.peers]
        if missing:
            raise InvalidParameterError(f"peers must give the URL of {missing}, got {sorted(self.peers)}")
        if self.role == "proxy" and self.credential_key is None:
            raise InvalidParameterError("the proxy needs credential_key (the file that checks user credentials)")
        if self.role != "proxy" and self.web_root is not None:
            raise InvalidParameterError(f"only the proxy serves the web page, got web_root for {self.role!r}")

    def to_dict(self) -> dict[str, Any]:
        web = {} if self.web_root is None else {"web_root": str(self.web_root)}  # absent: the file as before
        return web | {
            "role": self.role,
            "listen": {"host": self.host, "port": self.port},
            "state_dir": str(self.state_dir),
            "tls": {"ca": str(self.ca), "cert": str(self.cert), "key": str(self.key)},
            "peers": dict(self.peers),
            "round": self.round.to_dict(),
            "test_seed": self.test_seed,
            "credential_key": None if self.credential_key is None else str(self.credential_key),
        }

    @classmethod
    def load(cls, path: str | Path) -> ServiceConfig:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
            return cls(
                role=data["role"],
                host=data["listen"]["host"],
                port=int(data["listen"]["port"]),
                state_dir=Path(data["state_dir"]),
                ca=Path(data["tls"]["ca"]),
                cert=Path(data["tls"]["cert"]),
                key=Path(data["tls"]["key"]),
                peers=dict(data["peers"]),
                round=RoundSettings.from_dict(data["round"]),
                test_seed=data.get("test_seed"),
                credential_key=None if data.get("credential_key") is None else Path(data["credential_key"]),
                web_root=None if data.get("web_root") is None else Path(data["web_root"]),
            )
        except FileNotFoundError:
            raise InvalidParameterError(f"config file {str(p)!r} does not exist") from None
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidParameterError):
                raise
            raise InvalidParameterError(f"config file {str(p)!r} is malformed: {type(exc).__name__}: {exc}") from None





class RoundContext:
    """A party's working view of a round: its seed plan, components, release floor, dummy
    parameters (all functions of the public settings and, in test mode, the test seed)."""

    def __init__(self, settings: RoundSettings, *, test_seed: int | None, workers: int = 2) -> None:
        from fre_protocol.components import build_components
        from fre_protocol.roles.ledger import dummy_parameters
        from mechanism.fre_e2t import release_threshold

        self.settings = settings
        self.params = settings.params
        self.seeds = settings.seeds(test_seed)
        self.comps = build_components(settings.components, workers=workers)
        self.floor = release_threshold(self.params)
        self.dummy = dummy_parameters(self.params, settings.protocol) if self.params.is_dp else (math.inf, 0.0)

    def server_plan(self) -> ServerPlan:
        """What the servers need of the round, as the in-process drivers plan it."""
        return ServerPlan(
            params=self.params, seeds=self.seeds, cfg=self.settings.protocol, comps=self.comps, floor=self.floor,
            dummy=self.dummy,
        )

    def public_plan(self) -> PublicPlan:
        """The public plan S_syn assembles the release under."""
        return PublicPlan(
            server=self.server_plan(), dim=self.settings.dim, noise=self.settings.noise, unit=self.settings.unit
        )

    def phase2(self, released: dict[bytes, int]) -> Phase2Plan:
        """Phase 2's plan from the broadcast, as the in-process driver derives it."""
        from fre_protocol.roles.round import phase2_plan

        return phase2_plan(self.params, self.settings.dim, self.settings.protocol, self.comps, released)

    def user_noise(self, phase2: Phase2Plan) -> tuple[Any, float] | None:
        """The users' own DDG noise, which S_tag tops up under the topup policy (None: off)."""
        if self.settings.noise and self.params.is_dp:
            return (self.comps.sampler, float(phase2.ddg_config.sigma_int))
        return None
__all__ = ["SERVICE_ROLES", "EmbedderSpec", "RoundContext", "RoundDocument", "RoundSettings", "ServiceConfig", "canonical_json"]
