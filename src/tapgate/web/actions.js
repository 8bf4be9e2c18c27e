// What this browser does for each invocation, decided from the capability and, for phone_action, from
// the action (the catalogue's 16, tapgate/domain/phone_action_catalogue.json). A browser acts only
// through the platform's own links: sms:, tel:, mailto:, map links and a calendar file. Where no link
// can do the job, the plan is "cannot" and the app answers failed with the reason, at once.
//
// A plan is one of:
//   {how: "open", href, tab, title, done}     Confirm opens href (tab: a new tab for http(s)), answers done
//   {how: "download", file, title, done}      Confirm offers file {name, type, text}, answers done
//   {how: "compose", href, title}             sms_send: Confirm opens the draft, the person says sent or not
//   {how: "ask", title}                       a custom capability: Confirm is done, Decline is declined
//   {how: "cannot", title, reason}            answered failed with reason, never shown as a question

const TITLES = {
  alarm: "Set an alarm",
  timer: "Start a timer",
  calendar_event: "Add a calendar event",
  sms_draft: "Write a text message",
  email_draft: "Write an e-mail",
  dial: "Call a number",
  navigate: "Start a route",
  add_stop: "Add a stop to the route",
  search_nearby: "Search nearby",
  stop_navigation: "End the route",
  open_app: "Open an app",
  open_url: "Open a web page",
  media: "Control what is playing",
  torch: "Switch the torch",
  settings_panel: "Open a setting",
  automation_intent: "Run an automation",
};

// The actions no link can carry out, and what the agent is told.
export const CANNOT = {
  alarm: "A web app cannot set alarms: browsers give web pages no way into the clock app.",
  timer: "A web app cannot start timers: browsers give web pages no way into the clock app.",
  stop_navigation: "A web app cannot end a route in the map app.",
  open_app: "A web app cannot open other apps by name.",
  media: "A web app cannot control what other apps are playing.",
  torch: "A web app cannot switch the torch.",
  settings_panel: "A web app cannot open the phone's settings.",
  automation_intent: "A web app cannot run automations in other apps.",
};
const CANNOT_SEARCH_ROUTE = "A map link cannot search along the running route.";

const GOOGLE_MODES = { drive: "driving", walk: "walking", bicycle: "bicycling", transit: "transit" };
const APPLE_MODES = { drive: "d", walk: "w", transit: "r" };

/** "android", "ios" or "desktop", from what the browser says about itself. */
export function detectPlatform(nav = navigator) {
  const ua = nav.userAgent || "";
  if (/android/i.test(ua)) return "android";
  // iPadOS asks for desktop pages and says Macintosh; only its touch screen tells it apart.
  if (/iphone|ipad|ipod/i.test(ua) || (/macintosh/i.test(ua) && nav.maxTouchPoints > 1)) return "ios";
  return "desktop";
}

/** The plan for `invocation` ({capability, arguments, id}) on `platform`. */
export function plan(invocation, platform) {
  const args = invocation.arguments || {};
  if (invocation.capability === "sms_send") {
    return { how: "compose", title: "Send a text message", href: smsHref([args.to], args.body, platform) };
  }
  if (invocation.capability !== "phone_actions") {
    return { how: "ask", title: humanize(invocation.capability) };
  }
  const action = args.action;
  const title = TITLES[action] || humanize(String(action));
  if (CANNOT[action]) return { how: "cannot", title, reason: CANNOT[action] };
  switch (action) {
    case "sms_draft":
      return open(title, smsHref(args.to || [], args.body, platform), "The messaging app opened with the draft; the person sends it.");
    case "email_draft":
      return open(title, mailtoHref(args), "The mail app opened with the draft; the person sends it.");
    case "dial":
      return open(title, telHref(args.number), "The dialer opened with the number; the person places the call.");
    case "navigate":
      return open(title, routeHref(args.destination, args.stops || [], args.mode || "drive", platform), "The map opened with the route.");
    case "add_stop":
      // No map app adds to a running route: plan again from here, through the stop, to the destination.
      return open(title, routeHref(args.destination, [args.stop], args.mode || "drive", platform), "The map opened with a new route through the stop to the destination.");
    case "search_nearby":
      if (args.near === "route") return { how: "cannot", title, reason: CANNOT_SEARCH_ROUTE };
      return open(title, searchHref(args.query, platform), "The map opened with the search around the person.");
    case "open_url":
      if (!/^https?:\/\/./i.test(args.url || "")) return { how: "cannot", title, reason: "The address is not a web address." };
      return open(title, args.url, "The page opened in the browser.");
    case "calendar_event":
      return {
        how: "download",
        title,
        file: { name: "event.ics", type: "text/calendar", text: icsEvent(invocation.id, args, new Date()) },
        done: "The event was offered as a calendar file; the person saves it.",
      };
    default:
      return { how: "cannot", title, reason: `This app does not know the action ${action}.` };
  }
}

