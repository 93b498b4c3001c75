"""The test PKI: file modes, the chain, the certificate fields, and real TLS handshakes on
localhost where the deployment's mutual TLS admits its own operators and refuses everyone else."""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import fre_protocol.cli as cli
from fre_protocol.drivers.net.certs import (
    ROLE_USAGES,
    ROLES,
    CertPaths,
    client_ssl_context,
    make_test_pki,
    peer_role,
    server_ssl_context,
    verify_role_certificate,
)
from fre_protocol.drivers.net.files import write_file_atomically
from primitives.errors import InvalidParameterError, VerificationError


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return make_test_pki(tmp_path_factory.mktemp("pki") / "certs")


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    # With umask 0 a file gets exactly the mode it was created with: 0600 then proves os.open's
    # mode, not a helpful umask.
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


# --- files ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("permissive_umask")
def test_keys_are_0600_and_certificates_0644_whatever_the_umask(tmp_path: Path) -> None:
    paths = make_test_pki(tmp_path / "pki")
    assert _mode(paths.ca.with_name("ca.key")) == 0o600
    assert _mode(paths.ca) == 0o644
    for role in ROLES:
        cert, key = paths.for_role(role)
        assert _mode(key) == 0o600, role
        assert _mode(cert) == 0o644, role
    expected = {"ca.pem", "ca.key"} | {f"{r}.pem" for r in ROLES} | {f"{r}.key" for r in ROLES}
    assert {p.name for p in (tmp_path / "pki").iterdir()} == expected  # no temporary file left


def test_keys_are_unencrypted_pkcs8_p256(pki: CertPaths) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    for role in ROLES:
        cert, key_path = pki.for_role(role)
        pem = key_path.read_bytes()
        assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS8, not SEC1 "EC PRIVATE KEY"
        key = load_pem_private_key(pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert isinstance(key.curve, ec.SECP256R1)
        assert key.public_key() == _load(cert).public_key()


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        write_file_atomically(tmp_path / "k.key", b"secret", mode=0o600)
    assert list(tmp_path.iterdir()) == []


def test_non_empty_directory_is_refused_unless_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InvalidParameterError, match="busy"):
        make_test_pki(out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    first = make_test_pki(out, overwrite=True)
    ca_before = first.ca.read_bytes()
    second = make_test_pki(out, overwrite=True)
    assert second.ca.read_bytes() != ca_before  # a fresh CA replaced the old one
    assert (out / "notes.txt").read_text() == "mine"


def test_an_empty_directory_is_accepted(tmp_path: Path) -> None:
    assert make_test_pki(tmp_path, roles=("proxy",)).for_role("proxy")[0].exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"valid_days": 0}, "valid_days"),
        ({"hosts": ()}, "hosts"),
        ({"hosts": ("bad host",)}, "host"),
        ({"roles": ("../x",)}, "role"),
        ({"roles": ("ca",)}, "role"),
        ({"roles": ("proxy", "proxy")}, "distinct"),
    ],
)
def test_invalid_arguments_are_refused_before_writing(
    tmp_path: Path, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        make_test_pki(tmp_path / "pki", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "pki").exists()


def test_for_role_names_the_known_roles(pki: CertPaths) -> None:
    with pytest.raises(InvalidParameterError, match="S_syn.*S_tag.*operator.*proxy.*'user'"):
        pki.for_role("user")


# --- certificate contents ------------------------------------------------------------------------


def test_every_leaf_is_issued_by_the_ca(pki: CertPaths, tmp_path: Path) -> None:
    ca = _load(pki.ca)
    ca.verify_directly_issued_by(ca)  # self-signed
    for role in ROLES:
        _load(pki.for_role(role)[0]).verify_directly_issued_by(ca)
    # Another test PKI's CA has the same name but its own key: the signature check must fail.
    other = _load(make_test_pki(tmp_path, roles=("proxy",)).ca)
    assert other.subject == ca.subject
    with pytest.raises(InvalidSignature):
        _load(pki.for_role("proxy")[0]).verify_directly_issued_by(other)


def test_ca_may_sign_leaves_only(pki: CertPaths) -> None:
    ca = _load(pki.ca)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)


