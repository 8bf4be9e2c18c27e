// The gateway's HTTP API as this app uses it: same origin, JSON, the device token as a bearer token.

/** {ok, status, body, offline}: `offline` when the request never got an answer (network down, timed
 * out). The body is the parsed JSON, or null. */
export async function request(method, path, { token, body, timeoutMs = 15000, signal } = {}) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const abort = () => controller.abort();
  if (signal) signal.addEventListener("abort", abort, { once: true });
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  try {
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      signal: controller.signal,
    });
    let parsed = null;
    const text = await response.text();
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = null;
      }
    }
    return { ok: response.ok, status: response.status, body: parsed, offline: false };
  } catch {
    return { ok: false, status: 0, body: null, offline: true };
  } finally {
    clearTimeout(timer);
    if (signal) signal.removeEventListener("abort", abort);
  }
}

/** The gateway's one-sentence error message, or `fallback`. */
export function errorMessage(reply, fallback) {
  const message = reply && reply.body && reply.body.error && reply.body.error.message;
  return typeof message === "string" && message ? message : fallback;
}
