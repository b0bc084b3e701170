// workgroup console: renders the server's summary stream and the shown group's resources.
"use strict";

const state = { summary: null, selected: null, filter: "", shownVersion: null };

const $ = (id) => document.getElementById(id);

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "–" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function age(seconds, atLeast) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  const text = s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` : `${Math.floor(s / 3600)} h`;
  return atLeast ? `≥ ${text}` : text;
}

function clock(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
}

function renderGroups(summary) {
  const body = $("groups").tBodies[0];
  body.replaceChildren();
  $("no-groups").hidden = summary.groups.length > 0;
  for (const g of summary.groups) {
    const row = document.createElement("tr");
    row.dataset.group = g.group;
    if (g.group === state.selected) row.classList.add("selected");
    cell(row, g.group);
    cell(row, g.state);
    cell(row, g.protocol);
    cell(row, g.generation);
    cell(row, g.members.length);
    cell(row, g.resource_count);
    cell(row, g.unowned, g.unowned > 0 ? "warn" : "");
    row.addEventListener("click", () => select(g.group));
    body.appendChild(row);
  }
}

function renderMembers(group) {
  const body = $("members").tBodies[0];
  body.replaceChildren();
  for (const m of group.members) {
    const row = document.createElement("tr");
    row.dataset.member = m.name;
    cell(row, m.member_id);
    cell(row, m.instance_id);
    cell(row, m.process);
    cell(row, m.host);
    cell(row, m.endpoint);
    cell(row, m.owns);
    cell(row, m.load === null ? null : m.capacity === 1 ? m.load : `${m.load} (capacity ${m.capacity})`);
    const warming = m.warming ? `${m.warming} (${m.ready} ready)` : null;
    cell(row, warming, m.warming ? "warming" : "");
    cell(row, m.status === "member" ? null : m.status, m.status === "member" ? "" : m.status);
    body.appendChild(row);
  }
}

function renderResources(page) {
  const body = $("resources").tBodies[0];
  body.replaceChildren();
  for (const r of page.resources) {
    const row = document.createElement("tr");
    row.dataset.key = `${r.kind}/${r.key}`;
    cell(row, r.kind ?? "?");
    cell(row, r.key);
    cell(row, r.role);
    if (r.owner === null) cell(row, "nobody", "nobody");
    else cell(row, r.owner_name);
    cell(row, r.token);
    cell(row, r.checkpoint, "checkpoint").title = r.checkpoint ?? "";
    cell(row, age(r.checkpoint_age_s, r.age_at_least));
    const warmingFor = r.warming_by ? ` for ${age(r.warming_for_s, r.warming_at_least)}` : "";
    cell(row, r.warming_by ? `${r.warming_by}${warmingFor}${r.warming_ready ? " ✓ ready" : ""}` : null,
      r.warming_by ? "warming" : "");
    body.appendChild(row);
  }
  const shown = page.resources.length;
  $("resource-count").textContent =
    shown < page.total ? `${shown} of ${page.total} shown` : `${page.total} resources`;
}

// Keyspaces: a heat strip over the 64-bit hash space (one band per slice, as wide
// as its range, coloured by its load: blue cold, red hot, grey unknown) and the
// first slices in hash order.
const SLICE_ROWS = 200;

function heatColour(heat) {
  return heat === null ? "#d1d5db" : `hsl(${Math.round((1 - heat) * 210)}, 75%, 50%)`;
}

function renderKeyspaces(keyspaces) {
  const shown = $("keyspaces");
  shown.replaceChildren();
  for (const ks of keyspaces) {
    const section = document.createElement("div");
    section.className = "keyspace";
    section.dataset.keyspace = ks.name;
    const title = document.createElement("h3");
    const moving = ks.moving ? ` · ${ks.moving} moving` : "";
    title.textContent = `Keyspace ${ks.name} · ${ks.slice_count} slices · map epoch ${ks.epoch} · highest token ${ks.max_token}${moving}`;
    const strip = document.createElement("div");
    strip.className = "heat";
    for (const s of ks.slices) {
      const band = document.createElement("span");
      band.dataset.slice = s.id;
      band.style.width = `${s.share * 100}%`;
      band.style.background = heatColour(s.heat);
      band.title = `slice ${s.id} ${s.range} · ${s.owner_name ?? "nobody"} · token ${s.token} · load ${s.load ?? "–"}`;
      strip.appendChild(band);
    }
    const table = document.createElement("table");
    table.className = "slices";
    const head = table.createTHead().insertRow();
    for (const name of ["slice", "range", "share", "owner", "token", "load"]) {
      const th = document.createElement("th");
      th.textContent = name;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const s of ks.slices.slice(0, SLICE_ROWS)) {
      const row = body.insertRow();
      row.dataset.slice = s.id;
      cell(row, s.id);
      cell(row, s.range, "checkpoint");
      cell(row, `${(s.share * 100).toFixed(2)}%`);
      if (s.owner === null) cell(row, s.map_owner ? `nobody (moving to ${s.map_owner})` : "nobody", "nobody");
      else cell(row, s.owner_name);
      cell(row, s.token);
      cell(row, s.load);
    }
    section.append(title, strip, table);
    if (ks.slices.length > SLICE_ROWS) {
      const more = document.createElement("p");
      more.className = "muted";
      more.textContent = `${SLICE_ROWS} of ${ks.slices.length} slices shown`;
      section.appendChild(more);
    }
    shown.appendChild(section);
  }
}

function describe(entry) {
  if (entry.source === "event-log") {
    return `${entry.member}: ${entry.what} ${entry.kind}/${entry.key} (token ${entry.token})`;
  }
  if (entry.what === "rebalance") {
    const parts = [`generation ${entry.generation ?? "?"}`];
    if (entry.joined.length) parts.push(`joined: ${entry.joined.join(", ")}`);
    if (entry.left.length) parts.push(`left: ${entry.left.join(", ")}`);
    const moves = entry.moved.map((m) => `${m.kind}/${m.key} ${m.from ?? "nobody"} → ${m.to ?? "nobody"}`);
    if (moves.length) parts.push(`moved: ${moves.slice(0, 20).join("; ")}${moves.length > 20 ? ` and ${moves.length - 20} more` : ""}`);
    return parts.join(" · ");
  }
  if (entry.what === "appeared") return `members: ${(entry.members || []).join(", ") || "none"}`;
  return "";
}

function renderTimeline(summary) {
  const list = $("timeline");
  list.replaceChildren();
  for (const entry of summary.timeline) {
    const item = document.createElement("li");
    item.dataset.what = entry.what;
    if (entry.source === "event-log") item.classList.add("from-log");
    const when = document.createElement("time");
    when.textContent = clock(entry.time);
    const what = document.createElement("span");
    what.className = "what";
    what.textContent = `${entry.group} ${entry.what}`;
    const detail = document.createElement("span");
    detail.textContent = describe(entry);
    item.append(when, what, detail);
    list.appendChild(item);
  }
}

async function loadResources() {
  const group = state.selected;
  if (!group) return;
  const query = new URLSearchParams({ q: state.filter, limit: "500" });
  const reply = await fetch(`/api/groups/${encodeURIComponent(group)}?${query}`);
  if (!reply.ok) return;
  const page = await reply.json();
  if (group === state.selected) {
    renderKeyspaces(page.keyspaces);
    renderResources(page);
  }
}

function renderDetail(summary) {
  const group = summary.groups.find((g) => g.group === state.selected);
  $("detail").hidden = !group;
  if (!group) return;
  $("detail-title").textContent = `${group.group} · ${group.state} · generation ${group.generation ?? "?"}`;
  renderMembers(group);
  loadResources();
}

function render(summary) {
  state.summary = summary;
  $("coordinator").textContent = summary.coordinator;
  $("updated").textContent = summary.time ? `updated ${clock(summary.time)}` : "";
  const error = $("error");
  error.hidden = !summary.error;
  error.textContent = summary.error ? `coordinator not readable: ${summary.error}` : "";
  if (!state.selected && summary.groups.length) state.selected = summary.groups[0].group;
  renderGroups(summary);
  renderDetail(summary);
  renderTimeline(summary);
}

function select(group) {
  state.selected = group;
  if (state.summary) render(state.summary);
}

function connect() {
  const source = new EventSource("/api/stream");
  source.onopen = () => {
    $("status").dataset.state = "live";
    $("status").textContent = "live";
  };
  source.onmessage = (event) => render(JSON.parse(event.data));
  source.onerror = () => {
    $("status").dataset.state = "lost";
    $("status").textContent = "reconnecting…";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  $("filter").addEventListener("input", (event) => {
    state.filter = event.target.value;
    loadResources();
  });
  connect();
});