def test_leaf_fields(pki: CertPaths) -> None:
    for role in ROLES:
        leaf = _load(pki.for_role(role)[0])
        assert [a.value for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [role]
        eku = set(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        assert eku == set(ROLE_USAGES[role])
        if ExtendedKeyUsageOID.SERVER_AUTH in eku:
            san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert san.get_values_for_type(x509.DNSName) == ["localhost"]
            assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
        else:  # the operator's certificate is a client's: it names no host
            with pytest.raises(x509.ExtensionNotFound):
                leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
        assert leaf.signature_hash_algorithm is not None
        assert leaf.signature_hash_algorithm.name == "sha256"
        validity = leaf.not_valid_after_utc - leaf.not_valid_before_utc
        assert 7 * 86400 <= validity.total_seconds() <= 7 * 86400 + 3600


def test_each_role_has_only_the_usages_it_needs() -> None:
    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    assert ROLE_USAGES == {
        "S_tag": (server, client), "S_syn": (server, client), "proxy": (server, client), "operator": (client,),
    }


def test_hosts_may_be_given_per_role(tmp_path: Path) -> None:
    paths = make_test_pki(tmp_path, hosts={"S_tag": ["s-tag.internal"], "proxy": ["proxy.example"]},
                          roles=("S_tag", "proxy", "operator"))
    for role, want in (("S_tag", ["s-tag.internal"]), ("proxy", ["proxy.example"])):
        san = _load(paths.for_role(role)[0]).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == want
    with pytest.raises(InvalidParameterError, match="S_syn serves TLS and needs at least one host"):
        make_test_pki(tmp_path / "missing", hosts={"S_tag": ["a"]}, roles=("S_tag", "S_syn"))


def test_hosts_become_dns_names_and_ip_addresses(tmp_path: Path) -> None:
    paths = make_test_pki(tmp_path, hosts=("s-tag.internal", "10.0.0.7", "::1"), roles=("S_tag",))
    san = _load(paths.for_role("S_tag")[0]).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["s-tag.internal"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7"), ipaddress.ip_address("::1")]


# --- verify_role_certificate ---------------------------------------------------------------------


def test_verify_role_certificate_checks_issuer_validity_and_role(pki: CertPaths, tmp_path: Path) -> None:
    import datetime

    pem = pki.for_role("S_syn")[0].read_bytes()
    key = verify_role_certificate(pem, ca=pki.ca, role="S_syn")
    assert key.public_numbers() == _load(pki.for_role("S_syn")[0]).public_key().public_numbers()  # type: ignore[union-attr]
    with pytest.raises(VerificationError, match="S_tag's certificate names role 'S_syn', expected 'S_tag'"):
        verify_role_certificate(pem, ca=pki.ca, role="S_tag")
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30)
    with pytest.raises(VerificationError, match="certificate is valid from .* not at .*: S_syn's certificate is refused"):
        verify_role_certificate(pem, ca=pki.ca, role="S_syn", now=later)
    other = make_test_pki(tmp_path / "other", roles=("S_syn",))
    with pytest.raises(VerificationError, match="not issued by the deployment's CA"):
        verify_role_certificate(other.for_role("S_syn")[0].read_bytes(), ca=pki.ca, role="S_syn")
    with pytest.raises(VerificationError, match="not a PEM"):
        verify_role_certificate(b"junk", ca=pki.ca, role="S_syn")


# --- peer_role -----------------------------------------------------------------------------------


def test_peer_role_reads_the_subject_cn() -> None:
    assert peer_role(None) is None
    assert peer_role({}) is None  # what getpeercert() gives when the peer sent no certificate
    assert peer_role({"subject": ((("organizationName", "x"),),)}) is None
    assert peer_role({"subject": ((("organizationName", "x"),), (("commonName", "S_syn"),))}) == "S_syn"
    two = {"subject": ((("commonName", "proxy"),), (("commonName", "S_tag"),))}
    assert peer_role(two) is None


# --- handshakes ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    server_role: str | None = None
    server_error: Exception | None = None
    client_got: bytes | None = None
    client_error: Exception | None = None


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, *, hostname: str = "localhost") -> Outcome:
    outcome = Outcome()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)
        port = listener.getsockname()[1]

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                conn.settimeout(5)
                with server.wrap_socket(conn, server_side=True) as tls:
                    outcome.server_role = peer_role(tls.getpeercert())
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as exc:
                outcome.server_error = exc

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with client.wrap_socket(raw, server_hostname=hostname) as tls:
                    # Under TLS 1.3 a refused client certificate surfaces here, not in the handshake.
                    outcome.client_got = tls.recv(2)
        except (ssl.SSLError, OSError) as exc:
            outcome.client_error = exc
        thread.join(5)
        assert not thread.is_alive()
    return outcome


