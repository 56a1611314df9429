// The status page: polls this node's JSON and metrics every few seconds
// and draws them. Every request goes to the node that served the page;
// text is set with textContent only (names come from the network).
"use strict";

const POLL_MS = 2000;
const MINUTE_MS = 60000;

// history holds the recent scrapes of /metrics: {t, series}, oldest first,
// a little over a minute of them, so that rates and "in the last minute"
// are differences of two scrapes.
const history = [];
let keysAPI = true; // GET /v1/keys (the inspection API) answers here; false after a 404

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const c of cells) tr.append(c instanceof Node ? c : el("td", c));
    return tr;
  }));
}

// parseMetrics reads the Prometheus text format into a Map from name to a
// list of {labels, value}.
function parseMetrics(text) {
  const out = new Map();
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const line of text.split("\n")) {
    if (line === "" || line[0] === "#") continue;
    const brace = line.indexOf("{");
    const space = line.lastIndexOf("}") >= 0 ? line.indexOf(" ", line.lastIndexOf("}")) : line.indexOf(" ");
    const name = brace >= 0 && brace < space ? line.slice(0, brace) : line.slice(0, space);
    const labels = {};
    if (brace >= 0 && brace < space) {
      for (const m of line.slice(brace, space).matchAll(labelRe)) {
        labels[m[1]] = m[2].replace(/\\n/g, "\n").replace(/\\(.)/g, "$1");
      }
    }
    const value = parseFloat(line.slice(space + 1).trim().split(" ")[0]);
    if (!out.has(name)) out.set(name, []);
    out.get(name).push({ labels, value });
  }
  return out;
}

// sum adds the series of name whose labels include match.
function sum(series, name, match = {}) {
  let total = 0;
  for (const s of series.get(name) || []) {
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
  }
  return total;
}

// delta is how much counter name (filtered by match) grew from scrape a to
// scrape b; a reset (a restart) counts from zero.
function delta(a, b, name, match) {
  const d = sum(b.series, name, match) - sum(a.series, name, match);
  return d >= 0 ? d : sum(b.series, name, match);
}

// recent returns the two scrapes to compare for a rate: the last two.
function recent() {
  return history.length < 2 ? null : [history[history.length - 2], history[history.length - 1]];
}

// lastMinute returns the oldest scrape within a minute and the newest.
function lastMinute() {
  if (history.length < 2) return null;
  const b = history[history.length - 1];
  const a = history.find((h) => b.t - h.t <= MINUTE_MS + POLL_MS) || history[0];
  return a === b ? null : [a, b];
}

function rate(name, match) {
  const p = recent();
  return p ? delta(p[0], p[1], name, match) / ((p[1].t - p[0].t) / 1000) : null;
}

function inMinute(name, match) {
  const p = lastMinute();
  if (!p) return "…";
  const secs = Math.round((p[1].t - p[0].t) / 1000);
  return `${fmtNum(delta(p[0], p[1], name, match))} in the last ${secs >= 59 ? "minute" : secs + " s"}`;
}

function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "…";
  if (Math.abs(v) >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString("en");
  return v.toFixed(v < 1 ? 2 : 1);
}

function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return `${i ? b.toFixed(1) : b} ${units[i]}`;
}

// colour gives the i-th member (by name) a hue of its own: golden-angle
// steps keep neighbours apart however many members there are.
function colour(i) {
  return `hsl(${Math.round((i * 137.508 + 210) % 360)} 62% 52%)`;
}

function arc(start, end, r0, r1) {
  const pt = (a, r) => `${(r * Math.sin(a)).toFixed(2)} ${(-r * Math.cos(a)).toFixed(2)}`;
  const large = end - start > Math.PI ? 1 : 0;
  return `M ${pt(start, r1)} A ${r1} ${r1} 0 ${large} 1 ${pt(end, r1)} L ${pt(end, r0)} A ${r0} ${r0} 0 ${large} 0 ${pt(start, r0)} Z`;
}

