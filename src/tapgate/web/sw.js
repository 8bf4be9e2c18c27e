// The service worker: keeps the app's files for a start without a network, shows a generic notification
// when a Web Push arrives (a push carries ids only, never what is asked: the app fetches that itself),
// and brings the app forward when the notification is tapped.

const CACHE = "tapgate-app-v1";
const SHELL = [
  "./",
  "index.html",
  "app.css",
  "app.js",
  "actions.js",
  "api.js",
  "keys.js",
  "link.js",
  "passkey.js",
  "signing.js",
  "store.js",
  "manifest.webmanifest",
  "icon-192.png",
  "icon-512.png",
];
const TITLE = "tapgate";
const BODY = "Something is waiting for you. Open tapgate to see it.";

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(SHELL))
      .catch(() => {})
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((n) => n !== CACHE).map((n) => caches.delete(n))))
      .then(() => self.clients.claim()),
  );
});

// The app's own files: the network first (so a fixed app arrives at once), the copy when offline. The
// API is never cached.
self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  const scope = new URL(self.registration.scope);
  if (event.request.method !== "GET" || url.origin !== scope.origin || !url.pathname.startsWith(scope.pathname)) return;
  if (url.pathname.endsWith("/config.json")) return;
  event.respondWith(
    fetch(event.request)
      .then((response) => {
        if (response.ok) {
          const copy = response.clone();
          caches.open(CACHE).then((cache) => cache.put(event.request, copy));
        }
        return response;
      })
      .catch(() => caches.match(event.request, { ignoreSearch: true }).then((hit) => hit || Response.error())),
  );
});

self.addEventListener("push", (event) => {
  event.waitUntil(
    (async () => {
      const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
      for (const client of windows) client.postMessage({ type: "push" });
      await self.registration.showNotification(TITLE, {
        body: BODY,
        tag: "tapgate",
        renotify: true,
        icon: "icon-192.png",
        badge: "icon-192.png",
      });
    })(),
  );
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(
    (async () => {
      const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
      const open = windows.find((client) => new URL(client.url).pathname.startsWith(new URL(self.registration.scope).pathname));
      if (open) {
        open.postMessage({ type: "push" });
        return open.focus();
      }
      return self.clients.openWindow(self.registration.scope);
    })(),
  );
});
