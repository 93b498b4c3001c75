"""The round document bound to the servers that hold its keys.

A round document names the servers' public keys, and users seal to them: whoever chooses those
keys reads what users send. The proxy assembles the document, so it alone must not vouch for it.
Each of S_tag and S_syn signs the document's digest (SHA-256 of its canonical JSON, signatures
excluded) with the private key of its CA-issued role certificate, after checking the document
carries its own keys; the proxy serves the document with both certificates and signatures, and
every user, holding only ``ca.pem``, checks both before sending anything. Each server also checks
the other's signature before it takes phase traffic, so S_tag seals the dummy user's submissions
to a key S_syn vouched for.

The signed statement is ``CONTEXT || role || 0x00 || digest``, signed ECDSA P-256 / SHA-256 (the
role certificates' key type, :mod:`fre_protocol.drivers.net.certs`). The context string keeps the
certificate's TLS key from being usable to sign anything else this way: a TLS handshake signs a
transcript of its own, with its own context (RFC 8446 §4.4.3), never a string starting with ours.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fre_protocol.drivers.net.certs import verify_role_certificate
from fre_protocol.drivers.net.round import RoundDocument, RoundSettings, canonical_json
from primitives.errors import InvalidParameterError, VerificationError

CONTEXT = b"fre-e2t round document v1\x00"
#: The roles whose signatures make a round document valid.
SIGNERS = ("S_tag", "S_syn")


def statement(role: str, digest: bytes) -> bytes:
    """What ``role`` signs for the document whose SHA-256 is ``digest``."""
    return CONTEXT + role.encode() + b"\x00" + digest


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleSignature:
    """One server's signature on the document, with the certificate that carries its key (both public)."""

    certificate: str  # PEM
    signature: bytes

    def to_dict(self) -> dict[str, str]:
        return {"certificate": self.certificate, "signature": self.signature.hex()}

    @classmethod
    def from_dict(cls, role: str, data: Any) -> RoleSignature:
        try:
            return cls(certificate=str(data["certificate"]), signature=bytes.fromhex(data["signature"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise VerificationError(f"{role}'s signature on the round document is malformed ({type(exc).__name__})") from None


def sign_document(doc: RoundDocument, *, role: str, key: Path, cert: Path) -> RoleSignature:
    """``role``'s signature on ``doc`` with the private key in ``key`` (its certificate in ``cert``)."""
    private = serialization.load_pem_private_key(Path(key).read_bytes(), password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise InvalidParameterError(f"{role}'s key must be an EC private key, got {type(private).__name__}")
    signature = private.sign(statement(role, bytes.fromhex(doc.digest)), ec.ECDSA(hashes.SHA256()))
    return RoleSignature(certificate=Path(cert).read_text(), signature=signature)


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedRoundDocument:
    """The round document as the proxy serves it: the document's fields plus ``signatures``,
    ``{role: {"certificate": PEM, "signature": hex}}``."""

    document: RoundDocument
    signatures: dict[str, RoleSignature] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = self.document.to_dict()
        if self.signatures:
            out["signatures"] = {role: sig.to_dict() for role, sig in sorted(self.signatures.items())}
        return out

    def encode(self) -> bytes:
        return canonical_json(self.to_dict())

    @classmethod
    def decode(cls, data: bytes) -> SignedRoundDocument:
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise InvalidParameterError(f"round document is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise InvalidParameterError(f"round document must be a JSON object, got {type(raw).__name__}")
        signatures = raw.get("signatures") or {}
        if not isinstance(signatures, dict):
            raise VerificationError(f"the round document's signatures must be an object, got {type(signatures).__name__}")
        return cls(
            document=RoundDocument.from_dict(raw),
            signatures={str(role): RoleSignature.from_dict(str(role), sig) for role, sig in signatures.items()},
        )

    def verify_signature(self, role: str, *, ca: Path) -> None:
        """VerificationError unless ``role``'s signature on the document verifies under a
        certificate issued by the CA in ``ca``, valid now, that names ``role``."""
        sig = self.signatures.get(role)
        if sig is None:
            raise VerificationError(
                f"{role}'s signature on the round document is missing (signatures present: {sorted(self.signatures)})"
            )
        public = verify_role_certificate(sig.certificate.encode(), ca=ca, role=role)
        digest = self.document.digest
        try:
            public.verify(sig.signature, statement(role, bytes.fromhex(digest)), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise VerificationError(
                f"{role}'s signature on the round document (digest {digest}) does not verify under {role}'s certificate"
            ) from None

    def verify(self, *, ca: Path, settings: RoundSettings | None = None, roles: Sequence[str] = SIGNERS) -> None:
        """The checks a user (and each server) makes before sending anything: the settings are
        the ones it was given (when ``settings``), then each of ``roles`` signed this document."""
        if settings is not None:
            self.document.check_settings(settings)
        for role in roles:
            self.verify_signature(role, ca=ca)


__all__ = ["CONTEXT", "SIGNERS", "RoleSignature", "SignedRoundDocument", "sign_document", "statement"]
