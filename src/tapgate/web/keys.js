// The device key: made here by WebCrypto as non-extractable, so script can use it to sign but can never
// read it out. Ed25519 where the browser has it, else ECDSA on P-256. The gateway gets the public key as
// base64 of its SubjectPublicKeyInfo.

const ALGORITHMS = {
  ed25519: { generate: { name: "Ed25519" }, sign: { name: "Ed25519" } },
  p256: {
    generate: { name: "ECDSA", namedCurve: "P-256" },
    sign: { name: "ECDSA", hash: "SHA-256" },
  },
};

/** A new key pair, {alg, keys}; `prefer` ("ed25519" or "p256") skips detection. Ed25519 first:
 * browsers without it refuse generateKey with NotSupportedError and P-256 is used. */
export async function newDeviceKey(prefer) {
  const order = prefer === "p256" ? ["p256"] : prefer === "ed25519" ? ["ed25519"] : ["ed25519", "p256"];
  let last = null;
  for (const alg of order) {
    try {
      const keys = await crypto.subtle.generateKey(ALGORITHMS[alg].generate, false, ["sign", "verify"]);
      return { alg, keys };
    } catch (error) {
      last = error;
    }
  }
  throw last;
}

/** Base64 (standard alphabet) of the public key's SubjectPublicKeyInfo. */
export async function publicKeyBase64(keys) {
  return toBase64(new Uint8Array(await crypto.subtle.exportKey("spki", keys.publicKey)));
}

/** Base64 of the device's signature over `text` (UTF-8): Ed25519's 64 bytes, or P-256's raw r‖s
 * (WebCrypto's ECDSA output, which the gateway reads as well as DER). */
export async function signText(device, text) {
  const data = new TextEncoder().encode(text);
  const signature = await crypto.subtle.sign(ALGORITHMS[device.alg].sign, device.keys.privateKey, data);
  return toBase64(new Uint8Array(signature));
}

export function toBase64(bytes) {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** Bytes of base64url (padded or not), as a Web Push application server key arrives. */
export function fromBase64Url(text) {
  const standard = text.replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(standard + "=".repeat((4 - (standard.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}
