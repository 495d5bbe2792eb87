// Runs the flame graph page's inline script in Node against a minimal fake DOM and canvas,
// drives it (views, zoom, search, hover) and prints what it drew as JSON on stdout.
"use strict";
const fs = require("fs");
const page = fs.readFileSync(process.argv[2], "utf8");
const data = /<script type="application\/json" id="kp-data">([\s\S]*?)<\/script>/.exec(page)[1];
const scripts = [...page.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]);

const calls = { fillRect: 0, fillText: 0, texts: [] };
function element(id) {
  return {
    id, hidden: false, textContent: id === "kp-data" ? data : "", value: "", style: {},
    dataset: {}, children: [], listeners: {}, clientWidth: 1200, offsetWidth: 200, offsetHeight: 50,
    width: 1, height: 1,
    addEventListener(type, fn) { (this.listeners[type] = this.listeners[type] || []).push(fn); },
    appendChild(child) { this.children.push(child); },
    setAttribute(k, v) { this[k] = v; },
    getBoundingClientRect() { return { left: 0, top: 0 }; },
    getContext() {
      return {
        font: "", fillStyle: "", globalAlpha: 1, textBaseline: "",
        setTransform() {}, clearRect() {},
        fillRect() { calls.fillRect++; },
        fillText(t) { calls.fillText++; if (calls.texts.length < 50) calls.texts.push(t); },
        measureText(t) { return { width: 7 * t.length }; },
      };
    },
  };
}
const elements = {};
const byId = (id) => elements[id] || (elements[id] = element(id));
global.document = {
  getElementById: byId,
  createElement: () => element("new"),
  querySelectorAll: () => byId("kp-views").children,
  listeners: {},
  addEventListener(type, fn) { (this.listeners[type] = this.listeners[type] || []).push(fn); },
};
global.window = { devicePixelRatio: 1, innerWidth: 1400, innerHeight: 900, addEventListener() {} };
global.requestAnimationFrame = (fn) => fn();
global.setTimeout = (fn) => { fn(); return 0; };
global.clearTimeout = () => {};

for (const src of scripts) new Function(src)();
const api = window.kubeprofFlamegraph;
const canvas = byId("kp-canvas");
const out = { views: byId("kp-views").children.map((b) => b.textContent) };
const fire = (type, x, y) => (canvas.listeners[type] || []).forEach((fn) => fn({ clientX: x, clientY: y }));

out.initialStatus = byId("kp-status").textContent;
out.initialRects = calls.fillRect;
fire("mousemove", 600, 9);  // root row
out.rootTip = byId("kp-tip").textContent;
fire("mousemove", 5, 18 * 2 + 9);
out.deepTip = byId("kp-tip").textContent;
fire("click", 5, 18 * 2 + 9);  // zoom into the frame at depth 2, left edge
out.zoomStatus = byId("kp-status").textContent;
api.search(process.argv[3] || "main");
out.match = byId("kp-match").textContent;
api.setZoom(0);
out.matchUnzoomed = byId("kp-match").textContent;
if (out.views.length > 1) { api.selectView("gpu"); out.gpuStatus = byId("kp-status").textContent; }
// Optional: click a findings link <a class="kp-frame" data-view=.. data-search=..> (argv[4]).
if (process.argv[4]) {
  const link = { dataset: JSON.parse(process.argv[4]) };
  const target = { closest: (sel) => (sel === ".kp-frame" ? link : null) };
  let prevented = false;
  (document.listeners.click || []).forEach((fn) => fn({ target, preventDefault() { prevented = true; } }));
  out.link = { prevented, search: byId("kp-search").value, match: byId("kp-match").textContent,
               status: byId("kp-status").textContent };
}
out.calls = calls;
console.log(JSON.stringify(out));
