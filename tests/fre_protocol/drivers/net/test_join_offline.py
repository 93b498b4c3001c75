"""``fre-e2t join`` without a deployment: a signature that fails is one line and exit 5, before
any message (the live refusals, credential used and round closed, are in test_join.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from net_rounds import needs_net

needs_net()


def test_join_says_so_when_a_signature_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from fre_protocol.cli import main
    from fre_protocol.drivers.net import users_client
    from primitives.errors import VerificationError

    async def forged(*args: object, **kwargs: object) -> None:
        raise VerificationError("S_syn's signature on the round document (digest 00) does not verify")

    monkeypatch.setattr(users_client, "fetch_round", forged)
    (tmp_path / "credential").write_text("token")
    code = main(["join", "--round", "https://127.0.0.1:1", "--ca", "ca.pem", "--credential",
                 str(tmp_path / "credential"), "--text", "hello"])
    err = capsys.readouterr().err
    assert code == 5 and err.count("\n") == 1 and "verification failed, nothing more was sent" in err
