// The quorumbus console: plain JavaScript over the gateway's JSON
// endpoints (/$console/api/...). The sign-in cookie is HttpOnly: this
// script never sees the token.
"use strict";

const api = "api/";
const $ = (sel) => document.querySelector(sel);

async function call(path, body) {
  const opts = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.method = "POST";
    opts.headers["Content-Type"] = "application/json";
    opts.headers["X-Quorumbus-Console"] = "1";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(api + path, opts);
  const data = await resp.json().catch(() => ({}));
  if (resp.status === 401) {
    show("signin-page");
    throw new Error(data.error || "not signed in");
  }
  if (!resp.ok) throw new Error(data.error || resp.statusText);
  return data;
}

function show(id) {
  for (const s of document.querySelectorAll("main > section")) s.classList.toggle("hidden", s.id !== id);
  $("#signout").classList.toggle("hidden", id === "signin-page");
}

function error(e) { $("#error").textContent = e ? String(e.message || e) : ""; }

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fmtBytes(n) {
  if (n === undefined) return "-";
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

// ---- namespace

async function namespacePage() {
  show("namespace-page");
  const ns = await call("namespace");
  $("#ns-name").textContent = ns.namespace;
  const body = $("#entities tbody");
  body.textContent = "";
  for (const e of ns.entities) {
    const tr = document.createElement("tr");
    tr.dataset.name = e.name;
    const a = document.createElement("a");
    a.href = "#/entity/" + encodeURIComponent(e.name);
    a.textContent = e.name;
    cell(tr, "").appendChild(a);
    cell(tr, e.kind);
    cell(tr, e.degraded ? e.status + " (degraded)" : e.status, e.degraded ? "bad" : "");
    cell(tr, e.partitions, "num");
    const c = e.counts || {};
    cell(tr, c.Active ?? "?", "num active");
    cell(tr, c.DeadLetter ?? "?", "num dead");
    cell(tr, c.Scheduled ?? "?", "num");
    cell(tr, fmtBytes(c.SizeBytes), "num");
    body.appendChild(tr);
  }
  const nodes = $("#nodes tbody");
  nodes.textContent = "";
  for (const n of ns.nodes) {
    const tr = document.createElement("tr");
    cell(tr, n.id); cell(tr, n.addr); cell(tr, n.zone || "");
    cell(tr, n.alive ? (n.draining ? "draining" : "alive") : "down", n.alive ? "good" : "bad");
    nodes.appendChild(tr);
  }
  const groups = $("#groups tbody");
  groups.textContent = "";
  for (const g of ns.groups) {
    const tr = document.createElement("tr");
    cell(tr, g.id, "num"); cell(tr, g.leader || "(none)"); cell(tr, (g.replicas || []).join(", "));
    cell(tr, g.healthy ? "quorum" : "no quorum", g.healthy ? "good" : "bad");
    groups.appendChild(tr);
  }
}

// ---- entity

let current = null;      // the entity shown
let showDLQ = false;     // which sub-queue the message table shows
let history = [];        // [{active, dead}] polled counts
let poller = null;

async function entityPage(name) {
  show("entity-page");
  if (current !== name) { history = []; showDLQ = false; }
  current = name;
  $("#entity-name").textContent = name;
  $("#action-result").textContent = "";
  await refreshEntity(true);
  await peek();
  clearInterval(poller);
  poller = setInterval(() => refreshEntity(false).catch(error), 2000);
}

async function refreshEntity(withProps) {
  if (!current || location.hash.indexOf("#/entity/") !== 0) { clearInterval(poller); return; }
  const e = await call("entity?name=" + encodeURIComponent(current));
  $("#entity-kind").textContent = e.kind;
  const c = e.counts || {};
  $("#count-active").textContent = c.Active ?? "?";
  $("#count-dead").textContent = c.DeadLetter ?? "?";
  $("#count-scheduled").textContent = c.Scheduled ?? "?";
  $("#count-size").textContent = fmtBytes(c.SizeBytes);
  if (e.counts) {
    history.push({ active: c.Active || 0, dead: c.DeadLetter || 0 });
    if (history.length > 180) history.shift();
    drawChart();
  }
  if (withProps) {
    fillEdit(e);
    const body = $("#properties tbody");
    body.textContent = "";
    for (const k of Object.keys(e.properties || {}).sort()) {
      const tr = document.createElement("tr");
      cell(tr, k); cell(tr, String(e.properties[k]));
      body.appendChild(tr);
    }
  }
}

function drawChart() {
  const cv = $("#chart"), ctx = cv.getContext("2d");
  ctx.clearRect(0, 0, cv.width, cv.height);
  const max = Math.max(1, ...history.map((h) => Math.max(h.active, h.dead)));
  const step = cv.width / 180;
  for (const [key, color] of [["active", "#1f6feb"], ["dead", "#c0392b"]]) {
    ctx.strokeStyle = color;
    ctx.beginPath();
    history.forEach((h, i) => {
      const x = i * step, y = cv.height - 4 - (h[key] / max) * (cv.height - 8);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
  ctx.fillStyle = "#5b6776";
  ctx.fillText("max " + max, 4, 12);
}

// Peek pages: each partition continues after the last message shown
// of it (peekFrom: partition -> next sequence number); a page that filled
// no partition's share is the last.
const peekPage = 50;
let peekFrom = {};
let peekPageNo = 1;

async function peek(next) {
  $("#peek-main").classList.toggle("selected", !showDLQ);
  $("#peek-dlq").classList.toggle("selected", showDLQ);
  if (!next) { peekFrom = {}; peekPageNo = 1; }
  const from = Object.values(peekFrom).join(",");
  const msgs = await call("messages?name=" + encodeURIComponent(current) + (showDLQ ? "&dlq=1" : "") + "&n=" + peekPage +
    (from ? "&from=" + from : ""));
  if (next) peekPageNo++;
  const perPartition = {};
  for (const m of msgs) {
    perPartition[m.partition] = (perPartition[m.partition] || 0) + 1;
    const after = m.sequenceNumber + 1;
    if (!(peekFrom[m.partition] >= after)) peekFrom[m.partition] = after;
  }
  const more = Object.values(perPartition).some((n) => n >= peekPage);
  $("#peek-next").disabled = !more;
  $("#peek-page").textContent = "page " + peekPageNo;
  const body = $("#messages tbody");
  body.textContent = "";
  for (const m of msgs) {
    const tr = document.createElement("tr");
    tr.dataset.seq = m.sequenceNumber;
    cell(tr, m.sequenceNumber, "num");
    cell(tr, m.enqueuedTime);
    cell(tr, m.state);
    cell(tr, m.deliveryCount, "num");
    cell(tr, m.messageId || "");
    const props = Object.assign({}, m.properties || {});
    if (m.subject) props["(subject)"] = m.subject;
    if (m.sessionId) props["(session)"] = m.sessionId;
    if (m.correlationId) props["(correlation id)"] = m.correlationId;
    if (m.contentType) props["(content type)"] = m.contentType;
    const pre1 = document.createElement("pre");
    pre1.textContent = Object.keys(props).length ? JSON.stringify(props, null, 1) : "";
    cell(tr, "").appendChild(pre1);
    const pre2 = document.createElement("pre");
    pre2.className = "body";
    pre2.textContent = (m.bodyEncoding === "base64" ? "(base64) " : "") + m.body + (m.bodyTruncated ? " ..." : "");
    cell(tr, "").appendChild(pre2);
    cell(tr, m.deadLetterReason ? m.deadLetterReason + (m.deadLetterDescription ? ": " + m.deadLetterDescription : "") : "");
    const td = cell(tr, "");
    if (showDLQ) {
      const b = document.createElement("button");
      b.className = "resend";
      b.textContent = "Resend";
      b.addEventListener("click", () => act("redrive", { sequence: [m.sequenceNumber] }, (r) => "resent " + r.moved));
      td.appendChild(b);
    }
    body.appendChild(tr);
  }
  if (!msgs.length) {
    const tr = document.createElement("tr");
    cell(tr, "(none)").colSpan = 9;
    body.appendChild(tr);
  }
}

// The edit form: the properties an operator changes most, in the ATOM
// API's notation (ISO 8601 durations). Only the fields changed are sent;
// the gateway puts them into the entity's description and applies it as
// an admin client's update would.
const editable = ["LockDuration", "MaxDeliveryCount", "DefaultMessageTimeToLive", "Status", "UserMetadata"];
let editWas = {};

function fillEdit(e) {
  editWas = {};
  for (const k of editable) {
    const v = k === "Status" ? e.status : (e.properties || {})[k];
    editWas[k] = v === undefined || v === null ? "" : String(v);
    $("#edit-" + k).value = editWas[k];
  }
}

async function saveEdit() {
  const changes = {};
  for (const k of editable) {
    const v = $("#edit-" + k).value;
    if (v !== editWas[k]) changes[k] = v;
  }
  if (!Object.keys(changes).length) { $("#action-result").textContent = "nothing changed"; return; }
  error();
  try {
    await call("update", { name: current, properties: changes });
    $("#action-result").textContent = "saved " + Object.keys(changes).sort().join(", ");
    await refreshEntity(true);
  } catch (e) { error(e); }
}

async function act(what, extra, say) {
  error();
  try {
    const r = await call(what, Object.assign({ name: current }, extra));
    $("#action-result").textContent = say(r) + (r.stopped ? " (" + r.stopped + ")" : "");
    await refreshEntity(false);
    await peek();
  } catch (e) { error(e); }
}

// ---- wiring

async function route() {
  error();
  const h = location.hash || "#/";
  try {
    if (h.indexOf("#/entity/") === 0) await entityPage(decodeURIComponent(h.slice(9)));
    else { clearInterval(poller); current = null; await namespacePage(); }
  } catch (e) { error(e); }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error();
    try {
      const r = await call("signin", { keyName: $("#keyName").value, key: $("#key").value });
      $("#who").textContent = r.keyName;
      await route();
    } catch (e) { error(e); }
  });
  $("#signout").addEventListener("click", async () => { await call("signout", {}); $("#who").textContent = ""; show("signin-page"); });
  $("#create-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error();
    try {
      await call("create", { name: $("#create-name").value, kind: $("#create-kind").value,
        partitioned: $("#create-partitioned").checked, requiresSession: $("#create-session").checked });
      $("#create-name").value = "";
      await namespacePage();
    } catch (e) { error(e); }
  });
  $("#purge").addEventListener("click", () => { if (confirm("Delete every message of " + current + "?")) act("purge", {}, (r) => "purged " + r.purged); });
  $("#purge-dlq").addEventListener("click", () => { if (confirm("Delete every dead-lettered message of " + current + "?")) act("purge", { deadLetter: true }, (r) => "purged " + r.purged); });
  $("#delete").addEventListener("click", async () => {
    if (!confirm("Delete " + current + " and its messages?")) return;
    try { await call("delete", { name: current }); location.hash = "#/"; } catch (e) { error(e); }
  });
  $("#redrive-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    act("redrive", { filter: $("#redrive-filter").value, max: Number($("#redrive-max").value) || 0, rate: Number($("#redrive-rate").value) || 0 },
      (r) => "re-drove " + r.moved);
  });
  $("#peek-main").addEventListener("click", () => { showDLQ = false; peek().catch(error); });
  $("#peek-dlq").addEventListener("click", () => { showDLQ = true; peek().catch(error); });
  $("#peek-refresh").addEventListener("click", () => peek().catch(error));
  $("#peek-next").addEventListener("click", () => peek(true).catch(error));
  $("#edit-form").addEventListener("submit", (ev) => { ev.preventDefault(); saveEdit(); });
  window.addEventListener("hashchange", route);
  route();
});
