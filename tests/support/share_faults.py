"""A participant whose share to one server is malformed (issue 28, M6), for the drivers' tests."""

from __future__ import annotations

import pytest


def faulty_share(monkeypatch: pytest.MonkeyPatch, refused_by: str) -> None:
    """One participant (the first of participant chunk 0, in a released bucket) sends one server
    a share one byte short, so exactly that server refuses it (DecodeError) and the other
    accepts it. Patched wherever shares are built in this process: the devices
    (:mod:`fre_protocol.roles.user`) and a windowed round's chunks of participants
    (:mod:`fre_protocol.roles.windows`, every windowed driver's)."""
    from fre_protocol.messages import ShareSubmission, decode_as
    from fre_protocol.roles import user, windows

    make = user.share_plaintexts
    side = 0 if refused_by == "S_tag" else 1

    def faulty(*args: object, **kwargs: object) -> list[tuple[bytes, bytes]]:
        out = make(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs["rng"].label.endswith("phase2/0"):  # type: ignore[attr-defined]
            pair = list(out[0])
            msg = decode_as(pair[side], ShareSubmission)
            pair[side] = ShareSubmission(
                tag=msg.tag, contribution_id=msg.contribution_id, token=msg.token, share=msg.share[:-1]
            ).encode()
            out[0] = (pair[0], pair[1])
        return out

    for module in (user, windows):
        monkeypatch.setattr(module, "share_plaintexts", faulty)


__all__ = ["faulty_share"]