function drawRing(members) {
  const svg = $("ring");
  const ns = "http://www.w3.org/2000/svg";
  const parts = [];
  let at = 0;
  const total = members.reduce((s, m) => s + m.share, 0) || 1;
  for (const [i, m] of members.entries()) {
    const span = (m.share / total) * 2 * Math.PI;
    const p = document.createElementNS(ns, "path");
    // A whole circle cannot be one arc: a lone member gets two halves' worth minus a hair.
    p.setAttribute("d", arc(at, at + Math.min(span, 2 * Math.PI - 1e-4), 62, 100));
    p.setAttribute("fill", colour(i));
    p.setAttribute("data-member", m.name);
    const title = document.createElementNS(ns, "title");
    title.textContent = `${m.name}: ${(m.share * 100).toFixed(1)}%`;
    p.append(title);
    parts.push(p);
    at += span;
  }
  const label = document.createElementNS(ns, "text");
  label.setAttribute("y", "5");
  label.textContent = `${members.length} member${members.length === 1 ? "" : "s"}`;
  parts.push(label);
  svg.replaceChildren(...parts);
}

function showCluster(c, rings) {
  $("node").textContent = c.node;
  const ready = $("ready");
  ready.textContent = c.leaving ? "leaving" : c.ready ? "ready" : "not ready";
  ready.className = "badge " + (c.ready && !c.leaving ? "ok" : "bad");
  const byName = new Map((rings && rings.rings || []).map((r) => [r.node, r]));
  const agree = $("agree");
  if (!rings) {
    agree.textContent = "ring agreement unknown";
    agree.className = "badge warn";
  } else {
    agree.textContent = rings.agree ? "every member has the same ring" : "members disagree on the ring";
    agree.className = "badge " + (rings.agree ? "ok" : "bad");
  }
  const members = c.members || [];
  drawRing(members);
  fillRows($("members").tBodies[0], members.map((m, i) => {
    const sw = el("td");
    const s = el("span", undefined, "swatch");
    s.style.background = colour(i);
    sw.append(s);
    const r = byName.get(m.name);
    let same = el("td", "…");
    if (r) same = r.error ? el("td", "no answer: " + r.error, "bad") : el("td", r.agrees ? "yes" : "no", r.agrees ? "ok" : "bad");
    return [sw, m.name + (m.name === c.node ? " (this node)" : ""), m.addr, (m.share * 100).toFixed(1) + "%",
      r && !r.error ? r.ring_version : "…", same];
  }));
  for (const [i, tr] of [...$("members").tBodies[0].rows].entries()) tr.dataset.member = members[i].name;

  const ports = [`gRPC ${c.grpc_addr}`, `peer ${c.peer_addr}`];
  if (c.resp_addr) ports.push(`Redis protocol ${c.resp_addr}`);
  $("ports").textContent = ports.join(", ");

  const h = c.handoff || {};
  const moving = Object.entries(h).filter(([, n]) => n > 0);
  $("handoff").textContent = moving.length ? moving.map(([k, n]) => `${n} partitions ${k}`).join(", ") : "none in progress";
  const snap = $("snapshot");
  snap.textContent = snapshotText(c.snapshot, Date.now());
  snap.className = c.snapshot && c.snapshot.last_error ? "bad" : "";
  const mem = c.memory || {};
  if (mem.budget_bytes > 0) {
    const pct = (100 * mem.held_bytes) / mem.budget_bytes;
    $("memory").textContent = `${fmtBytes(mem.held_bytes)} of ${fmtBytes(mem.budget_bytes)} held by the tables (${pct.toFixed(1)}%)`;
    const bar = $("memory-bar");
    bar.style.width = Math.min(100, pct).toFixed(1) + "%";
    bar.className = pct > 90 ? "high" : "";
  } else {
    $("memory").textContent = `${fmtBytes(mem.held_bytes || 0)} held by the tables; no memory budget (--max-memory)`;
  }
  return c.replication;
}

// snapshotText says where the node's snapshot (--state-dir) is, how many
// keys it holds and when it was last written, from GET /v1/cluster's
// snapshot (null without a state directory).
function snapshotText(s, now) {
  if (!s) return "off (no --state-dir): a stop of every node loses the counts";
  let when = "not written yet by this process";
  if (s.last_written) {
    const secs = Math.max(0, Math.round((now - Date.parse(s.last_written)) / 1000));
    when = `written ${secs} s ago (every ${s.interval} when something changed)`;
  }
  const err = s.last_error ? `; last write FAILED: ${s.last_error}` : "";
  return `${fmtNum(s.keys)} keys in ${s.path}, ${when}${err}`;
}

