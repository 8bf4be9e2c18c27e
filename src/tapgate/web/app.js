// tapgate's browser phone app: pairs from the QR code's link, keeps a non-extractable key, shows each
// invocation and approval as a card, and does nothing until the person confirms it here.

import { details, detectPlatform, humanize, plan } from "./actions.js";
import { errorMessage, request } from "./api.js";
import { fromBase64Url, newDeviceKey, publicKeyBase64, signText } from "./keys.js";
import { DeviceLink } from "./link.js";
import { assertDecision, passkeySupport, registerPasskey } from "./passkey.js";
import { actionSha256, signedText } from "./signing.js";
import { dropAnswer, forgetDevice, loadDevice, queueAnswer, queuedAnswers, saveDevice } from "./store.js";

// approvals: this phone shows and signs the person's approvals, once they grant it ("can approve for you").
const MANIFEST = [{ name: "phone_actions" }, { name: "sms_send" }, { name: "approvals" }];
const PAIRING_MINUTES = 10;
const CONSENT_POLL_MS = 1000;
const INBOX_WAIT_SECONDS = 25;
const INBOX_BUSY_MS = 3000; // the inbox answers at once while anything waits: look again after this
const RECENT_MAX = 12;
const PUSH_SUBSCRIBE_MS = 10000; // subscribe hangs where the browser's push service is out of reach

const platform = detectPlatform();
const $ = (id) => document.getElementById(id);

let config = { vapid_public_key: null };
let device = null;
let pairing = null; // {code, alg} from the link's fragment
let consoleSignIn = null; // the sign-in id from a console's QR code (#console=TENANT.ID)
let link = null;
let inbox = null;
const invocationCards = new Map();
const approvalCards = new Map();
const answered = new Set(); // invocation ids answered here, whether or not the gateway has heard yet
const noticesShown = new Set(); // a notice a link sent again shows once
const NOTICES_MAX = 5;
// The agent's notices in generic words (as their pushes say them) unless the gateway shows its own.
const NOTICE_WORDS = {
  "goal.blocked": "A goal is waiting for you.",
  "goal.done": "A goal is done.",
  "memory.proposed": "Something to remember is waiting for your review.",
  "suggestion.proposed": "A suggestion is waiting for your review.",
  "run.finished": "A run has finished.",
  "run.failed": "A run has failed.",
};

// -- screens ---------------------------------------------------------------------------------------------

function show(screen) {
  for (const section of document.querySelectorAll(".screen")) section.hidden = section.id !== `screen-${screen}`;
}

const SIGN_IN_NOTICE = "Sign in to the console? Check that the code below is the one the console shows, then approve.";

function notify(text) {
  const notice = $("notice");
  notice.textContent = text || "";
  notice.hidden = !text;
}

/** An agent's notice (device:notice): a line at the top of the list, the newest few kept; nothing to answer. */
function showNotice(item) {
  if (noticesShown.has(item.id)) return;
  noticesShown.add(item.id);
  const list = $("notices");
  const words = [item.title, item.body].filter((w) => typeof w === "string" && w).join(": ");
  const line = element("li", "notice-line", words || NOTICE_WORDS[item.event] || "Your assistant sent a notice.");
  line.dataset.event = String(item.event || "");
  line.dataset.noticeId = item.id;
  list.prepend(line);
  while (list.children.length > NOTICES_MAX) list.lastElementChild.remove();
  list.hidden = false;
}

