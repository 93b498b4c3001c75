"""The round document names its embedder: the model a device embeds its text with, its
dimension (the round's) and whether its rows are unit norm. It is part of the signed bytes;
``deploy-local`` and ``serve`` write it; ``fre-e2t join`` embeds with it and refuses another."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from net_rounds import SEED, needs_net, round_settings

needs_net()

from fre_protocol.cli import build_parser, main  # noqa: E402
from fre_protocol.drivers.net import users_client  # noqa: E402
from fre_protocol.drivers.net.round import EmbedderSpec, RoundDocument, RoundSettings  # noqa: E402
from fre_protocol.drivers.net.signing import SignedRoundDocument, sign_document  # noqa: E402
from fre_protocol.text.embedder import DEFAULT_MODEL_DIM, DEFAULT_MODEL_ID  # noqa: E402
from primitives.errors import InvalidParameterError, VerificationError  # noqa: E402

DEFAULT = EmbedderSpec(name=DEFAULT_MODEL_ID, dim=DEFAULT_MODEL_DIM, normalize=True)


def settings_with(embedder: EmbedderSpec | None, dim: int | None = None) -> RoundSettings:
    return dataclasses.replace(round_settings("embedder"), dim=dim or (embedder.dim if embedder else 16),
                               embedder=embedder)


def document(settings: RoundSettings) -> RoundDocument:
    return RoundDocument(settings=settings, voprf_public_key=b"\x01" * 32, tag_box_key=b"\x02" * 32,
                         syn_box_key=b"\x03" * 32)


# -- the settings and the document --------------------------------------------------------------------
def test_round_document_round_trips_with_its_embedder() -> None:
    doc = document(settings_with(DEFAULT))
    data = json.loads(doc.encode())
    assert data["embedder"] == {"name": DEFAULT_MODEL_ID, "dim": 384, "normalize": True}
    back = RoundDocument.decode(doc.encode())
    assert back.settings.embedder == DEFAULT and back.encode() == doc.encode() and back.digest == doc.digest


def test_a_round_that_names_no_embedder_keeps_its_bytes() -> None:
    """No "embedder" key at all: an older document decodes, and re-encodes to its own bytes."""
    doc = document(settings_with(None))
    assert "embedder" not in json.loads(doc.encode())
    assert RoundDocument.decode(doc.encode()).settings.embedder is None
    assert RoundDocument.decode(doc.encode()).digest == doc.digest


def test_the_embedder_changes_the_digest() -> None:
    a = document(settings_with(DEFAULT))
    b = document(settings_with(dataclasses.replace(DEFAULT, normalize=False)))
    assert a.digest != b.digest != document(settings_with(None, dim=384)).digest


def test_an_embedder_of_another_dimension_is_refused_naming_both() -> None:
    with pytest.raises(InvalidParameterError, match=r"embedder 'sentence-transformers/all-MiniLM-L6-v2' gives "
                       r"384-dimensional embeddings, but the round's dim is 16"):
        settings_with(DEFAULT, dim=16)
    data = settings_with(DEFAULT).to_dict()
    data["dim"] = 768
    with pytest.raises(InvalidParameterError, match="384-dimensional .* round's dim is 768"):
        RoundSettings.from_dict(data)


@pytest.mark.parametrize(("entry", "message"), [
    (None, "embedder must be an object"),
    ("all-MiniLM-L6-v2", "embedder must be an object"),
    ({"name": "m", "dim": 384}, "exactly the keys"),
    ({"name": "m", "dim": 384, "normalize": True, "sha256": "00"}, "exactly the keys"),
    ({"name": "m", "dim": "384", "normalize": True}, "embedder dim must be an integer"),
    ({"name": "m", "dim": 384, "normalize": 1}, "embedder normalize must be true or false"),
    ({"name": "", "dim": 384, "normalize": True}, "embedder name must be"),
])
def test_a_malformed_embedder_entry_is_refused(entry: Any, message: str) -> None:
    data = settings_with(DEFAULT).to_dict()
    data["embedder"] = entry
    with pytest.raises(InvalidParameterError, match=message):
        RoundSettings.from_dict(data)


def test_check_settings_names_the_embedder_when_it_differs() -> None:
    doc = document(settings_with(DEFAULT))
    with pytest.raises(VerificationError, match="differs from the expected settings in 'embedder'"):
        doc.check_settings(settings_with(None, dim=384))


def test_the_signed_document_verifies_with_the_field(tmp_path: Path) -> None:
    from fre_protocol.drivers.net.certs import make_test_pki

    pki = make_test_pki(tmp_path / "pki")
    doc = document(settings_with(DEFAULT))
    signed = SignedRoundDocument(document=doc, signatures={
        role: sign_document(doc, role=role, key=pki.key[role], cert=pki.cert[role]) for role in ("S_tag", "S_syn")
    })
    served = SignedRoundDocument.decode(signed.encode())
    served.verify(ca=pki.ca, settings=doc.settings)
    assert served.document.settings.embedder == DEFAULT
    # The entry is in the signed bytes: another model, same signatures, does not verify.
    raw = json.loads(signed.encode())
    raw["embedder"]["name"] = "sentence-transformers/all-mpnet-base-v2"
    with pytest.raises(VerificationError, match="does not verify"):
        SignedRoundDocument.decode(json.dumps(raw).encode()).verify(ca=pki.ca)


# -- deploy-local and serve write it ------------------------------------------------------------------
def parse(*argv: str) -> Any:
    return build_parser().parse_args(list(argv))


ROUND_FLAGS = ("--epsilon", "inf", "--seed", "1")


def test_deploy_local_names_the_default_embedder() -> None:
    from fre_protocol.cli.deploy_local import settings_from_args

    args = parse("deploy-local", "--embeddings", "x.npy", "--out", "o", *ROUND_FLAGS)
    assert settings_from_args(args, 384).embedder == DEFAULT


def test_deploy_local_names_no_embedder_for_embeddings_of_another_dimension() -> None:
    """With no --embedder, embeddings the default model cannot have made (16-d) give a round that
    names none; naming the default for them is refused, naming both dimensions."""
    from fre_protocol.cli.deploy_local import settings_from_args

    args = parse("deploy-local", "--embeddings", "x.npy", "--out", "o", *ROUND_FLAGS)
    assert settings_from_args(args, 16).embedder is None
    named = parse("deploy-local", "--embeddings", "x.npy", "--out", "o", "--embedder", "default", *ROUND_FLAGS)
    with pytest.raises(InvalidParameterError, match=r"--embedder: the embedder .* 384-dimensional .* "
                       r"the round's dim \(the embeddings'\) is 16; .*--embedder none"):
        settings_from_args(named, 16)
    none = parse("deploy-local", "--embeddings", "x.npy", "--out", "o", "--embedder", "none", *ROUND_FLAGS)
    assert settings_from_args(none, 16).embedder is None


def test_deploy_local_names_a_model_folder_by_its_fingerprint(tmp_path: Path) -> None:
    from fre_protocol.cli.deploy_local import settings_from_args

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "modules.json").write_text("[]")
    args = parse("deploy-local", "--embeddings", "x.npy", "--out", "o", "--embedder", str(folder), *ROUND_FLAGS)
    spec = settings_from_args(args, 16).embedder
    assert spec.name.startswith("local:my-model:") and spec.dim == 16 and spec.normalize


def test_serve_applies_embedder_over_the_configuration() -> None:
    from fre_protocol.cli.common import with_embedder

    settings = settings_with(None, dim=384)
    assert with_embedder(settings, parse("serve", "tag", "--config", "c.json")) is settings
    assert with_embedder(settings, parse("serve", "tag", "--config", "c.json", "--embedder", "default")).embedder == DEFAULT
    named = settings_with(DEFAULT)
    assert with_embedder(named, parse("serve", "tag", "--config", "c.json", "--embedder", "none")).embedder is None


# -- fre-e2t join ---------------------------------------------------------------------------------------
@pytest.fixture
def join_round(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """``join`` against a served round (its fetch replaced), recording what it would embed with and
    stopping where it would send its first message."""
    state: dict[str, Any] = {"settings": settings_with(DEFAULT), "embedded": [], "played": []}

    async def served(*args: object, **kwargs: object) -> RoundSettings:
        return state["settings"]

    class Recording:
        def __init__(self, model: str | None, *, cache: bool, normalize: bool, precision: str) -> None:
            assert precision == "fp32", precision  # the browser's precision, on every CPU
            state["embedded"].append((model, cache, normalize))

        def embed(self, texts: list[str]) -> Any:
            x = np.zeros((len(texts), state["settings"].dim), dtype=np.float32)
            x[:, 0] = 1.0
            return x

    def play(x: Any, *args: object, **kwargs: object) -> None:
        state["played"].append(x)
        raise VerificationError("stop here (test)")

    import fre_protocol.text.embedder as embedder

    monkeypatch.setattr(users_client, "fetch_round", served)
    monkeypatch.setattr(users_client, "play_users", play)
    monkeypatch.setattr(embedder, "SentenceTransformerEmbedder", Recording)
    (tmp_path / "credential").write_text("token")
    state["argv"] = ["join", "--round", "https://127.0.0.1:1", "--ca", "ca.pem", "--credential",
                     str(tmp_path / "credential")]
    state["tmp"] = tmp_path
    return state


def test_join_embeds_with_the_rounds_embedder(join_round: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*join_round["argv"], "--text", "hello"]) == 5  # stopped where it would send
    assert join_round["embedded"] == [(DEFAULT_MODEL_ID, False, True)] and len(join_round["played"]) == 1
    assert f"embedder {DEFAULT_MODEL_ID} (d = 384, unit norm) (named by the round)" in capsys.readouterr().out


@pytest.mark.parametrize("alias", ["default", "all-MiniLM-L6-v2", DEFAULT_MODEL_ID])
def test_join_takes_an_embedder_flag_naming_the_rounds_model(join_round: dict[str, Any], alias: str) -> None:
    assert main([*join_round["argv"], "--text", "hello", "--embedder", alias]) == 5
    assert len(join_round["embedded"]) == 1 and len(join_round["played"]) == 1


@pytest.mark.parametrize("source", [("--text", "hello"), ("--embedding", "x.npy")])
def test_join_refuses_another_embedder_before_anything_is_sent(
    join_round: dict[str, Any], capsys: pytest.CaptureFixture[str], source: tuple[str, str],
) -> None:
    code = main([*join_round["argv"], *source, "--embedder", "sentence-transformers/all-mpnet-base-v2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert ("--embedder names 'sentence-transformers/all-mpnet-base-v2', but the round's embedder is "
            f"'{DEFAULT_MODEL_ID}' (d = 384): a device embeds with the round's model only") in err
    assert join_round["embedded"] == [] and join_round["played"] == []


def test_join_refuses_an_embedding_that_is_not_unit_norm(join_round: dict[str, Any],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = join_round["tmp"] / "x.npy"
    np.save(path, np.full((1, 384), 0.5))
    assert main([*join_round["argv"], "--embedding", str(path)]) == 2
    assert "gives unit-norm rows, the embedding's norm is 9.79796" in capsys.readouterr().err
    assert join_round["played"] == []
    np.save(path, np.full((1, 384), 384 ** -0.5))
    assert main([*join_round["argv"], "--embedding", str(path)]) == 5 and len(join_round["played"]) == 1


def test_join_on_a_round_that_names_no_embedder(join_round: dict[str, Any],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """An older document: a text needs --embedder (said so, nothing sent); an embedding goes as given."""
    join_round["settings"] = settings_with(None, dim=384)
    assert main([*join_round["argv"], "--text", "hello"]) == 2
    err = capsys.readouterr().err
    assert "the round document names no embedder" in err and "--embedder NAME_OR_DIR" in err
    assert join_round["embedded"] == [] and join_round["played"] == []
    assert main([*join_round["argv"], "--text", "hello", "--embedder", "default"]) == 5
    assert join_round["embedded"] == [("default", False, True)]
    assert "the round names none, not checked" in capsys.readouterr().out
    path = join_round["tmp"] / "x.npy"
    np.save(path, np.full((1, 384), 0.5))  # no model named: nothing to check its norm against
    assert main([*join_round["argv"], "--embedding", str(path)]) == 5


def test_join_needs_the_folder_of_a_round_that_names_one(join_round: dict[str, Any],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    folder = join_round["tmp"] / "my-model"
    folder.mkdir()
    (folder / "modules.json").write_text("[]")
    from fre_protocol.text.embedder import model_id

    join_round["settings"] = settings_with(EmbedderSpec(name=model_id(folder), dim=16))
    assert main([*join_round["argv"], "--text", "hello"]) == 2
    assert "pass --embedder DIR with that folder" in capsys.readouterr().err
    assert main([*join_round["argv"], "--text", "hello", "--embedder", str(folder)]) == 5
    assert join_round["embedded"] == [(str(folder), False, True)]
    (folder / "modules.json").write_text("[{}]")  # another folder's content: another fingerprint
    assert main([*join_round["argv"], "--text", "hello", "--embedder", str(folder)]) == 2
    assert "but the round's embedder is 'local:my-model:" in capsys.readouterr().err



# -- the TypeScript client reads the same signed bytes ---------------------------------------------------
WEB = Path(__file__).resolve().parents[4] / "clients" / "web"


def test_the_typescript_client_verifies_the_signed_document_with_the_field(tmp_path: Path) -> None:
    """The document as the proxy serves it (Python's canonical JSON, both signatures), verified by
    the TypeScript client's verifyRound, which reads back the embedder; the entry changed, refused."""
    import shutil
    import subprocess

    from fre_protocol.drivers.net.certs import make_test_pki

    if shutil.which("node") is None or not (WEB / "node_modules").is_dir():
        pytest.skip("the TypeScript client is not installed (node >= 20.19 and `make setup-web`)")
    subprocess.run(["npm", "run", "build", "--silent"], cwd=WEB, check=True, timeout=180)
    pki = make_test_pki(tmp_path / "pki")
    doc = document(settings_with(DEFAULT))
    signed = SignedRoundDocument(document=doc, signatures={
        role: sign_document(doc, role=role, key=pki.key[role], cert=pki.cert[role]) for role in ("S_tag", "S_syn")
    })
    tampered = json.loads(signed.encode())
    tampered["embedder"]["normalize"] = False
    (tmp_path / "served.json").write_bytes(signed.encode())
    (tmp_path / "tampered.json").write_bytes(json.dumps(tampered, sort_keys=True, separators=(",", ":")).encode())
    script = (
        f"import {{ readFileSync }} from 'node:fs'; import {{ verifyRound }} from '{(WEB / 'dist' / 'src' / 'net.js').as_uri()}';"
        f"import {{ roundEmbedder }} from '{(WEB / 'dist' / 'src' / 'embedder.js').as_uri()}';"
        "const ca = readFileSync(process.argv[1], 'utf8');"
        "const { document, digest } = verifyRound(readFileSync(process.argv[2], 'utf8'), ca);"
        "let refused = null; try { verifyRound(readFileSync(process.argv[3], 'utf8'), ca); } catch (e) { refused = e.message; }"
        "console.log(JSON.stringify({ digest, embedder: roundEmbedder(document), refused }));"
    )
    done = subprocess.run(["node", "--input-type=module", "-e", script, str(pki.ca), str(tmp_path / "served.json"),
                           str(tmp_path / "tampered.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["digest"] == doc.digest and got["embedder"] == DEFAULT.to_dict()
    assert "signature on the round document does not verify" in got["refused"]


@pytest.mark.integration
def test_served_round_names_the_embedder_serve_was_given(tmp_path: Path) -> None:
    """Three services whose configuration names no embedder, each started with ``--embedder
    default``: the proxy serves a document naming it, which both servers signed."""
    import asyncio

    from fre_protocol.drivers.net.deploy import start_service, stop_all, write_configs
    from fre_protocol.drivers.net.round import ServiceConfig

    dep = write_configs(tmp_path, settings_with(None, dim=384), test_seed=SEED)
    assert ServiceConfig.load(dep.configs["proxy"]).round.embedder is None
    try:
        for role in ("S_tag", "S_syn", "proxy"):
            start_service(dep, role, args=["--embedder", "default"])
        served = asyncio.run(users_client.fetch_round(dep.url("proxy"), dep.pki / "ca.pem", deadline_s=60))
    finally:
        stop_all(dep, kill=True)
    assert served.embedder == DEFAULT
