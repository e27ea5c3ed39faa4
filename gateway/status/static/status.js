// The status page: polls /status/api/state and redraws (no library, no build step).
"use strict";

const POLL_MS = 2000;
let previous = null;  // the last document: CPU % is the CPU seconds between two of them

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function ms(value) {
  if (value === null || value === undefined) return "-";
  return value >= 1000 ? `${(value / 1000).toFixed(1)}s` : `${Math.round(value)}ms`;
}

function bytes(value) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i += 1; }
  return `${value.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function port(url) {
  const match = /:(\d+)\/?$/.exec(url || "");
  return match ? match[1] : url;
}

function group(upstreams) {
  // host -> card -> vLLM url -> [PaddleX]
  const hosts = new Map();
  for (const u of upstreams) {
    const host = u.host ?? "-";
    const card = u.card ?? "-";
    if (!hosts.has(host)) hosts.set(host, new Map());
    const cards = hosts.get(host);
    if (!cards.has(card)) cards.set(card, new Map());
    const vllms = cards.get(card);
    if (!vllms.has(u.vllm)) vllms.set(u.vllm, []);
    vllms.get(u.vllm).push(u);
  }
  return hosts;
}

function paddlexChip(u) {
  const failed = (u.requests?.error ?? 0) + (u.requests?.timeout ?? 0);
  const title = `${u.container || u.url}\nstate ${u.state}\nin flight ${u.in_flight}` +
    `\np50 ${ms(u.latency_ms?.p50)} p99 ${ms(u.latency_ms?.p99)}\nerrors ${failed}` +
    (u.last_error ? `\nlast error: ${u.last_error}` : "");
  return `<span class="chip paddlex ${esc(u.state)}" data-url="${esc(u.url)}" ` +
    `data-state="${esc(u.state)}" title="${esc(title)}">:${esc(port(u.url))} ` +
    `<span class="state">${esc(u.state)}</span> ${esc(u.in_flight)} ` +
    `<span class="muted">${ms(u.latency_ms?.p50)}/${ms(u.latency_ms?.p99)}` +
    `${failed ? ` err ${failed}` : ""}</span></span>`;
}

function vllmCell(url, v) {
  const stats = v.state === "healthy"
    ? ` run ${v.running ?? 0} wait ${v.waiting ?? 0} kv ${Math.round((v.kv_cache ?? 0) * 100)}%`
    : "";
  return `<span class="chip vllm ${esc(v.state)}" data-url="${esc(url)}" data-state="${esc(v.state)}">` +
    `vLLM :${esc(port(url))} <span class="state">${esc(v.state)}</span>` +
    `<span class="muted">${esc(stats)}</span></span>`;
}

function drawFleet(doc) {
  const parts = [];
  for (const [host, cards] of group(doc.upstreams)) {
    let healthy = 0, total = 0;
    for (const vllms of cards.values()) for (const list of vllms.values()) {
      total += list.length;
      healthy += list.filter((u) => u.state === "healthy").length;
    }
    parts.push(`<div class="host" data-host="${esc(host)}"><h2>host ${esc(host)}` +
      `<span class="muted">${healthy}/${total} PaddleX healthy</span></h2>`);
    for (const [card, vllms] of cards) {
      parts.push(`<div class="card" data-card="${esc(card)}"><b>card ${esc(card)}</b><div>`);
      for (const [url, list] of vllms) {
        const v = doc.vllm[url] || { state: "unknown" };
        parts.push(`<div class="vllm">${vllmCell(url, v)}<div class="chips">` +
          `${list.map(paddlexChip).join("")}</div></div>`);
      }
      parts.push("</div></div>");
    }
    parts.push("</div>");
  }
  document.getElementById("fleet").innerHTML = parts.join("");
}

function drawQueue(doc) {
  const rows = doc.queue.waiting.map((w) =>
    `<tr><td>${esc(w.priority)}</td><td>${esc(w.token)}</td><td>${esc(w.count)}</td></tr>`);
  document.getElementById("queue").innerHTML = `<p>${esc(doc.queue.depth)} waiting ` +
    `(mode ${esc(doc.mode)}${doc.panic ? ", PANIC" : ""})</p>` +
    (rows.length ? `<table><tr><th>priority</th><th>token</th><th>n</th></tr>${rows.join("")}</table>` : "");
}

function drawJobs(doc) {
  const el = document.getElementById("jobs");
  const jobs = doc.jobs;
  if (!jobs) { el.innerHTML = '<p class="muted">no job store</p>'; return; }
  const rows = jobs.running.map((j) =>
    `<tr><td title="${esc(j.id)}">${esc(j.id.slice(0, 10))}</td><td>${esc(j.tenant ?? "-")}</td>` +
    `<td><progress max="${esc(j.pages || 1)}" value="${esc(j.done)}"></progress> ` +
    `${esc(j.done)}/${esc(j.pages)}</td></tr>`);
  el.innerHTML = `<p>pending ${jobs.jobs.pending}, running ${jobs.jobs.running}, ` +
    `done ${jobs.jobs.done}, failed ${jobs.jobs.failed}<br>pages waiting ${jobs.pages_waiting}, ` +
    `oldest ${Math.round(jobs.oldest_waiting_s)}s<br>disk free ${bytes(jobs.disk_free_bytes)} ` +
    `of ${bytes(jobs.disk_total_bytes)}</p>` +
    (rows.length ? `<table><tr><th>job</th><th>token</th><th>pages</th></tr>${rows.join("")}</table>` : "");
}

function drawHeader(doc) {
  const states = {};
  for (const u of doc.upstreams) states[u.state] = (states[u.state] || 0) + 1;
  document.getElementById("summary").textContent =
    Object.entries(states).map(([s, n]) => `${n} ${s}`).join(", ") || "no upstreams";
  const g = doc.gateway;
  let cpu = "";
  if (previous) {
    const seconds = doc.time - previous.time;
    if (seconds > 0) cpu = `CPU ${Math.round(((g.cpu_seconds - previous.gateway.cpu_seconds) / seconds) * 100)}% `;
  }
  document.getElementById("gateway").textContent =
    `gateway: ${cpu}RSS ${bytes(g.rss_bytes)} (${g.processes} processes)`;
  document.getElementById("updated").textContent = `updated ${new Date(doc.time * 1000).toLocaleTimeString()}`;
}

async function poll() {
  try {
    const answer = await fetch("/status/api/state", { credentials: "same-origin", cache: "no-store" });
    if (answer.status === 401) { window.location.replace("/status/login"); return; }
    const doc = await answer.json();
    drawFleet(doc);
    drawQueue(doc);
    drawJobs(doc);
    drawHeader(doc);
    previous = doc;
    document.body.dataset.loaded = "1";
  } catch (error) {
    document.getElementById("updated").textContent = `update failed: ${error}`;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