function setLinkState(word) {
  const labels = { live: "Connected", polling: "Connected", reconnecting: "Reconnecting…", offline: "Offline" };
  const state = $("link-state");
  state.hidden = !word;
  state.textContent = labels[word] || "";
  state.dataset.state = word || "";
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function textOf(value) {
  return typeof value === "string" ? value : "";
}

function showLine(box, slot, value) {
  slot.textContent = textOf(value);
  box.hidden = !textOf(value);
}

function fillFields(list, fields) {
  list.replaceChildren();
  for (const { label, value } of fields) {
    list.append(element("dt", "", label), element("dd", "", value));
  }
}

function spaced(code) {
  return code.length === 6 ? `${code.slice(0, 3)} ${code.slice(3)}` : code;
}

function clock(iso) {
  const when = new Date(iso);
  return Number.isNaN(when.getTime()) ? "" : when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// -- start -------------------------------------------------------------------------------------------------

async function main() {
  readFragment();
  if (!window.isSecureContext || !window.crypto || !crypto.subtle) {
    // Browsers keep WebCrypto (and service workers and push) from pages on plain http.
    notify("Open this page over https:// (or on localhost): on plain http this browser cannot keep a key.");
    show("welcome");
    return;
  }
  registerServiceWorker();
  config = await loadConfig();
  try {
    device = await loadDevice();
  } catch {
    device = null;
    notify("This browser keeps no data for this page (private mode?): pairing needs storage.");
  }
  if (pairing) showPairForm();
  else if (!device) show("welcome");
  else if (device.status === "awaiting_consent") showComparison();
  else startHome();
}

/** The pairing code rides in the fragment so no server log sees it; read it, then wipe it from the
 * address bar and the history. */
function readFragment() {
  if (!location.hash) return;
  const values = new URLSearchParams(location.hash.slice(1));
  history.replaceState(null, "", location.pathname + location.search);
  const code = values.get("pair");
  if (code) pairing = { code, alg: values.get("alg") };
  const signIn = values.get("console");
  if (signIn && /^[a-z0-9-]+\.[0-9a-f]{16}$/.test(signIn)) consoleSignIn = signIn.split(".")[1];
}

/** The console's QR code asks this phone to sign its person in: open the console_login approval, which
 * then comes as a card like any other, with the code the console shows. */
async function askConsoleSignIn() {
  const signIn = consoleSignIn;
  consoleSignIn = null;
  if (!signIn) return;
  if (!device || device.status !== "active") {
    notify("Pair this browser first: then scan the console's code again to sign in.");
    return;
  }
  const reply = await request("POST", `/v1/console/sign-ins/${signIn}/ask`, { token: device.token });
  if (reply.ok) {
    // Until its card arrives: the card says the same and more (it may be here already, by the link).
    if (![...approvalCards.values()].some((entry) => entry.kind === "console_login")) notify(SIGN_IN_NOTICE);
    wake();
  } else {
    notify(errorMessage(reply, "The console sign-in could not be opened; reload the console and scan again."));
  }
}

async function loadConfig() {
  const reply = await request("GET", "config.json", { timeoutMs: 5000 });
  return reply.ok && reply.body ? reply.body : { vapid_public_key: null };
}

function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.register("sw.js", { scope: "./" }).catch(() => {});
  navigator.serviceWorker.addEventListener("message", (event) => {
    if (event.data && event.data.type === "push") wake();
  });
}

// -- pairing -----------------------------------------------------------------------------------------------

function defaults() {
  if (platform === "android") return { name: "Android phone", device_id: "android-phone", kind: "phone" };
  if (platform === "ios") {
    const tablet = /ipad/i.test(navigator.userAgent) || /macintosh/i.test(navigator.userAgent);
    return tablet ? { name: "iPad", device_id: "ipad", kind: "tablet" } : { name: "iPhone", device_id: "iphone", kind: "phone" };
  }
  return { name: "Browser", device_id: "browser", kind: "browser" };
}

function showPairForm() {
  const initial = defaults();
  $("comparison-code").textContent = ""; // never show an earlier pairing's code

  $("pair-name").value = initial.name;
  $("pair-id").value = initial.device_id;
  $("pair-kind").value = initial.kind;
  const paired = Boolean(device && device.status === "active");
  if (paired) notify(`This browser is paired as ${device.name}. Pairing again replaces it on this browser.`);
  $("pair-keep").hidden = !paired;
  show("pair");
  $("pair-name").focus();
}

function pairError(text) {
  const error = $("pair-error");
  error.textContent = text || "";
  error.hidden = !text;
}

function askNotifications() {
  if (!config.vapid_public_key || !("Notification" in window)) return Promise.resolve("unavailable");
  if (Notification.permission !== "default") return Promise.resolve(Notification.permission);
  return Notification.requestPermission().catch(() => "denied");
}

function within(promise, ms) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timed out")), ms))]);
}