function showMetrics(replication) {
  const last = history[history.length - 1];
  if (!last) return;
  const s = last.series;
  const rounds = lastMinute();
  let lag = "";
  if (rounds) {
    const n = delta(rounds[0], rounds[1], "shardlimiter_replication_round_seconds_count");
    const secs = delta(rounds[0], rounds[1], "shardlimiter_replication_round_seconds_sum");
    if (n > 0) lag = `, rounds of ${(1000 * secs / n).toFixed(1)} ms on average: lag up to interval + round`;
  }
  $("replication").textContent = replication === "off" ? "off" :
    `every ${replication}${lag}; errors: ${inMinute("shardlimiter_replication_errors_total")}`;
  $("fallback").textContent = inMinute("shardlimiter_peer_fallback_decisions_total");
  $("standin").textContent = inMinute("shardlimiter_peer_standin_decisions_total");
  $("leases").textContent = s.has("shardlimiter_lease_granted_hits") ?
    `${fmtNum(sum(s, "shardlimiter_lease_granted_hits", {}))} hits granted to other nodes, ` +
    `${fmtNum(sum(s, "shardlimiter_lease_held_hits", {}))} held from their owners; ` +
    `${fmtNum(rate("shardlimiter_lease_decisions_total"))} checks/s decided from leases` : "not reported by this node";
  $("shed").textContent = `${fmtNum(rate("shardlimiter_transport_shed_total"))}/s; ${inMinute("shardlimiter_transport_shed_total")}`;
  const inflight = (s.get("shardlimiter_transport_inflight_checks") || []).map((x) => {
    const max = sum(s, "shardlimiter_transport_max_inflight_checks", x.labels);
    return `${x.labels.pool || "?"}: ${fmtNum(x.value)} of ${fmtNum(max)}`;
  });
  $("inflight").textContent = inflight.join(", ") || "…";

  const algos = (s.get("shardlimiter_table_keys") || []).map((x) => x.labels.algorithm);
  fillRows($("keys").tBodies[0], algos.map((a) => [a, fmtNum(sum(s, "shardlimiter_table_keys", { algorithm: a })),
    fmtBytes(sum(s, "shardlimiter_table_bytes", { algorithm: a })),
    fmtNum(sum(s, "shardlimiter_table_evictions_total", { algorithm: a }))]));
}

// ruleSeries groups shardlimiter_rule_checks_total by its labels other than
// outcome: one entry per rule name (and domain, for rules-file rules).
function ruleSeries() {
  const last = history[history.length - 1];
  const groups = new Map();
  for (const x of (last && last.series.get("shardlimiter_rule_checks_total")) || []) {
    const { outcome, ...rest } = x.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    if (!groups.has(key)) groups.set(key, rest);
  }
  return [...groups.values()];
}

function ruleRates(match) {
  const checks = ["under", "near", "over"].reduce((t, o) => t + (rate("shardlimiter_rule_checks_total", { ...match, outcome: o }) || 0), 0);
  return [fmtNum(recent() ? checks : null), fmtNum(rate("shardlimiter_rule_checks_total", { ...match, outcome: "over" }))];
}

// flattenRules lists the rate limits of GET /v1/config, one row each.
function flattenRules(cfg) {
  const rows = [];
  const walk = (domain, path, ds) => {
    for (const d of ds || []) {
      const here = [...path, d.value ? `${d.key}=${d.value}` : d.key];
      for (const l of d.rate_limits || []) rows.push({ domain, descriptor: here.join(" → "), limit: l, unlimited: d.unlimited });
      if (d.unlimited && !(d.rate_limits || []).length) rows.push({ domain, descriptor: here.join(" → "), unlimited: true });
      walk(domain, here, d.descriptors);
    }
  };
  for (const dom of cfg.domains || []) walk(dom.domain, [], dom.descriptors);
  return rows;
}

