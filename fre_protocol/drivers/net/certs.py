"""A local certificate authority and one certificate per party, for a TEST deployment.

The operators (S_tag, S_syn, the proxy, the operator's own tools) authenticate one another with
mutual TLS: each presents a certificate whose subject CN is its role, issued by the deployment's
CA, and a server reads the caller's role from the verified certificate (:func:`peer_role`); a
client pins the role of the server it meant to reach the same way (:func:`expect_role`). Each
leaf carries only the extended key usages its role needs (:data:`ROLE_USAGES`). S_tag and S_syn
also sign the round document with their certificate's key; anyone holding ``ca.pem`` checks such
a certificate with :func:`verify_role_certificate`. Users hold no certificate; they check the
proxy's against the CA, and the servers' signatures on the round document.

All keys are ECDSA P-256 and all signatures ECDSA with SHA-256. Keys come from OpenSSL's CSPRNG
and there is deliberately no seeded mode: a reproducible TLS key is a published one. For a real
deployment use the organisation's CA; these files exist so tests and demos run TLS end to end.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fre_protocol.drivers.net.files import write_file_atomically
from primitives.errors import InvalidParameterError, VerificationError

__all__ = [
    "ROLES", "ROLE_USAGES", "CertPaths", "certificate_role", "client_ssl_context", "expect_role", "make_test_pki",
    "peer_role", "server_ssl_context", "verify_role_certificate",
]

ROLES = ("S_tag", "S_syn", "proxy", "operator")

_SERVER, _CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
#: What each role's certificate may do in TLS: S_tag serves the proxy and S_syn and calls S_syn
#: (for the released tags' contribution-token hashes); S_syn serves the proxy and S_tag and calls
#: S_tag; the proxy serves users and calls both servers; the operator's tools only call. A role
#: not named here (a test's own) gets both.
ROLE_USAGES: dict[str, tuple[x509.ObjectIdentifier, ...]] = {
    "S_tag": (_SERVER, _CLIENT),
    "S_syn": (_SERVER, _CLIENT),
    "proxy": (_SERVER, _CLIENT),
    "operator": (_CLIENT,),
}

CA_NAME = "fre-e2t test CA"
PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644
# Role names become file names and CNs: no separators, no dot files.
_ROLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
# Leaves a clock that runs a little behind the issuer's still accepts a fresh certificate.
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class CertPaths:
    """Where :func:`make_test_pki` wrote the CA certificate and each role's certificate and key."""

    ca: Path
    cert: dict[str, Path]
    key: dict[str, Path]

    def for_role(self, role: str) -> tuple[Path, Path]:
        """``(certificate, private key)`` of ``role``."""
        if role not in self.cert or role not in self.key:
            raise InvalidParameterError(f"role must be one of {sorted(self.cert)}, got {role!r}")
        return self.cert[role], self.key[role]


def make_test_pki(
    out_dir: Path,
    *,
    hosts: Sequence[str] | Mapping[str, Sequence[str]] = ("localhost", "127.0.0.1"),
    roles: Sequence[str] = ROLES,
    valid_days: int = 7,
    overwrite: bool = False,
) -> CertPaths:
    """Write ``ca.pem``/``ca.key`` and ``<role>.pem``/``<role>.key`` for every role into ``out_dir``.

    ``hosts`` is either one list for every role that serves (the parties share the hosts) or a
    mapping from role to its own hosts (an IP address becomes ``IPAddress``, anything else
    ``DNSName``); a client-only role (the operator) names no host. Each leaf carries its role's
    extended key usages (:data:`ROLE_USAGES`). Keys are unencrypted PKCS8 PEM created with mode 0600; each file is
    written to a temporary name, fsynced and renamed, so a crash leaves no half-written key.
    An existing non-empty ``out_dir`` is refused unless ``overwrite``.
    """
    out_dir = Path(out_dir)
    names = _check_arguments(out_dir, hosts=hosts, roles=roles, valid_days=valid_days, overwrite=overwrite)
    out_dir.mkdir(parents=True, exist_ok=True)
    not_before = datetime.datetime.now(datetime.UTC) - _CLOCK_SKEW
    not_after = not_before + _CLOCK_SKEW + datetime.timedelta(days=valid_days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_certificate(ca_key, not_before, not_after)
    ca_path = out_dir / "ca.pem"
    _write_key(out_dir / "ca.key", ca_key)
    _write_cert(ca_path, ca_cert)

    cert: dict[str, Path] = {}
    key: dict[str, Path] = {}
    for role in roles:
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = _leaf_certificate(role, names[role], leaf_key, ca_key, ca_cert, not_before, not_after)
        key[role] = out_dir / f"{role}.key"
        cert[role] = out_dir / f"{role}.pem"
        _write_key(key[role], leaf_key)
        _write_cert(cert[role], leaf)
    return CertPaths(ca=ca_path, cert=cert, key=key)


def peer_role(peercert: dict[str, Any] | None) -> str | None:
    """The role in a verified peer certificate: its subject CN, from the dict that
    :meth:`ssl.SSLSocket.getpeercert` returns. ``None`` when the peer sent no certificate (a user)
    or the subject does not carry exactly one CN.

    Only meaningful on a context that verified the certificate against the deployment CA
    (:func:`server_ssl_context`): otherwise anyone can write any CN.
    """
    if not peercert:
        return None
    common_names = [
        value
        for rdn in peercert.get("subject", ())
        for attribute, value in rdn
        if attribute == "commonName"
    ]
    return _one(common_names)


def certificate_role(cert: x509.Certificate) -> str | None:
    """The role a certificate names: its subject CN, as :func:`peer_role` reads it from a TLS
    peer (``None`` unless exactly one CN)."""
    return _one([str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)])