/** The pair body's push target, or null where this browser offers no Web Push (or the person said no). */
async function webPushTarget(permission) {
  if (permission !== "granted" || !("serviceWorker" in navigator) || !("PushManager" in window)) return null;
  try {
    const registration = await within(navigator.serviceWorker.ready, 5000);
    const old = await registration.pushManager.getSubscription();
    if (old) await old.unsubscribe();
    const subscription = await within(
      registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: fromBase64Url(config.vapid_public_key),
      }),
      PUSH_SUBSCRIBE_MS,
    );
    return { kind: "webpush", token: JSON.stringify(subscription) };
  } catch {
    return null;
  }
}

async function onPair(event) {
  event.preventDefault();
  // The question must come from the tap itself: browsers only ask the person from a gesture.
  const permission = askNotifications();
  const form = $("pair-form");
  const name = $("pair-name").value.trim();
  const deviceId = $("pair-id").value.trim();
  if (!name) return pairError("Give this device a name.");
  if (!/^[a-z0-9]+(-[a-z0-9]+)*$/.test(deviceId) || deviceId.length > 24) {
    return pairError("The device id is lower-case letters and digits, words joined by “-”, at most 24.");
  }
  pairError("");
  const button = $("pair-button");
  button.disabled = true;
  button.textContent = "Pairing…";
  try {
    const { alg, keys } = await newDeviceKey(pairing.alg);
    const body = {
      code: pairing.code,
      device_id: deviceId,
      name,
      kind: $("pair-kind").value,
      alg,
      public_key: await publicKeyBase64(keys),
      capabilities: MANIFEST,
      app: "browser", // its key stays with this origin: a moved gateway asks for a new pairing
    };
    const push = await webPushTarget(await permission);
    if (push) body.push = push;
    const reply = await request("POST", "/v1/pair", { body });
    if (!reply.ok) {
      pairError(reply.offline ? "No connection to the gateway; try again." : errorMessage(reply, "The gateway refused the pairing."));
      return;
    }
    stopHome();
    clearCards();
    device = {
      device_id: reply.body.device_id,
      name,
      kind: body.kind,
      alg,
      keys,
      public_key: body.public_key,
      push: push ? push.kind : null,
      token: reply.body.device_token,
      pairing_id: reply.body.pairing_id,
      comparison_code: reply.body.comparison_code,
      status: "awaiting_consent",
      claimed_at: Date.now(),
    };
    await forgetDevice();
    await saveDevice(device);
    pairing = null;
    form.reset();
    notify("");
    showComparison();
  } catch (error) {
    pairError(`Pairing failed in this browser: ${error && error.message ? error.message : error}`);
  } finally {
    button.disabled = false;
    button.textContent = "Pair this phone";
  }
}

function showComparison() {
  const code = device.comparison_code;
  const shown = $("comparison-code");
  shown.textContent = spaced(code);
  shown.dataset.code = code;
  shown.setAttribute("aria-label", `Comparison code ${code.split("").join(" ")}`);
  show("compare");
  waitForConsent(device);
}

async function waitForConsent(waiting) {
  while (device === waiting && waiting.status === "awaiting_consent") {
    const reply = await request("POST", "/v1/device/heartbeat", { token: waiting.token });
    if (device !== waiting) return;
    if (reply.ok) {
      waiting.status = "active";
      await saveDevice(waiting);
      startHome();
      return;
    }
    const expired = Date.now() - waiting.claimed_at > PAIRING_MINUTES * 60 * 1000;
    if (reply.status === 401 || expired) {
      await leave("The pairing was declined or has expired. Start a new pairing and scan its code.");
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, CONSENT_POLL_MS));
  }
}

function clearCards() {
  for (const cards of [invocationCards, approvalCards]) {
    for (const entry of cards.values()) clearTimeout(entry.timer);
    cards.clear();
  }
  answered.clear();
  $("cards").replaceChildren();
  $("recent").replaceChildren();
  $("recent-section").hidden = true;
}

