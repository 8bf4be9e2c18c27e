// Passkeys: a WebAuthn credential in the phone's own secure hardware, used with the person's
// face, fingerprint or screen lock. Registered once (right after pairing, or from "This device"); then
// every Approve and Deny asks for it, with the SHA-256 of the exact signed text as the challenge, so the
// gateway learns the person confirmed this decision, not only that this browser's key signed it.

import { errorMessage, request } from "./api.js";

function fromB64url(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

function toB64url(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** What the person reads where a passkey cannot be made because the app was opened at an IP address. */
export const PASSKEY_NEEDS_A_NAME =
  "Passkeys need the gateway's name, not an IP address: open the app at the address your gateway's operator gave (https and a name, like https://gateway.local:8443), pair this phone there, then set up the passkey.";

/** True when this page was opened at an IP address, where browsers make no passkey. */
function openedAtAnAddress() {
  const host = location.hostname;
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(host) || host.startsWith("[") || host.includes(":");
}

/** "yes", or the sentence saying why this browser cannot hold a passkey and what the person can do. */
export async function passkeySupport() {
  if (openedAtAnAddress()) return PASSKEY_NEEDS_A_NAME;
  if (!window.isSecureContext || typeof PublicKeyCredential === "undefined") {
    return "This browser cannot make passkeys here. Open the app over https (or on this computer's localhost) in a current browser.";
  }
  let platform = false;
  try {
    platform = await PublicKeyCredential.isUserVerifyingPlatformAuthenticatorAvailable();
  } catch {
    platform = false;
  }
  if (!platform) {
    return "This phone has no screen lock, fingerprint or face unlock the browser can use for a passkey. Turn on a screen lock in the phone's settings, then come back here; until then your answers are signed by this browser's key only.";
  }
  return "yes";
}

/** Create this device's passkey and register it with the gateway; returns its credential id. Throws an
 * Error whose message is a sentence for the person. */
export async function registerPasskey(device) {
  const reply = await request("GET", "/v1/device/passkeys/options", { token: device.token });
  if (!reply.ok) throw new Error(errorMessage(reply, "The gateway could not start setting up a passkey."));
  const options = reply.body;
  const publicKey = {
    ...options,
    challenge: fromB64url(options.challenge),
    user: { ...options.user, id: fromB64url(options.user.id) },
    excludeCredentials: options.excludeCredentials.map((c) => ({ ...c, id: fromB64url(c.id) })),
  };
  let credential;
  try {
    credential = await navigator.credentials.create({ publicKey });
  } catch (error) {
    if (error && error.name === "SecurityError" && openedAtAnAddress()) throw new Error(PASSKEY_NEEDS_A_NAME);
    throw new Error(
      error && error.name === "NotAllowedError"
        ? "The passkey was not made: the phone did not confirm it was you. Try again."
        : `The passkey was not made in this browser (${error && error.name ? error.name : error}).`,
    );
  }
  const body = {
    credential: {
      id: credential.id,
      rawId: toB64url(credential.rawId),
      type: credential.type,
      response: {
        clientDataJSON: toB64url(credential.response.clientDataJSON),
        attestationObject: toB64url(credential.response.attestationObject),
      },
    },
  };
  const saved = await request("POST", "/v1/device/passkeys", { token: device.token, body });
  if (!saved.ok) throw new Error(errorMessage(saved, "The gateway did not accept the passkey."));
  return saved.body.credential_id;
}

/** The assertion for `text` (the signed decision) by the device's passkey, or null when it has none.
 * Throws an Error whose message is a sentence for the person when they did not confirm. */
export async function assertDecision(device, text) {
  if (!device.passkey) return null;
  const challenge = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  let assertion;
  try {
    assertion = await navigator.credentials.get({
      publicKey: {
        challenge,
        rpId: location.hostname,
        allowCredentials: [{ type: "public-key", id: fromB64url(device.passkey) }],
        userVerification: "required",
        timeout: 120000,
      },
    });
  } catch (error) {
    throw new Error(
      error && error.name === "NotAllowedError"
        ? "Your passkey was not confirmed, so nothing was sent. Tap again and confirm with your face, fingerprint or screen lock."
        : `Your passkey could not be used (${error && error.name ? error.name : error}); nothing was sent.`,
    );
  }
  const response = assertion.response;
  return {
    id: assertion.id,
    rawId: toB64url(assertion.rawId),
    type: assertion.type,
    response: {
      clientDataJSON: toB64url(response.clientDataJSON),
      authenticatorData: toB64url(response.authenticatorData),
      signature: toB64url(response.signature),
      userHandle: response.userHandle ? toB64url(response.userHandle) : null,
    },
  };
}
