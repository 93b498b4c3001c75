/**
 * libsodium's crypto_box_seal with a prepared ephemeral key (primitives/channel.py): the
 * ephemeral key pair is crypto_box_seed_keypair(seed) (secret = SHA-512(seed)[:32]); the box is
 * epk || crypto_box_easy(m, nonce = BLAKE2b-192(epk || recipient), recipient, esk), i.e. X25519,
 * HSalsa20 to the box key, then XSalsa20-Poly1305 (tag first).
 */
import { hsalsa, xsalsa20poly1305 } from "@noble/ciphers/salsa.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { blake2b } from "@noble/hashes/blake2.js";
import { sha512 } from "@noble/hashes/sha2.js";
import { concat, equal } from "./bytes.js";

export interface EphemeralKey {
  publicKey: Uint8Array;
  secretKey: Uint8Array;
}

export function seedKeypair(seed: Uint8Array): EphemeralKey {
  if (seed.length !== 32) throw new Error("an ephemeral seed is 32 bytes");
  const secretKey = sha512(seed).slice(0, 32);
  return { secretKey, publicKey: x25519.getPublicKey(secretKey) };
}

const SIGMA = new Uint32Array([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]); // "expand 32-byte k"

function words(bytes: Uint8Array): Uint32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Uint32Array.from({ length: bytes.length / 4 }, (_, i) => view.getUint32(4 * i, true));
}

/** crypto_box_beforenm: HSalsa20(X25519(esk, pk), 0^16). */
export function boxKey(recipient: Uint8Array, secretKey: Uint8Array): Uint8Array {
  const shared = x25519.getSharedSecret(secretKey, recipient);
  if (equal(shared, new Uint8Array(32))) throw new Error("recipient is not a usable X25519 public key");
  const out = new Uint32Array(8);
  hsalsa(SIGMA, words(shared), new Uint32Array(4), out);
  const key = new Uint8Array(32);
  const view = new DataView(key.buffer);
  out.forEach((w, i) => view.setUint32(4 * i, w, true));
  return key;
}

export function sealWith(ephemeral: EphemeralKey, recipient: Uint8Array, plaintext: Uint8Array): Uint8Array {
  const nonce = blake2b(concat(ephemeral.publicKey, recipient), { dkLen: 24 });
  const box = xsalsa20poly1305(boxKey(recipient, ephemeral.secretKey), nonce).encrypt(plaintext);
  return concat(ephemeral.publicKey, box);
}