async function leave(message) {
  stopHome();
  device = null;
  await forgetDevice();
  clearCards();
  setLinkState(null);
  notify(message);
  show("welcome");
}

// -- home: the link, the inbox and the cards -----------------------------------------------------------------

function startHome() {
  show("home");
  notify("");
  showAbout();
  offerPasskey();
  updateEmpty();
  setLinkState(navigator.onLine === false ? "offline" : "reconnecting");
  link = new DeviceLink(device, {
    state: setLinkState,
    connected: () => refresh(),
    pending: addInvocations,
    invoke: addInvocation,
    approval: addApproval,
    notice: showNotice,
    gone: () => leave("This phone was removed from your gateway. To use it again, start a new pairing."),
  });
  link.start();
  inbox = new Inbox(device);
  inbox.run();
  flushAnswers();
  askConsoleSignIn();
}

function showAbout() {
  fillFields($("about"), [
    { label: "Name", value: device.name },
    { label: "Device id", value: device.device_id },
    { label: "Key", value: device.alg === "ed25519" ? "Ed25519, kept in this browser" : "P-256, kept in this browser" },
    { label: "Notifications", value: device.push ? "Web Push" : "Off (open this page to see requests)" },
    { label: "Passkey", value: device.passkey ? "Set up: answers need your face, fingerprint or screen lock" : "None" },
  ]);
}

/** Right after pairing, and whenever this device has none: offer the passkey, or say why it cannot. */
async function offerPasskey() {
  const offer = $("passkey-offer");
  offer.hidden = Boolean(device.passkey);
  $("passkey-again").hidden = !device.passkey;
  if (device.passkey) return;
  const support = await passkeySupport();
  const button = $("passkey-button");
  button.hidden = support !== "yes";
  $("passkey-state").textContent = support === "yes" ? "" : support;
}

/** From "This device": a new passkey for this device (after the old one was deleted from the phone, or a
 * new phone lock), kept beside the old one at the gateway. */
async function onSetUpPasskeyAgain() {
  const button = $("passkey-again");
  const state = $("passkey-again-state");
  button.disabled = true;
  state.textContent = "Waiting for your face, fingerprint or screen lock…";
  try {
    const holder = device;
    holder.passkey = await registerPasskey(holder);
    await saveDevice(holder);
    state.textContent = "A new passkey is set up; your answers now use it.";
  } catch (error) {
    state.textContent =
      error.message.includes("InvalidStateError")
        ? "This phone already holds this device's passkey; there is nothing to set up again."
        : error.message;
  } finally {
    button.disabled = false;
  }
}

async function onSetUpPasskey() {
  const button = $("passkey-button");
  const state = $("passkey-state");
  button.disabled = true;
  state.textContent = "Waiting for your face, fingerprint or screen lock…";
  try {
    const holder = device;
    const credentialId = await registerPasskey(holder);
    holder.passkey = credentialId;
    await saveDevice(holder);
    state.textContent = "";
    $("passkey-offer").hidden = true;
    $("passkey-again").hidden = false;
    remember("Passkey set up: your answers now need your face, fingerprint or screen lock", "done");
    showAbout();
  } catch (error) {
    state.textContent = error.message;
  } finally {
    button.disabled = false;
  }
}

function stopHome() {
  if (link) link.stop();
  if (inbox) inbox.stop();
  link = null;
  inbox = null;
}

/** Something may be waiting (the network came back, the page became visible, a push arrived). */
function wake() {
  if (!device || device.status !== "active") return;
  if (link) link.nudge();
  refresh();
}

async function refresh() {
  if (!device || device.status !== "active") return;
  if (inbox) inbox.kick();
  flushAnswers();
  loadMandates();
  const reply = await request("GET", "/v1/device/invocations", { token: device.token });
  if (reply.ok && reply.body) addInvocations(reply.body.invocations || []);
}

/** The person's live standing mandates, each with Revoke: a yes signed once, taken back here at once. */
async function loadMandates() {
  const reply = await request("GET", "/v1/mandates", { token: device.token });
  if (!reply.ok || !reply.body) return;
  const live = (reply.body.mandates || []).filter((m) => m.status === "active");
  const list = $("mandates");
  list.replaceChildren();
  for (const mandate of live) list.append(mandateItem(mandate));
  $("mandates-section").hidden = live.length === 0;
}