function showRules(cfg) {
  const seen = ruleSeries();
  const have = history.length > 0 && history[history.length - 1].series.has("shardlimiter_rule_checks_total");
  $("rules-version").textContent = cfg && cfg.version ? `rules version ${cfg.version}` : "no rules file loaded (--config)";
  const rows = cfg ? flattenRules(cfg) : [];
  fillRows($("rules").tBodies[0], rows.map((r) => {
    const name = r.limit ? r.limit.name : "";
    const match = seen.find((g) => g.rule === name && (g.domain === undefined || g.domain === r.domain));
    const rates = have && match ? ruleRates(match) : [have ? "0" : "n/a", have ? "0" : "n/a"];
    const limit = r.unlimited ? "unlimited" : `${r.limit.requests_per_unit} per ${r.limit.unit.toLowerCase()}`;
    return [r.domain, r.descriptor, name, limit, r.limit ? r.limit.algorithm : "", ...rates];
  }));
  $("rule-metrics-note").textContent = have ? "" : "per-rule metrics not available on this node";
  fillRows($("seen").tBodies[0], seen.map((g) => {
    const label = g.domain !== undefined ? `${g.domain}: ${g.rule}` : g.rule;
    return [label, ...ruleRates(g), fmtNum(rate("shardlimiter_rule_hits_total", g))];
  }));
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

async function getText(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.text();
}

async function refresh() {
  const [cluster, rings, config, metrics] = await Promise.allSettled([
    getJSON("/v1/cluster"), getJSON("/v1/cluster/rings"), getJSON("/v1/config"), getText("/metrics")]);
  const errors = [cluster, rings, metrics].filter((r) => r.status === "rejected").map((r) => r.reason.message);
  if (metrics.status === "fulfilled") {
    history.push({ t: Date.now(), series: parseMetrics(metrics.value) });
    while (history.length > 2 && history[history.length - 1].t - history[1].t > MINUTE_MS + POLL_MS) history.shift();
  }
  let replication = "off";
  if (cluster.status === "fulfilled") {
    replication = showCluster(cluster.value, rings.status === "fulfilled" ? rings.value : null);
  }
  showMetrics(replication);
  showRules(config.status === "fulfilled" ? config.value : null);
  $("errors").hidden = errors.length === 0;
  $("errors").textContent = errors.join("; ");
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
}

// lookup reads a key without spending: GET /v1/keys (the inspection API)
// where the node has it, else a peek (POST /v1/GetRateLimits, hits 0).
async function lookup(ev) {
  ev.preventDefault();
  const f = ev.target.elements;
  const item = { name: f.name.value.trim(), unique_key: f.key.value.trim() };
  if (f.limit.value !== "") {
    item.limit = Number(f.limit.value);
    item.duration_ms = Number(f.duration.value || 0);
    item.algorithm = f.algorithm.value;
  }
  $("lookup-error").hidden = true;
  $("lookup-result").hidden = true;
  try {
    let owner, via, state, raw;
    const q = new URLSearchParams({ name: item.name, key: item.unique_key });
    for (const k of ["limit", "duration_ms", "algorithm"]) if (item[k] !== undefined) q.set(k, item[k]);
    const r = keysAPI ? await fetch("/v1/keys?" + q, { cache: "no-store" }) : null;
    if (r && r.status === 404) keysAPI = false; // no inspection API on this node: peek from now on
    if (r && keysAPI) {
      const body = await r.json();
      if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
      owner = body.owner || "";
      via = "GET /v1/keys: read on its owner, consumes nothing";
      state = [["owner", body.owner_state], ["replica", body.replica_state]].filter(([, v]) => v).map(([role, v]) =>
        `${role} ${v.node}: ` + (v.error || `${v.status}, ${v.remaining} of ${v.limit} left${v.held ? "" : " (not held: as fresh as a new key)"}`)).join("\n");
      raw = body;
    } else {
      const resp = await fetch("/v1/GetRateLimits", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ requests: [{ ...item, hits: 0 }] }) });
      const body = await resp.json();
      if (!resp.ok) throw new Error(body.error || `HTTP ${resp.status}`);
      const res = body.responses[0];
      if (res.error) throw new Error(res.error);
      owner = (res.metadata || {}).owner || "";
      via = "a peek: POST /v1/GetRateLimits with hits 0 (no inspection API on this node)";
      state = `${res.status}, ${res.remaining} of ${res.limit} left`;
      raw = res;
    }
    $("lookup-owner").textContent = owner;
    $("lookup-via").textContent = via;
    $("lookup-state").textContent = state;
    $("lookup-raw").textContent = JSON.stringify(raw, null, 2);
    $("lookup-result").hidden = false;
  } catch (e) {
    $("lookup-error").textContent = "lookup failed: " + e.message;
    $("lookup-error").hidden = false;
  }
}

async function loop() {
  if (!document.hidden) {
    try {
      await refresh();
    } catch (e) {
      $("errors").hidden = false;
      $("errors").textContent = "refresh failed: " + e.message;
    }
  }
  setTimeout(loop, POLL_MS);
}

$("lookup").addEventListener("submit", lookup);
loop();
