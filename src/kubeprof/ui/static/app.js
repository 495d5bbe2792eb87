// kubeprof web UI: three pages over the JSON API (/api/v1), no framework, no build step.
// Sessions list (filter, sort), a session page (findings, GPU timeline, flame graph narrowed
// by view/pod/GPU/time, top functions and kernels) and a diff view of two sessions.
(function () {
  "use strict";
  var app = document.getElementById("kp-app");
  var flame = document.getElementById("kp-flame");
  var FG = window.kubeprofFlamegraph;
  // The views the report renders (report/views.py): off-cpu is where threads waited,
  // wall is on + off CPU per thread.
  var VIEW_NAMES = { cpu: "CPU time", gpu: "GPU time", "off-cpu": "Off-CPU time", wall: "Wall-clock time" };

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "html") e.innerHTML = attrs[k]; // only the report's own escaped HTML
      else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }

  function getJSON(url) {
    return fetch(url, { headers: { Accept: "application/json" } }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body.message || r.statusText);
        return body;
      });
    });
  }

  function fail(err) {
    app.textContent = "";
    app.appendChild(el("p", { "class": "kp-error", text: String(err.message || err) }));
  }

  function pct(x) { return x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %"; }
  function age(s) {
    if (s < 120) return s + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    if (s < 172800) return Math.round(s / 3600) + " h";
    return Math.round(s / 86400) + " d";
  }
  function fmtNs(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
    return (ns / 1e3).toFixed(0) + " us";
  }
  function sessionPath(s) { return "/sessions/" + encodeURIComponent(s.namespace) + "/" + encodeURIComponent(s.name); }
  function ref(s) { return s.namespace + "/" + s.name; }

  // -- sessions list ---------------------------------------------------------------------
  var COLUMNS = [
    ["name", "Session"], ["namespace", "Namespace"], ["phase", "Phase"], ["nodes", "Nodes / pods"],
    ["gpuIdle", "GPU idle"], ["topFinding", "Top finding"], ["ageSeconds", "Age"]
  ];

  function sessionsPage() {
    getJSON("/api/v1/sessions").then(function (data) {
      var params = new URLSearchParams(location.search);
      var state = { sort: params.get("sort") || "ageSeconds", desc: params.get("desc") === "1", filter: params.get("q") || "" };
      var picked = [];
      var filter = el("input", { type: "search", id: "kp-filter", placeholder: "Filter by name, namespace, phase or finding", size: "44", value: state.filter });
      var compare = el("button", { type: "button", id: "kp-compare", disabled: "disabled", text: "Compare the two selected" });
      var tbody = el("tbody");
      var head = el("tr", {}, [el("th", { text: "" })].concat(COLUMNS.map(function (c) {
        return el("th", { "data-key": c[0], tabindex: "0", onclick: function () {
          state.desc = state.sort === c[0] ? !state.desc : false; state.sort = c[0]; draw();
        } }, [c[1]]);
      })));
      function cell(s, key) {
        if (key === "name") return el("td", {}, [el("a", { href: sessionPath(s), text: s.name })]);
        if (key === "nodes") return el("td", { "class": "kp-num", text: s.nodes + " / " + s.pods });
        if (key === "gpuIdle") return el("td", { "class": "kp-num", text: pct(s.gpuIdle) });
        if (key === "ageSeconds") return el("td", { "class": "kp-num", title: s.startedAt, text: age(s.ageSeconds) });
        if (key === "phase") return el("td", {}, [el("span", { "class": "kp-phase kp-phase-" + s.phase, text: s.phase })]);
        return el("td", { text: s[key] || "—" });
      }
      function draw() {
        var needle = filter.value.toLowerCase();
        var rows = data.sessions.filter(function (s) {
          return !needle || [s.name, s.namespace, s.phase, s.topFinding].join(" ").toLowerCase().indexOf(needle) >= 0;
        });
        rows.sort(function (a, b) {
          var x = a[state.sort], y = b[state.sort];
          if (x === null || x === undefined) x = -Infinity;
          if (y === null || y === undefined) y = -Infinity;
          var c = typeof x === "string" ? x.localeCompare(y) : x - y;
          return state.desc ? -c : c;
        });
        tbody.textContent = "";
        rows.forEach(function (s) {
          var box = el("input", { type: "checkbox", "aria-label": "select " + ref(s), onchange: function () {
            if (box.checked) picked.push(ref(s)); else picked = picked.filter(function (r) { return r !== ref(s); });
            if (picked.length > 2) picked.shift();
            compare.disabled = picked.length !== 2;
          } });
          box.checked = picked.indexOf(ref(s)) >= 0;
          tbody.appendChild(el("tr", { "class": "kp-row" }, [el("td", {}, [box])].concat(COLUMNS.map(function (c) { return cell(s, c[0]); }))));
        });
        Array.prototype.forEach.call(head.children, function (th) {
          th.setAttribute("aria-sort", th.dataset.key === state.sort ? (state.desc ? "descending" : "ascending") : "none");
        });
        document.getElementById("kp-count").textContent = rows.length + " of " + data.sessions.length + " sessions";
      }
      compare.addEventListener("click", function () {
        location.href = "/diff?base=" + encodeURIComponent(picked[0]) + "&new=" + encodeURIComponent(picked[1]);
      });
      filter.addEventListener("input", draw);
      app.textContent = "";
      app.appendChild(el("h1", { text: "Profiling sessions" }));
      app.appendChild(el("div", { "class": "kp-toolbar" }, [filter, compare, el("span", { id: "kp-count", "class": "kp-note" })]));
      app.appendChild(data.sessions.length ? el("table", { "class": "kp-table kp-sessions" }, [el("thead", {}, [head]), tbody])
        : el("p", { text: "No sessions stored yet: record one with `kubeprof record -- COMMAND`, or create a ProfilingSession." }));
      if (data.sessions.length) draw();
    }).catch(fail);
  }

  // -- the flame graph, moved into whichever page shows it --------------------------------
  function showFlame(container, data, initial) {
    container.appendChild(flame);
    flame.hidden = false;
    FG.load(data, initial);
  }

  function legend(diff) {
    var lg = document.getElementById("kp-legend");
    lg.textContent = "";
    if (diff) {
      lg.appendChild(el("span", {}, [el("i", { style: "background:hsl(0,85%,50%)" }), "slower (larger share)"]));
      lg.appendChild(el("span", {}, [el("i", { style: "background:hsl(215,85%,50%)" }), "faster (smaller share)"]));
      lg.appendChild(el("span", {}, [el("i", { style: "background:hsl(0,0%,86%)" }), "unchanged"]));
      return;
    }
    [["python", "hsl(205,62%,70%)"], ["native", "hsl(28,85%,62%)"], ["kernel", "hsl(2,70%,66%)"],
     ["CUDA API", "hsl(280,50%,72%)"], ["GPU kernel", "hsl(118,50%,58%)"]].forEach(function (k) {
      lg.appendChild(el("span", {}, [el("i", { style: "background:" + k[1] }), k[0]]));
    });
  }

  function table(cls, headers, rows) {
    return el("table", { "class": "kp-table " + cls }, [el("thead", {}, [el("tr", {}, headers.map(function (h) { return el("th", { text: h }); }))]),
      el("tbody", {}, rows.map(function (r) { return el("tr", {}, r.map(function (c, i) { return el("td", { "class": i < headers.length - 1 ? "kp-num" : "kp-fn", text: c }); })); }))]);
  }

  // -- session page ------------------------------------------------------------------------
  function sessionPage(ns, name) {
    var params = new URLSearchParams(location.search);
    var base = "/api/v1/sessions/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name);
    // The summary and the flame graphs fold CPython's frames as `kubeprof report` does;
    // the checkbox keeps them (keep-interpreter=1 in this page's URL and the API's).
    var keep = interpreterBox(params);
    keep.box.addEventListener("change", function () {
      var p = new URLSearchParams(location.search);
      if (keep.box.checked) p.set("keep-interpreter", "1"); else p.delete("keep-interpreter");
      location.search = p.toString();
    });
    var sel = { pod: params.get("pod") || "", gpu: params.get("gpu") || "", from: params.get("from") || "", to: params.get("to") || "" };
    function flameQuery(v) {
      var q = new URLSearchParams();
      q.set("view", v);
      Object.keys(sel).forEach(function (k) { if (sel[k]) q.set(k, sel[k]); });
      if (keep.box.checked) q.set("keep-interpreter", "1");
      return q.toString();
    }
    // The flame graph is asked for at once, beside the summary: it reads pre-counted stacks
    // and answers in a second, where the summary's analysis of a big session takes longer.
    var early = { view: params.get("view") || "cpu" };
    early.query = flameQuery(early.view);
    early.answer = getJSON(base + "/flamegraph?" + early.query);
    var earlyHolder = el("section", { "class": "kp-flame-holder" }, [el("h2", { text: "Flame graph" }),
      el("p", { "class": "kp-note", id: "kp-analysing", text: "Analysing the session for its findings\u2026" })]);
    app.textContent = "";
    app.appendChild(earlyHolder);
    early.answer.then(function (data) {
      if (earlyHolder.parentNode) { showFlame(earlyHolder, data, early.view); legend(false); }
    }, function () { /* shown again, with its error, once the summary has come */ });
    // The page is `kubeprof report NAME --whole-session`: its flame graph covers the whole
    // session (narrowed by time here), so the header and tables do too.
    getJSON(base + "?whole-session=1" + (keep.box.checked ? "&keep-interpreter=1" : "")).then(function (s) {
      var view = params.get("view") || (s.views.indexOf("cpu") >= 0 ? "cpu" : s.views[0]);
      document.title = "kubeprof: " + ns + "/" + name;
      app.textContent = "";
      app.appendChild(el("h1", {}, [el("span", { "class": "kp-ns", text: ns + " / " }), name, " ", el("span", { "class": "kp-phase kp-phase-" + s.phase, text: s.phase })]));
      app.appendChild(el("dl", { "class": "kp-facts" }, [].concat.apply([], s.header.map(function (kv) { return [el("dt", { text: kv[0] }), el("dd", { text: kv[1] })]; }))));
      // The Perfetto trace `kubeprof report -f perfetto` writes, saved as a .json.gz file.
      // Each node's pids and clock are its own: one timeline per node when there are several.
      var nodes = s.nodes || [];
      var links = nodes.length > 1
        ? [].concat.apply(["Open timeline (Perfetto) of node "], nodes.map(function (n, i) {
            return [i ? ", " : "", el("a", { "class": "kp-perfetto-node", href: base + "/timeline?node=" + encodeURIComponent(n), download: "", text: n })];
          }))
        : [el("a", { id: "kp-perfetto", href: base + "/timeline", download: "", text: "Open timeline (Perfetto)" })];
      app.appendChild(el("p", { "class": "kp-timeline-link" }, links.concat([
        el("span", { "class": "kp-note", text: " \u2014 downloads a .trace.json.gz file: open it at ui.perfetto.dev (\u201cOpen trace file\u201d) or in chrome://tracing." })])));
      app.appendChild(el("section", { "class": "kp-top", id: "kp-findings" }, [el("h2", { text: "Findings" }), el("div", { html: s.html.findings || "<p>No GPU or CPU data to analyse.</p>" })]));

      var viewBtns = el("span", { "class": "kp-views" }, ["cpu", "gpu", "off-cpu", "wall"].map(function (v) {
        var b = el("button", { type: "button", "data-view": v, "aria-pressed": String(v === view), text: VIEW_NAMES[v], onclick: function () { view = v; update(); } });
        if (s.views.indexOf(v) < 0) b.disabled = true;
        return b;
      }));
      var pod = el("select", { id: "kp-pod", "aria-label": "pod", onchange: function () { sel.pod = pod.value; update(); } },
        [el("option", { value: "", text: "all pods" })].concat(s.pods.map(function (p) { return el("option", { value: p.name, text: p.name }); })));
      var gpu = el("select", { id: "kp-gpu", "aria-label": "GPU", onchange: function () { sel.gpu = gpu.value; update(); } },
        [el("option", { value: "", text: "all GPUs" })].concat(s.gpus.map(function (g) { return el("option", { value: g.id, text: "GPU " + g.id }); })));
      pod.value = sel.pod; gpu.value = sel.gpu;
      var from = el("input", { type: "number", min: "0", step: "any", id: "kp-from", placeholder: "from s", value: sel.from, size: "6" });
      var to = el("input", { type: "number", min: "0", step: "any", id: "kp-to", placeholder: "to s", value: sel.to, size: "6" });
      var apply = el("button", { type: "button", text: "Apply range", onclick: function () { sel.from = from.value; sel.to = to.value; update(); } });
      var clear = el("button", { type: "button", text: "Whole session", onclick: function () { sel.from = sel.to = from.value = to.value = ""; update(); } });
      var rangeNote = el("span", { "class": "kp-note", id: "kp-range" });
      var holder = el("section", { "class": "kp-flame-holder" }, [
        el("h2", { text: "Flame graph" }),
        el("div", { "class": "kp-toolbar" }, [viewBtns, pod, gpu, "seconds", from, "to", to, apply, clear, keep.label, rangeNote])]);
      app.appendChild(holder);

      // Left: the top functions of exactly the flame graph above (its view, pod, GPU and time
      // range), refreshed with it. Right: the session's top kernels.
      var topTitle = el("h2", { text: "Top functions" });
      var topBody = el("div");
      var kRows = s.topKernels.map(function (k) { return [(100 * k.selfShare).toFixed(1) + " %", fmtNs(k.selfNs), k.function]; });
      app.appendChild(el("section", { "class": "kp-tops" }, [
        el("div", {}, [topTitle, topBody]),
        el("div", {}, [el("h2", { text: "Top kernels (GPU time, whole session)" }), kRows.length ? table("kp-topk", ["share", "time", "kernel"], kRows) : el("p", { "class": "kp-note", text: "No GPU kernels traced." })])
      ]));
      function showTop(top) {
        var scope = [VIEW_NAMES[view].replace(/ time.*$/, ""), "self time"];
        if (sel.pod) scope.push("pod " + sel.pod);
        if (sel.gpu) scope.push("GPU " + sel.gpu);
        if (sel.from || sel.to) scope.push((sel.from || "0") + "–" + (sel.to || "end") + " s");
        if (keep.box.checked) scope.push("CPython's frames kept");
        topTitle.textContent = "Top functions (" + scope.join(", ") + ")";
        topBody.textContent = "";
        var rows = top.map(function (f) { return [(100 * f.selfShare).toFixed(1) + " %", fmtNs(f.selfNs), fmtNs(f.totalNs), f.function.replace(/_\[gpu\]$/, "")]; });
        topBody.appendChild(rows.length ? table("kp-topfn", ["self", "self time", "total time", "function"], rows) : el("p", { "class": "kp-note", text: "Nothing sampled here." }));
      }
      if (s.html.gpu) app.appendChild(el("section", { "class": "kp-top" }, [el("h2", { text: "GPUs, processes and kernels" }), el("div", { html: s.html.gpu })]));

      function update(search) {
        Array.prototype.forEach.call(viewBtns.children, function (b) { b.setAttribute("aria-pressed", String(b.dataset.view === view)); });
        var q = flameQuery(view);
        history.replaceState(null, "", location.pathname + "?" + q);
        // the first graph: the answer already asked for, when it is of the same view
        var answer = early && early.query === q ? early.answer : getJSON(base + "/flamegraph?" + q);
        early = null;
        answer.then(function (data) {
          showFlame(holder, data, view);
          legend(false);
          showTop(data.top);
          rangeNote.textContent = data.range ? "showing " + data.range[0].toFixed(0) + "–" + data.range[1].toFixed(0) + " s (whole seconds)" : "";
          if (search) FG.search(search);
        }).catch(function (err) { rangeNote.textContent = String(err.message || err); });
      }
      // Clicking the busy/idle timeline narrows the flame graph to a tenth of the session
      // around the clicked time (whole seconds: the CPU counts are kept per second).
      var svg = app.querySelector("svg.kp-timeline");
      if (svg && s.timeline) {
        svg.style.cursor = "crosshair";
        svg.addEventListener("click", function (evt) {
          var r = svg.getBoundingClientRect(), span = s.timeline.busy.length * s.timeline.bucketSeconds;
          var t = s.timeline.startSeconds + (evt.clientX - r.left) / r.width * span;
          var w = Math.max(s.bucketSeconds, Math.round(span / 10)), lo = Math.max(0, Math.floor(t - w / 2));
          sel.from = from.value = String(lo);
          sel.to = to.value = String(lo + w);
          update();
          holder.scrollIntoView({ block: "start" });
        });
      }
      // Findings link to frames of either view: switch the view, then light the frames up.
      app.addEventListener("click", function (evt) {
        var a = evt.target.closest ? evt.target.closest(".kp-frame") : null;
        if (!a) return;
        evt.preventDefault(); evt.stopPropagation();
        view = a.dataset.view || view;
        update(a.dataset.search || "");
        holder.scrollIntoView({ block: "start" });
      }, true);
      update();
    }).catch(fail);
  }

  // -- diff page -----------------------------------------------------------------------------
  // The numbers are `kubeprof diff -f json`'s own answer (/api/v1/diff/numbers): the same
  // rows in the same order, formatted as the text diff formats them.
  var DIFF_TOP = 20;
  function sec(s) { return s.toFixed(3); }
  function share(part, whole) { return (whole ? 100 * part / whole : 0).toFixed(1) + "%"; }
  function signed(x, digits) { return (x >= 0 ? "+" : "") + x.toFixed(digits); }

  function diffSides(d) {
    return el("div", { "class": "kp-diff-sides" }, ["A", "B"].map(function (tag, i) {
      var found = d.findings[i].length ? d.findings[i] : ["none"];
      return el("div", { "class": "kp-diff-side", id: "kp-side-" + tag }, [
        el("h2", { text: tag + ": " + d.sessions[i] }),
        el("p", { "class": "kp-note", text: d.duration_s[i].toFixed(1) + " s; CPU rows: " + d.cpu_window[i] }),
        el("p", { "class": "kp-diff-idle", text: d.gpu_idle[i] }),
        el("ul", { "class": "kp-diff-findings" }, found.map(function (f) { return el("li", { text: f }); }))]);
    }));
  }

  function diffTable(t) {
    var head = t.self_only ? ["A s", "B s", "\u0394 s", "\u0394 pts"]
      : ["self A s", "self B s", "\u0394 s", "\u0394 pts", "total A s", "total B s", "\u0394 s", "\u0394 pts"];
    function cells(r) {
      var c = [sec(r.self_s[0]) + " (" + share(r.self_s[0], t.whole_s[0]) + ")",
        sec(r.self_s[1]) + " (" + share(r.self_s[1], t.whole_s[1]) + ")",
        signed(r.self_change_s, 3), signed(r.self_change_points, 1)];
      if (!t.self_only) {
        c.push(sec(r.total_s[0]) + " (" + share(r.total_s[0], t.whole_s[0]) + ")",
          sec(r.total_s[1]) + " (" + share(r.total_s[1], t.whole_s[1]) + ")",
          signed(r.total_change_s, 3), signed(r.total_change_points, 1));
      }
      return c;
    }
    var tbody = el("tbody");
    var more = el("button", { type: "button", "class": "kp-diff-more" });
    function draw(n) {
      tbody.textContent = "";
      t.rows.slice(0, n).forEach(function (r) {
        var cls = r.self_s[1] > r.self_s[0] ? "kp-up" : r.self_s[1] < r.self_s[0] ? "kp-down" : "";
        tbody.appendChild(el("tr", { "class": cls }, cells(r).map(function (c) { return el("td", { "class": "kp-num", text: c }); })
          .concat([el("td", { "class": "kp-fn", text: r.name })])));
      });
      more.hidden = t.rows.length <= n;
      more.textContent = "Show all " + t.rows.length + " rows";
    }
    more.addEventListener("click", function () { draw(t.rows.length); });
    draw(DIFF_TOP);
    return el("section", { "class": "kp-diff-table" }, [
      el("h2", { text: t.title + ": A " + sec(t.whole_s[0]) + " s, B " + sec(t.whole_s[1]) + " s (" + signed(t.whole_s[1] - t.whole_s[0], 3) + " s)" }),
      el("table", { "class": "kp-table" }, [el("thead", {}, [el("tr", {}, head.concat(["name"]).map(function (h) { return el("th", { text: h }); }))]), tbody]),
      more]);
  }

  function diffPage() {
    var params = new URLSearchParams(location.search);
    getJSON("/api/v1/sessions").then(function (list) {
      var refs = list.sessions.map(ref);
      function picker(id, value) {
        var s = el("select", { id: id }, refs.map(function (r) { return el("option", { value: r, text: r }); }));
        s.value = value || "";
        return s;
      }
      var base = picker("kp-base", params.get("base") || refs[1]);
      var next = picker("kp-new", params.get("new") || refs[0]);
      var view = el("select", { id: "kp-diff-view" }, ["cpu", "gpu", "off-cpu", "wall"].map(function (v) { return el("option", { value: v, text: VIEW_NAMES[v] }); }));
      view.value = params.get("view") || "cpu";
      var sort = el("select", { id: "kp-diff-sort", "aria-label": "rows by" }, [
        el("option", { value: "self", text: "rows by |\u0394 self|" }), el("option", { value: "total", text: "rows by |\u0394 total|" })]);
      sort.value = params.get("sort") || "self";
      var keep = interpreterBox(params);
      var note = el("span", { "class": "kp-note", id: "kp-diff-note" });
      var numbers = el("section", { id: "kp-diff-numbers" });
      var holder = el("section", { "class": "kp-flame-holder" }, [el("h2", { text: "Differential flame graph" }),
        el("p", { "class": "kp-note", text: "Width: time in both sessions together. Colour: how the frame's share of its session changed from the baseline to the new session \u2014 red got slower, blue got faster." })]);
      app.textContent = "";
      app.appendChild(el("h1", { text: "Compare two sessions" }));
      app.appendChild(el("p", { "class": "kp-note", text: "The numbers of `kubeprof diff A B`: \u0394 = B \u2212 A; points (pts) are each session's share of its own total, so runs of different lengths compare." }));
      app.appendChild(el("div", { "class": "kp-toolbar" }, ["baseline (A)", base, "new (B)", next, view, sort, keep.label, el("button", { type: "button", id: "kp-diff-go", text: "Compare", onclick: go }), note]));
      app.appendChild(numbers);
      app.appendChild(holder);
      function go() {
        var q = new URLSearchParams({ base: base.value, "new": next.value, view: view.value, sort: sort.value });
        if (keep.box.checked) q.set("keep-interpreter", "1");
        history.replaceState(null, "", "/diff?" + q.toString());
        note.textContent = "";
        delete numbers.dataset.ready;
        numbers.textContent = "";
        numbers.appendChild(el("p", { "class": "kp-note", text: "Analysing both sessions\u2026" }));
        getJSON("/api/v1/diff/numbers?" + q.toString()).then(function (d) {
          numbers.textContent = "";
          numbers.appendChild(diffSides(d));
          d.tables.forEach(function (t) { numbers.appendChild(diffTable(t)); });
          numbers.dataset.ready = "1";
        }).catch(function (err) { numbers.textContent = ""; note.textContent = String(err.message || err); });
        getJSON("/api/v1/diff?" + q.toString()).then(function (data) {
          showFlame(holder, data, view.value);
          legend(true);
        }).catch(function (err) { note.textContent = String(err.message || err); });
      }
      keep.box.addEventListener("change", go);
      if (base.value && next.value) go();
    }).catch(fail);
  }

  // `kubeprof report --keep-interpreter` as a checkbox and the query parameter keep-interpreter=1.
  function interpreterBox(params) {
    var box = el("input", { type: "checkbox", id: "kp-keep-interpreter" });
    box.checked = params.get("keep-interpreter") === "1";
    var label = el("label", { "class": "kp-note", title: "As `kubeprof report --keep-interpreter`: by default CPython's own frames (_PyEval_EvalFrameDefault, sre_ucs1_count, ...) are folded into the Python function that ran them" }, [box, " keep CPython's frames"]);
    return { box: box, label: label };
  }

  var parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "sessions" && parts.length === 3) sessionPage(parts[1], parts[2]);
  else if (parts[0] === "diff") diffPage();
  else sessionsPage();
})();
