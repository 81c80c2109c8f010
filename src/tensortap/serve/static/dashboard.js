// The tensortap dashboard: three views (runs, one run, compare) over the JSON API, drawn
// with plotly.js. Every chart follows the run live by polling; nothing here writes anywhere.
"use strict";

// the colours of every page, the static report's too (/static/colours.js, made from
// tensortap.report._colours)
const COLOURS = window.TENSORTAP_COLOURS;
const BAD = COLOURS.bad;
const SEVERITY = COLOURS.severity;
const PALETTE = COLOURS.palette;
// a chart's line colours: by mode where each line's mode is drawn once (TRAIN and EVAL look the
// same on every page), else the palette in order (as report._colours.line_colours)
function lineColours(modes) {
  const known = modes.filter((m) => m != null && m in COLOURS.mode);
  if (known.length === modes.length && new Set(known).size === known.length) {
    return known.map((m) => COLOURS.mode[m]);
  }
  return modes.map((_, i) => PALETTE[i % PALETTE.length]);
}
const GAP_TEXT = { nan: "NaN", inf: "+Inf", "-inf": "-Inf", nonfinite: "NaN/Inf" };

const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
// text for plotly, which renders <a href>, <b>, <br> in names, titles, tick labels and hover
// text: a tensor's or a run's name is shown as it is, never as markup (nor a link)
const plain = (s) => String(s ?? "").replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "-");
const main = () => document.getElementById("main");