def _one(common_names: list[str]) -> str | None:
    # Two CNs could each be read as the role by a different parser: neither is taken.
    return common_names[0] if len(common_names) == 1 else None


def expect_role(peercert: dict[str, Any] | None, role: str, *, who: str, where: str) -> None:
    """VerificationError unless the server ``who`` reached at ``where`` presented ``role``'s
    certificate (after a handshake that verified it against the CA): a client of S_syn must not
    talk to S_tag, however the address was routed."""
    got = peer_role(peercert)
    if got != role:
        raise VerificationError(
            f"{who} meant to reach {role} at {where}, but the server's certificate names {got!r}"
        )


def verify_role_certificate(
    pem: bytes, *, ca: Path, role: str, now: datetime.datetime | None = None
) -> ec.EllipticCurvePublicKey:
    """The public key of ``pem``, a certificate that must be issued by the CA in ``ca``, valid
    ``now``, for signing (key usage), and name ``role``; VerificationError naming ``role`` and
    what failed otherwise. This is how a party holding only ``ca.pem`` checks the key a
    server signed the round document with."""
    when = now or datetime.datetime.now(datetime.UTC)
    try:
        leaf = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise VerificationError(f"{role}'s certificate is not a PEM X.509 certificate") from None
    try:
        authority = x509.load_pem_x509_certificate(Path(ca).read_bytes())
    except (OSError, ValueError) as exc:
        raise InvalidParameterError(f"ca must be a PEM certificate file, got {str(ca)!r} ({type(exc).__name__})") from None
    try:
        leaf.verify_directly_issued_by(authority)
    except Exception:  # noqa: BLE001 - wrong issuer name, signature or algorithm: all one answer
        raise VerificationError(
            f"{role}'s certificate (subject {leaf.subject.rfc4514_string()!r}) is not issued by the deployment's CA "
            f"({authority.subject.rfc4514_string()!r})"
        ) from None
    for name, cert in (("the CA's", authority), (f"{role}'s", leaf)):
        if not cert.not_valid_before_utc <= when <= cert.not_valid_after_utc:
            raise VerificationError(
                f"{name} certificate is valid from {cert.not_valid_before_utc.isoformat()} to "
                f"{cert.not_valid_after_utc.isoformat()}, not at {when.isoformat()}: {role}'s certificate is refused"
            )
    got = certificate_role(leaf)
    if got != role:
        raise VerificationError(f"{role}'s certificate names role {got!r}, expected {role!r}")
    try:
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
        may_sign = usage.digital_signature
    except x509.ExtensionNotFound:
        may_sign = True  # no key usage extension: not restricted (RFC 5280 §4.2.1.3)
    constraints = _basic_constraints(leaf)
    if not may_sign or (constraints is not None and constraints.ca):
        raise VerificationError(f"{role}'s certificate is not a leaf certificate for signatures")
    public = leaf.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise VerificationError(f"{role}'s certificate must carry an EC key, got {type(public).__name__}")
    return public


def _basic_constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None


