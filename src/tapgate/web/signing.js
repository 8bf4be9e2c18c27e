// The text a device signs to decide an approval: the same eight lines, byte for byte, as
// tapgate.domain.approvals.signed_text builds on the server, each ending in "\n".

const LINE_BREAKS = /[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/;
// What tapgate.domain.text.unsafe_character refuses: controls, format characters (bidirectional marks
// included), unassigned, private use, surrogates, separators and the invisible fillers.
const UNSAFE = /[\p{Cc}\p{Cf}\p{Cn}\p{Co}\p{Cs}\p{Zl}\p{Zp}\u115f\u1160\u3164\uffa0\u2800]/u;
const HEX64 = /^[0-9a-f]{64}$/;
const HEX32 = /^[0-9a-f]{32}$/;

function line(name, value, mayBeEmpty) {
  if (typeof value !== "string") throw new Error(`${name} must be text`);
  if (!value && !mayBeEmpty) throw new Error(`${name} must not be empty`);
  if (LINE_BREAKS.test(value) || UNSAFE.test(value)) throw new Error(`${name} holds a hidden or line-breaking character`);
  return value;
}

/** The exact text to sign for `approval` (as GET /v1/inbox gives it) and `decision` ("approved" or
 * "denied"). Throws for an approval whose fields could not be signed safely. */
export function signedText(approval, decision) {
  if (decision !== "approved" && decision !== "denied") throw new Error("decision must be approved or denied");
  const sign = approval.sign;
  if (!HEX64.test(sign.action_sha256)) throw new Error("action_sha256 must be 64 lower-case hex digits");
  if (!HEX32.test(sign.challenge)) throw new Error("challenge must be 32 lower-case hex digits");
  if (!Number.isSafeInteger(sign.expires_at) || sign.expires_at < 0) throw new Error("expires_at must be a whole number");
  return [
    line("format", sign.format, false),
    `approval: ${line("approval_id", approval.id, false)}`,
    `decision: ${decision}`,
    `kind: ${line("kind", approval.kind, false)}`,
    `subject: ${line("subject", approval.subject, true)}`,
    `action-sha256: ${sign.action_sha256}`,
    `challenge: ${sign.challenge}`,
    `expires: ${sign.expires_at}`,
    "",
  ].join("\n");
}

/** Canonical JSON as the server builds it (tapgate.domain.approvals.canonical_json): keys sorted by code
 * point, no spaces, non-ASCII kept. A number the server wrote in another form (5.0, 1e-07) does not come
 * out the same, so such an approval is refused here rather than signed unchecked. */
export function canonicalJson(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("a number in the action is not finite");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).sort(byCodePoint);
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(",")}}`;
  }
  throw new Error("the action holds something that is not JSON");
}

function byCodePoint(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i += 1) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

async function sha256Hex(text) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The planned action's hash (a line of the signed text), recomputed from what the inbox item shows: its
 * tool, subject (the device), kind (the capability), exact arguments and preview. */
export async function actionSha256(approval) {
  if (!approval.arguments || typeof approval.arguments !== "object" || !approval.preview) {
    throw new Error("the approval lacks the arguments or the preview its hash covers");
  }
  const planned = {
    tool: String(approval.tool || ""),
    device: String(approval.subject || ""),
    capability: String(approval.kind || ""),
    arguments: approval.arguments,
    preview_sha256: await sha256Hex(canonicalJson(approval.preview)),
  };
  return sha256Hex(canonicalJson(planned));
}