// plotly.js (3.5 MB) is loaded after the first requests, not before them: starting it holds
// the page's one thread for a second or more, so a run's page first draws the charts on
// screen as plain SVG (quickChart) and opens the gate then (or after GATE_MS without a chart
// to draw); other pages open it at once (the runs page never needs plotly.js).
const GATE_MS = 1500;
let plotlyGate = Promise.resolve();
let openPlotlyGate = () => {};
function gatePlotly() {
  plotlyGate = new Promise((resolve) => { openPlotlyGate = resolve; setTimeout(resolve, GATE_MS); });
}
let plotlyLoading = null;
function plotlyReady() {
  if (window.Plotly) return Promise.resolve();
  plotlyLoading ||= plotlyGate.then(() => new Promise((resolve, reject) => {
    const script = document.createElement("script");
    // the server names it by its content's hash (the browser keeps it for good)
    const named = document.querySelector('meta[name="tensortap-plotly"]');
    script.src = named ? named.content : "/static/plotly.min.js";
    script.onload = resolve;
    script.onerror = () => reject(new Error("plotly.js did not load"));
    document.head.appendChild(script);
  }));
  return plotlyLoading;
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// Poll ``fn`` every ``ms``: never two at once, errors shown in ``where`` and retried.
function every(ms, fn, where) {
  const tick = async () => {
    try {
      await fn();
      if (where) where.textContent = "";
    } catch (err) {
      if (where) where.textContent = `could not update: ${err.message}`;
    }
    setTimeout(tick, ms);
  };
  tick();
}

function statusSpan(status, severity) {
  const text = severity ? `${status} (${severity})` : status;
  return `<span class="${esc(status)} ${esc(severity || "")}">${esc(text)}</span>`;
}

// ---------------------------------------------------------------- verdicts
// One diagnosis per run: healthy, unknown, or the root cause with its chain (a job's summary).
function verdictSpan(d) {
  const cls = d.verdict === "problem" || d.verdict === "failed" ? "problem" : d.verdict === "healthy" ? "ok" : "warning";
  return `<span class="${cls}">${esc(d.headline)}</span>`;
}

// "step N" as a link to the charts at that step (the run page zooms them there), or as text
// where the step is not a number
function stepLink(step) {
  return Number.isInteger(step) ? `<a href="#curves" class="step" data-step="${esc(step)}">step ${esc(step)}</a>`
    : `step ${esc(step)}`;
}

// The first cause in full (what to try, its evidence); the other problems folded under it, so
// that the charts still start near the top of a run's page
function diagnosisHtml(d) {
  if (!d) return "";
  const chain = (p, i) => `${i ? `<p>also: ${verdictSpan({verdict: "problem", headline: p.headline})}</p>` : ""}
    <p class="muted">try: ${esc(p.fix)}</p><ul>${[...p.evidence, ...p.consequences].map((e) =>
      `<li>${stepLink(e.step)}, ${esc(e.rule)}: ${esc(e.message)}</li>`).join("")}</ul>`;
  const [first, ...others] = d.problems;
  const more = others.length ? `<details><summary>${esc(others.length)} more ` +
    `problem${others.length > 1 ? "s" : ""}</summary>${others.map((p) => chain(p, 1)).join("")}</details>` : "";
  return `<p>diagnosis: ${verdictSpan(d)}</p>${first ? chain(first, 0) : ""}${more}`;
}

// ---------------------------------------------------------------- runs
// The runs table: one row per run, the rows of `tensortap jobs` (/api/table: read, sorted,
// filtered and grouped by the server's tensortap.jobs._runs, never again here). A click on a
// header sorts by it (again: the other way); grouping by a hyperparameter shows one row per
// value (its runs, verdicts, mean and spread of the last loss) above its runs.
const fmt = (v) => (v == null ? "-" : typeof v === "number" ? String(+v.toPrecision(4)) : String(v));
function duration(s) {
  if (s == null) return "-";
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} m`;
}
const VERDICT_CLASS = { healthy: "ok", problem: "problem", failed: "problem", unreadable: "problem" };
function verdictCell(r) {
  const cls = VERDICT_CLASS[r.verdict] || "warning";
  return `<span class="verdict ${cls}" title="${esc(r.headline)}">${esc(r.verdict_text)}</span>`;
}
const RUN_COLUMNS = [  // [sort key, header, cell]
  ["verdict", "verdict", verdictCell],
  ["name", "run", (r) => `<a href="/run/${esc(r.id)}">${esc(r.name)}</a>` +
    (r.problems.length ? ` <span class="warning" title="${esc(r.problems.join("; "))}">` +
      `(${esc(r.problems.length)} damaged part${r.problems.length > 1 ? "s" : ""})</span>` : "")],
  ["status", "status", (r) => statusSpan(r.status)],
  ["steps", "steps", (r) => esc(fmt(r.steps))],
  ["duration", "duration", (r) => esc(duration(r.duration))],
  ["loss", "last loss", (r) => esc(fmt(r.last_loss))],
  ["best", "best metric", (r) => (r.best_metric ? `${esc(fmt(r.best_metric.value))} ` +
    `<span class="muted">${esc(r.best_metric.name)}</span>` : "-")],
  ["learning_rate", "learning rate", (r) => esc(fmt(r.hyperparameters.learning_rate))],
  ["batch_size", "batch size", (r) => esc(fmt(r.hyperparameters.batch_size))],
  ["optimizer", "optimizer", (r) => esc(fmt(r.hyperparameters.optimizer))],
  ["command", "command", (r) => `<code title="${esc(r.command)}">${esc(r.command)}</code>`],
];
function groupText(g) {
  const verdicts = Object.entries(g.verdicts).map(([v, n]) => `${n} ${v}`).join(", ");
  const loss = g.loss_mean == null ? "no last loss"
    : `last loss ${fmt(g.loss_mean)}` + (g.loss_sd == null ? "" : ` ± ${fmt(g.loss_sd)}`) +
      ` (mean ± sd of ${g.losses})`;
  return `${g.key} = ${fmt(g.value)} · ${g.runs} run${g.runs > 1 ? "s" : ""} · ${loss} · ${verdicts}`;
}

function runsPage() {
  main().innerHTML = `<p><input type="search" id="filter" placeholder="filter: name, verdict, status, command">
    <label>group by <input id="group" list="group-keys" placeholder="seed, learning_rate..." size="18"></label>
    <datalist id="group-keys"></datalist>
    <button id="compare" disabled>compare selected</button> <span class="muted" id="table-note"></span>
    <span id="err" class="problem"></span></p>
    <table id="runs"><thead><tr><th></th></tr></thead><tbody></tbody></table>
    <p class="muted" id="places"></p>`;
  const chosen = new Set();
  const button = document.getElementById("compare");
  button.onclick = () => { location.href = `/compare?ids=${[...chosen].join(",")}`; };
  let sortKey = null, descending = false, asked = 0, body = null, shownHeads = "", shownRows = [];
  let following = false;
  const group = () => document.getElementById("group").value.trim();
  const query = () => {
    const q = new URLSearchParams();
    if (sortKey) q.set("sort", (descending ? "-" : "") + sortKey);
    const text = document.getElementById("filter").value.trim();
    if (text) q.set("filter", text);
    if (group()) q.set("group", group());
    return q;
  };
  const columns = () => {
    const by = body && body.groups && body.groups.length ? body.groups[0].key : null;
    const known = RUN_COLUMNS.some(([k]) => k === by) || ["lr", "bs", "opt"].includes(by);
    if (!by || known) return RUN_COLUMNS;  // the grouped-by hyperparameter as a column too
    const cols = RUN_COLUMNS.slice();
    cols.splice(RUN_COLUMNS.length - 1, 0, [by, by, (r) => esc(fmt(r.group_value))]);
    return cols;
  };
  const draw = () => {
    if (!body) return;
    const cols = columns();
    const heads = cols.map(([k]) => k).join("\u0000");
    if (heads !== shownHeads) {  // the headers drawn again only when the columns change
      shownHeads = heads;
      document.querySelector("#runs thead tr").innerHTML = "<th></th>" + cols.map(([k, h]) =>
        `<th class="sort" data-sort="${esc(k)}">${esc(h)}</th>`).join("");
      document.querySelectorAll("#runs th[data-sort]").forEach((th) => {
        th.onclick = () => {
          descending = sortKey === th.dataset.sort ? !descending : false;
          sortKey = th.dataset.sort;
          refresh().catch((e) => { document.getElementById("err").textContent = e.message; });
        };
      });
    }
    document.querySelectorAll("#runs th[data-sort]").forEach((th) => {
      th.dataset.dir = th.dataset.sort === sortKey ? (descending ? "descending" : "ascending") : "";
    });
    const byId = new Map(body.rows.map((r) => [r.id, r]));
    const line = (r) => `<tr data-id="${esc(r.id)}" class="run${r.pending ? " pending" : ""}">` +
      `<td><input type="checkbox" ${chosen.has(r.id) ? "checked" : ""}></td>` +
      cols.map(([k, , cell]) => `<td class="c-${esc(k)}">${cell(r)}</td>`).join("") + "</tr>";
    // [key, html] a row: a run's id, or a group's place
    const rows = body.groups
      ? body.groups.flatMap((g, i) => [[`group ${i}`, `<tr class="group"><td></td><td colspan="${cols.length}">${esc(groupText(g))}</td></tr>`],
        ...g.ids.map((id) => [id, line(byId.get(id))])])
      : body.rows.map((r) => [r.id, line(r)]);
    const bind = (tr) => {
      const box = tr.querySelector("input[type=checkbox]");
      if (!box) return;
      box.onchange = () => {
        const id = box.closest("tr").dataset.id;
        if (box.checked) chosen.add(id); else chosen.delete(id);
        button.disabled = chosen.size < 2;
      };
    };
    // the rows drawn again only where they change: a poll that brings the same answer must
    // not replace a box under the pointer (a click whose press and release land on different
    // elements is lost) nor drop a hover or a selection of text, and a running job's row
    // (its duration grows) is drawn again alone, not the table around it
    const tbody = document.querySelector("#runs tbody");
    const sameRows = rows.length === shownRows.length && tbody.rows.length === rows.length &&
      rows.every(([key], i) => key === shownRows[i][0]);
    if (sameRows) {
      rows.forEach(([, html], i) => {
        if (html === shownRows[i][1]) return;
        tbody.rows[i].outerHTML = html;
        bind(tbody.rows[i]);
      });
    } else {
      tbody.innerHTML = rows.map(([, html]) => html).join("");
      [...tbody.rows].forEach(bind);
    }
    shownRows = rows;
    document.getElementById("group-keys").innerHTML = body.keys.map((k) => `<option value="${esc(k)}">`).join("");
    document.getElementById("table-note").textContent = `${body.rows.length} of ${body.total} runs` +
      (body.pending ? ` (${body.pending} still being read)` : "");
    document.getElementById("places").textContent = `looking in: ${body.places.join(", ")}` +
      Object.entries(body.errors).map(([p, e]) => `; ${p}: ${e}`).join("");
    window.tensortapRuns = { rows: body.rows.length, total: body.total, pending: body.pending,
      sort: body.sort, groups: body.groups ? body.groups.length : 0, asked,
      drawnAt: performance.now() };
  };
  // the latest question's answer only: an earlier one arriving late is dropped
  const refresh = async () => {
    const mine = ++asked;
    const answer = await api(`/api/table?${query()}`);
    if (mine !== asked) return;
    body = answer; draw();
    // rows the server has not read yet (it reads a capped number per answer): asked for
    // again at once, not at the next poll
    if (answer.pending && !following) {
      following = true;
      setTimeout(() => { following = false; now(); }, 0);
    }
  };
  const err = document.getElementById("err");
  const now = () => refresh().then(() => { err.textContent = ""; }).catch((e) => { err.textContent = e.message; });
  document.getElementById("filter").oninput = now;
  document.getElementById("group").onchange = now;
  every(2000, refresh, err);
}

// ---------------------------------------------------------------- curves
function seriesLabel(s, modes, prefix) {
  return plain((prefix ? `${prefix}: ` : "") + (modes > 1 ? `${s.name} (${s.mode})` : s.name));
}

// A rollback's branch: the session's steps are drawn from where it forks from its parent
// (its checkpoint's global step in the parent), and the parent's steps after the fork, which
// the rollback abandoned, dimmed and dashed. ``forkX`` maps a global step of the worker to
// where it is drawn; ``abandoned`` says whether a branch left that step behind.
function branchesOf(sessions, worker) {
  return (sessions || []).filter((b) => b.worker === worker && b.branch_of != null &&
    Number.isFinite(b.branch_global_step)).sort((a, b) => a.step - b.step);
}
function forkX(branches, x) {
  for (let k = branches.length - 1; k >= 0; k--) {
    const b = branches[k];
    if (b.step <= x) return forkX(branches.slice(0, k), b.branch_global_step) + (x - b.step);
  }
  return x;
}
function abandoned(branches, x) {
  return branches.some((b) => b.branch_global_step <= x && x < b.step);
}
// the first global step of the session that wrote global step ``x`` (0: the first session)
function sessionAt(branches, x) {
  let at = 0;
  branches.forEach((b) => { if (b.step <= x) at = b.step; });
  return at;
}
// ``s`` split at its branches: the line kept (x drawn from the forks), one segment per
// session whose steps a rollback abandoned (never one line across sessions: each starts at
// its own fork), and each run of NaN/Inf, placed alike (``abandoned`` when a rollback undid it)
function forked(s, sessions) {
  const branches = branchesOf(sessions, s.worker);
  const keep = { x: [], y: [], global: [] }, drops = new Map();
  s.x.forEach((x, k) => {
    let to = keep;
    if (abandoned(branches, x)) {
      const at = sessionAt(branches, x);
      if (!drops.has(at)) drops.set(at, { x: [], y: [], global: [], session: at });
      to = drops.get(at);
    }
    to.x.push(forkX(branches, x)); to.y.push(s.y[k]); to.global.push(x);
  });
  const bad = s.gaps.map(([first, last, kind]) => ({ x: forkX(branches, first), first, last, kind,
    abandoned: abandoned(branches, first) }));
  const gaps = bad.filter((g) => !g.abandoned)
    .map((g) => [g.x, forkX(branches, g.last), g.kind]);
  return { line: { ...s, ...keep, gaps }, dropped: [...drops.values()], bad };
}

// The default y-range of a chart: the kept steps' values, and the abandoned ones near them
// (within one span of the kept range); farther ones (an undone step's 1.9e6 loss) are marked
// at the edge, not scaled to. Null when nothing is left out (plotly's own range then).
function keptRange(kept, dropped) {
  const ys = kept.flat().filter(Number.isFinite);
  const others = dropped.flat().filter(Number.isFinite);
  if (!ys.length || !others.length) return null;
  let lo = Math.min(...ys), hi = Math.max(...ys);
  const span = (hi - lo) || Math.abs(hi) || 1;
  const near = others.filter((y) => y >= lo - span && y <= hi + span);
  if (near.length === others.length) return null;
  lo = Math.min(lo, ...near); hi = Math.max(hi, ...near);
  const pad = 0.05 * ((hi - lo) || Math.abs(hi) || 1);
  return [lo - pad, hi + pad];
}

// Each bad step of a line (a NaN/Inf value: it has no y; an abandoned value off the range)
// as a mark at the plot's top or bottom edge (a hidden axis of 0 to 1 over the plot), at its
// step, saying on hover what it was.
function badMarks(label, color, bad, dropped, range) {
  const x = [], y = [], symbol = [], text = [];
  const undone = (g) => (g.abandoned ? ", abandoned by a rollback" : "");
  bad.forEach((g) => {
    const steps = g.first === g.last ? `global step ${g.first}` : `global steps ${g.first}-${g.last}`;
    x.push(g.x); y.push(g.kind === "-inf" ? 0 : 1);
    symbol.push(g.kind === "inf" ? "triangle-up" : g.kind === "-inf" ? "triangle-down" : "x");
    text.push(`${label}: ${GAP_TEXT[g.kind]} at ` +
      (g.x === g.first ? `${steps}${undone(g)}` : `step ${g.x} (${steps}${undone(g)})`));
  });
  if (range) {
    dropped.forEach((d) => d.y.forEach((v, k) => {
      if (!Number.isFinite(v) || (v >= range[0] && v <= range[1])) return;
      x.push(d.x[k]); y.push(v > range[1] ? 1 : 0);
      symbol.push(v > range[1] ? "triangle-up-open" : "triangle-down-open");
      const value = Math.abs(v) >= 1e4 ? v.toExponential(2) : String(+v.toPrecision(4));
      text.push(`${label}: ${value} at step ${d.x[k]} (global step ${d.global[k]}, ` +
        "abandoned by a rollback; off the scale of the kept steps)");
    }));
  }
  if (!x.length) return null;
  return { x, y, yaxis: "y2", name: `${label}: bad steps (NaN, Inf, undone), at the edge`,
    legendgroup: label, type: "scatter", mode: "markers", cliponaxis: false, showlegend: false,
    marker: { color: BAD, size: 9, symbol, line: { color, width: 1 } },
    hovertext: text, hoverinfo: "text", meta: "bad" };
}

// Each step a guard tripped on (its update skipped, or only recorded), as a mark at the plot's
// top edge at that step (drawn from the forks, as the lines are), saying why on hover.
function tripMarks(trips, sessions) {
  const x = [], y = [], symbol = [], text = [];
  (trips || []).forEach((t) => {
    if (!Number.isFinite(t.global_step) || t.decision != null) return;  // decisions: below
    x.push(forkX(branchesOf(sessions, t.worker), t.global_step)); y.push(1);
    symbol.push(t.skipped ? "diamond" : "diamond-open");
    text.push(`guard at global step ${t.global_step}: ` +
      (t.skipped ? "the update was skipped (undone)" : "tripped (recorded only)") +
      (t.reason ? `: ${plain(t.reason)}` : ""));
  });
  if (!x.length) return null;
  return { x, y, yaxis: "y2", name: "guard: steps skipped", type: "scatter", mode: "markers",
    cliponaxis: false, showlegend: false, marker: { color: SEVERITY.warning, size: 10, symbol },
    hovertext: text, hoverinfo: "text", meta: "trips" };
}
// What a rollback decided (restore and skip, go on, remedy, stop) and from what evidence:
// ``rollback: stop (numerics in blocks.2, step 61)``, as the static report labels it
function decisionText(t) {
  const why = [t.evidence || "no replay"];
  if (t.layer) why.push(`in ${t.layer}`);
  const action = t.remedy ? `${t.action} ${t.remedy}` : String(t.action ?? t.decision);
  return { action, why: why.join(" ") };
}

// Each rollback decision as a star at the plot's top edge at its bad step's global step (drawn
// from the forks, as the lines are), in the colour the static report marks it with, saying on
// hover what was decided and why
function decisionMarks(trips, sessions) {
  const x = [], y = [], text = [];
  (trips || []).forEach((t) => {
    if (!Number.isFinite(t.global_step) || t.decision == null) return;
    const { action, why } = decisionText(t);
    x.push(forkX(branchesOf(sessions, t.worker), t.global_step)); y.push(1);
    text.push(`rollback at global step ${t.global_step}: ${plain(action)} ` +
      `(${plain(why)}, step ${plain(t.step ?? "?")})` + (t.reason ? `: ${plain(t.reason)}` : ""));
  });
  if (!x.length) return null;
  return { x, y, yaxis: "y2", name: "rollback decisions", type: "scatter", mode: "markers",
    cliponaxis: false, showlegend: false,
    marker: { color: SEVERITY.problem, size: 12, symbol: "star" },
    hovertext: text, hoverinfo: "text", meta: "decisions" };
}

// the rollback decisions as a short list under the curves (step, decision, reason), every
// text from the run escaped
function decisionsHtml(trips) {
  const rows = (trips || []).filter((t) => t.decision != null).map((t) => {
    const { action, why } = decisionText(t);
    return `<li><span class="decision-step">step ${esc(t.step ?? "?")}</span> ` +
      `<span class="muted">(global step ${esc(t.global_step)})</span>: ` +
      `<span class="decision problem">${esc(action)}</span> ` +
      `<span class="decision-reason">${esc(why)}${t.reason ? `: ${esc(t.reason)}` : ""}</span></li>`;
  });
  return rows.length ? `<p>Rollback decisions, from what the replays said about the failed steps:</p>` +
    `<ul id="decision-list">${rows.join("")}</ul>` : "";
}

// the global steps whose update a guard skipped, by worker: their values (a 1e6 loss the
// step computed before it was undone) do not set the default y-range
function skippedSteps(trips) {
  const out = new Map();
  (trips || []).filter((t) => t.skipped && Number.isFinite(t.global_step)).forEach((t) => {
    if (!out.has(t.worker)) out.set(t.worker, new Set());
    out.get(t.worker).add(t.global_step);
  });
  return out;
}

// where a resumed session of the run starts: "↻ session 1", on the curves
function sessionText(s) {
  if (s.branch_of != null) {
    return `session ${s.index} of ${s.worker} is a branch of session ${s.branch_of} from ` +
      `${s.branch_mode || "TRAIN"} step ${s.branch_step} (global step ${s.branch_global_step}): ` +
      `${s.branch_reason || "rolled back"}; its steps are drawn from the fork, the steps it ` +
      `abandoned dashed; started ${when(s.started)} on ${s.host ?? "?"} pid ${s.pid ?? "?"}`;
  }
  const rolled = (s.rolled_back || []).map(([m, a, b]) => `${m} steps ${a}-${b} counted again`);
  return `session ${s.index} of ${s.worker} resumed at step ${s.step} (the trial held steps up to ` +
    `${s.resumed_from_step}), started ${when(s.started)} on ${s.host ?? "?"} pid ${s.pid ?? "?"}` +
    (s.step_source ? `; steps counted by ${s.step_source}` : "") + (rolled.length ? `; ${rolled.join(", ")}` : "");
}

// A chart drawn without plotly.js (while it loads): its title and each line as an SVG
// polyline (a line breaks at its NaN/Inf gaps), built with DOM calls, never from markup.
function quickChart(div, title, lines) {
  const NS = "http://www.w3.org/2000/svg", W = div.clientWidth || 900, H = 340, P = 56;
  const xs = lines.flatMap((l) => l.x), ys = lines.flatMap((l) => l.y).filter(Number.isFinite);
  if (!xs.length || !ys.length) return;
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => P + ((x - x0) / ((x1 - x0) || 1)) * (W - 2 * P);
  const sy = (y) => H - P - ((y - y0) / ((y1 - y0) || 1)) * (H - 2 * P);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "quick");
  svg.setAttribute("width", String(W)); svg.setAttribute("height", String(H));
  const text = (x, y, words, anchor) => {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", String(x)); t.setAttribute("y", String(y));
    t.setAttribute("font-size", "12"); t.setAttribute("text-anchor", anchor);
    t.textContent = words;  // text, not markup
    svg.appendChild(t);
  };
  text(W / 2, 18, title, "middle");
  text(P, H - P + 16, String(x0), "start");
  text(W - P, H - P + 16, `${x1} (global step)`, "end");
  text(P - 4, P, String(+y1.toPrecision(3)), "end");
  text(P - 4, H - P, String(+y0.toPrecision(3)), "end");
  const colours = lineColours(lines.map((l) => l.mode));
  lines.forEach((l, i) => {
    let points = [];
    const flush = () => {
      if (points.length) {
        const line = document.createElementNS(NS, "polyline");
        line.setAttribute("points", points.join(" "));
        line.setAttribute("fill", "none");
        line.setAttribute("stroke", colours[i]);
        svg.appendChild(line);
      }
      points = [];
    };
    let g = 0;
    l.x.forEach((x, k) => {
      while (g < l.gaps.length && l.gaps[g][1] < x) { flush(); g++; }
      if (Number.isFinite(l.y[k])) points.push(`${sx(x).toFixed(1)},${sy(l.y[k]).toFixed(1)}`);
    });
    flush();
  });
  div.replaceChildren(svg);
}

// How a run's charts are drawn (the controls above them): the EMA's weight (0: off), a log
// y axis, and the x-range every chart shares (null: each its own)
const DEFAULT_VIEW = { smoothing: 0, log: false, xRange: null, wall: null, epochs: null };

// A global step's wall time (ms, for a date axis) from the run's clock (serve._data.clock:
// steps and their wall times in seconds): between two of its steps, on the line through them;
// before the first or after the last, on the nearest two (one alone: its time)
function wallOf(clock, step) { return along(clock.steps, clock.wall, step) * 1000; }

// the value at ``step`` of a line through the points (s[i], w[i]), steps ascending
function along(s, w, step) {
  const n = s.length;
  if (n === 1) return w[0];
  let lo = 0, hi = n - 1;
  if (step <= s[0]) hi = 1;
  else if (step >= s[n - 1]) lo = n - 2;
  else {
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (s[mid] <= step) lo = mid; else hi = mid; }
  }
  const rate = (w[hi] - w[lo]) / ((s[hi] - s[lo]) || 1);
  return w[lo] + rate * (step - s[lo]);
}

// the figure's steps moved to wall times: every trace's x, and the shapes and labels placed
// on the x axis (the findings, the NaN bands, the sessions); the axis a date axis
function onWallTime(traces, layout, clock) {
  const at = (x) => (typeof x === "number" ? wallOf(clock, x) : x);
  traces.forEach((t) => { if (t.x) t.x = t.x.map(at); });
  (layout.shapes || []).forEach((sh) => {
    if (sh.xref === "x") { sh.x0 = at(sh.x0); sh.x1 = at(sh.x1); }
  });
  (layout.annotations || []).forEach((a) => { if (a.xref === "x") a.x = at(a.x); });
  if (layout.xaxis.range) layout.xaxis.range = layout.xaxis.range.map(at);
  layout.xaxis.type = "date";
  layout.xaxis.title = { text: "wall time" };
}

// the figure's steps moved to epochs (the run's saved ``epoch`` series, between its points on
// the line through them), as ``onWallTime`` moves them to wall times
function onEpochs(traces, layout, clock) {
  const at = (x) => (typeof x === "number" ? along(clock.epoch_steps, clock.epoch, x) : x);
  traces.forEach((t) => { if (t.x) t.x = t.x.map(at); });
  (layout.shapes || []).forEach((sh) => {
    if (sh.xref === "x") { sh.x0 = at(sh.x0); sh.x1 = at(sh.x1); }
  });
  (layout.annotations || []).forEach((a) => { if (a.xref === "x") a.x = at(a.x); });
  if (layout.xaxis.range) layout.xaxis.range = layout.xaxis.range.map(at);
  layout.xaxis.title = { text: "epoch" };
}

// TensorBoard's smoothing: an exponential moving average debiased by the weight given to its
// zero start (1 - w^n after n finite values), so the first points are not pulled to 0; a value
// that is not finite (a gap) is kept as it is and left out of the average; a constant line
// stays as it is (tensorboard/webapp/widgets/line_chart_v2/lib/data_transformer.ts)
function smooth(ys, weight) {
  const finite = ys.filter(Number.isFinite);
  if (!weight || !finite.length || finite.every((v) => v === finite[0])) return ys.slice();
  let last = 0, n = 0;
  return ys.map((y) => {
    if (!Number.isFinite(y)) return y;
    last = last * weight + (1 - weight) * y;
    n += 1;
    return last / (weight === 1 ? 1 : 1 - weight ** n);
  });
}

// plotly traces and layout of ``series`` (several runs' when compared), with gaps, findings
// and where a resumed session starts; ``view`` (DEFAULT_VIEW's keys) smooths the lines (the
// raw ones faint behind), sets a log y axis and the shared x-range
function curveFigure(title, series, findings, names, sessions, trips, view = DEFAULT_VIEW) {
  const modes = new Set(series.map((s) => s.mode)).size;
  const traces = [], shapes = [], annotations = [];
  let finite = 0, lastX = 0;
  const branched = (sessions || []).some((b) => b.branch_of != null);
  const drawn = series.map((given) => forked(given, sessions));
  const skipped = skippedSteps(trips);
  const undone = (d) => skipped.get(d.line.worker) || new Set();
  const range = keptRange(
    drawn.map((d) => d.line.y.filter((_, k) => !undone(d).has(d.line.global[k]))),
    [...drawn.flatMap((d) => d.dropped.map((p) => p.y)),
      ...drawn.map((d) => d.line.y.filter((_, k) => undone(d).has(d.line.global[k])))]);
  const marks = [];
  const colours = names ? drawn.map((_, i) => PALETTE[i % PALETTE.length])  // runs compared
    : lineColours(drawn.map((d) => d.line.mode));
  drawn.forEach(({ line: s, dropped, bad }, i) => {
    const color = colours[i];
    finite += s.y.length;
    lastX = Math.max(lastX, ...s.x.slice(-1), ...s.gaps.map((g) => g[1]));
    // a line never bridges a NaN: break it at each gap
    const x = [], y = [];
    let g = 0;
    s.x.forEach((xi, k) => {
      while (g < s.gaps.length && s.gaps[g][1] < xi) {
        if (k > 0) { x.push(s.gaps[g][0]); y.push(null); }
        g++;
      }
      x.push(xi); y.push(s.y[k]);
    });
    const label = seriesLabel(s, modes, names && names[i]);
    const lineMode = s.y.length < 40 ? "lines+markers" : "lines";
    if (view.smoothing > 0) {  // the raw line faint behind, the smoothed one over it
      traces.push({ x, y, name: `${label} (raw)`, type: "scatter", legendgroup: label,
        showlegend: false, mode: lineMode, opacity: 0.25, line: { color, width: 1.5 },
        marker: { size: 4, color }, connectgaps: false, meta: "raw" });
      traces.push({ x, y: smooth(y, view.smoothing), name: label, type: "scatter",
        legendgroup: label, mode: "lines", line: { color, width: 2 }, connectgaps: false,
        meta: "smoothed", customdata: y,
        hovertemplate: "step %{x}: %{y:.4g} smoothed (%{customdata:.4g} raw)" });
    } else {
      traces.push({ x, y, name: label, type: "scatter", legendgroup: label,
        mode: lineMode, line: { color, width: 2 },
        marker: { size: 6, color }, connectgaps: false });
    }
    // what each rollback abandoned: one dimmed, dashed trace per session, from its fork
    dropped.forEach((d, k) => {
      lastX = Math.max(lastX, ...d.x);
      traces.push({ x: d.x, y: d.y, name: `${label} (abandoned by a rollback)`, legendgroup: label,
        showlegend: k === 0, type: "scatter", mode: d.y.length < 40 ? "lines+markers" : "lines",
        opacity: 0.35, line: { color, width: 1.5, dash: "dash" }, marker: { size: 4, color },
        customdata: d.global, meta: "abandoned",
        hovertemplate: "step %{x} (global step %{customdata}, abandoned): %{y}" });
    });
    const mark = badMarks(label, color, bad, dropped, range);
    if (mark) { marks.push(mark); lastX = Math.max(lastX, ...mark.x); }
    s.gaps.forEach(([first, last, kind], k) => {
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: first - 0.5, x1: last + 0.5, y0: 0, y1: 1,
        fillcolor: BAD, opacity: 0.18, line: { width: 0 }, layer: "below" });
      if (k === 0) {
        annotations.push({ x: first, xref: "x", y: 0.02 + 0.07 * i, yref: "paper", xanchor: "left",
          text: `${GAP_TEXT[kind]} from step ${first}`, showarrow: false, font: { color: BAD, size: 11 },
          hovertext: `${seriesLabel(s, modes)}: ${GAP_TEXT[kind]} at steps ${first} to ${last}` });
      }
    });
  });
  const tripped = tripMarks(trips, sessions);
  if (tripped) { marks.push(tripped); lastX = Math.max(lastX, ...tripped.x); }
  const decided = decisionMarks(trips, sessions);
  if (decided) { marks.push(decided); lastX = Math.max(lastX, ...decided.x); }
  traces.push(...marks);  // over the lines
  const flags = [];  // each finding's label: placed in lanes once drawn (placeFlags)
  (findings || []).forEach((f) => {
    const color = SEVERITY[f.severity] || SEVERITY.problem;
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: f.step, x1: f.step, y0: 0, y1: 1,
      line: { color, width: 1.5, dash: "dash" } });
    const label = `⚑ ${plain(f.rule)}`;
    const hover = `${plain(f.rule)} (${plain(f.severity)}) at step ${plain(f.step)}: ${plain(f.message)}`;
    flags.push({ index: annotations.length, label, hover });
    annotations.push({ x: f.step, xref: "x", y: 1, yref: "paper", xanchor: "left",
      text: label, showarrow: false, font: { color, size: FLAG_FONT }, captureevents: true, visible: true,
      bgcolor: "rgba(255,255,255,0.85)",  // readable over the findings' dashed lines
      hovertext: hover, name: "finding" });
  });
  const stacked = new Map();  // marks at one x (rollbacks to one step) stand one above another
  (sessions || []).forEach((s) => {
    const fork = s.branch_of != null && Number.isFinite(s.branch_global_step);
    // a branch starts where it forks (drawn through its worker's earlier branches)
    const at = fork ? forkX(branchesOf(sessions, s.worker).filter((b) => b.step < s.step),
      s.branch_global_step) - 0.5 : s.step - 0.5;
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1,
      line: { color: SEVERITY.advice, width: 1.5, dash: "dot" } });
    const k = stacked.get(at) || 0;
    stacked.set(at, k + 1);
    annotations.push({ x: at, xref: "x", y: 0.01 + 0.08 * k, yref: "paper", xanchor: "left",
      yanchor: "bottom",
      text: fork ? `⑂ session ${plain(s.index)}: rolled back to step ${plain(s.branch_step)}`
        : `↻ session ${plain(s.index)}`,
      showarrow: false, font: { color: SEVERITY.advice, size: 11 },
      captureevents: true, hovertext: plain(sessionText(s)), name: fork ? "branch" : "session" });
  });
  if (!finite && series.length) {
    annotations.push({ x: 0.5, y: 0.5, xref: "paper", yref: "paper", showarrow: false,
      text: "no finite value", font: { color: BAD, size: 16 } });
  }
  const layout = {
    title: { text: plain(title) }, uirevision: title, height: 380, margin: { l: 60, r: 20, t: 40, b: 40 },
    xaxis: { title: { text: branched ? "step (a rollback's branch drawn from its fork)" : "global step" },
      nticks: 10 }, yaxis: { nticks: 8, automargin: true },
    legend: { orientation: "h", y: -0.18 }, shapes, annotations, hovermode: "closest",
    meta: { flags },
  };
  if (view.log) {
    layout.yaxis.type = "log";  // plotly leaves out the values <= 0
    // a log axis's range is in decades: the kept range where it is positive, else plotly's
    if (range && range[0] > 0) layout.yaxis.range = range.map(Math.log10);
  } else if (range) layout.yaxis.range = range;
  if (marks.length) {  // the edge the marks stand on: 0 the bottom, 1 the top
    layout.yaxis2 = { overlaying: "y", range: [0, 1], visible: false, fixedrange: true };
  }
  // every chart of the page over the same steps: a finding's flag at the same place on each
  if (view.xRange) layout.xaxis.range = view.xRange.slice();
  if (!finite) { layout.yaxis.range = [0, 1]; layout.xaxis.range = [-0.5, lastX + 0.5]; }
  if (view.wall) onWallTime(traces, layout, view.wall);
  else if (view.epochs) onEpochs(traces, layout, view.epochs);
  return { traces, layout };
}

// A finding's label stands in one of FLAG_LANES lanes down from the plot's top edge: the first
// lane where it clears, in pixels at the drawn width and x-range, every label already there
// (right-aligned to its step where it would pass the plot's right edge). A finding that finds
// no lane free joins the label nearest it on the left, which then counts it ("⚑ LossSpike +2")
// and lists it on hover: two labels never overprint, and every finding stays on the chart.
const FLAG_FONT = 11, FLAG_LANES = 5, FLAG_LANE = 0.07, FLAG_GAP = 6;
let textMeasure = null;
function textWidth(text, size, family) {
  textMeasure ||= document.createElement("canvas").getContext("2d");
  textMeasure.font = `${size}px ${family}`;
  return textMeasure.measureText(text).width;
}

// each finding label's place ({annotation index: {visible, y, xanchor, text, hovertext}}) on
// the x axis ``ax`` of a drawn figure (its pixels: ``ax._length`` wide)
function flagLanes(ax, annotations, flags, family) {
  const plotWidth = ax._length, ends = new Array(FLAG_LANES).fill(-Infinity), placed = [];
  const items = flags.map((f) => ({ ...f, px: ax.d2p(annotations[f.index].x) }))
    .sort((a, b) => a.px - b.px);
  const offRange = (f) => !Number.isFinite(f.px) || f.px < 0 || f.px > plotWidth;
  items.forEach((f) => {
    f.members = [f]; f.lane = null; f.anchor = "left";
    if (offRange(f)) return;  // off the range: plotly does not draw it
    // room for the count it may gain, the text's own padding and the gap
    const width = textWidth(`${f.label} +99`, FLAG_FONT, family) + 4;
    let x0 = f.px, x1 = f.px + width;
    if (x1 > plotWidth) { x0 = f.px - width; x1 = f.px; f.anchor = "right"; }
    const lane = ends.findIndex((end) => end + FLAG_GAP <= x0);
    if (lane >= 0 || !placed.length) { f.lane = Math.max(lane, 0); ends[f.lane] = x1; placed.push(f); return; }
    placed.reduce((best, p) => (Math.abs(p.px - f.px) < Math.abs(best.px - f.px) ? p : best))
      .members.push(f);
  });
  const out = new Map();
  items.forEach((f) => {
    if (f.lane == null) { out.set(f.index, { visible: offRange(f) }); return; }
    const more = f.members.length - 1;
    out.set(f.index, { visible: true, y: 1 - FLAG_LANE * f.lane, xanchor: f.anchor,
      text: more ? `${f.label} +${more}` : f.label,
      hovertext: f.members.map((m) => m.hover).join("<br>") });
  });
  return out;
}

// the lanes of a drawn figure's finding labels worked out again (drawn, zoomed, resized), and
// given to plotly where they changed (so placing them twice changes nothing)
function placeFlags(gd) {
  const full = gd._fullLayout, given = gd.layout;
  const flags = given && given.meta && given.meta.flags;
  if (!full || !full.xaxis || !flags || !flags.length || !given.annotations) return;
  const update = {};
  flagLanes(full.xaxis, given.annotations, flags, full.font.family).forEach((place, i) => {
    Object.entries(place).forEach(([key, value]) => {
      if (given.annotations[i][key] !== value) update[`annotations[${i}].${key}`] = value;
    });
  });
  window.tensortapFlagsPlaced = (window.tensortapFlagsPlaced || 0) + 1;  // the tests look
  if (!Object.keys(update).length || gd.tensortapPlacing) return;
  gd.tensortapPlacing = true;  // the relayout's own event finds the lanes placed
  Promise.resolve(Plotly.relayout(gd, update)).catch(() => {})
    .finally(() => { gd.tensortapPlacing = false; });
}

// Plotly.react, with the figure's finding labels placed in lanes: before it on the axis drawn
// so far (a chart drawn again, a zoom's points come, keeps its labels apart), and after it,
// and whenever the figure is zoomed or resized (plotly answers both with a relayout)
function reactWithFlags(div, traces, layout, config) {
  const full = div._fullLayout, flags = layout.meta && layout.meta.flags;
  if (full && full.xaxis && flags && flags.length) {
    flagLanes(full.xaxis, layout.annotations, flags, full.font.family).forEach((place, i) => {
      Object.assign(layout.annotations[i], place);
    });
  }
  const drawn = Plotly.react(div, traces, layout, config);
  div.tensortapFlags ||= () => placeFlags(div);  // one listener, again after a purge
  div.removeListener("plotly_relayout", div.tensortapFlags);
  div.on("plotly_relayout", div.tensortapFlags);
  Promise.resolve(drawn).then(() => placeFlags(div)).catch(() => {});
  return drawn;
}

// plotly sizes a figure to its box when it draws it (and again on a window's resize only): a
// box that changes later (a neighbour placed beside it in the grid) has its figure resized, so
// that no figure is drawn past its box, over the next one
const resized = typeof ResizeObserver === "undefined" ? null : new ResizeObserver((entries) => {
  entries.forEach((e) => { if (window.Plotly && e.target._fullLayout) Plotly.Plots.resize(e.target); });
});

function ensurePlot(container, id) {
  let div = document.getElementById(id);
  if (!div) {
    div = document.createElement("div");
    div.id = id; div.className = "plot";
    container.appendChild(div);
    if (resized) resized.observe(div);
  }
  return div;
}

function drawCurves(container, series, findings, names, prefix, sessions) {
  const byCollection = {};
  series.forEach((s, i) => { (byCollection[s.collection] ||= []).push([s, names ? names[i] : null]); });
  for (const [collection, items] of Object.entries(byCollection)) {
    const { traces, layout } = curveFigure(collection, items.map((p) => p[0]), findings,
      names ? items.map((p) => p[1]) : null, sessions);
    reactWithFlags(ensurePlot(container, `${prefix}-${collection}`), traces, layout,
      { displaylogo: false, responsive: true });
  }
}

// ---------------------------------------------------------------- one run
function runId() { return decodeURIComponent(location.pathname.split("/").pop()); }

// only the rows (layers) and columns (steps) of ``matrix`` that hold something
function compact(steps, names, matrix) {
  const rows = names.map((_, i) => matrix[i].some((v) => v != null));
  const cols = steps.map((_, j) => matrix.some((row) => row[j] != null));
  return {
    steps: steps.filter((_, j) => cols[j]),
    names: names.filter((_, i) => rows[i]),
    matrix: matrix.filter((_, i) => rows[i]).map((row) => row.filter((_, j) => cols[j])),
  };
}

function healthFigure(health) {
  const figs = [];
  const g = compact(health.steps, health.gradient_names, health.gradient_norms);
  const a = compact(health.steps, health.activation_names, health.zero_share);
  // layer names are tick labels and hover text: plain text for plotly
  const h = { steps: g.steps, gradient_names: g.names.map(plain), gradient_norms: g.matrix,
    zero_steps: a.steps, activation_names: a.names.map(plain), zero_share: a.matrix };
  if (h.gradient_names.length) {
    const num = (v) => (typeof v === "number" ? v : null);
    const z = h.gradient_norms.map((row) => row.map((v) => (num(v) > 0 ? Math.log10(v) : null)));
    const zero = h.gradient_norms.map((row) => row.map((v) => (v === 0 ? 1 : null)));
    const bad = h.gradient_norms.map((row) => row.map((v) => (typeof v === "string" ? 1 : null)));
    const base = { x: h.steps, y: h.gradient_names, type: "heatmap", xgap: 0, hoverongaps: false };
    figs.push(["health-gradients", [
      { ...base, z, colorscale: [[0, "#fff7ec"], [1, "#7f0000"]], colorbar: { title: { text: "log10 ‖g‖" } },
        hovertemplate: "%{y} at step %{x}: log10 norm %{z:.3g}<extra></extra>", name: "norm" },
      { ...base, z: zero, colorscale: [[0, "#000"], [1, "#000"]], showscale: false, name: "exactly 0",
        hovertemplate: "%{y} at step %{x}: exactly 0 (a dead layer)<extra></extra>" },
      { ...base, z: bad, colorscale: [[0, BAD], [1, BAD]], showscale: false, name: "NaN/Inf",
        hovertemplate: "%{y} at step %{x}: NaN or Inf<extra></extra>" },
    ], { title: { text: "gradient norm per layer (log10)<br><sub>black: exactly 0 · red: NaN/Inf</sub>" },
      height: 200 + 20 * h.gradient_names.length, margin: { l: 220, t: 70 }, uirevision: "g",
      xaxis: { title: { text: "global step" } } }]);
  }
  if (h.activation_names.length) {
    figs.push(["health-zeros", [{ x: h.zero_steps, y: h.activation_names, type: "heatmap", hoverongaps: false,
      z: h.zero_share.map((row) => row.map((v) => (v == null ? null : 100 * v))), zmin: 0, zmax: 100,
      colorscale: [[0, "#f7fbff"], [1, "#08306b"]], colorbar: { ticksuffix: "%" },
      hovertemplate: "%{y} at step %{x}: %{z:.1f}% zeros<extra></extra>" }],
    { title: { text: "zero activations per layer<br><sub>share, absolute scale 0-100%</sub>" }, uirevision: "z",
      height: 200 + 20 * h.activation_names.length, margin: { l: 220, t: 70 },
      xaxis: { title: { text: "global step" } } }]);
  }
  return figs;
}

// ---------------------------------------------------------------- a run's charts
// One chart per series name (its modes as lines), in a grid of placeholders: a chart's data is
// asked for only while it is on screen (or near), first as buckets over the whole run, then
// from the last step the page holds (the cursor: the server sends only what is newer). At
// most PAGE charts are listed at a time, with a button for the next ones.
const PAGE = 200;  // charts listed per request (the server's cap)
const BATCH = 50;  // charts per curves request
const REBUCKET = 2400;  // points held for a line before it is asked for whole again

function chartTitle(c) { return c.statistic === "value" ? c.name : `${c.name} · ${c.statistic}`; }

// ``own``: the box of tensortap's own series (the server says which: chart.own), a closed
// <details> at the bottom of the page, so they are not drawn until it is opened
function chartGrid(id, box, note, more, own, view = { ...DEFAULT_VIEW, share: false }) {
  const charts = [];  // {name, statistic, modes, div, lines, cursor, shown, zoom, dirty}
  const byKey = new Map();
  let total = 0, match = "", marks = { findings: [], sessions: [], trips: [] }, asked = 0,
    lastStep = null, polls = 0;
  const visible = new Set();
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const chart = charts[Number(e.target.dataset.index)];
      if (e.isIntersecting) { visible.add(chart); chart.dirty = true; }
      else { visible.delete(chart); if (chart.shown) { Plotly.purge(chart.div); chart.shown = false; } }
    }
    draw();
    fetchFresh().catch(() => {});  // a chart come into view is asked for now, not at the next poll
  }, { rootMargin: "300px 0px" });

  const key = (c) => `${c.name}\u0000${c.statistic}`;
  const add = (c) => {
    if (byKey.has(key(c))) { byKey.get(key(c)).modes = c.modes; return; }
    const div = document.createElement("div");
    div.className = "plot";
    div.dataset.index = String(charts.length);
    div.dataset.name = c.name;
    div.dataset.statistic = c.statistic;
    div.id = `chart-${charts.length}`;
    const chart = { ...c, div, lines: new Map(), cursor: null, shown: false, zoom: null, dirty: true };
    div.textContent = chartTitle(c);  // until drawn: its name, as text
    charts.push(chart); byKey.set(key(c), chart);
    (c.own && own ? own.box : box).appendChild(div);
    observer.observe(div);
  };
  const list = async (offset) => {
    const q = new URLSearchParams({ offset: String(offset), limit: String(PAGE) });
    if (match) q.set("match", match);
    const body = await api(`/api/run/${id}/series?${q}`);
    total = body.total;
    body.charts.forEach(add);
  };
  const reset = () => {
    for (const c of charts) { observer.unobserve(c.div); if (c.shown) Plotly.purge(c.div); }
    charts.length = 0; byKey.clear(); visible.clear(); box.innerHTML = "";
    if (own) own.box.innerHTML = "";
  };
  const status = () => {
    const left = total - charts.length;
    more.hidden = left <= 0;
    more.textContent = `${left} more series`;
    note.textContent = total ? `${charts.length} of ${total} series` : "";
    if (own) {
      const n = charts.filter((c) => c.own).length;
      own.details.hidden = !n;
      own.note.textContent = n ? `(${n}: the facts tensortap saves for its rules, and reductions copied off a value)` : "";
    }
    if (!total) box.innerHTML = `<p class="muted" id="nocurves">waiting for a loss or a metric...</p>`;
    else document.getElementById("nocurves")?.remove();
  };
  more.onclick = async () => { await list(charts.length); status(); };

  function merge(chart, line, whole) {
    const k = `${line.mode}\u0000${line.worker}`;
    const held = chart.lines.get(k);
    if (whole || !held) { chart.lines.set(k, { ...line }); return; }
    held.x = held.x.concat(line.x); held.y = held.y.concat(line.y);
    held.gaps = held.gaps.concat(line.gaps);
    held.points += line.points; held.last = line.last; held.last_step = line.last_step;
    if (held.x.length > REBUCKET) chart.cursor = null;  // asked for whole (rebucketed) next
  }

  async function fetchCharts(group, extra) {
    for (let at = 0; at < group.length; at += BATCH) {
      const part = group.slice(at, at + BATCH);
      const q = new URLSearchParams(extra);
      part.forEach((c) => { q.append("name", c.name); q.append("stat", c.statistic); });
      q.set("limit", String(PAGE));
      asked += 1;
      const body = await api(`/api/run/${id}/curves?${q}`);
      if (body.clock) clock = body.clock;
      const next = { findings: body.findings, sessions: body.sessions, trips: body.trips };
      // a finding (or a session, a trip) that comes after a chart's last new point is drawn
      // on every chart too: each is redrawn when the marks change
      if (JSON.stringify(next) !== JSON.stringify(marks)) charts.forEach((c) => { c.dirty = true; });
      marks = next;
      lastStep = body.last_step;
      const whole = !extra.after;
      if (whole) part.forEach((c) => c.lines.clear());
      body.series.forEach((line) => {
        const chart = byKey.get(key({ name: line.name, statistic: line.statistic }));
        if (chart) merge(chart, line, false);
      });
      part.forEach((c) => {
        if (!extra.x0) c.cursor = body.last_step;
        c.dirty = c.dirty || whole || body.series.some((l) => l.name === c.name);
      });
    }
  }

  // the charts on screen never asked for yet, asked for once (not again while asked)
  async function fetchFresh() {
    const fresh = [...visible].filter((c) => c.cursor == null && !c.zoom && !c.asking);
    if (!fresh.length) return;
    fresh.forEach((c) => { c.asking = true; });
    try { await fetchCharts(fresh, {}); } finally { fresh.forEach((c) => { c.asking = false; }); }
    draw();
  }

  // the steps of every chart the page holds, and the last step the run reached: one x-range
  // for all (a chart of one point no longer picks 0-60 in a run of 560 steps)
  function sharedRange() {
    let lo = Infinity, hi = -Infinity;
    charts.forEach((c) => c.lines.forEach((l) => {
      if (l.x.length) { lo = Math.min(lo, l.x[0]); hi = Math.max(hi, l.x[l.x.length - 1]); }
      l.gaps.forEach((g) => { lo = Math.min(lo, g[0]); hi = Math.max(hi, g[1]); });
    }));
    if (Number.isFinite(lastStep)) hi = Math.max(hi, lastStep);
    (marks.findings || []).forEach((f) => { lo = Math.min(lo, f.step); hi = Math.max(hi, f.step); });
    if (!Number.isFinite(lo) || !Number.isFinite(hi)) return null;
    const pad = Math.max(0.5, 0.01 * (hi - lo));
    return [lo - pad, hi + pad];
  }
  let sharedAt = null;  // the range the charts were last drawn with
  let clock = null;  // the run's clock (global steps' wall times), from the curves answers

  function draw() {
    if (view.share) {  // a new step widens the range: every chart is drawn again with it
      const range = sharedRange();
      if (JSON.stringify(range) !== JSON.stringify(sharedAt)) {
        sharedAt = range;
        charts.forEach((c) => { c.dirty = true; });
      }
    }
    if (!window.Plotly) {  // plotly.js (3.5 MB) takes a second or two to load and start: the
      // charts on screen are drawn at once as plain SVG lines, then again by plotly
      for (const c of visible) {
        const lines = [...c.lines.values()];
        if (lines.length && (c.dirty || !c.quick)) { quickChart(c.div, chartTitle(c), lines); c.quick = true; }
      }
      if ([...visible].some((c) => c.quick)) {  // drawn: plotly.js once the browser painted it
        requestAnimationFrame(() => setTimeout(openPlotlyGate, 0));
      }
      plotlyReady().then(draw).catch(() => {});
      return;
    }
    for (const c of visible) {
      if (!c.dirty && c.shown) continue;
      const lines = [...c.lines.values()];
      if (!lines.length) continue;
      const { traces, layout } = curveFigure(chartTitle(c), lines, marks.findings, null,
        marks.sessions, marks.trips, { ...view,
          xRange: view.x === "step" && view.focus ? view.focus : view.share ? sharedRange() : null,
          wall: view.x === "wall" ? clock : null, epochs: view.x === "epoch" ? clock : null });
      if (c.zoom && view.x === "step") layout.xaxis.range = c.zoom;
      if (!c.shown) c.div.textContent = "";
      reactWithFlags(c.div, traces, layout, { displaylogo: false, responsive: true });
      if (!c.shown) {
        c.div.on("plotly_relayout", (ev) => {
          const range = ev["xaxis.range"] || (ev["xaxis.range[0]"] != null
            ? [ev["xaxis.range[0]"], ev["xaxis.range[1]"]] : null);
          if (view.x !== "step") return;  // over wall time or epochs: plotly's own zoom
          if (range) {  // zoomed in: that range asked for (every point once it is short)
            c.zoom = range;
            fetchCharts([c], { x0: String(Math.floor(c.zoom[0])), x1: String(Math.ceil(c.zoom[1])) })
              .then(() => { c.dirty = true; draw(); }).catch(() => {});
          } else if (ev["xaxis.autorange"]) {  // zoomed out: the whole run asked for again
            c.zoom = null; c.cursor = null;
            if (view.focus) {  // out of a step's window (an evidence link's): every chart
              view.focus = null; charts.forEach((other) => { other.dirty = true; });
            }
          }
        });
      }
      c.shown = true; c.dirty = false;
    }
    const decisions = document.getElementById("decisions");
    if (decisions) {
      const listed = decisionsHtml(marks.trips);
      if (decisions.dataset.drawn !== listed) {
        decisions.innerHTML = listed; decisions.dataset.drawn = listed;
      }
    }
    window.tensortapCurves = {  // for whoever looks (the tests do)
      series: charts.flatMap((c) => [...c.lines.values()]), findings: marks.findings,
      sessions: marks.sessions, trips: marks.trips, total, listed: charts.length, asked,
      last_step: lastStep, polls,
      drawn: charts.filter((c) => c.shown).map((c) => c.name), clock,
      fetched: charts.filter((c) => c.cursor != null).map((c) => c.name),
    };
  }

  return {
    // the controls changed: every chart drawn again with them (those off screen when seen)
    setView(changes) { Object.assign(view, changes); charts.forEach((c) => { c.dirty = true; }); draw(); },
    // every chart over a window around ``step`` (an evidence link's): those on screen zoomed
    // as a drag does (their points in the window asked for), the others drawn over it when
    // they come into view; a double click on a chart shows the whole run again
    showStep(step) {
      if (view.x !== "step" || !Number.isFinite(step)) return;
      const last = Number.isFinite(lastStep) ? Math.max(lastStep, step) : step;
      const half = Math.max(10, Math.round(0.05 * last));
      view.focus = [Math.max(0, step - half) - 0.5, step + half + 0.5];
      charts.forEach((c) => { c.dirty = true; });
      visible.forEach((c) => {
        if (c.shown) Plotly.relayout(c.div, { "xaxis.range": view.focus.slice() });
      });
      draw();
    },
    hasClock() { return clock != null && clock.wall != null; },
    hasEpochs() { return clock != null && clock.epoch != null; },
    async setMatch(text) { match = text; reset(); await list(0); status(); },
    async tick() {
      polls += 1;
      if (!charts.length) { await list(0); status(); }
      else if (charts.length < PAGE) { await list(0); status(); }  // new series appear
      await fetchFresh();
      const byCursor = new Map();
      [...visible].filter((c) => c.cursor != null && !c.zoom && !c.asking).forEach((c) => {
        (byCursor.get(c.cursor) || byCursor.set(c.cursor, []).get(c.cursor)).push(c);
      });
      for (const [cursor, group] of byCursor) {
        await fetchCharts(group, { after: String(cursor) });
      }
      draw();
    },
  };
}

// The run's configuration as rows: each leaf's path (optimizer.param_groups.0.lr) and value.
function configRows(value, path = "") {
  if (value && typeof value === "object" && Object.keys(value).length) {
    return Object.entries(value).flatMap(([k, v]) => configRows(v, path ? `${path}.${k}` : k));
  }
  return [[path, typeof value === "string" ? value : JSON.stringify(value)]];
}

// ---------------------------------------------------------------- a run's page
// A run's page is its views, in the order a person reads them: the diagnosis (verdict, "try:",
// the evidence), the losses and metrics, layer health, the rules, the rest; tensortap's own
// series last, closed. A view is its markup, what it starts (its controls, its own polls:
// ``start(page)``) and what it draws of the run's document (``/api/run/ID``, read every 2 s
// for all of them: ``run(d, page)``); ``page`` holds the run's id, the error line and what
// views share (the curves' grid). A new view is an entry of RUN_VIEWS, not an edit elsewhere.

const summaryView = {
  html: `<div id="summary"></div><p id="err" class="problem"></p>`,
  run(d) {
    document.getElementById("summary").innerHTML = `${statusSpan(d.status)} · ${esc(d.kind)} · started ${esc(when(d.started))}` +
      ` · last step ${esc(d.last_step ?? "-")} · <span class="muted">${esc(d.location)}</span>` +
      (d.problems.length ? `<details><summary class="warning">${esc(d.problems.length)} damaged ` +
        `part${d.problems.length > 1 ? "s" : ""}</summary>${esc(d.problems.join("; "))}</details>` : "");
  },
};

const diagnosisView = {
  html: `<div id="diagnosis"></div>`,
  start(page) {
    document.getElementById("diagnosis").onclick = (ev) => {  // an evidence's step: the charts there
      const link = ev.target.closest && ev.target.closest("a.step");
      if (!link || !page.grid) return;
      ev.preventDefault();
      document.getElementById("curves").scrollIntoView();
      page.grid.showStep(Number(link.dataset.step));
    };
  },
  run(d) { document.getElementById("diagnosis").innerHTML = diagnosisHtml(d.diagnosis); },
};

const curvesView = {
  html: `<h2>Losses and metrics</h2><p><input id="curves-match" placeholder="only names holding..." size="28">
    <label title="TensorBoard's smoothing: an exponential moving average, debiased at the start; the raw line stays faint behind">smoothing
    <input type="range" id="smoothing" min="0" max="0.99" step="0.01" value="0"> <output id="smoothing-value">0</output></label>
    <label>y <select id="y-scale"><option value="linear">linear</option><option value="log">log</option></select></label>
    <label>x <select id="x-axis"><option value="step">global step</option><option value="wall" disabled>wall time</option><option value="epoch" disabled>epoch</option></select></label>
    <span class="muted" id="curves-note"></span></p><div class="plots" id="curves"></div>
    <p><button id="curves-more" hidden></button></p><div id="decisions"></div>`,
  start(page) {
    const grid = chartGrid(page.id, document.getElementById("curves"), document.getElementById("curves-note"),
      document.getElementById("curves-more"), { details: document.getElementById("own-series"),
        box: document.getElementById("own-curves"), note: document.getElementById("own-note") },
      { ...DEFAULT_VIEW, share: true, x: "step" });
    page.grid = grid;
    const smoothing = document.getElementById("smoothing");
    smoothing.oninput = () => {
      document.getElementById("smoothing-value").textContent = smoothing.value;
      grid.setView({ smoothing: Number(smoothing.value) });
    };
    const yScale = document.getElementById("y-scale");
    yScale.onchange = () => grid.setView({ log: yScale.value === "log" });
    const xAxis = document.getElementById("x-axis");
    xAxis.onchange = () => grid.setView({ x: xAxis.value });
    const matchBox = document.getElementById("curves-match");
    matchBox.onchange = () => grid.setMatch(matchBox.value).catch((e) => { page.err.textContent = e.message; });
    every(1000, async () => {
      await grid.tick();
      xAxis.options[1].disabled = !grid.hasClock();  // offered where wall times were saved
      xAxis.options[2].disabled = !grid.hasEpochs();  // ... and where the run saved its epoch
    }, page.err);
  },
};

const healthView = {
  html: `<h2>Layer health</h2><div class="plots" id="health"></div>`,
  start(page) {
    every(5000, async () => {
      const h = await api(`/api/run/${page.id}/health`);
      await plotlyReady();
      const box = document.getElementById("health");
      const figs = healthFigure(h);
      if (!figs.length) box.innerHTML = `<p class="muted">no gradients or ReLU activations saved</p>`;
      // every box placed before any is drawn: each figure is sized to its own column
      const divs = figs.map(([div]) => ensurePlot(box, div));
      figs.forEach(([, traces, layout], k) => {
        Plotly.react(divs[k], traces, layout, { displaylogo: false, responsive: true });
      });
    }, page.err);
  },
};

const rulesView = {
  html: `<h2>Rules</h2><table id="rules"></table>`,
  run(d) {
    document.getElementById("rules").innerHTML = d.all_rules.length
      ? "<tr><th>rule</th><th>status</th><th>gravest at</th><th>steps judged</th><th>why</th></tr>" + d.all_rules.map((r) =>
        `<tr><td>${esc(r.name)}</td><td>${statusSpan(r.status, r.severity)}</td><td>${esc(r.gravest_step ?? "")}</td>
         <td>${esc(r.steps_judged ?? "")}</td><td>${esc(r.gravest_message || r.message || r.StatusDetails || "")}</td></tr>`).join("")
      : `<tr><td class="muted">${d.kind === "job" ? "no rule status yet" : "no rules ran on this trial (it was not written by a job): see the static report"}</td></tr>`;
  },
};

const tensorPlotView = {
  html: `<h2>Activations (TensorPlot)</h2><p><select id="tp-step"></select> <span class="muted" id="tp-note"></span></p><div id="tensorplot"></div>`,
  start(page) {
    const select = document.getElementById("tp-step");
    const note = document.getElementById("tp-note");
    const draw = async (step) => {
      try {
        const t = await api(`/api/run/${page.id}/tensorplot${step != null ? `?step=${step}` : ""}`);
        await plotlyReady();
        if (!t.figure) { note.textContent = t.note; return; }
        if (select.options.length !== t.steps.length) {
          select.innerHTML = t.steps.map((s, k) =>
            `<option value="${esc(s)}">${esc(t.labels ? t.labels[k] : `step ${s}`)}</option>`).join("");
        }
        if (step != null) select.value = String(step);
        Plotly.react("tensorplot", t.figure.data, t.figure.layout, { displaylogo: false });
        note.textContent = "summed over the batch: units that never fire stay dark";
      } catch (e) {
        note.textContent = `TensorPlot: ${e.message}`;
      }
    };
    select.onchange = () => draw(Number(select.value));
    draw(null);
  },
};

const embeddingsView = {
  html: `<h2>Embeddings</h2><p><input id="em-tensor" list="em-names" placeholder="tensor to embed" size="34">
    <input id="em-labels" list="em-names" placeholder="its labels" size="28"> <select id="em-mode"></select>
    <button id="em-draw">draw</button> <span class="muted" id="em-note"></span></p>
    <datalist id="em-names"></datalist><div id="embeddings"></div>`,
  start(page) {
    const field = (name) => document.getElementById(`em-${name}`);
    const draw = async (first) => {
      const query = first ? "" : `?tensor=${encodeURIComponent(field("tensor").value)}` +
        `&labels=${encodeURIComponent(field("labels").value)}&mode=${field("mode").value}`;
      try {
        const e = await api(`/api/run/${page.id}/embeddings${query}`);
        await plotlyReady();
        if (first) {
          document.getElementById("em-names").innerHTML = e.names.map((n) => `<option value="${esc(n)}">`).join("");
          field("mode").innerHTML = e.modes.map((m) => `<option>${esc(m)}</option>`).join("");
          field("tensor").value = e.tensor || "";
          field("labels").value = e.labels || "";
        }
        field("mode").value = e.mode;
        field("note").textContent = e.figure ? `PCA of each sample, steps ${e.steps.join(", ")}` : e.note;
        if (e.figure) {
          Plotly.react("embeddings", { data: e.figure.data, layout: e.figure.layout,
            frames: e.figure.frames, config: { displaylogo: false } });
        }
        else Plotly.purge("embeddings");
      } catch (err) {
        field("note").textContent = `embeddings: ${err.message}`;
      }
    };
    field("draw").onclick = () => draw(false);
    draw(true);
  },
};

const timelineView = {
  html: `<h2>Rule timeline</h2><table class="timeline" id="timeline"></table>`,
  run(d) {
    document.getElementById("timeline").innerHTML = d.timeline.map((e) =>
      `<tr><td>${esc(when(e.time))}</td><td>${esc(e.event)}</td><td>${esc(e.rule || "")}</td>
       <td>${esc(e.step ?? "")}</td><td>${esc(e.message || e.result || e.error || e.status || e.reason || "")}</td></tr>`).join("");
  },
};

const configView = {
  html: `<h2>Configuration</h2><table id="config"></table>`,
  run(d) {
    const settings = configRows(d.config || {});
    document.getElementById("config").innerHTML = settings.length
      ? settings.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join("")
      : `<tr><td class="muted">no configuration recorded (a trial of an older tensortap, or none gathered yet)</td></tr>`;
  },
};

const logView = {
  html: `<h2>Training log</h2><pre id="log"></pre>`,
  run(d) {
    const log = document.getElementById("log");
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.textContent = d.log_tail.join("\n") || "(no training log: a trial without a job)";
    if (atEnd) log.scrollTop = log.scrollHeight;
  },
};

// the curves' grid puts tensortap's own series here (curvesView), closed, at the page's end
const ownSeriesView = {
  html: `<details id="own-series" hidden><summary>tensortap's own series <span class="muted" id="own-note"></span></summary>
    <div class="plots" id="own-curves"></div></details>`,
};

const RUN_VIEWS = [summaryView, diagnosisView, curvesView, healthView, rulesView, tensorPlotView,
  embeddingsView, timelineView, configView, logView, ownSeriesView];

function runPage() {
  const id = runId();
  main().innerHTML = RUN_VIEWS.map((v) => v.html).join("\n");  // every view's markup, then their starts
  document.getElementById("links").innerHTML = `<a href="/report/${esc(id)}" target="_blank">static report</a>`;
  const page = { id, err: document.getElementById("err"), grid: null };
  RUN_VIEWS.forEach((v) => { if (v.start) v.start(page); });
  every(2000, async () => {
    const d = await api(`/api/run/${id}`);
    document.getElementById("title").textContent = d.name;
    document.title = `tensortap: ${d.name}`;
    RUN_VIEWS.forEach((v) => { if (v.run) v.run(d, page); });
  }, page.err);
}

// ---------------------------------------------------------------- compare
// a run's first charts followed from a cursor: whole once, then only the steps after the last
// one held (whole again once a line holds more than REBUCKET points)
function follower(id) {
  const held = new Map();
  let cursor = null;
  return async () => {
    const body = await api(`/api/run/${id}/curves` + (cursor != null ? `?after=${cursor}` : ""));
    if (cursor == null) held.clear();
    let whole = false;
    for (const line of body.series) {
      const k = [line.name, line.statistic, line.mode, line.worker].join("\u0000");
      const h = held.get(k);
      if (!h) { held.set(k, { ...line }); continue; }
      h.x = h.x.concat(line.x); h.y = h.y.concat(line.y); h.gaps = h.gaps.concat(line.gaps);
      h.points += line.points;
      whole ||= h.x.length > REBUCKET;
    }
    cursor = whole ? null : body.last_step;
    return { ...body, series: [...held.values()] };
  };
}

// "problem: the loss does not decrease: ...": the verdict's word first, as the runs table
function verdictWord(d) {
  return d.headline.startsWith(d.verdict) ? d.headline : `${d.verdict}: ${d.headline}`;
}

// two runs: the layers that differ most first (/api/diff), read once: it reads values
async function layerDiff(a, b) {
  const box = document.getElementById("diff-box");
  const note = document.getElementById("diff-note");
  box.hidden = false;
  note.textContent = "reading both runs' layers...";
  try {
    const d = await api(`/api/diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
    if (!d.layers.length) {
      note.textContent = "neither run saved gradients, weights or activations to compare";
      return;
    }
    note.textContent = `A: ${d.a}, B: ${d.b}. own: orders of magnitude the layer's weights ` +
      "differ (inf: saved or moving in one run only); then: its gradients, drift and " +
      "activations, which follow a change anywhere";
    const num = (v) => (typeof v === "number" ? v.toFixed(2) : v === "Infinity" ? "inf" : esc(v));
    document.getElementById("diff").innerHTML =
      "<tr><th>layer</th><th>own</th><th>then</th><th>largest difference</th></tr>" +
      d.layers.map((l) => `<tr class="diff-row"><td>${esc(l.layer)}</td><td>${num(l.score)}</td>` +
        `<td>${num(l.spread)}</td><td>${esc(l.headline)}</td></tr>`).join("");
  } catch (e) {
    note.textContent = `the layers could not be compared: ${e.message || e}`;
  }
}