def server_ssl_context(paths: CertPaths, role: str, *, require_client_cert: bool) -> ssl.SSLContext:
    """A TLS (>= 1.2) server context presenting ``role``'s certificate, trusting only the CA.

    ``require_client_cert=True`` for an endpoint only operators call (S_tag and S_syn behind the
    proxy): mutual TLS, a caller without a CA-issued certificate fails the handshake.
    ``False`` for the proxy's user-facing side: users have no certificate, so one is asked for
    (``CERT_OPTIONAL``) and verified when sent, and :func:`peer_role` tells operators from users.
    """
    cert, key = paths.for_role(role)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(paths.ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


def client_ssl_context(
    paths: CertPaths | None = None, *, ca: Path, role: str | None = None
) -> ssl.SSLContext:
    """A TLS (>= 1.2) client context that trusts only the CA in ``ca`` and checks the host name.

    With ``role`` (and ``paths``), it presents that role's certificate: an operator calling
    another operator over mutual TLS. Without, it is a user's context: TLS only, the user stays
    anonymous to the proxy at this layer and needs nothing but the CA certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if role is not None:
        if paths is None:
            raise InvalidParameterError(f"paths must be given with role={role!r}, got None")
        cert, key = paths.for_role(role)
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    return context


def _check_arguments(
    out_dir: Path, *, hosts: Sequence[str] | Mapping[str, Sequence[str]], roles: Sequence[str], valid_days: int,
    overwrite: bool,
) -> dict[str, list[x509.GeneralName]]:
    """Validate before anything is written; return each role's hosts as SAN entries."""
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or valid_days < 1:
        raise InvalidParameterError(f"valid_days must be an integer >= 1, got {valid_days!r}")
    if isinstance(roles, str) or not roles:
        raise InvalidParameterError(f"roles must be a non-empty sequence of names, got {roles!r}")
    for role in roles:
        if not isinstance(role, str) or not _ROLE_NAME.fullmatch(role) or role == "ca":
            raise InvalidParameterError(
                f"each role must match {_ROLE_NAME.pattern} and not be 'ca', got {role!r}"
            )
    if len(set(roles)) != len(roles):
        raise InvalidParameterError(f"roles must be distinct, got {list(roles)!r}")
    if isinstance(hosts, Mapping):
        unknown = sorted(set(hosts) - set(roles))
        if unknown:
            raise InvalidParameterError(f"hosts names roles {unknown} that are not among roles {list(roles)}")
        per_role = {role: hosts.get(role, ()) for role in roles}
    else:
        if isinstance(hosts, str) or not hosts:
            raise InvalidParameterError(f"hosts must be a non-empty sequence of names, got {hosts!r}")
        per_role = {role: hosts if _SERVER in ROLE_USAGES.get(role, (_SERVER,)) else () for role in roles}
    names: dict[str, list[x509.GeneralName]] = {}
    for role, its_hosts in per_role.items():
        if isinstance(its_hosts, str):
            raise InvalidParameterError(f"hosts of {role} must be a sequence of names, got {its_hosts!r}")
        names[role] = [_general_name(host) for host in its_hosts]
        if not names[role] and _SERVER in ROLE_USAGES.get(role, (_SERVER,)):
            raise InvalidParameterError(f"{role} serves TLS and needs at least one host, got none")
    if out_dir.exists():
        if not out_dir.is_dir():
            raise InvalidParameterError(f"out_dir must be a directory, got existing file {str(out_dir)!r}")
        if not overwrite and any(out_dir.iterdir()):
            raise InvalidParameterError(
                f"out_dir must be absent or empty unless overwrite (--force), got non-empty {str(out_dir)!r}"
            )
    return names


def _general_name(host: str) -> x509.GeneralName:
    if not isinstance(host, str) or not host or any(c.isspace() for c in host):
        raise InvalidParameterError(f"each host must be a DNS name or an IP address, got {host!r}")
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _ca_certificate(
    key: ec.EllipticCurvePrivateKey, not_before: datetime.datetime, not_after: datetime.datetime
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        # path_length=0: this CA signs leaves only, never another CA.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _leaf_certificate(
    role: str,
    names: list[x509.GeneralName],
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.Certificate:
    public = key.public_key()
    usages = list(ROLE_USAGES.get(role, (_SERVER, _CLIENT)))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, role)]))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:  # a client-only leaf (the operator's) names no host: it is never a server
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=key_cert_sign,
        crl_sign=crl_sign, encipher_only=False, decipher_only=False,
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_file_atomically(path, pem, mode=PRIVATE_MODE)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    write_file_atomically(path, cert.public_bytes(serialization.Encoding.PEM), mode=PUBLIC_MODE)
