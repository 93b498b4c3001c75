"""RFC 9497 oblivious PRFs: the ristretto255-SHA512 suite in OPRF, VOPRF and POPRF modes.

>>> from primitives.voprf import get_suite, Mode
>>> suite = get_suite("ristretto255-SHA512", Mode.VOPRF)
>>> sk, pk = suite.derive_key_pair(bytes(32), b"key info")
>>> blind, blinded = suite.blind(b"input")
>>> evaluated, proof = suite.blind_evaluate(sk, [blinded])
>>> suite.finalize([b"input"], [blind], evaluated, blinded_elements=[blinded], pk=pk,
...                proof=proof) == [suite.evaluate(sk, b"input")]
True

The group backend is chosen by registry name (``group="ristretto255-sodium"`` by default, or
``"ristretto255-pure"``); see :mod:`primitives.group`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from primitives.group import PrimeOrderGroup
from primitives.randomness import RandomSource
from primitives.voprf.hashing import SUITE_ID, expand_message_xmd
from primitives.voprf.suite import Finalized, Mode, OprfSuite, SecretBytes, get_suite


class Oprf(Protocol):
    """What the protocol calls on an RFC 9497 suite: the ``oprf`` family's contract (implemented
    by :class:`OprfSuite`).

    Factory convention: the registry entry is called as ``factory(name, Mode.VOPRF, group=group,
    workers=workers)`` with the run's built ``group`` component. RFC 9497's one-shot ``Finalize``
    is not part of the contract: users verify and finalize a whole batch with
    :meth:`verify_and_finalize` (the implementation keeps ``finalize`` for the RFC's interface).
    """

    @property
    def mode(self) -> Mode: ...
    @property
    def group(self) -> PrimeOrderGroup[Any, Any]: ...
    def derive_key_pair(self, seed: SecretBytes, info: bytes = b"") -> tuple[bytes, bytes]: ...
    def generate_key_pair(self, rng: RandomSource | None = None) -> tuple[bytes, bytes]: ...
    def blind(
        self, input: bytes, blind: SecretBytes | None = None, rng: RandomSource | None = None
    ) -> tuple[bytes, bytes]: ...
    def blind_evaluate(
        self,
        sk: SecretBytes,
        blinded_elements: Sequence[bytes],
        info: bytes = b"",
        proof_randomness: SecretBytes | None = None,
        rng: RandomSource | None = None,
    ) -> tuple[list[bytes], bytes | None]: ...
    def blind_evaluate_each(
        self, sk: SecretBytes, blinded_elements: Sequence[bytes], rngs: Sequence[RandomSource]
    ) -> list[tuple[bytes, bytes]]: ...
    def verify_and_finalize(
        self,
        inputs: Sequence[bytes | None],
        blind_inverses: Sequence[SecretBytes | None],
        blinded_elements: Sequence[bytes],
        evaluated_elements: Sequence[bytes],
        proofs: bytes | Sequence[bytes],
        *,
        pk: bytes,
        info: bytes = b"",
    ) -> list[Finalized]: ...
    def evaluate(self, sk: SecretBytes, input: bytes, info: bytes = b"") -> bytes: ...
    def warm_up(self) -> None: ...


__all__ = ["SUITE_ID", "Finalized", "Mode", "Oprf", "OprfSuite", "expand_message_xmd", "get_suite"]