function comparePage() {
  const ids = (new URLSearchParams(location.search).get("ids") || "").split(",").filter(Boolean);
  const followers = ids.map(follower);
  main().innerHTML = `<p id="err" class="problem"></p><h2>Rules side by side</h2><table id="rules"></table>
    <div id="diff-box" hidden><h2>Layers that differ</h2><p class="muted" id="diff-note"></p>
    <table id="diff"></table></div>
    <h2>Curves, aligned by global step</h2><div class="plots" id="curves"></div>`;
  document.getElementById("title").textContent = `comparing ${ids.length} runs`;
  // a run against itself has no layer that differs (and /api/diff refuses it)
  if (ids.length === 2 && ids[0] !== ids[1]) layerDiff(ids[0], ids[1]);
  every(2000, async () => {
    const runs = await Promise.all(ids.map((id) => api(`/api/run/${id}`)));
    const curves = await Promise.all(followers.map((follow) => follow()));
    await plotlyReady();
    const names = [...new Set(runs.flatMap((r) => r.all_rules.map((x) => x.name)))];
    document.getElementById("rules").innerHTML = `<tr><th>rule</th>${runs.map((r) =>
      `<th><a href="/run/${esc(r.id)}">${esc(r.name)}</a><br>${statusSpan(r.status)}</th>`).join("")}</tr>` +
      // the verdict first: what each run's diagnosis says, before the rules it rests on
      `<tr class="verdict"><td>verdict</td>${runs.map((r) => `<td>${r.diagnosis ? verdictSpan(
        { ...r.diagnosis, headline: verdictWord(r.diagnosis) })
        : '<span class="muted">no rules ran (a trial)</span>'}</td>`).join("")}</tr>` +
      names.map((n) => `<tr><td>${esc(n)}</td>${runs.map((r) => {
        const x = r.all_rules.find((y) => y.name === n);
        return `<td>${x ? statusSpan(x.status, x.severity) + (x.gravest_step != null ? ` at ${esc(x.gravest_step)}` : "") : "-"}</td>`;
      }).join("")}</tr>`).join("");
    // one chart per tensor and mode, one line per run
    const groups = {};
    curves.forEach((c, i) => c.series.forEach((s) => {
      const title = `${s.statistic === "value" ? s.name : `${s.name} · ${s.statistic}`} (${s.mode})`;
      (groups[title] ||= []).push([{ ...s, collection: title }, runs[i].name]);
    }));
    const box = document.getElementById("curves");
    let k = 0;
    for (const items of Object.values(groups)) {
      drawCurves(box, items.map((p) => p[0]), [], items.map((p) => p[1]), `compare-${k++}`);
    }
  }, document.getElementById("err"));
}

// one page shell for all three: the path says which
if (location.pathname.startsWith("/run/")) { gatePlotly(); plotlyReady().catch(() => {}); runPage(); }
else if (location.pathname.startsWith("/compare")) comparePage();
else runsPage();