function open(title, href, done) {
  return { how: "open", title, href, tab: /^https?:/i.test(href), done };
}

export function humanize(name) {
  const words = String(name).replace(/_/g, " ").trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function isPhoneNumber(text) {
  return /^[\d\s+().\-/#*]+$/.test(text) && /\d/.test(text);
}

function recipient(text) {
  const value = String(text).trim();
  return isPhoneNumber(value) ? value.replace(/[^\d+*#]/g, "").replace(/#/g, "%23") : encodeURIComponent(value);
}

export function smsHref(recipients, body, platform) {
  const to = recipients.filter((r) => r && String(r).trim()).map(recipient);
  const text = body ? encodeURIComponent(body) : "";
  if (platform === "ios") {
    // iOS reads "&body=" after the number, and several recipients only through /open?addresses=.
    if (to.length > 1) return `sms:/open?addresses=${to.join(",")}${text ? `&body=${text}` : ""}`;
    return `sms:${to.join(",")}${text ? `&body=${text}` : ""}`;
  }
  return `sms:${to.join(",")}${text ? `?body=${text}` : ""}`;
}

function address(text) {
  return encodeURIComponent(String(text).trim()).replace(/%40/g, "@");
}

export function mailtoHref(args) {
  const query = [];
  if (args.cc && args.cc.length) query.push(`cc=${args.cc.map(address).join(",")}`);
  if (args.subject) query.push(`subject=${encodeURIComponent(args.subject)}`);
  // RFC 6068: line breaks in a mailto body are CRLF.
  if (args.body) query.push(`body=${encodeURIComponent(args.body.replace(/\r?\n/g, "\r\n"))}`);
  const to = (args.to || []).map(address).join(",");
  return `mailto:${to}${query.length ? `?${query.join("&")}` : ""}`;
}

export function telHref(number) {
  return `tel:${String(number).replace(/[^\d+*#]/g, "").replace(/#/g, "%23")}`;
}

/** A place as the map apps read it: "lat,lon" when it has coordinates, else its query or name. */
export function placeText(place) {
  if (!place || typeof place !== "object") return String(place || "");
  if (typeof place.lat === "number" && typeof place.lon === "number") return `${place.lat},${place.lon}`;
  return String(place.query || place.name || "").trim();
}

export function routeHref(destination, stops, mode, platform) {
  if (platform === "ios" && stops.length === 0 && APPLE_MODES[mode]) {
    return `https://maps.apple.com/?daddr=${encodeURIComponent(placeText(destination))}&dirflg=${APPLE_MODES[mode]}`;
  }
  // Google's Maps URLs open the Maps app where it is installed and the web map everywhere else.
  const query = new URLSearchParams({ api: "1", destination: placeText(destination), travelmode: GOOGLE_MODES[mode] || "driving" });
  if (stops.length) query.set("waypoints", stops.map(placeText).join("|"));
  query.set("dir_action", "navigate");
  return `https://www.google.com/maps/dir/?${query}`;
}

export function searchHref(text, platform) {
  if (platform === "ios") return `https://maps.apple.com/?q=${encodeURIComponent(text)}`;
  return `https://www.google.com/maps/search/?${new URLSearchParams({ api: "1", query: text })}`;
}

// -- the calendar file (RFC 5545) ------------------------------------------------------------------------

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})$/;

function pad(n) {
  return String(n).padStart(2, "0");
}

function dayAfter(y, m, d) {
  const next = new Date(Date.UTC(Number(y), Number(m) - 1, Number(d) + 1));
  return `${next.getUTCFullYear()}${pad(next.getUTCMonth() + 1)}${pad(next.getUTCDate())}`;
}

function escapeText(text) {
  return String(text).replace(/\\/g, "\\\\").replace(/;/g, "\\;").replace(/,/g, "\\,").replace(/\r?\n/g, "\\n");
}

/** Fold a content line at 75 octets of UTF-8, never inside a character. */
function fold(line) {
  const encoder = new TextEncoder();
  const out = [];
  let current = "";
  let size = 0;
  for (const ch of line) {
    const width = encoder.encode(ch).length;
    if (size + width > (out.length ? 74 : 75)) {
      out.push(current);
      current = "";
      size = 0;
    }
    current += ch;
    size += width;
  }
  out.push(current);
  return out.join("\r\n ");
}

/** A VCALENDAR with one VEVENT for calendar_event's fields. A date is an all-day event; a date and time
 * is in the phone's own time zone (floating), as the person said it. */
export function icsEvent(uid, args, now) {
  const stamp = `${now.getUTCFullYear()}${pad(now.getUTCMonth() + 1)}${pad(now.getUTCDate())}T${pad(now.getUTCHours())}${pad(now.getUTCMinutes())}${pad(now.getUTCSeconds())}Z`;
  const lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//tapgate//browser phone app//EN", "BEGIN:VEVENT"];
  lines.push(`UID:${escapeText(uid)}@tapgate`, `DTSTAMP:${stamp}`);
  const day = DATE.exec(args.start || "");
  const timed = DATE_TIME.exec(args.start || "");
  const endDay = DATE.exec(args.end || "") || DATE_TIME.exec(args.end || "");
  const endTimed = DATE_TIME.exec(args.end || "");
  if (day) {
    const [, y, m, d] = day;
    lines.push(`DTSTART;VALUE=DATE:${y}${m}${d}`);
    // An all-day event's end is the day after its last day.
    const last = endDay && `${endDay[1]}${endDay[2]}${endDay[3]}` >= `${y}${m}${d}` ? endDay : day;
    lines.push(`DTEND;VALUE=DATE:${dayAfter(last[1], last[2], last[3])}`);
  } else if (timed) {
    const [, y, m, d, hh, mm] = timed;
    const start = `${y}${m}${d}T${hh}${mm}00`;
    lines.push(`DTSTART:${start}`);
    const end = endTimed ? `${endTimed[1]}${endTimed[2]}${endTimed[3]}T${endTimed[4]}${endTimed[5]}00` : "";
    lines.push(end > start ? `DTEND:${end}` : "DURATION:PT1H");
  }
  lines.push(`SUMMARY:${escapeText(args.title || "Event")}`);
  if (args.location) lines.push(`LOCATION:${escapeText(args.location)}`);
  if (args.notes) lines.push(`DESCRIPTION:${escapeText(args.notes)}`);
  lines.push("END:VEVENT", "END:VCALENDAR");
  return `${lines.map(fold).join("\r\n")}\r\n`;
}

// -- what the card lists ---------------------------------------------------------------------------------

const LABELS = {
  time: "Time",
  days: "Repeats on",
  label: "Label",
  seconds: "Runs for",
  title: "Title",
  start: "Starts",
  end: "Ends",
  location: "Where",
  notes: "Notes",
  to: "To",
  cc: "Cc",
  subject: "Subject",
  body: "Message",
  number: "Number",
  destination: "Destination",
  stop: "Stop",
  stops: "On the way",
  mode: "Travel by",
  replace_route: "Replaces the running route",
  query: "Looking for",
  near: "Near",
  app: "App",
  url: "Address",
  command: "Command",
  on: "Switch",
  panel: "Setting",
  name: "Automation",
  values: "Inputs",
};

function duration(seconds) {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  return [h && `${h} h`, m && `${m} min`, s && `${s} s`].filter(Boolean).join(" ") || "0 s";
}

function shown(field, value) {
  if (field === "seconds" && typeof value === "number") return duration(value);
  if (field === "on" && typeof value === "boolean") return value ? "On" : "Off";
  if (field === "near") return value === "route" ? "Along the route" : "Around me";
  if (typeof value === "boolean") return value ? "Yes" : "No";
  if (Array.isArray(value)) return value.map((v) => (typeof v === "object" ? placeText(v) : String(v))).join(", ");
  if (value && typeof value === "object") {
    if ("lat" in value || "query" in value || "name" in value) return placeText(value);
    return Object.entries(value).map(([k, v]) => `${k}: ${v}`).join("; ");
  }
  return String(value);
}

/** The invocation's arguments as [{label, value}] for the card, in the order they came. */
export function details(invocation) {
  const args = invocation.arguments || {};
  if (invocation.capability === "sms_send") {
    return [
      { label: "To", value: String(args.to ?? "") },
      { label: "Message", value: String(args.body ?? "") },
    ];
  }
  const phone = invocation.capability === "phone_actions";
  return Object.entries(args)
    .filter(([key]) => !(phone && (key === "action" || key === "summary")))
    .map(([key, value]) => ({ label: (phone && LABELS[key]) || humanize(key), value: shown(key, value) }));
}