function mandateItem(mandate) {
  const item = element("li", "recent-item mandate");
  item.dataset.id = mandate.mandate_id;
  const daily = mandate.per_day ? `, ${mandate.used_today} of ${mandate.per_day} today` : "";
  const until = new Date(mandate.expires_at).toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
  const words =
    `${mandate.agent_id || "Any of your agents"}: ${mandate.tools.join(", ")} (${mandate.purpose}). ` +
    `Used ${mandate.used} of ${mandate.max_calls}${daily}; until ${until}.`;
  item.append(element("span", "recent-text", words));
  const revoke = element("button", "button danger revoke", "Revoke");
  revoke.type = "button";
  revoke.addEventListener("click", async () => {
    revoke.disabled = true;
    const path = `/v1/mandates/${encodeURIComponent(mandate.mandate_id)}`;
    const reply = await request("DELETE", path, { token: device.token });
    if (reply.ok) {
      item.remove();
      $("mandates-section").hidden = $("mandates").children.length === 0;
      remember(`Standing permission revoked: ${mandate.purpose}`, "done");
    } else {
      revoke.disabled = false;
      notify(errorMessage(reply, "The permission could not be revoked; try again."));
    }
  });
  item.append(revoke);
  return item;
}

function updateEmpty() {
  $("empty").hidden = invocationCards.size + approvalCards.size > 0;
}

function remember(text, outcome, href) {
  const item = element("li", `recent-item ${outcome}`);
  item.append(element("span", "recent-time", new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })));
  item.append(element("span", "recent-text", text));
  if (href) {
    const again = element("a", "recent-link", "Open again");
    again.href = href;
    again.rel = "noopener noreferrer";
    if (/^https?:/i.test(href)) again.target = "_blank";
    item.append(again);
  }
  const list = $("recent");
  $("recent-section").hidden = false;
  list.prepend(item);
  while (list.children.length > RECENT_MAX) list.lastElementChild.remove();
}

function cardFrom(templateId) {
  return document.getElementById(templateId).content.firstElementChild.cloneNode(true);
}

function showBinding(card, code) {
  const box = card.querySelector(".binding");
  box.hidden = !code;
  if (code) {
    card.querySelector(".binding-code").textContent = code;
    box.setAttribute("aria-label", `Code ${code.split("").join(" ")}`);
  }
}

function cardError(card, text) {
  const error = card.querySelector(".card-error");
  error.textContent = text || "";
  error.hidden = !text;
}

function removeCard(cards, id) {
  const entry = cards.get(id);
  if (!entry) return;
  clearTimeout(entry.timer);
  entry.card.remove();
  cards.delete(id);
  updateEmpty();
}

function expireAt(cards, id, iso, what) {
  const left = new Date(iso).getTime() - Date.now();
  if (!(left > 0)) return 0;
  return setTimeout(() => {
    if (cards.has(id)) {
      removeCard(cards, id);
      remember(`${what}: no answer in time`, "expired");
    }
  }, Math.min(left, 2 ** 31 - 1));
}

// -- invocations -----------------------------------------------------------------------------------------------

function kindLine(invocation) {
  if (invocation.capability === "phone_actions") return "Phone action";
  if (invocation.capability === "sms_send") return "Text message";
  return `On ${device.name}`;
}

/** A fetch lists work to take, not every open call: a call already handed over (by the link, or by an
 * earlier poll) is left out until redelivery_seconds have passed. So a card is never taken away because a
 * fetch left its call out; it goes when the person answers, when its call expires, or with the device. */
function addInvocations(list) {
  for (const invocation of list) addInvocation(invocation);
}

