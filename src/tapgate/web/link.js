// The device's link to the gateway: a WebSocket first (authenticated by a first device:auth frame, as a
// browser cannot set headers on one), long-polling when WebSockets do not get through, reconnecting with
// back-off. Every (re)connect fetches all that is pending, so nothing depends on a frame or a push
// arriving: they only make it sooner. On the WebSocket, approvals arrive live too (device:approval), and
// so do the agent's notices (device:notice: shown, never answered).

import { request } from "./api.js";

const LONG_POLL_SECONDS = 25;
const BUSY_POLL_MS = 3000; // the long-poll answers at once while work is pending: ask again after this
const WS_FAILURES_BEFORE_POLLING = 2;
const POLLS_BEFORE_TRYING_WS_AGAIN = 5;
const STABLE_MS = 10000; // a link that lasted this long resets the back-off
const MAX_BACKOFF_MS = 30000;

export class DeviceLink {
  /** handlers: state(word), connected(), pending(list), invoke(invocation), approval(item), notice(item),
   * gone(). */
  constructor(device, handlers) {
    this.device = device;
    this.handlers = handlers;
    this.stopped = false;
    this.failures = 0;
    this.socket = null;
    this.controller = null;
    this.wakeUp = null;
  }

  start() {
    this.run();
  }

  stop() {
    this.stopped = true;
    if (this.socket) this.socket.close(1000);
    if (this.controller) this.controller.abort();
    this.nudge();
  }

  /** Skip the wait of a back-off (the network came back, the page became visible). */
  nudge() {
    this.failures = 0;
    if (this.wakeUp) this.wakeUp();
  }

  async run() {
    let socketFailures = 0;
    while (!this.stopped) {
      const outcome = await this.viaWebSocket();
      if (this.stopped) return;
      if (outcome.code === 4401 || outcome.code === 4403) {
        if (await this.gone()) return;
      }
      // A socket that opens and drops at once (a proxy that takes the upgrade, then cuts it) counts as
      // one that never opened.
      const stable = outcome.lasted >= STABLE_MS;
      socketFailures = stable ? 0 : socketFailures + 1;
      this.failures = stable ? 0 : this.failures + 1;
      if (socketFailures >= WS_FAILURES_BEFORE_POLLING) {
        if (await this.viaLongPoll()) return;
        socketFailures = 0;
      }
      if (this.stopped) return;
      this.handlers.state("reconnecting");
      await this.backOff();
    }
  }

  viaWebSocket() {
    return new Promise((resolve) => {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      let opened = false;
      let since = 0;
      let socket;
      try {
        socket = new WebSocket(`${scheme}://${location.host}/v1/device/connect`);
      } catch {
        resolve({ opened: false, code: 0, lasted: 0 });
        return;
      }
      this.socket = socket;
      socket.onopen = () => {
        opened = true;
        since = Date.now();
        socket.send(JSON.stringify({ type: "device:auth", deviceId: this.device.device_id, token: this.device.token }));
        this.handlers.state("live");
        this.handlers.connected();
      };
      socket.onmessage = (event) => {
        let frame;
        try {
          frame = JSON.parse(event.data);
        } catch {
          return;
        }
        if (frame.type === "device:invoke") {
          this.handlers.invoke({
            id: frame.callId,
            tool: frame.tool,
            capability: frame.capability,
            arguments: frame.input || {},
            summary: frame.summary ?? null,
            expires_at: frame.expires_at,
            binding_code: frame.binding_code ?? null,
          });
        } else if (frame.type === "device:approval" && frame.approval && typeof frame.approval.id === "string") {
          this.handlers.approval(frame.approval);
        } else if (frame.type === "device:notice" && frame.notice && typeof frame.notice.id === "string") {
          this.handlers.notice(frame.notice);
        } else if (frame.type === "device:revoked") {
          this.gone();
        }
      };
      socket.onclose = (event) => {
        this.socket = null;
        resolve({ opened, code: event.code, lasted: opened ? Date.now() - since : 0 });
      };
    });
  }

  /** Long-poll for a while; true when the device turned out to be gone. The first request asks without
   * waiting, so the app knows at once that this way through works. */
  async viaLongPoll() {
    for (let round = 0; round <= POLLS_BEFORE_TRYING_WS_AGAIN && !this.stopped; round++) {
      const wait = round === 0 ? 0 : LONG_POLL_SECONDS;
      this.controller = new AbortController();
      const reply = await request("GET", `/v1/device/invocations?wait=${wait}`, {
        token: this.device.token,
        timeoutMs: (wait + 15) * 1000,
        signal: this.controller.signal,
      });
      this.controller = null;
      if (this.stopped) return false;
      if (reply.status === 401) return this.gone();
      if (!reply.ok) return false;
      this.failures = 0;
      const list = (reply.body && reply.body.invocations) || [];
      if (round === 0) {
        this.handlers.state("polling");
        this.handlers.connected();
      }
      this.handlers.pending(list);
      if (list.length) await this.pause(BUSY_POLL_MS);
    }
    return false;
  }

  /** Ask the gateway whether this device still exists; tell the app (once) when it does not. */
  async gone() {
    if (this.stopped) return true;
    const reply = await request("POST", "/v1/device/heartbeat", { token: this.device.token });
    if (reply.status === 401) {
      this.stopped = true;
      this.handlers.gone();
      return true;
    }
    return false;
  }

  backOff() {
    const ceiling = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.min(this.failures, 5));
    return this.pause(ceiling / 2 + Math.random() * (ceiling / 2));
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
