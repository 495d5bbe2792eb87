// kubeprof flame graph: a canvas renderer over a pre-order call tree embedded as flat arrays.
// Node i's subtree is the index range [i, end[i]); layout for a zoom root is one linear pass
// that skips subtrees narrower than MIN_PX, so only drawable frames cost anything.
(function () {
  "use strict";
  var ROW = 18, MIN_PX = 0.5, FONT = "11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";
  var DATA = null;
  var canvas = document.getElementById("kp-canvas");
  var ctx = canvas.getContext("2d");
  var tip = document.getElementById("kp-tip");
  var statusEl = document.getElementById("kp-status");
  var matchEl = document.getElementById("kp-match");
  var searchEl = document.getElementById("kp-search");
  var views = {}, V = null, zoom = 0, rows = [], scale = 1, charW = 7, matchName = null;

  function prepare(raw) {
    // Typed arrays plus parent/end/x derived once per view.
    var n = raw.name.length, depth = Int32Array.from(raw.depth);
    var end = new Int32Array(n), parent = new Int32Array(n), open = [], maxDepth = 0;
    for (var i = 0; i < n; i++) {
      var d = depth[i];
      while (open.length > d) end[open.pop()] = i;
      parent[i] = d > 0 ? open[d - 1] : -1;
      open.push(i);
      if (d > maxDepth) maxDepth = d;
    }
    while (open.length) end[open.pop()] = n;
    return {
      raw: raw, n: n, names: raw.names, kinds: Uint8Array.from(raw.kinds),
      name: Int32Array.from(raw.name), depth: depth, parent: parent, end: end,
      value: Float64Array.from(raw.value), samples: Float64Array.from(raw.samples),
      base: raw.base ? Float64Array.from(raw.base) : null, baseTotal: raw.baseTotal || 0,
      newTotal: raw.newTotal || 0,
      unit: raw.scale, x: new Float64Array(n), cursor: new Float64Array(n),
      colors: new Array(raw.names.length), maxDepth: maxDepth
    };
  }

  function hash(s) {
    var h = 2166136261;
    for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) / 4294967296;
  }

  function color(v, nm) {
    var c = v.colors[nm];
    if (c === undefined) {
      var p = DATA.palette[DATA.kinds[v.kinds[nm]]] || [0, 0, 75, 0], r = hash(v.names[nm]);
      c = "hsl(" + (p[0] + (r - 0.5) * p[3]).toFixed(1) + "," + p[1] + "%," + (p[2] + (r - 0.5) * 10).toFixed(1) + "%)";
      v.colors[nm] = c;
    }
    return c;
  }

  function change(v, i) {
    // Diff views: the change of the frame's share of each session's total (-1 .. 1).
    var before = v.base[i], after = v.value[i] - before;
    return (v.newTotal ? after / v.newTotal : 0) - (v.baseTotal ? before / v.baseTotal : 0);
  }

  function diffColor(v, i) {
    var d = change(v, i), m = Math.min(1, Math.abs(d) / 0.2);
    if (Math.abs(d) < 0.002) return "hsl(0,0%,86%)";
    return d > 0 ? "hsl(0," + (40 + 45 * m).toFixed(0) + "%," + (84 - 34 * m).toFixed(0) + "%)"
                 : "hsl(215," + (40 + 45 * m).toFixed(0) + "%," + (84 - 34 * m).toFixed(0) + "%)";
  }

  function fmtTime(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
    if (ns >= 1e3) return (ns / 1e3).toFixed(0) + " us";
    return ns.toFixed(0) + " ns";
  }

  function pct(part, whole) { return whole > 0 ? (100 * part / whole).toFixed(2) + "%" : "0%"; }

  function layout() {
    // Lay out the zoom root's subtree for the current width; rows[d] lists drawn nodes.
    if (!V) return;
    var v = V, width = canvas.clientWidth || 800, z = zoom;
    scale = width / (v.value[z] || 1);
    rows = [];
    for (var a = v.parent[z]; a >= 0; a = v.parent[a]) { v.x[a] = 0; rows[v.depth[a]] = [a]; }
    v.x[z] = 0; v.cursor[z] = 0; rows[v.depth[z]] = [z];
    var i = z + 1, e = v.end[z], value = v.value, parent = v.parent, cursor = v.cursor, x = v.x;
    while (i < e) {
      var w = value[i] * scale, p = parent[i], xi = cursor[p];
      cursor[p] = xi + w;
      if (w < MIN_PX) { i = v.end[i]; continue; }
      x[i] = xi; cursor[i] = xi;
      var d = v.depth[i];
      (rows[d] || (rows[d] = [])).push(i);
      i++;
    }
    var dpr = window.devicePixelRatio || 1, height = rows.length * ROW + 2;
    canvas.style.height = height + "px";
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.font = FONT;
    charW = ctx.measureText("abcdefghijklmnopqrstuvwxyz").width / 26 || 7;
    draw();
  }

  function draw() {
    var v = V, z = zoom, drawn = 0;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    for (var d = 0; d < rows.length; d++) {
      var row = rows[d] || [], y = d * ROW, faded = d < v.depth[z];
      for (var k = 0; k < row.length; k++) {
        var i = row[k], nm = v.name[i];
        var w = faded ? canvas.clientWidth : v.value[i] * scale, x = v.x[i];
        ctx.globalAlpha = faded ? 0.45 : 1;
        ctx.fillStyle = matchName && matchName[nm] ? "#e040fb" : v.base ? diffColor(v, i) : color(v, nm);
        ctx.fillRect(x, y, w > 2 ? w - 0.5 : w, ROW - 1);
        drawn++;
        if (w > 6 * charW) {
          var label = v.names[nm], max = Math.floor((w - 6) / charW);
          if (label.length > max) label = label.slice(0, Math.max(max - 1, 0)) + "\u2026";
          ctx.fillStyle = "#111";
          ctx.fillText(label, x + 3, y + ROW / 2);
        }
      }
    }
    ctx.globalAlpha = 1;
    statusEl.textContent = DATA.views[currentName].title + ": " + fmtTime(v.value[0] * v.unit) +
      " total; " + v.n.toLocaleString() + " call-tree nodes, " + drawn.toLocaleString() +
      " drawn" + (z ? "; zoomed into \u201c" + v.names[v.name[z]] + "\u201d (click a faded frame or press Esc to zoom out)" : "");
  }

  function nodeAt(evt) {
    var rect = canvas.getBoundingClientRect(), px = evt.clientX - rect.left, d = Math.floor((evt.clientY - rect.top) / ROW);
    var row = rows[d];
    if (!row || !row.length) return -1;
    if (d < V.depth[zoom]) return row[0];
    var lo = 0, hi = row.length - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (V.x[row[mid]] <= px) lo = mid; else hi = mid - 1; }
    var i = row[lo];
    return px >= V.x[i] && px <= V.x[i] + V.value[i] * scale ? i : -1;
  }

  function selfValue(i) {
    var s = V.value[i];
    for (var c = i + 1; c < V.end[i]; c = V.end[c]) s -= V.value[c];
    return s;
  }

  function showTip(evt) {
    var i = nodeAt(evt);
    if (i < 0) { tip.hidden = true; return; }
    var v = V, unitName = DATA.views[currentName].unit, ns = v.value[i] * v.unit;
    tip.textContent = v.names[v.name[i]] + "\n" + DATA.kinds[v.kinds[v.name[i]]] + " frame\n" +
      v.samples[i].toLocaleString() + " " + unitName + ", " + fmtTime(ns) +
      " (" + pct(v.value[i], v.value[0]) + " of total, " + pct(v.value[i], v.value[zoom]) + " of view)\n" +
      "self: " + fmtTime(selfValue(i) * v.unit) + " (" + pct(selfValue(i), v.value[0]) + ")" +
      (v.base ? "\nbefore: " + pct(v.base[i], v.baseTotal) + " of " + DATA.views[currentName].sessions[0] +
        ", after: " + pct(v.value[i] - v.base[i], v.newTotal) + " of " + DATA.views[currentName].sessions[1] +
        " (" + (change(v, i) >= 0 ? "+" : "") + (100 * change(v, i)).toFixed(2) + " points)" : "");
    tip.hidden = false;
    var tx = evt.clientX + 14, ty = evt.clientY + 14;
    if (tx + tip.offsetWidth > window.innerWidth) tx = Math.max(0, evt.clientX - tip.offsetWidth - 14);
    if (ty + tip.offsetHeight > window.innerHeight) ty = Math.max(0, evt.clientY - tip.offsetHeight - 14);
    tip.style.left = tx + "px";
    tip.style.top = ty + "px";
  }

  function setZoom(i) { zoom = i; layout(); updateMatch(); }

  function compileSearch(text) {
    if (!text) return null;
    var m = /^\/(.*)\/([a-z]*)$/.exec(text);
    if (m) { try { return new RegExp(m[1], m[2].indexOf("i") >= 0 ? m[2] : m[2] + "i"); } catch (e) { return null; } }
    var needle = text.toLowerCase();
    return { test: function (s) { return s.toLowerCase().indexOf(needle) >= 0; } };
  }

  function matchedValue(from, to) {
    // Sum of matched frames' values, not counting matches nested under a match.
    var s = 0, i = from;
    while (i < to) { if (matchName[V.name[i]]) { s += V.value[i]; i = V.end[i]; } else i++; }
    return s;
  }

  function updateMatch() {
    if (!matchName) { matchEl.textContent = ""; return; }
    var total = matchedValue(0, V.n), inZoom = 0;
    for (var a = zoom; a >= 0; a = V.parent[a]) if (matchName[V.name[a]]) inZoom = V.value[zoom];
    if (!inZoom) inZoom = matchedValue(zoom, V.end[zoom]);
    matchEl.textContent = "matched: " + pct(total, V.value[0]) + " of total" +
      (zoom ? ", " + pct(inZoom, V.value[zoom]) + " of view" : "");
  }

  function computeMatch() {
    var re = compileSearch(searchEl.value.trim());
    matchName = null;
    if (!re) return;
    matchName = new Uint8Array(V.names.length);
    for (var k = 0; k < V.names.length; k++) if (re.test(V.names[k])) matchName[k] = 1;
  }

  function runSearch() { computeMatch(); draw(); updateMatch(); }

  var currentName = null;
  function selectView(name) {
    currentName = name;
    V = views[name] || (views[name] = prepare(DATA.views[name]));
    var buttons = document.querySelectorAll("#kp-views button");
    for (var b = 0; b < buttons.length; b++) buttons[b].setAttribute("aria-pressed", String(buttons[b].dataset.view === name));
    zoom = 0;
    computeMatch();
    layout();
    updateMatch();
  }

  var viewsEl = document.getElementById("kp-views");
  function load(data, initial) {
    // (Re)start on a new payload: the HTML report's embedded one, or the web UI's fetched one.
    DATA = data; views = {}; V = null;
    var names = Object.keys(DATA.views);
    viewsEl.textContent = "";
    if (names.length > 1) {
      names.forEach(function (name) {
        var b = document.createElement("button");
        b.type = "button";
        b.dataset.view = name;
        b.textContent = DATA.views[name].title;
        b.addEventListener("click", function () { selectView(name); });
        viewsEl.appendChild(b);
      });
    }
    selectView(DATA.views[initial] ? initial : DATA.initial);
  }
  canvas.addEventListener("mousemove", showTip);
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  canvas.addEventListener("click", function (evt) { var i = nodeAt(evt); if (i >= 0) setZoom(i); });
  document.getElementById("kp-reset").addEventListener("click", function () { setZoom(0); });
  document.getElementById("kp-up").addEventListener("click", function () { if (zoom) setZoom(V.parent[zoom]); });
  // Findings link to their frames: <a class="kp-frame" data-view=".." data-search="..">.
  document.addEventListener("click", function (evt) {
    var a = evt.target && evt.target.closest ? evt.target.closest(".kp-frame") : null;
    if (!a || !DATA) return;
    evt.preventDefault();
    if (DATA.views[a.dataset.view] && a.dataset.view !== currentName) selectView(a.dataset.view);
    setZoom(0);
    searchEl.value = a.dataset.search || "";
    runSearch();
    if (canvas.scrollIntoView) canvas.scrollIntoView({ block: "start", behavior: "smooth" });
  });
  document.addEventListener("keydown", function (evt) { if (evt.key === "Escape" && V && evt.target !== searchEl) setZoom(0); });
  var pending = 0;
  searchEl.addEventListener("input", function () { clearTimeout(pending); pending = setTimeout(runSearch, 120); });
  var resizing = false;
  window.addEventListener("resize", function () {
    if (resizing) return;
    resizing = true;
    requestAnimationFrame(function () { resizing = false; layout(); });
  });
  function frames() {
    // What is drawn, for tests and tools: [{name, kind, depth, x, w, self}] (CSS pixels).
    var out = [];
    for (var d = 0; d < rows.length; d++) (rows[d] || []).forEach(function (i) {
      out.push({ name: V.names[V.name[i]], kind: DATA.kinds[V.kinds[V.name[i]]], depth: d,
                 x: V.x[i], w: V.value[i] * scale, self: selfValue(i) * scale,
                 change: V.base ? change(V, i) : null });
    });
    return out;
  }
  window.kubeprofFlamegraph = {
    load: load, selectView: selectView, setZoom: setZoom, frames: frames,
    zoomed: function () { return V && zoom ? V.names[V.name[zoom]] : ""; },
    search: function (t) { searchEl.value = t; runSearch(); }
  };
  var embedded = document.getElementById("kp-data");
  if (!embedded || !embedded.textContent.trim()) return;
  // The HTML report: start state from the URL, #view=gpu&search=sgemm&zoom=42 (a node index).
  var t0 = performance.now();
  var data = JSON.parse(embedded.textContent);
  var tParsed = performance.now();
  var start = {};
  (typeof location !== "undefined" ? location.hash.slice(1) : "").split("&").forEach(function (kv) {
    var p = kv.split("=");
    if (p[0]) start[p[0]] = decodeURIComponent(p[1] || "");
  });
  if (start.search) searchEl.value = start.search;
  load(data, start.view);
  var z = parseInt(start.zoom, 10);
  if (z > 0 && z < V.n) setZoom(z);
  // Timings for benchmarks (bench/flamegraph_scale.py reads them from the DOM).
  canvas.dataset.parseMs = (tParsed - t0).toFixed(1);
  canvas.dataset.firstDrawMs = (performance.now() - tParsed).toFixed(1);
})();