function addInvocation(invocation) {
  if (!device || invocationCards.has(invocation.id) || answered.has(invocation.id)) return;
  const chosen = plan(invocation, platform);
  if (chosen.how === "cannot") {
    answer(invocation.id, "failed", chosen.reason);
    remember(`${chosen.title}: not possible here. ${chosen.reason}`, "failed");
    return;
  }
  const card = cardFrom("invocation-card");
  card.dataset.id = invocation.id;
  card.dataset.capability = invocation.capability;
  card.querySelector(".card-kind").textContent = kindLine(invocation);
  card.querySelector(".card-title").textContent = chosen.title;
  const summary = card.querySelector(".card-summary");
  summary.textContent = invocation.summary || "";
  summary.hidden = !invocation.summary;
  fillFields(card.querySelector(".fields"), details(invocation));
  showBinding(card, invocation.binding_code);
  const confirm = card.querySelector(".confirm");
  const decline = card.querySelector(".decline");
  if (chosen.how === "compose") confirm.textContent = "Open in Messages";
  confirm.addEventListener("click", () => onConfirm(invocation, chosen, card));
  decline.addEventListener("click", () => {
    answer(invocation.id, "declined", null);
    remember(`${chosen.title}: declined`, "declined");
  });
  $("cards").prepend(card);
  const entry = { card, title: chosen.title, timer: 0 };
  invocationCards.set(invocation.id, entry);
  entry.timer = expireAt(invocationCards, invocation.id, invocation.expires_at, chosen.title);
  updateEmpty();
}

function openLink(href, inTab) {
  if (inTab) {
    window.open(href, "_blank", "noopener,noreferrer");
    return;
  }
  // sms:, tel: and mailto: go to the platform's own app; the page stays where it is.
  const anchor = document.createElement("a");
  anchor.href = href;
  anchor.rel = "noopener noreferrer";
  anchor.click();
}

function offerFile(file) {
  const url = URL.createObjectURL(new Blob([file.text], { type: file.type }));
  const anchor = document.createElement("a");
  anchor.href = url;
  anchor.download = file.name;
  anchor.click();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// Runs inside the tap, before any await: browsers open links and apps only from a person's gesture.
function onConfirm(invocation, chosen, card) {
  if (chosen.how === "open") {
    openLink(chosen.href, chosen.tab);
    answer(invocation.id, "done", chosen.done);
    remember(`${chosen.title}: done`, "done", chosen.href);
  } else if (chosen.how === "download") {
    offerFile(chosen.file);
    answer(invocation.id, "done", chosen.done);
    remember(`${chosen.title}: calendar file offered`, "done");
  } else if (chosen.how === "compose") {
    openLink(chosen.href, false);
    askWhetherSent(invocation, chosen, card);
  } else {
    answer(invocation.id, "done", "The person confirmed it.");
    remember(`${chosen.title}: confirmed`, "done");
  }
}

function askWhetherSent(invocation, chosen, card) {
  card.classList.add("asking");
  card.querySelector(".card-kind").textContent = "Did you send it?";
  const actions = card.querySelector(".actions");
  const sent = element("button", "button primary sent", "Sent");
  sent.type = "button";
  const notSent = element("button", "button not-sent", "Not sent");
  notSent.type = "button";
  const again = element("a", "button", "Open the message again");
  again.href = chosen.href;
  sent.addEventListener("click", () => {
    answer(invocation.id, "sent", "The person says they sent it.");
    remember(`${chosen.title}: sent`, "done");
  });
  notSent.addEventListener("click", () => {
    answer(invocation.id, "cancelled", "The person did not send it.");
    remember(`${chosen.title}: not sent`, "declined");
  });
  actions.replaceChildren(sent, notSent, again);
  sent.focus();
}

async function answer(id, status, message) {
  answered.add(id);
  removeCard(invocationCards, id);
  await queueAnswer({ id, status, message });
  flushAnswers();
}

let flushing = null;
let flushAgain = false;
let flushRetry = 0;

/** Deliver every answer the gateway has not acknowledged; kept in IndexedDB until it has, so an answer
 * given offline (or just before the page closed) still arrives. */
function flushAnswers() {
  if (!device || device.status !== "active") return null;
  if (flushing) {
    flushAgain = true; // an answer queued while a round was under way: go round once more
    return flushing;
  }
  const token = device.token;
  flushAgain = false;
  flushing = (async () => {
    for (const queued of await queuedAnswers()) {
      answered.add(queued.id);
      const body = { status: queued.status };
      if (queued.message) body.message = queued.message;
      const path = `/v1/device/invocations/${encodeURIComponent(queued.id)}/result`;
      const reply = await request("POST", path, { token, body });
      if (reply.offline || reply.status >= 500 || reply.status === 429) {
        clearTimeout(flushRetry);
        flushRetry = setTimeout(flushAnswers, 5000);
        return;
      }
      if (reply.status === 401) return;
      if (reply.status === 410) remember("An answer arrived after its request had expired", "expired");
      await dropAnswer(queued.id); // answered, answered before, expired or unknown: settled either way
    }
  })().finally(() => {
    flushing = null;
    if (flushAgain) flushAnswers();
  });
  return flushing;
}

// -- approvals -------------------------------------------------------------------------------------------------

class Inbox {
  constructor(owner) {
    this.device = owner;
    this.stopped = false;
    this.controller = null;
    this.wakeUp = null;
  }

  stop() {
    this.stopped = true;
    this.kick();
  }

  /** Look again now. */
  kick() {
    if (this.controller) this.controller.abort();
    if (this.wakeUp) this.wakeUp();
  }

  async run() {
    let failures = 0;
    while (!this.stopped) {
      const wait = approvalCards.size ? 0 : INBOX_WAIT_SECONDS;
      const started = performance.now();
      this.controller = new AbortController();
      const reply = await request("GET", `/v1/inbox?wait=${wait}`, {
        token: this.device.token,
        timeoutMs: (wait + 15) * 1000,
        signal: this.controller.signal,
      });
      const kicked = this.controller.signal.aborted;
      this.controller = null;
      if (this.stopped) return;
      if (reply.status === 401) {
        leave("This phone was removed from your gateway. To use it again, start a new pairing.");
        return;
      }
      if (reply.ok && reply.body) {
        failures = 0;
        reconcileApprovals(reply.body.approvals || [], started);
        if (approvalCards.size) await this.pause(INBOX_BUSY_MS);
      } else if (!kicked) {
        failures += 1;
        await this.pause(Math.min(30000, 1000 * 2 ** Math.min(failures, 5)));
      }
    }
  }

  pause(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        self.wakeUp = null;
        resolve();
      }
      this.wakeUp = done;
    });
  }
}

