// The Accord configurator page. It decides nothing: it keeps what the user picked, turns it into
// the words of a launch command, sends them to the API (which runs the `accord` CLI) and shows the
// answers. Legality, defaults, excluded values, proofs and fixes all come from the resolver.
"use strict";

// What the user picked. `flags` maps a flag name to the text typed or chosen for it; the address
// bar holds the same thing, so a configuration can be shared as a link.
const state = { system: "llm", facts: "h100", count: "", flags: {} };

let catalog = new Map();   // flag name -> entry of `accord flags --json`
let presets = [];          // GET /api/presets
let models = [];           // GET /api/models
let latest = 0;            // number of the newest refresh; older answers are dropped
let lastConfig = null;     // the last resolved configuration (for placeholders)
let lastDryRun = null;     // the last dry run that answered, kept on screen during a conflict

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// -- talking to the API -------------------------------------------------------------------------

async function getJSON(path) {
  const response = await fetch(path);
  return response.json();
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = null; }
  return { status: response.status, text, json };
}

// -- from the picks to a command line -------------------------------------------------------------

// A value from the resolver (JSON) as the text the inputs hold.
function valueToText(value) {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.join(" ");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function negatedSpelling(entry) {
  const wanted = "--no-" + entry.flags[0].slice(2);
  return entry.flags.find((s) => s === wanted) || null;
}

// The command-line words that set one flag to the text the user gave it.
function wordsFor(entry, text) {
  const spelling = entry.flags[0];
  if (entry.type === "bool") {
    if (text === "true") return [spelling];
    const negated = negatedSpelling(entry);
    return text === "false" && negated ? [negated] : [];
  }
  if (entry.type === "list" || entry.nargs === "+" || entry.nargs === "*") {
    return [spelling, ...text.trim().split(/\s+/)];
  }
  return [spelling, text];
}

function presetCount() {
  const preset = presets.find((p) => p.name === state.facts);
  return preset ? preset.facts["gpu.count"] : null;
}

// The launch words sent to the API: a GPU count that differs from the preset, then each flag.
function launchArgs() {
  const args = [];
  if (state.count !== "" && Number(state.count) !== presetCount()) {
    args.push("--fact", "gpu.count=" + state.count);
  }
  for (const [name, text] of Object.entries(state.flags)) {
    const entry = catalog.get(name);
    if (entry && text !== "") args.push(...wordsFor(entry, text));
  }
  return args;
}

function requestBody(extraArgs = []) {
  return { system: state.system, facts: state.facts, args: [...extraArgs, ...launchArgs()] };
}

// Shell quoting for display: words with only safe characters stay bare.
function shellWord(word) {
  return /^[A-Za-z0-9_\-.,:\/=+@%]+$/.test(word) ? word : "'" + word.replace(/'/g, "'\\''") + "'";
}

function commandText() {
  const words = ["accord", "serve"];
  if (state.system !== "llm") words.push("--system", state.system);
  if (state.facts !== "probe") words.push("--facts", state.facts);
  return [...words, ...launchArgs()].map(shellWord).join(" ");
}

// -- the address bar ------------------------------------------------------------------------------

function saveToUrl() {
  const params = new URLSearchParams({ system: state.system, facts: state.facts });
  if (state.count !== "") params.set("count", state.count);
  for (const [name, text] of Object.entries(state.flags)) params.set("flag." + name, text);
  history.replaceState(null, "", "#" + params.toString());
}

function loadFromUrl() {
  const params = new URLSearchParams(location.hash.slice(1));
  state.system = params.get("system") || state.system;
  state.facts = params.get("facts") || state.facts;
  state.count = params.get("count") || "";
  state.flags = {};
  for (const [key, value] of params) {
    if (key.startsWith("flag.")) state.flags[key.slice(5)] = value;
  }
}

// -- one flag's row ---------------------------------------------------------------------------------

// The values a select offers: the dry run's legal then excluded values when it checked this flag,
// else the catalog's choices; plus whatever the user set, so a shared link always shows it.
function selectOptions(entry, choice) {
  let values;
  if (choice) values = [...choice.legal, ...choice.excluded.map((x) => x.value)].map(valueToText);
  else if (entry.type === "bool") values = negatedSpelling(entry) ? ["true", "false"] : ["true"];
  else values = (entry.choices || []).map(valueToText);
  const current = state.flags[entry.name];
  if (current !== undefined && current !== "" && !values.includes(current)) values.push(current);
  return values;
}

function flagControl(entry, choice) {
  const name = entry.name;
  const current = state.flags[name] ?? "";
  const onchange = (event) => setFlag(name, event.target.value);
  const values = selectOptions(entry, choice);
  if (choice || entry.type === "bool" || entry.type === "enum") {
    const excluded = new Map((choice ? choice.excluded : []).map((x) => [valueToText(x.value), x]));
    const select = el("select", { "data-flag": name, onchange },
      el("option", { value: "" }, "(unset: the resolver decides)"));
    for (const value of values) {
      const why = excluded.get(value);
      const label = why ? `${value}  ✗ excluded (${why.rules.map((r) => r.id).join(", ")})` : value;
      select.append(el("option", { value, class: why ? "excluded" : "" }, label));
    }
    select.value = current;
    return select;
  }
  const input = el("input", { type: "text", "data-flag": name, spellcheck: "false", onchange,
    placeholder: entry.default === null ? "" : valueToText(entry.default) });
  input.value = current;
  return input;
}

function flagRow(entry, choice) {
  const row = el("div", { class: "flag", "data-name": entry.name,
    "data-search": [entry.name, ...entry.flags, entry.help || "", entry.group].join(" ").toLowerCase().replace(/_/g, "-") });
  const whyButton = el("button", { class: "why-button", title: "the rules and facts behind this value",
    onclick: () => showWhy(entry.name) }, "why?");
  row.append(el("div", { class: "flag-head" },
    el("code", { class: "spelling" }, entry.flags[0]),
    flagControl(entry, choice),
    el("span", { class: "resolved", "data-resolved": entry.name }),
    whyButton));
  if (entry.help) row.append(el("div", { class: "help" }, entry.help));
  if (choice) {
    row.append(el("div", { class: "legal" }, "legal here: ",
      choice.legal.length ? choice.legal.map(valueToText).join(", ") : "(none)"));
    if (choice.excluded.length) {
      const list = el("ul", { class: "excluded-list" });
      for (const item of choice.excluded) {
        for (const rule of item.rules) {
          list.append(el("li", {}, el("code", {}, valueToText(item.value)), " excluded by ",
            el("b", {}, rule.id), ": " + rule.reason));
        }
      }
      const values = choice.excluded.map((x) => valueToText(x.value)).join(", ");
      row.append(el("details", { class: "excluded" },
        el("summary", {}, `excluded here: ${values}`), list));
    }
  }
  return row;
}

// -- drawing the answers ------------------------------------------------------------------------------

function sourceText(provenance) {
  if (!provenance) return "";
  if (provenance.source === "rule") return "rule " + provenance.rule;
  if (provenance.source === "user") return "you set it";
  if (provenance.source === "relax") return "changed by --relax, rule " + provenance.rule;
  return provenance.source;
}

function drawResolvedValues(config) {
  for (const span of document.querySelectorAll("[data-resolved]")) {
    const name = span.dataset.resolved;
    if (!config || !(name in config.values)) { span.textContent = ""; continue; }
    span.textContent = "= " + (valueToText(config.values[name]) || "null") + "  (" + sourceText(config.provenance[name]) + ")";
  }
}

function drawChoices(dry, stale) {
  const box = $("choices");
  box.replaceChildren();
  if (!dry || !dry.choices) {
    box.append(el("p", { class: "note" }, "Shown once the command resolves."));
    return;
  }
  if (stale) box.append(el("p", { class: "note" }, "As checked for the last legal configuration; the command above has a conflict."));
  for (const choice of dry.choices) {
    const entry = catalog.get(choice.flag);
    if (entry) box.append(flagRow(entry, choice));
  }
}

// Every flag of the catalog in its group, except the choices drawn above. Built once per system.
function drawGroups(choiceNames) {
  const box = $("groups");
  box.replaceChildren();
  const groups = new Map();
  for (const entry of catalog.values()) {
    if (choiceNames.has(entry.name)) continue;
    if (!groups.has(entry.group)) groups.set(entry.group, []);
    groups.get(entry.group).push(entry);
  }
  for (const [group, entries] of groups) {
    const details = el("details", { class: "group", "data-group": group },
      el("summary", {}, group + " ", el("span", { class: "note" }, `${entries.length} flags`)));
    for (const entry of entries) details.append(flagRow(entry, null));
    box.append(details);
  }
  applySearch();
}

function drawOutputs(config, configText) {
  $("command-text").textContent = commandText();
  const words = ["accord", "serve"];
  if (state.system !== "llm") words.push("--system", state.system);
  if (state.facts !== "probe") words.push("--facts", state.facts);
  if (launchArgs()[0] === "--fact") words.push("--fact", "gpu.count=" + state.count);
  const yaml = [`# ${words.map(shellWord).join(" ")} --config accord.yaml`];
  if (config) {
    for (const name of Object.keys(config.values).sort()) {
      if (config.provenance[name].source === "user") yaml.push(`${name}: ${JSON.stringify(config.values[name])}`);
    }
    if (yaml.length === 1) yaml.push("# (no flags set: every value is the resolver's choice)");
  } else {
    yaml.push("# (no legal configuration yet)");
  }
  $("yaml-text").textContent = yaml.join("\n");
  $("json-text").textContent = configText || "(no legal configuration yet)";
}

function drawWarnings(config) {
  const box = $("warnings");
  const warnings = config ? config.warnings : [];
  box.hidden = warnings.length === 0;
  box.replaceChildren(...warnings.map((w) => el("div", {}, "warning: " + w)));
}

function drawConflict(conflict, proofText) {
  const box = $("conflict");
  box.hidden = !conflict;
  if (!conflict) return;
  $("proof").textContent = proofText;
  const fixes = $("fixes");
  fixes.replaceChildren();
  conflict.conflicts.forEach((each, i) => {
    each.fixes.forEach((text, j) => {
      fixes.append(el("button", { class: "fix", "data-conflict": i, "data-fix": j,
        onclick: () => applyFix(i, j) }, text));
    });
  });
}

function setStatus(kind, text) {
  const status = $("status");
  status.className = "status " + kind;
  status.textContent = text;
}

function showError(message) {
  const box = $("error");
  box.hidden = !message;
  box.textContent = message || "";
}

// -- actions ----------------------------------------------------------------------------------------

// One change: the resolved configuration (or the conflict) first, then the dry run's choices, so
// the command and the values update as soon as the resolver has them.
async function refresh() {
  const number = ++latest;
  saveToUrl();
  $("command-text").textContent = commandText();
  const started = performance.now();
  const body = requestBody();
  const resolved = await post("/api/resolve", body);
  if (number !== latest) return;
  if (resolved.status === 200) {
    lastConfig = resolved.json;
    showError(null);
    drawConflict(null);
    drawResolvedValues(resolved.json);
    drawOutputs(resolved.json, resolved.text);
    drawWarnings(resolved.json);
    setStatus("checking", `resolved · ${resolved.json.hash.slice(0, 12)} · checking choices…`);
    const dry = await post("/api/dry-run", body);
    if (number !== latest) return;
    if (dry.status === 200) lastDryRun = dry.json;
    drawChoices(dry.status === 200 ? dry.json : null, false);
    drawResolvedValues(resolved.json);
    const ms = Math.round(performance.now() - started);
    setStatus("ok", `resolved · ${resolved.json.hash.slice(0, 12)} · ${ms} ms`);
  } else if (resolved.status === 409) {
    const proof = await post("/api/proof", body);
    if (number !== latest) return;
    showError(null);
    drawConflict(resolved.json, proof.text);
    drawChoices(lastDryRun, true);
    drawResolvedValues(null);
    drawOutputs(null, null);
    drawWarnings(null);
    const count = resolved.json.conflicts.length;
    setStatus("conflict", `no legal configuration · ${count} conflict${count === 1 ? "" : "s"}`);
  } else {
    showError(resolved.json ? resolved.json.message : resolved.text);
    setStatus("bad", "bad input");
  }
  updateCountPlaceholder();
  syncInputs();
}

function setFlag(name, text) {
  if (text === "") delete state.flags[name];
  else state.flags[name] = text;
  refresh();
}

async function applyFix(conflictIndex, fixIndex) {
  const answer = await post("/api/fix", { ...requestBody(), conflict: conflictIndex, fix: fixIndex });
  if (answer.status !== 200) { showError(answer.json ? answer.json.message : answer.text); return; }
  for (const name of answer.json.drop) delete state.flags[name];
  for (const [name, value] of Object.entries(answer.json.set)) {
    if (value === null) delete state.flags[name];
    else state.flags[name] = valueToText(value);
  }
  refresh();
}

function drawWhyNode(node) {
  const item = el("li", {}, el("code", {}, node.flag), " = ", el("b", {}, valueToText(node.value) || "null"),
    "  (" + sourceText(node.provenance) + ")");
  if (node.rule) {
    const when = node.rule.when ? `when ${node.rule.when}` : "always";
    item.append(el("div", { class: "help" }, `${node.rule.kind} rule ${node.rule.id}, ${when}: ${node.rule.reason}`));
    const facts = Object.entries(node.facts).map(([k, v]) => `${k} = ${valueToText(v)}`);
    facts.push(...node.unknown_facts.map((k) => `${k} unknown`));
    if (facts.length) item.append(el("div", { class: "facts" }, "reads facts: " + facts.join(", ")));
    if (node.reads.length) item.append(el("ul", {}, ...node.reads.map(drawWhyNode)));
  }
  return item;
}

async function showWhy(name) {
  const answer = await post("/api/why", requestBody([name]));
  const box = $("why");
  box.hidden = false;
  $("why-title").textContent = "Why " + name;
  const body = $("why-body");
  if (answer.status === 200) body.replaceChildren(el("ul", {}, ...answer.json.flags.map(drawWhyNode)));
  else if (answer.status === 409) body.replaceChildren(el("p", {}, "The command has no legal configuration; see the conflict above."));
  else body.replaceChildren(el("p", {}, answer.json ? answer.json.message : answer.text));
  box.scrollIntoView({ block: "nearest" });
}

// Search: show the rows whose name, spellings, help or group contain the word.
function applySearch() {
  const needle = $("search").value.trim().toLowerCase().replace(/_/g, "-");
  for (const row of document.querySelectorAll(".flag")) {
    row.hidden = needle !== "" && !row.dataset.search.includes(needle);
  }
  for (const group of document.querySelectorAll(".group")) {
    const visible = group.querySelectorAll(".flag:not([hidden])").length;
    group.hidden = visible === 0;
    group.open = needle !== "" && visible > 0;
  }
}

// -- the machine panel ----------------------------------------------------------------------------

function updateCountPlaceholder() {
  const count = presetCount() ?? (lastConfig ? lastConfig.facts["gpu.count"] : null);
  $("count").placeholder = count === null || count === undefined ? "" : String(count);
}

function syncInputs() {
  $("system").value = state.system;
  $("facts").value = state.facts;
  $("count").value = state.count;
  $("model").value = state.flags.model_path || "";
  const preset = presets.find((p) => p.name === state.facts);
  $("facts-description").textContent = preset ? preset.description : "The facts of the machine this server runs on.";
  $("models").replaceChildren(...models.filter((m) => m.system === state.system)
    .map((m) => el("option", { value: m.path }, m.name)));
}

async function loadCatalog() {
  const entries = await getJSON("/api/flags?system=" + encodeURIComponent(state.system));
  // Old spellings and retired flags are separate entries of the catalog; the page sets current ones.
  catalog = new Map(entries.filter((e) => !e.deprecated && e.name !== "config").map((e) => [e.name, e]));
  const dry = await post("/api/dry-run", { system: state.system, facts: state.facts, args: [] });
  const names = new Set(dry.status === 200 ? dry.json.choices.map((c) => c.flag) : []);
  drawGroups(names);
}

async function start() {
  loadFromUrl();
  [presets, models] = await Promise.all([getJSON("/api/presets").then((x) => x.presets),
    getJSON("/api/models").then((x) => x.models)]);
  const facts = $("facts");
  facts.append(el("option", { value: "probe" }, "probe: this machine"));
  for (const preset of presets) facts.append(el("option", { value: preset.name }, preset.name));

  $("system").addEventListener("change", async (event) => {
    state.system = event.target.value;
    state.flags = {};
    lastDryRun = null;
    await loadCatalog();
    refresh();
  });
  facts.addEventListener("change", (event) => { state.facts = event.target.value; state.count = ""; refresh(); });
  $("count").addEventListener("change", (event) => { state.count = event.target.value.trim(); refresh(); });
  $("model").addEventListener("change", (event) => setFlag("model_path", event.target.value.trim()));
  $("search").addEventListener("input", applySearch);
  $("why-close").addEventListener("click", () => { $("why").hidden = true; });
  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", () => copyText(button));
  }
  window.addEventListener("hashchange", () => { loadFromUrl(); refresh(); });

  syncInputs();
  await loadCatalog();
  await refresh();
}

async function copyText(button) {
  const text = $(button.dataset.copy).textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {  // no clipboard permission: select the text so Ctrl-C copies it
    const range = document.createRange();
    range.selectNodeContents($(button.dataset.copy));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
  }
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = "Copy"; }, 1200);
}

start();
