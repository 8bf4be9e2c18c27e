// What the app keeps on this browser, in IndexedDB: the device (its id, token and non-extractable key
// pair) and the answers still to be delivered. A CryptoKey is stored as itself (structured clone), so
// the private key never exists outside the browser's key store, not even as bytes in this database.

const DB_NAME = "tapgate";
const DB_VERSION = 1;
const STATE = "state";
const OUTBOX = "outbox";

let opening = null;

function database() {
  if (!opening) {
    opening = new Promise((resolve, reject) => {
      const request = indexedDB.open(DB_NAME, DB_VERSION);
      request.onupgradeneeded = () => {
        request.result.createObjectStore(STATE);
        request.result.createObjectStore(OUTBOX);
      };
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
  }
  return opening;
}

async function run(store, mode, work) {
  const db = await database();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(store, mode);
    const request = work(tx.objectStore(store));
    tx.oncomplete = () => resolve(request ? request.result : undefined);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

/** The paired (or pairing) device, or null: {device_id, name, kind, alg, keys, public_key, token,
 * pairing_id, comparison_code, status: "awaiting_consent" | "active", claimed_at}. */
export function loadDevice() {
  return run(STATE, "readonly", (s) => s.get("device")).then((d) => d || null);
}

export function saveDevice(device) {
  return run(STATE, "readwrite", (s) => s.put(device, "device"));
}

/** Forget the device and every answer waiting to be sent. */
export async function forgetDevice() {
  await run(OUTBOX, "readwrite", (s) => s.clear());
  await run(STATE, "readwrite", (s) => s.delete("device"));
}

/** Answers the gateway has not acknowledged yet, by invocation id: {status, message}. */
export function queuedAnswers() {
  return run(OUTBOX, "readonly", (s) => s.getAll()).then((values) => values || []);
}

export function queueAnswer(answer) {
  return run(OUTBOX, "readwrite", (s) => s.put(answer, answer.id));
}

export function dropAnswer(id) {
  return run(OUTBOX, "readwrite", (s) => s.delete(id));
}