function reconcileApprovals(list, started) {
  const present = new Set(list.map((a) => a.id));
  for (const [id, entry] of approvalCards) {
    if (!present.has(id) && entry.added < started && !entry.busy) {
      removeCard(approvalCards, id);
      remember(`${entry.title}: no longer waiting`, "expired");
    }
  }
  for (const approval of list) addApproval(approval);
}

const CARD_TITLES = new Map([["device_pair", "New device"], ["grant", "A device asks for a grant"]]);

function addApproval(approval) {
  if (approvalCards.has(approval.id)) return;
  // The sign-in's own card says the same and more: the notice that announced it goes once it is here.
  if (approval.kind === "console_login" && $("notice").textContent === SIGN_IN_NOTICE) notify("");
  const card = cardFrom("approval-card");
  card.dataset.id = approval.id;
  const shown = approval.preview || {};
  const title = CARD_TITLES.get(approval.kind) || textOf(shown.title) || humanize(approval.kind);
  card.querySelector(".card-title").textContent = title;
  card.querySelector(".card-summary").textContent = approval.prompt;
  showLine(card.querySelector(".card-description"), card.querySelector(".card-description"), shown.description);
  showLine(card.querySelector(".card-why"), card.querySelector(".why-text"), shown.why);
  const preview = Array.isArray(shown.fields) ? shown.fields : [];
  fillFields(card.querySelector(".fields"), preview.map((f) => ({ label: String(f.label), value: String(f.value) })));
  showBinding(card, approval.binding_code);
  const until = clock(approval.expires_at);
  card.querySelector(".card-expiry").textContent = until ? `answer by ${until}` : "";
  // "This wasn't me" pauses the agent that asked: only a card an agent's call waits on offers it.
  const agentAsks = approval.agent_asks === true;
  card.querySelector(".not-me").hidden = !agentAsks;
  card.querySelector(".not-me-hint").hidden = !agentAsks;
  const entry = { card, title, kind: approval.kind, added: performance.now(), timer: 0, busy: false };
  card.querySelector(".confirm").addEventListener("click", () => decide(approval, entry, "approved", false));
  card.querySelector(".decline").addEventListener("click", () => decide(approval, entry, "denied", false));
  card.querySelector(".not-me").addEventListener("click", () => decide(approval, entry, "denied", true));
  $("cards").prepend(card);
  approvalCards.set(approval.id, entry);
  entry.timer = expireAt(approvalCards, approval.id, approval.expires_at, entry.title);
  updateEmpty();
}

