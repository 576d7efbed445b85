// Tangram live dashboard: renders the snapshots that ws/dashboard/ streams.
// The shapes are documented in apps/dashboard/events.py. Every snapshot is
// complete, so the page re-renders from it and never patches state. All text
// goes through textContent; nothing from the server is parsed as HTML.
"use strict";

(() => {
  const CLOSE_FORBIDDEN = 4403;
  const RETRY_MIN_MS = 500;
  const RETRY_MAX_MS = 15000;
  // The server refreshes every few seconds; a silence longer than this means trouble.
  const STALE_AFTER_MS = 15000;

  const body = document.body;
  const byTestId = (id) => document.querySelector(`[data-testid="${CSS.escape(id)}"]`);

  let socket = null;
  let retryMs = RETRY_MIN_MS;
  let retryTimer = null;
  let lastSnapshotAt = null; // client clock, ms
  let serverOffsetMs = 0; // server clock minus client clock
  let connection = "connecting";

  // ---- DOM helpers -------------------------------------------------------

  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key === "testid") node.setAttribute("data-testid", value);
      else if (key === "style") Object.assign(node.style, value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // ---- formatting --------------------------------------------------------

  function num(value) {
    if (Number.isInteger(value)) return String(value);
    return value.toFixed(Math.abs(value) < 10 ? 2 : 1).replace(/\.?0+$/, "");
  }

  function amount(kind, value) {
    if (kind === "memory" || kind === "gpu_memory") {
      return value >= 1024 ? `${num(value / 1024)} GiB` : `${num(value)} MiB`;
    }
    return num(value);
  }

  function ago(iso) {
    if (!iso) return "";
    const seconds = Math.max(0, Math.round((Date.now() + serverOffsetMs - Date.parse(iso)) / 1000));
    if (seconds < 60) return `${seconds}s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${seconds % 60}s`;
    return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
  }

  function kindsOf(...maps) {
    const kinds = new Set();
    for (const map of maps) for (const kind of Object.keys(map || {})) kinds.add(kind);
    const order = ["cpu", "memory", "gpu", "gpu_memory"];
    return [...kinds].sort((a, b) => {
      const ia = order.indexOf(a) === -1 ? order.length : order.indexOf(a);
      const ib = order.indexOf(b) === -1 ? order.length : order.indexOf(b);
      return ia - ib || a.localeCompare(b);
    });
  }

  function level(fraction) {
    if (fraction >= 0.9) return "high";
    if (fraction >= 0.6) return "mid";
    return "low";
  }

  // ---- rendering ---------------------------------------------------------

  function capacityBar(prefix, kind, used, capacity) {
    const fraction = capacity > 0 ? Math.min(1, used / capacity) : used > 0 ? 1 : 0;
    const free = capacity - used;
    return el(
      "div",
      { class: "bar-row", testid: `${prefix}-kind-${kind}` },
      el("span", { class: "kind" }, kind),
      el(
        "div",
        {
          class: "bar",
          role: "meter",
          "aria-valuemin": 0,
          "aria-valuemax": capacity,
          "aria-valuenow": used,
          "aria-label": `${kind} used`,
        },
        el("div", { class: `fill ${level(fraction)}`, style: { width: `${fraction * 100}%` } }),
      ),
      el(
        "span",
        { class: "amount" },
        el("span", { testid: `${prefix}-used-${kind}` }, amount(kind, used)),
        " / ",
        el("span", { testid: `${prefix}-capacity-${kind}` }, amount(kind, capacity)),
      ),
      el(
        "span",
        { class: free < 0 ? "free over" : "free" },
        el("span", { testid: `${prefix}-free-${kind}` }, amount(kind, free)),
        " free",
      ),
    );
  }

  function actionItem(action) {
    const since = action.state === "running" ? action.started_at : action.assigned_at;
    const alloc = kindsOf(action.allocation)
      .map((kind) => (kind === "memory" ? amount(kind, action.allocation[kind]) : `${amount(kind, action.allocation[kind])} ${kind}`))
      .concat(action.gpus && action.gpus.length ? [`GPU ${action.gpus.join(",")}`] : [])
      .concat(action.batch_id ? [`batch of ${action.batch_size}`] : [])
      .join(" · ");
    return el(
      "li",
      { class: "action", testid: `action-${action.id}`, "data-state": action.state },
      el("span", { class: `badge state-${action.state}` }, action.state),
      el("span", { class: "type" }, action.type),
      el("span", { class: "tenant" }, action.tenant),
      el("span", { class: "alloc muted", title: alloc, testid: `action-${action.id}-alloc` }, alloc),
      el("span", { class: "since muted", "data-since": since || "" }, ago(since)),
      el("span", { class: "id muted", title: action.id }, action.id.slice(0, 8)),
    );
  }

  // A warm key as an operator reads it: its kind and the start of its digest.
  function shortKey(key) {
    const [kind, name] = key.includes(":") ? key.split(/:(.*)/s) : ["", key];
    const shown = kind === "scorer" ? name.slice(0, 8) : name;
    return kind ? `${kind} ${shown}` : shown;
  }

  function nodeCard(node) {
    const prefix = `node-${node.name}`;
    const kinds = kindsOf(node.capacity, node.used);
    const list = el("ul", { class: "actions", testid: `${prefix}-running` }, node.actions.map(actionItem));
    const hidden = node.actions_total - node.actions.length;
    return el(
      "article",
      { class: `node state-${node.state}`, testid: prefix, "data-state": node.state },
      el(
        "header",
        {},
        el("h3", {}, node.name),
        el("span", { class: `badge state-${node.state}`, testid: `${prefix}-state` }, node.state),
        el(
          "span",
          { class: "muted seen" },
          "seen ",
          el("span", { "data-since": node.last_seen_at }, ago(node.last_seen_at)),
          " ago",
        ),
      ),
      el("div", { class: "bars" }, kinds.map((k) => capacityBar(prefix, k, node.used[k] || 0, node.capacity[k] || 0))),
      node.warm.length
        ? el(
            "p",
            { class: "warm muted", testid: `${prefix}-warm`, title: node.warm.join("\n") },
            node.warm_slots ? `warm (${node.warm.length} of ${node.warm_slots}): ` : "warm: ",
            node.warm.map((key) => el("span", { class: "key" }, shortKey(key))),
          )
        : null,
      el(
        "h4",
        {},
        "Placed actions ",
        el("span", { class: "count", testid: `${prefix}-running-count` }, node.actions_total),
      ),
      list,
      node.actions_total === 0 ? el("p", { class: "empty" }, "idle") : null,
      hidden > 0 ? el("p", { class: "muted more" }, `and ${hidden} more`) : null,
    );
  }

  function quotaMeter(prefix, kind, used, quota) {
    const limit = quota ? quota.limit : null;
    const fraction = limit ? Math.min(1, used / limit) : 0;
    const guaranteedAt = limit && quota ? Math.min(1, quota.guaranteed / limit) : null;
    return el(
      "div",
      { class: "quota", testid: `${prefix}-quota-${kind}` },
      el("span", { class: "kind" }, kind),
      el(
        "div",
        { class: "bar small" },
        el("div", { class: `fill ${level(fraction)}`, style: { width: `${fraction * 100}%` } }),
        guaranteedAt !== null
          ? el("div", { class: "guarantee", title: "guaranteed", style: { left: `${guaranteedAt * 100}%` } })
          : null,
      ),
      el(
        "span",
        { class: "amount" },
        el("span", { testid: `${prefix}-usage-${kind}` }, amount(kind, used)),
        quota ? ` / ${amount(kind, quota.guaranteed)} / ${amount(kind, quota.limit)}` : " (no quota)",
      ),
      quota && quota.lending_limit !== null
        ? el(
            "span",
            {
              class: "muted lends",
              testid: `${prefix}-lends-${kind}`,
              title: "the most of its idle guarantee other tenants may borrow",
            },
            `lends ≤ ${amount(kind, quota.lending_limit)}`,
          )
        : null,
    );
  }

  function tenantRow(tenant) {
    const prefix = `tenant-${tenant.name}`;
    const kinds = kindsOf(tenant.usage, tenant.quotas);
    return el(
      "tr",
      { testid: prefix },
      el(
        "th",
        { scope: "row" },
        tenant.name,
        tenant.waiting ? el("div", { class: "waiting muted", testid: `${prefix}-waiting`, title: tenant.waiting }, tenant.waiting) : null,
      ),
      el("td", { class: "num", testid: `${prefix}-queued` }, tenant.queued),
      el("td", { class: "num", testid: `${prefix}-assigned` }, tenant.assigned),
      el("td", { class: "num", testid: `${prefix}-running` }, tenant.running),
      el(
        "td",
        {},
        kinds.length
          ? el("div", { class: "quotas" }, kinds.map((k) => quotaMeter(prefix, k, tenant.usage[k] || 0, tenant.quotas[k])))
          : el("span", { class: "muted" }, "no usage, no quotas"),
      ),
    );
  }

  function render(snapshot) {
    const totals = snapshot.totals;
    byTestId("totals-nodes").textContent = `${totals.nodes_online}/${totals.nodes}`;
    byTestId("totals-queued").textContent = totals.queued;
    byTestId("totals-assigned").textContent = totals.assigned;
    byTestId("totals-running").textContent = totals.running;
    byTestId("totals-capacity").replaceChildren(
      ...kindsOf(totals.capacity).map((k) => capacityBar("totals", k, totals.used[k] || 0, totals.capacity[k])),
    );
    byTestId("nodes").replaceChildren(
      ...(snapshot.nodes.length ? snapshot.nodes.map(nodeCard) : [el("p", { class: "empty" }, "No node has registered yet.")]),
    );
    const rows = snapshot.tenants.map(tenantRow);
    byTestId("tenants")
      .querySelector("tbody")
      .replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 5, class: "empty" }, "No tenants yet."))]));
  }

  // ---- connection --------------------------------------------------------

  function setConnection(state, text) {
    connection = state;
    byTestId("connection-dot").setAttribute("data-state", state);
    byTestId("connection-status").textContent = text;
  }

  function tick() {
    if (lastSnapshotAt !== null) {
      const seconds = Math.round((Date.now() - lastSnapshotAt) / 1000);
      byTestId("last-update").textContent = `${new Date(lastSnapshotAt).toLocaleTimeString()} (${seconds}s ago)`;
      if (connection === "live" && Date.now() - lastSnapshotAt > STALE_AFTER_MS) {
        setConnection("stale", "connected, but no update lately");
      }
    }
    for (const node of document.querySelectorAll("[data-since]")) {
      node.textContent = ago(node.getAttribute("data-since"));
    }
  }

  function scheduleReconnect() {
    const delay = Math.round(retryMs * (0.75 + Math.random() * 0.5));
    retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
    setConnection("reconnecting", `disconnected, retrying in ${Math.ceil(delay / 1000)}s`);
    retryTimer = setTimeout(connect, delay);
  }

  function connect() {
    retryTimer = null;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setConnection("connecting", "connecting…");
    socket = new WebSocket(scheme + location.host + body.dataset.wsPath);
    socket.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      if (frame.type !== "snapshot") return;
      lastSnapshotAt = Date.now();
      serverOffsetMs = Date.parse(frame.snapshot.server_time) - lastSnapshotAt;
      retryMs = RETRY_MIN_MS;
      render(frame.snapshot);
      setConnection("live", "live");
      tick();
    });
    socket.addEventListener("close", (event) => {
      socket = null;
      if (event.code === CLOSE_FORBIDDEN) {
        setConnection("refused", "not allowed: sign in as staff and reload");
        const link = el("a", { href: `${body.dataset.loginUrl}?next=${encodeURIComponent(location.pathname)}` }, "sign in");
        byTestId("connection-status").append(" (", link, ")");
        return;
      }
      scheduleReconnect();
    });
  }

  document.addEventListener("visibilitychange", () => {
    // Coming back to a tab whose retry timer was throttled: try at once.
    if (document.visibilityState === "visible" && retryTimer !== null) {
      clearTimeout(retryTimer);
      connect();
    }
  });

  setInterval(tick, 1000);
  connect();
})();