def test_mutual_tls_admits_an_operator_and_names_its_role(pki: CertPaths) -> None:
    server = server_ssl_context(pki, "S_tag", require_client_cert=True)
    for hostname in ("localhost", "127.0.0.1"):
        outcome = _handshake(server, client_ssl_context(pki, ca=pki.ca, role="proxy"), hostname=hostname)
        assert outcome.server_error is None and outcome.client_error is None
        assert outcome.server_role == "proxy"
        assert outcome.client_got == b"ok"


def test_a_certificate_from_another_ca_is_refused(pki: CertPaths) -> None:
    foreign_ca = trustme.CA()
    client = client_ssl_context(ca=pki.ca)
    foreign_ca.issue_cert("localhost", common_name="proxy").configure_cert(client)
    outcome = _handshake(server_ssl_context(pki, "S_tag", require_client_cert=True), client)
    assert isinstance(outcome.server_error, ssl.SSLCertVerificationError)
    assert outcome.server_error.reason == "CERTIFICATE_VERIFY_FAILED"
    assert outcome.server_role is None and outcome.client_got != b"ok"


def test_a_client_without_certificate_is_refused_by_mutual_tls(pki: CertPaths) -> None:
    outcome = _handshake(server_ssl_context(pki, "S_tag", require_client_cert=True), client_ssl_context(ca=pki.ca))
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.server_error.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    assert outcome.client_got != b"ok"


def test_a_user_without_certificate_reaches_the_tls_only_side(pki: CertPaths) -> None:
    outcome = _handshake(server_ssl_context(pki, "proxy", require_client_cert=False), client_ssl_context(ca=pki.ca))
    assert outcome.server_error is None and outcome.client_error is None
    assert outcome.server_role is None and outcome.client_got == b"ok"


def test_the_client_checks_the_server_name_and_issuer(pki: CertPaths) -> None:
    server = server_ssl_context(pki, "S_syn", require_client_cert=False)
    wrong_name = _handshake(server, client_ssl_context(ca=pki.ca), hostname="s-syn.example")
    assert isinstance(wrong_name.client_error, ssl.SSLCertVerificationError)
    other_ca = Path(pki.ca.parent / "other-ca.pem")
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    try:
        wrong_ca = _handshake(server, client_ssl_context(ca=other_ca))
    finally:
        other_ca.unlink()
    assert isinstance(wrong_ca.client_error, ssl.SSLCertVerificationError)


def test_contexts_refuse_tls_below_1_2(pki: CertPaths) -> None:
    server = server_ssl_context(pki, "S_tag", require_client_cert=True)
    client = client_ssl_context(pki, ca=pki.ca, role="proxy")
    assert server.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert client.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert server_ssl_context(pki, "proxy", require_client_cert=False).verify_mode == ssl.CERT_OPTIONAL
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED


def test_a_role_without_paths_is_refused(pki: CertPaths) -> None:
    with pytest.raises(InvalidParameterError, match="paths"):
        client_ssl_context(ca=pki.ca, role="proxy")


# --- command line --------------------------------------------------------------------------------


def test_cli_writes_the_files_and_says_they_are_for_testing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "COMMANDS", {"certs": "fre_protocol.cli.certs"})
    out = tmp_path / "pki"
    assert cli.main(["certs", "--out", str(out), "--host", "proxy.internal", "--days", "2"]) == 0
    printed = capsys.readouterr().out
    assert "TEST" in printed and str(out / "proxy.key") in printed
    san = _load(out / "proxy.pem").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["proxy.internal"]

    assert cli.main(["certs", "--out", str(out)]) == 2
    assert "non-empty" in capsys.readouterr().err
    assert cli.main(["certs", "--out", str(out), "--force"]) == 0
