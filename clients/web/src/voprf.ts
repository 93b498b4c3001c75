/**
 * The device's half of RFC 9497 VOPRF (ristretto255-SHA512) with @noble/curves: Blind with a
 * given scalar r (the device draws it offline), then VerifyProof and Finalize, which noble's
 * ``voprf.finalize`` does together (it throws when S_tag's DLEQ proof does not verify).
 * HashToGroup is RFC 9380 hash_to_ristretto255 with expand_message_xmd(SHA-512) under the DST
 * "HashToGroup-" || contextString.
 */
import { ristretto255, ristretto255_hasher, ristretto255_oprf } from "@noble/curves/ed25519.js";
import { sha512 } from "@noble/hashes/sha2.js";
import { bigintToLe, concat, leToBigint, utf8 } from "./bytes.js";

export const ORDER = 2n ** 252n + 27742317777372353535851937790883648493n;
const CONTEXT = concat(utf8("OPRFV1-"), new Uint8Array([1]), utf8("-ristretto255-SHA512"));
const HASH_TO_GROUP_DST = concat(utf8("HashToGroup-"), CONTEXT);

/** A scalar from 64 uniform bytes (little-endian, reduced mod the group order), as the Python
 * group's random_scalar; zero is refused (the caller draws again). */
export function scalarFromUniform(bytes64: Uint8Array): Uint8Array {
  if (bytes64.length !== 64) throw new Error("a blind scalar is drawn from 64 bytes");
  const v = leToBigint(bytes64) % ORDER;
  if (v === 0n) throw new Error("zero scalar: draw again");
  return bigintToLe(v, 32);
}

export function hashToGroup(input: Uint8Array) {
  return ristretto255_hasher.hashToCurve(input, { DST: HASH_TO_GROUP_DST });
}

/** RFC 9497 §3.3.2 Blind with the device's scalar: blindedElement = r · HashToGroup(input). */
export function blind(input: Uint8Array, scalar: Uint8Array): Uint8Array {
  const r = leToBigint(scalar);
  return hashToGroup(input).multiply(r).toBytes();
}

/** VerifyProof then Finalize: the 64-byte PRF output (throws if the proof does not verify). */
export function verifyAndFinalize(
  input: Uint8Array, scalar: Uint8Array, evaluated: Uint8Array, blinded: Uint8Array, publicKey: Uint8Array, proof: Uint8Array,
): Uint8Array {
  return ristretto255_oprf.voprf.finalize(input, scalar, evaluated, blinded, publicKey, proof);
}

export { ristretto255, sha512 };