async function decide(approval, entry, decision, notMe) {
  const { card } = entry;
  const buttons = card.querySelectorAll("button");
  for (const button of buttons) button.disabled = true;
  entry.busy = true;
  cardError(card, "");
  try {
    let text;
    try {
      if ((await actionSha256(approval)) !== approval.sign.action_sha256) {
        throw new Error("what this card shows is not what the signature would cover");
      }
      text = signedText(approval, decision);
    } catch (error) {
      cardError(card, `This request cannot be signed safely (${error.message}); it was not answered.`);
      return;
    }
    const body = { decision, device_id: device.device_id, signature: await signText(device, text) };
    if (notMe) body.not_me = true;
    try {
      const passkey = await assertDecision(device, text);
      if (passkey) body.passkey = passkey;
    } catch (error) {
      cardError(card, error.message);
      return;
    }
    const reply = await request("POST", `/v1/approvals/${encodeURIComponent(approval.id)}`, { token: device.token, body });
    if (reply.ok) {
      removeCard(approvalCards, approval.id);
      if (approval.kind === "mandate") loadMandates();
      const said = notMe ? "declined: this wasn't me (the assistant is paused)" : decision === "approved" ? "confirmed" : "declined";
      remember(`${entry.title}: ${said}`, decision === "approved" ? "done" : "declined");
      if (inbox) inbox.kick();
      return;
    }
    if ([404, 409, 410].includes(reply.status)) {
      removeCard(approvalCards, approval.id);
      remember(`${entry.title}: ${errorMessage(reply, "no longer waiting")}`, "expired");
      return;
    }
    const refusal = reply.body && reply.body.error ? reply.body.error.code : "";
    if (refusal === "passkey_refused" && !device.passkey) {
      cardError(card, `${errorMessage(reply, "This answer needs your passkey.")} This browser has none yet: set one up at the top of this page, then answer again.`);
      offerPasskey();
      return;
    }
    cardError(card, reply.offline ? "No connection: your answer was not sent. Try again." : errorMessage(reply, "The gateway refused the answer."));
  } finally {
    entry.busy = false;
    for (const button of buttons) button.disabled = false;
  }
}

// -- wiring ------------------------------------------------------------------------------------------------------

$("pair-form").addEventListener("submit", onPair);
$("passkey-button").addEventListener("click", onSetUpPasskey);
$("passkey-again").addEventListener("click", onSetUpPasskeyAgain);
$("pair-keep").addEventListener("click", () => {
  pairing = null;
  if (!device || device.status !== "active") return;
  if (link) {
    notify("");
    show("home");
  } else {
    startHome();
  }
});
$("compare-cancel").addEventListener("click", () => leave("Pairing cancelled."));
$("forget").addEventListener("click", (event) => {
  const button = event.currentTarget;
  if (button.dataset.armed) {
    leave("This browser forgot the device. Remove it from your gateway's device list too.");
    delete button.dataset.armed;
    button.textContent = "Forget this device";
  } else {
    button.dataset.armed = "yes";
    button.textContent = "Tap again to forget";
  }
});
window.addEventListener("online", () => {
  setLinkState("reconnecting");
  wake();
});
window.addEventListener("offline", () => setLinkState("offline"));
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") wake();
});
window.addEventListener("hashchange", () => {
  readFragment();
  if (pairing) showPairForm();
  else if (consoleSignIn) askConsoleSignIn();
});

main();
