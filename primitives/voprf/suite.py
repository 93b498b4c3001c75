"""The RFC 9497 ciphersuite ristretto255-SHA512 in its three modes (OPRF, VOPRF, POPRF).

One :class:`OprfSuite` object serves both roles; every call is a pure function of its arguments
and the explicit randomness (``blind=``, ``proof_randomness=`` or a :class:`RandomSource`).

Batches: :meth:`OprfSuite.blind_evaluate` evaluates a list of blinded elements and, in the
verifiable modes, returns ONE DLEQ proof for the whole list (RFC 9497 §2.2, ComputeCompositesFast);
:meth:`OprfSuite.finalize` verifies that proof for the list (ComputeComposites + VerifyProof).
With a backend that releases the GIL, a large batch is cut into contiguous index ranges that run
on a small thread pool: each range does its own decoding, scalar multiplications and partial
composite sum; the partial sums are added and the proof is made once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Any, TypeVar

from primitives.errors import (
    DecodeError,
    InvalidInputError,
    InvalidParameterError,
    VerificationError,
)
from primitives.group import PrimeOrderGroup
from primitives.randomness import RandomSource
from primitives.secret import Secret
from primitives.voprf import dleq
from primitives.voprf.hashing import (
    HASH_SIZE,
    SUITE_ID,
    check_input,
    context_string,
    derive_key_pair_dst,
    finalize_hash,
    framed,
    hash_to_group_dst,
    hash_to_scalar_dst,
)

T = TypeVar("T")
SecretBytes = bytes | bytearray | Secret[bytes]
#: One item of :meth:`OprfSuite.verify_and_finalize`: the PRF output, the error that stopped it,
#: or None for a batch position the caller did not ask to finalize.
Finalized = bytes | DecodeError | VerificationError | None

#: Below this many elements a batch runs in the calling thread (thread hand-off costs more).
PARALLEL_THRESHOLD = 64


class Mode(IntEnum):
    """Protocol variants and their one-byte identifiers (RFC 9497 §3.1)."""

    OPRF = 0
    VOPRF = 1
    POPRF = 2


def parse_mode(mode: int | str | Mode) -> Mode:
    if isinstance(mode, str):
        try:
            return Mode[mode.upper()]
        except KeyError:
            pass
    elif isinstance(mode, int) and not isinstance(mode, bool) and mode in (0, 1, 2):
        return Mode(mode)
    raise InvalidParameterError(f"mode must be one of 0 (OPRF), 1 (VOPRF), 2 (POPRF), got {mode!r}")


@lru_cache(maxsize=4)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="voprf")


def _reveal(value: SecretBytes) -> bytes:
    if isinstance(value, Secret):
        inner = value.reveal()
        if not isinstance(inner, bytes | bytearray):
            raise InvalidInputError(f"secret must wrap bytes, got {type(inner).__name__}")
        return bytes(inner)
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    raise InvalidInputError(f"secret must be bytes or Secret[bytes], got {type(value).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True)
class _BatchProof:
    """What a VOPRF/POPRF finalize verifies: the blinded elements, the proof scalars (c, s), the
    key B the proof is made under (tweaked in POPRF), its encoding and the composite seed."""

    blinded: list[bytes]
    c: Any
    s: Any
    key: Any
    b_enc: bytes
    seed: bytes


class OprfSuite:
    """ristretto255-SHA512 in one mode over one group backend (RFC 9497 §3, §4.1)."""

    __slots__ = (
        "_mode",
        "_group",
        "_workers",
        "_context",
        "_h2g_dst",
        "_h2s_dst",
        "_dkp_dst",
        "_last_pk",
    )

    identifier = SUITE_ID
    element_size = 32
    scalar_size = 32
    proof_size = 64
    output_size = HASH_SIZE

    def __init__(
        self, mode: int | str | Mode, group: PrimeOrderGroup[Any, Any], *, workers: int = 2
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidParameterError(f"workers must be an integer >= 1, got {workers!r}")
        self._mode = parse_mode(mode)
        self._group = group
        self._workers = workers
        self._context = context_string(int(self._mode))
        self._h2g_dst = hash_to_group_dst(self._context)
        self._h2s_dst = hash_to_scalar_dst(self._context)
        self._dkp_dst = derive_key_pair_dst(self._context)
        # (encoding, element) of the last public key that decoded: a client finalizes many
        # requests under one key, and decoding is a pure function of the bytes.
        self._last_pk: tuple[bytes, Any] | None = None

    def __repr__(self) -> str:
        return (
            f"OprfSuite({self.identifier!r}, mode={self._mode.name}, "
            f"group={self._group.name!r}, workers={self._workers})"
        )

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def group(self) -> PrimeOrderGroup[Any, Any]:
        return self._group

    @property
    def context_string(self) -> bytes:
        return self._context

    # -- keys (RFC 9497 §3.2) ---------------------------------------------------------------
    def derive_key_pair(self, seed: SecretBytes, info: bytes = b"") -> tuple[bytes, bytes]:
        """DeriveKeyPair (§3.2.1): ``(skSm, pkSm)`` from a 32-byte seed and public key info."""
        g = self._group
        seed_bytes = _reveal(seed)
        if len(seed_bytes) != g.scalar_size:
            raise InvalidInputError(
                f"seed must be {g.scalar_size} bytes long, got {len(seed_bytes)}"
            )
        derive_input = seed_bytes + framed(check_input(info, "info"))
        for counter in range(256):
            sk = g.hash_to_scalar(derive_input + counter.to_bytes(1, "big"), self._dkp_dst)
            if not g.scalar_is_zero(sk):
                return g.serialize_scalar(sk), g.serialize_element(g.scalar_mult_base(sk))
        raise InvalidInputError("seed and info must derive a non-zero key within 256 counters")

    def generate_key_pair(self, rng: RandomSource | None = None) -> tuple[bytes, bytes]:
        """GenerateKeyPair (§3.2): a random non-zero ``skS`` and ``pkS = skS * G``."""
        g = self._group
        sk = g.random_scalar(rng if rng is not None else RandomSource.cryptographic("oprf-key"))
        return g.serialize_scalar(sk), g.serialize_element(g.scalar_mult_base(sk))

    def public_key(self, sk: SecretBytes) -> bytes:
        """``pkS = skS * G`` for an encoded private key."""
        g = self._group
        return g.serialize_element(g.scalar_mult_base(self._secret_scalar(sk, "sk")))

    def tweaked_key(self, pk: bytes, info: bytes = b"") -> bytes:
        """POPRF ``tweakedKey = HashToScalar("Info" || framed(info)) * G + pkS`` (§3.3.3 Blind)."""
        self._require_mode(Mode.POPRF, "tweaked_key")
        g = self._group
        return g.serialize_element(self._tweaked_key(self._decode(pk, "pk"), info))

    # -- client: Blind (§3.3.1, §3.3.3) -----------------------------------------------------
    def blind(
        self,
        input: bytes,
        blind: SecretBytes | None = None,
        rng: RandomSource | None = None,
        *,
        info: bytes | None = None,
        pk: bytes | None = None,
    ) -> tuple[bytes, bytes]:
        """Blind: ``(blind, blindedElement = blind * HashToGroup(input))``.

        ``blind`` fixes the scalar (test vectors); otherwise it is drawn from ``rng`` (a fresh
        cryptographic source by default). In POPRF mode, passing ``info`` and ``pk`` also runs
        the early tweaked-key check of §3.3.3 (InvalidInputError when the tweaked key is the
        identity); :meth:`finalize` runs it in any case.
        """
        g = self._group
        input_ = check_input(input, "input")
        if self._mode is Mode.POPRF and pk is not None:
            self._tweaked_key(self._decode(pk, "pk"), info if info is not None else b"")
        point = g.hash_to_group(input_, self._h2g_dst)
        if g.is_identity(point):
            raise InvalidInputError("input must not hash to the identity element")
        if blind is None:
            r = g.random_scalar(rng if rng is not None else RandomSource.cryptographic("blind"))
        else:
            r = self._secret_scalar(blind, "blind")
        return g.serialize_scalar(r), g.serialize_element(g.scalar_mult(r, point))

    # -- server: BlindEvaluate (§3.3.1-3) ---------------------------------------------------
    def blind_evaluate(
        self,
        sk: SecretBytes,
        blinded_elements: Sequence[bytes],
        info: bytes = b"",
        proof_randomness: SecretBytes | None = None,
        rng: RandomSource | None = None,
    ) -> tuple[list[bytes], bytes | None]:
        """Evaluate a batch; ``(evaluatedElements, proof)`` with ONE proof (None in OPRF mode).

        Raises DecodeError for a malformed blinded element (naming its index) and, in POPRF
        mode, InvalidInputError when ``info`` tweaks the key to zero (RFC 9497 InverseError;
        the client then knows the private key, which should be rotated).
        """
        g = self._group
        k = self._secret_scalar(sk, "sk")
        encodings = self._batch(blinded_elements, "blinded_elements")
        info_ = self._info(info)
        if self._mode is Mode.POPRF:
            t = g.scalar_add(k, self._info_scalar(info_))
            if g.scalar_is_zero(t):
                raise InvalidInputError(
                    "info must not tweak the private key to zero (skS + HashToScalar(info) = 0)"
                )
            proof_key, eval_scalar = t, g.scalar_inverse(t)
        else:
            proof_key, eval_scalar = k, k
        mode = self._mode
        if mode is not Mode.OPRF:
            b_enc = g.serialize_element(g.scalar_mult_base(proof_key))
            seed = dleq.composite_seed(b_enc, self._context)
            if proof_randomness is not None:
                r = self._secret_scalar(proof_randomness, "proof_randomness")
            else:
                r = g.random_scalar(rng if rng is not None else RandomSource.cryptographic("proof"))

        def work(lo: int, hi: int) -> tuple[list[bytes], Any]:
            chunk = encodings[lo:hi]
            elements = self._decode_all(chunk, "blinded_elements", lo)
            evaluated = [g.scalar_mult(eval_scalar, e) for e in elements]
            ev_enc = [g.serialize_element(e) for e in evaluated]
            if mode is Mode.OPRF:
                return ev_enc, None
            if mode is Mode.VOPRF:  # C = blinded, D = evaluated
                m, _ = dleq.weighted_sum(g, seed, self._h2s_dst, lo, elements, chunk, ev_enc)
            else:  # POPRF proves t * evaluated = blinded: C = evaluated, D = blinded
                m, _ = dleq.weighted_sum(g, seed, self._h2s_dst, lo, evaluated, ev_enc, chunk)
            return ev_enc, m

        parts = self._run(work, len(encodings))
        evaluated_all = [enc for part in parts for enc in part[0]]
        if mode is Mode.OPRF:
            return evaluated_all, None
        m_total = dleq.sum_elements(g, [part[1] for part in parts])
        c, s = dleq.prove_composites(g, proof_key, b_enc, m_total, r, self._h2s_dst)
        return evaluated_all, g.serialize_scalar(c) + g.serialize_scalar(s)

    def blind_evaluate_each(
        self, sk: SecretBytes, blinded_elements: Sequence[bytes], rngs: Sequence[RandomSource]
    ) -> list[tuple[bytes, bytes]]:
        """``(evaluatedElement, proof)`` for each element, proved alone: entry i is exactly
        ``blind_evaluate(sk, [blinded_elements[i]], rng=rngs[i])`` with its one element and
        proof (VOPRF mode). The key's public half and the composite seed are computed once, not
        once per element, and a one-element composite is one multiplication: a server that
        answers each user with its own proof pays only the per-element work.

        With the libsodium backend and its kernels on, M = d·C and Z = d·D (equal to k·M) come
        from the variable-time kernel of :mod:`primitives.group.vartime_numba`: d, C and D are
        public, so only k·C and r·M need constant time."""
        self._require_mode(Mode.VOPRF, "blind_evaluate_each")
        g, dst = self._group, self._h2s_dst
        k = self._secret_scalar(sk, "sk")
        encodings = self._batch(blinded_elements, "blinded_elements")
        if len(rngs) != len(encodings):
            raise InvalidInputError(
                f"rngs must hold one RandomSource per element ({len(encodings)}), got {len(rngs)}"
            )
        elements = self._decode_all(encodings, "blinded_elements", 0)
        if not elements:
            return []
        b_enc = g.serialize_element(g.scalar_mult_base(k))
        seed = dleq.composite_seed(b_enc, self._context)
        # Each element's nonce from its own stream, as blind_evaluate draws it (first).
        nonces = [g.random_scalar(rng) for rng in rngs]
        evaluated = [g.serialize_element(g.scalar_mult(k, e)) for e in elements]
        weights = [
            dleq.composite_weight(g, seed, 0, enc, ev_enc, dst)
            for enc, ev_enc in zip(encodings, evaluated, strict=True)
        ]
        ms, zs = self._composites(encodings, evaluated, weights, elements)
        out = []
        for ev_enc, m, z, r in zip(evaluated, ms, zs, nonces, strict=True):
            c, s = dleq.prove_composites(g, k, b_enc, m, r, dst, z=z)
            out.append((ev_enc, g.serialize_scalar(c) + g.serialize_scalar(s)))
        return out

    def _composites(
        self, c_enc: list[bytes], d_enc: list[bytes], weights: list[Any], c_elements: list[Any]
    ) -> tuple[list[Any], list[Any | None]]:
        """M_i = d_i·C_i and, from the kernel, Z_i = d_i·D_i of one-element proofs; without the
        kernel Z is left to :func:`dleq.prove_composites` (k·M)."""
        g = self._group
        if dleq.kernel_applies(g):
            from primitives.group import vartime_numba

            try:
                status, ms, zs = vartime_numba.composite_points(
                    b"".join(c_enc), b"".join(d_enc), b"".join(g.serialize_scalar(w) for w in weights), len(c_enc)
                )
            except DecodeError:
                raise
            except Exception as exc:  # a JIT that fails to build must not take evaluation down
                vartime_numba.SWITCH.disable(exc)
            else:
                if not status.any():
                    return ms, list(zs)
                # C was decoded above and D = k·C: the kernel refusing either is its own fault.
                vartime_numba.SWITCH.disable(RuntimeError("composite kernel refused canonical encodings"))
        return [g.scalar_mult(w, e) for w, e in zip(weights, c_elements, strict=True)], [None] * len(c_elements)

    # -- client: Finalize (§3.3.1-3) --------------------------------------------------------

    def finalize(
        self,
        inputs: Sequence[bytes],
        blinds: Sequence[SecretBytes],
        evaluated: Sequence[bytes],
        blinded_elements: Sequence[bytes] | None = None,
        pk: bytes | None = None,
        proof: bytes | None = None,
        info: bytes = b"",
    ) -> list[bytes]:
        """Unblind and hash each evaluated element; in VOPRF/POPRF verify the batch proof first.

        Raises VerificationError when the proof does not verify, DecodeError for malformed
        elements, scalars or proof, InvalidInputError for inconsistent arguments.
        """
        ev_enc = self._batch(evaluated, "evaluated")
        inputs_, blinds_ = self._finalize_inputs(inputs, blinds, len(ev_enc))
        info_ = self._info(info)
        out_info = info_ if self._mode is Mode.POPRF else None
        batch = None
        if self._mode is not Mode.OPRF:
            batch = self._batch_proof(len(ev_enc), blinded_elements, pk, proof, info_)

        def work(lo: int, hi: int) -> tuple[list[bytes], Any, Any]:
            return self._finalize_range(inputs_, blinds_, ev_enc, out_info, batch, lo, hi)

        parts = self._run(work, len(ev_enc))
        if batch is not None:
            self._verify_batch_proof(
                batch, [part[1] for part in parts], [part[2] for part in parts]
            )
        return [out for part in parts for out in part[0]]

    def _finalize_inputs(
        self, inputs: Sequence[bytes], blinds: Sequence[SecretBytes], n: int
    ) -> tuple[list[bytes], list[Any]]:
        """One input and one non-zero blind per evaluated element, checked and decoded."""
        if isinstance(inputs, bytes | bytearray) or len(inputs) != n:
            raise InvalidInputError(
                f"inputs must be a list of {n} byte strings, got "
                f"{type(inputs).__name__} of length {len(inputs)}"
            )
        if isinstance(blinds, bytes | bytearray) or len(blinds) != n:
            raise InvalidInputError(
                f"blinds must be a list of {n} scalars, got {len(blinds)} items"
            )
        inputs_ = [check_input(x, f"inputs[{i}]") for i, x in enumerate(inputs)]
        blinds_ = [self._secret_scalar(b, f"blinds[{i}]") for i, b in enumerate(blinds)]
        return inputs_, blinds_

    def _batch_proof(
        self,
        n: int,
        blinded_elements: Sequence[bytes] | None,
        pk: bytes | None,
        proof: bytes | None,
        info: bytes,
    ) -> _BatchProof:
        """The proof's arguments, checked and decoded, with the composite seed (§2.2.2)."""
        if blinded_elements is None or pk is None or proof is None:
            raise InvalidInputError(
                f"{self._mode.name} finalize needs blinded_elements, pk and proof, got "
                f"blinded_elements={'set' if blinded_elements is not None else None}, "
                f"pk={'set' if pk is not None else None}, "
                f"proof={'set' if proof is not None else None}"
            )
        blinded = self._batch(blinded_elements, "blinded_elements")
        if len(blinded) != n:
            raise InvalidInputError(
                f"blinded_elements must have {n} items like evaluated, got {len(blinded)}"
            )
        c, s = self._decode_proof(proof)
        pk_elem = self._decode_pk(pk)
        key = self._tweaked_key(pk_elem, info) if self._mode is Mode.POPRF else pk_elem
        b_enc = self._group.serialize_element(key)
        seed = dleq.composite_seed(b_enc, self._context)
        return _BatchProof(blinded=blinded, c=c, s=s, key=key, b_enc=b_enc, seed=seed)

    def _finalize_range(
        self,
        inputs: list[bytes],
        blinds: list[Any],
        ev_enc: list[bytes],
        out_info: bytes | None,
        batch: _BatchProof | None,
        lo: int,
        hi: int,
    ) -> tuple[list[bytes], Any, Any]:
        """Outputs of elements ``lo .. hi-1`` and, with a proof, their partial composites M, Z."""
        g = self._group
        ev_chunk = ev_enc[lo:hi]
        ev = self._decode_all(ev_chunk, "evaluated", lo)
        outputs = [
            finalize_hash(
                inputs[lo + j],
                g.serialize_element(g.scalar_mult(g.scalar_inverse(blinds[lo + j]), e)),
                out_info,
            )
            for j, e in enumerate(ev)
        ]
        if batch is None:
            return outputs, None, None
        bl_chunk = batch.blinded[lo:hi]
        bl = self._decode_all(bl_chunk, "blinded_elements", lo)
        c_enc, d_enc = self._proof_sides(bl_chunk, ev_chunk)
        c_elements, d_elements = self._proof_sides(bl, ev)
        m, z = dleq.weighted_sum(
            g, batch.seed, self._h2s_dst, lo, c_elements, c_enc, d_enc, d_elements
        )
        return outputs, m, z

    def _verify_batch_proof(self, batch: _BatchProof, ms: list[Any], zs: list[Any]) -> None:
        """VerifyProof (§2.2.2) from the partial composites of every range."""
        g = self._group
        m = dleq.sum_elements(g, ms)
        z = dleq.sum_elements(g, zs)
        if not dleq.verify_composites(
            g, batch.key, batch.b_enc, m, z, batch.c, batch.s, self._h2s_dst
        ):
            raise VerificationError(
                f"proof must verify for the batch of {len(batch.blinded)} elements under the "
                "given public key"
                + (" and info" if self._mode is Mode.POPRF else "")
                + ", got a proof that does not"
            )

    # -- client: VerifyProof + Finalize with prepared inverses (§2.2.2, §3.3.2-3) -----------
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
    ) -> list[Finalized]:
        """VerifyProof (§2.2.2) then Finalize (§3.3.2, §3.3.3) of many evaluations, each item
        failing on its own: entry i is the PRF output of ``inputs[i]``, the DecodeError or
        VerificationError that stopped it, or None where ``inputs[i]`` is None (a batch
        position the caller holds no input for: covered by the proof, not finalized).

        ``proofs`` is one proof per element (a list: each from a BlindEvaluate of one element)
        or one proof for the whole batch (bytes: a failing proof fails every item).
        ``blind_inverses[i]`` is ``blind^-1``, computed ahead of time, so the online work is one
        scalar multiplication and a hash per element. Verification runs in one thread with
        variable-time arithmetic (every input to it is public); the unblinding is constant time.
        Raises InvalidParameterError in OPRF mode (nothing to verify) and InvalidInputError for
        inconsistent arguments.
        """
        if self._mode is Mode.OPRF:
            raise InvalidParameterError("verify_and_finalize needs mode VOPRF or POPRF, got OPRF")
        n = len(evaluated_elements)
        dleq.check_batch("evaluated_elements", n)
        for name, items in (
            ("inputs", inputs),
            ("blind_inverses", blind_inverses),
            ("blinded_elements", blinded_elements),
        ):
            if isinstance(items, bytes | bytearray) or len(items) != n:
                raise InvalidInputError(
                    f"{name} must be a list of {n} items like evaluated_elements, got {len(items)}"
                )
        info_ = self._info(info)
        key = self._decode_pk(pk)
        if self._mode is Mode.POPRF:
            key = self._tweaked_key(key, info_)
        elements = [
            self._try_decode(e, f"evaluated_elements[{i}]")
            for i, e in enumerate(evaluated_elements)
        ]
        if isinstance(proofs, bytes | bytearray):
            verdicts = self._verify_batch(
                key, blinded_elements, evaluated_elements, elements, bytes(proofs)
            )
        else:
            if isinstance(proofs, str) or len(proofs) != n:
                raise InvalidInputError(
                    f"proofs must be one proof or a list of one per element ({n}), got {len(proofs)} items"
                )
            verdicts = self._verify_each(
                key, blinded_elements, evaluated_elements, elements, proofs
            )
        out_info = info_ if self._mode is Mode.POPRF else None
        g = self._group
        results: list[Finalized] = []
        for i, (verdict, element) in enumerate(zip(verdicts, elements, strict=True)):
            input_, inverse = inputs[i], blind_inverses[i]
            if verdict is not None or input_ is None or inverse is None:
                results.append(verdict)
                continue
            unblinded = g.scalar_mult(self._secret_scalar(inverse, f"blind_inverses[{i}]"), element)
            results.append(
                finalize_hash(
                    check_input(input_, f"inputs[{i}]"), g.serialize_element(unblinded), out_info
                )
            )
        return results

    def _try_decode(self, data: bytes, name: str) -> Any:
        try:
            return self._decode(data, name)
        except DecodeError as exc:
            return exc

    def _proof_sides(
        self, blinded: Sequence[bytes], evaluated: Sequence[bytes]
    ) -> tuple[Sequence[bytes], Sequence[bytes]]:
        """(C, D) of the proofs: VOPRF proves k*blinded = evaluated, POPRF t*evaluated = blinded."""
        return (blinded, evaluated) if self._mode is Mode.VOPRF else (evaluated, blinded)

    def _verify_batch(
        self,
        key: Any,
        blinded: Sequence[bytes],
        evaluated: Sequence[bytes],
        elements: Sequence[Any],
        proof: bytes,
    ) -> list[DecodeError | VerificationError | None]:
        """One proof over every element (§2.2.2 with m = len): one verdict for all."""
        n = len(evaluated)
        failed = next((e for e in elements if isinstance(e, DecodeError)), None)
        if failed is not None:
            return [failed] * n
        try:
            scalars = self._decode_proof(proof)
            decoded_blinded = self._decode_all(blinded, "blinded_elements", 0)
        except DecodeError as exc:
            return [exc] * n
        cs, ds = (
            (decoded_blinded, elements) if self._mode is Mode.VOPRF else (elements, decoded_blinded)
        )
        if dleq.verify_proof(
            self._group, key, cs, ds, scalars, context=self._context, dst=self._h2s_dst
        ):
            return [None] * n
        return [
            VerificationError(
                f"proof must verify for the batch of {n} elements, got a proof that does not"
            )
        ] * n

    def _verify_each(
        self,
        key: Any,
        blinded: Sequence[bytes],
        evaluated: Sequence[bytes],
        elements: Sequence[Any],
        proofs: Sequence[bytes],
    ) -> list[DecodeError | VerificationError | None]:
        """One proof per element (§2.2.2 with m = 1 each), checked together."""
        g = self._group
        out: list[DecodeError | VerificationError | None] = [None] * len(proofs)
        todo: list[int] = []
        split: list[tuple[bytes, bytes]] = []
        for i, proof in enumerate(proofs):
            if isinstance(elements[i], DecodeError):
                out[i] = elements[i]
                continue
            try:
                c, s = self._decode_proof(proof)
                self._decode(blinded[i], f"blinded_elements[{i}]")
            except DecodeError as exc:
                out[i] = exc
                continue
            todo.append(i)
            split.append((g.serialize_scalar(c), g.serialize_scalar(s)))
        c_enc, d_enc = self._proof_sides([blinded[i] for i in todo], [evaluated[i] for i in todo])
        verdicts = dleq.verify_single_proofs(
            g,
            g.serialize_element(key),
            c_enc,
            d_enc,
            split,
            context=self._context,
            dst=self._h2s_dst,
        )
        for i, ok in zip(todo, verdicts, strict=True):
            if not ok:
                out[i] = VerificationError(
                    "proof must verify for its element, got a proof that does not"
                )
        return out

    def warm_up(self) -> None:
        """Load (or compile) the verification kernels now, so no metered call pays for it."""
        from primitives.group import msm_numba, vartime_numba

        vartime_numba.warm_up()
        msm_numba.warm_up()

    # -- Evaluate (§3.3.1, §3.3.3) ----------------------------------------------------------
    def evaluate(self, sk: SecretBytes, input: bytes, info: bytes = b"") -> bytes:
        """The PRF output computed directly from the private key and the input."""
        g = self._group
        k = self._secret_scalar(sk, "sk")
        input_ = check_input(input, "input")
        info_ = self._info(info)
        point = g.hash_to_group(input_, self._h2g_dst)
        if g.is_identity(point):
            raise InvalidInputError("input must not hash to the identity element")
        if self._mode is Mode.POPRF:
            t = g.scalar_add(k, self._info_scalar(info_))
            if g.scalar_is_zero(t):
                raise InvalidInputError(
                    "info must not tweak the private key to zero (skS + HashToScalar(info) = 0)"
                )
            element = g.scalar_mult(g.scalar_inverse(t), point)
            return finalize_hash(input_, g.serialize_element(element), info_)
        return finalize_hash(input_, g.serialize_element(g.scalar_mult(k, point)), None)

    # -- helpers ----------------------------------------------------------------------------
    def _require_mode(self, mode: Mode, what: str) -> None:
        if self._mode is not mode:
            raise InvalidParameterError(f"{what} needs mode {mode.name}, got {self._mode.name}")

    def _info(self, info: bytes) -> bytes:
        info_ = check_input(info, "info")
        if info_ and self._mode is not Mode.POPRF:
            raise InvalidParameterError(
                f"info must be empty outside POPRF mode, got {len(info_)} bytes in {self._mode.name}"
            )
        return info_

    def _info_scalar(self, info: bytes) -> Any:
        return self._group.hash_to_scalar(b"Info" + framed(info), self._h2s_dst)

    def _tweaked_key(self, pk_elem: Any, info: bytes) -> Any:
        g = self._group
        key = g.add(g.scalar_mult_base(self._info_scalar(check_input(info, "info"))), pk_elem)
        if g.is_identity(key):
            raise InvalidInputError("info and pk must not give the identity as tweaked key")
        return key

    def _secret_scalar(self, value: SecretBytes, name: str) -> Any:
        g = self._group
        try:
            scalar = g.deserialize_scalar(_reveal(value))
        except DecodeError as exc:
            raise DecodeError(f"{name}: {exc}") from None
        if g.scalar_is_zero(scalar):
            raise InvalidInputError(f"{name} must be a non-zero scalar, got zero")
        return scalar

    def _decode(self, data: bytes, name: str) -> Any:
        try:
            return self._group.deserialize_element(data)
        except DecodeError as exc:
            raise DecodeError(f"{name}: {exc}") from None

    def _decode_pk(self, pk: bytes) -> Any:
        last = self._last_pk
        if last is not None and isinstance(pk, bytes) and pk == last[0]:
            return last[1]
        element = self._decode(pk, "pk")
        if isinstance(pk, bytes):
            self._last_pk = (pk, element)
        return element

    def _decode_all(self, encodings: Sequence[bytes], name: str, start: int) -> list[Any]:
        decode = self._group.deserialize_element
        out = []
        for j, data in enumerate(encodings):
            try:
                out.append(decode(data))
            except DecodeError as exc:
                raise DecodeError(f"{name}[{start + j}]: {exc}") from None
        return out

    def _decode_proof(self, proof: bytes) -> tuple[Any, Any]:
        g = self._group
        if not isinstance(proof, bytes | bytearray) or len(proof) != 2 * g.scalar_size:
            got = len(proof) if isinstance(proof, bytes | bytearray) else type(proof).__name__
            raise DecodeError(f"proof must be {2 * g.scalar_size} bytes long, got {got}")
        try:
            return (
                g.deserialize_scalar(bytes(proof[: g.scalar_size])),
                g.deserialize_scalar(bytes(proof[g.scalar_size :])),
            )
        except DecodeError as exc:
            raise DecodeError(f"proof: {exc}") from None

    def _batch(self, items: Sequence[bytes], name: str) -> list[bytes]:
        if isinstance(items, bytes | bytearray | memoryview | str):
            raise InvalidInputError(
                f"{name} must be a list of encoded elements, got a single value"
            )
        batch = list(items)
        dleq.check_batch(name, len(batch))
        return batch

    def _run(self, work: Callable[[int, int], T], n: int) -> list[T]:
        """``work`` over contiguous index ranges, in parallel when the backend frees the GIL."""
        threads = 1
        if self._group.releases_gil and n >= PARALLEL_THRESHOLD:
            threads = min(self._workers, n // (PARALLEL_THRESHOLD // 2), os.cpu_count() or 1)
        if threads <= 1:
            return [work(0, n)]
        bounds = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
        pool = _pool(threads - 1)
        futures = [pool.submit(work, lo, hi) for lo, hi in bounds[1:]]
        try:
            first = work(*bounds[0])
        except BaseException:
            wait(futures)
            raise
        return [first, *(future.result() for future in futures)]


def get_suite(
    identifier: str = SUITE_ID,
    mode: int | str | Mode = Mode.OPRF,
    *,
    group: str | PrimeOrderGroup[Any, Any] = "ristretto255-sodium",
    workers: int = 2,
) -> OprfSuite:
    """The suite ``identifier`` in ``mode`` over the group registered as ``group`` (or given)."""
    from primitives.errors import UnknownComponentError

    if identifier != SUITE_ID:
        raise UnknownComponentError(f"oprf suite must be one of {[SUITE_ID]}, got {identifier!r}")
    if isinstance(group, str):
        from primitives.group import get_group

        group_obj = get_group(group)
    else:
        group_obj = group
    return OprfSuite(mode, group_obj, workers=workers)
