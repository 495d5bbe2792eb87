"""The web UI in a real browser: the list, a session page, zooming, and the diff view."""

from __future__ import annotations

import json

FRAMES = "window.kubeprofFlamegraph.frames()"
READY = f"window.kubeprofFlamegraph && {FRAMES}.length > 0"
# A session page draws its first flame graph before the summary comes (app.js asks for both
# at once); the findings, the timeline and the view buttons come with the summary.
SESSION_READY = f"!!document.getElementById('kp-findings') && {READY}"


def _canvas_point(browser, frame: dict) -> tuple[float, float]:
    """Page coordinates of the middle of a drawn frame (the canvas scrolled into view)."""
    browser.eval("document.getElementById('kp-canvas').scrollIntoView({block: 'start'})")
    rect = browser.eval(
        "(() => { const r = document.getElementById('kp-canvas')"
        ".getBoundingClientRect(); return [r.left, r.top]; })()"
    )
    return rect[0] + frame["x"] + frame["w"] / 2, rect[1] + frame["depth"] * 18 + 9


def test_sessions_list_renders_rows_from_the_store(browser, ui_url, shots):
    browser.goto(ui_url + "/sessions", "document.querySelectorAll('.kp-row').length === 3")
    rows = browser.eval(
        "[...document.querySelectorAll('.kp-row')].map(r => "
        "[...r.cells].slice(1).map(c => c.textContent))"
    )
    by_name = {r[0]: r for r in rows}
    assert set(by_name) == {"pageable", "pageable_pinned", "train"}
    assert by_name["train"][1:4] == ["team-a", "Completed", "1 / 2"]
    # The analysis ran in the background: GPU idle and the top finding are filled in.
    assert by_name["pageable"][4].endswith("%")
    # copies keep the device busy: copy-bound (pageable, advice to pin) is the top finding
    assert by_name["pageable"][5].startswith("Copy-bound") and "pin" in by_name["pageable"][5]
    browser.screenshot(shots / "sessions.png")
    browser.eval(
        "(() => { const f = document.getElementById('kp-filter'); f.value = 'team';"
        " f.dispatchEvent(new Event('input')); })()"
    )
    assert browser.eval("document.querySelectorAll('.kp-row').length") == 1


def test_session_page_shows_findings_and_the_hottest_function_widest(browser, ui_url, shots):
    browser.goto(ui_url + "/sessions/local/pageable?view=cpu", SESSION_READY)
    titles = browser.eval(
        "[...document.querySelectorAll('.kp-finding h3')].map(h => h.textContent)"
    )
    assert any("Pageable memory copies" in t for t in titles)
    assert browser.eval("!!document.querySelector('svg.kp-timeline')")
    frames = browser.eval(FRAMES)
    code = [f for f in frames if f["kind"] != "process"]
    widest = max(code, key=lambda f: f["self"])  # the widest plateau: most time in itself
    assert widest["name"].startswith("copy_batch"), widest
    first = "document.querySelector('.kp-topfn tbody td:last-child').textContent"
    assert browser.wait(first).startswith("copy_batch")  # the table agrees with the graph
    browser.screenshot(shots / "session.png")

    link = browser.eval(
        "(() => { const a = document.getElementById('kp-perfetto');"
        " return a && [a.textContent, a.getAttribute('href'), a.hasAttribute('download'),"
        " a.parentElement.textContent]; })()"
    )
    assert link, "no timeline link on the session page"
    text, href, download, line = link
    assert text == "Open timeline (Perfetto)" and download
    assert href == "/api/v1/sessions/local/pageable/timeline"
    assert "ui.perfetto.dev" in line and "chrome://tracing" in line
    got = browser.eval(
        f"fetch({href!r}).then(r => r.arrayBuffer().then(b => [r.status,"
        " r.headers.get('content-type'), r.headers.get('content-disposition'),"
        " [...new Uint8Array(b, 0, 2)], b.byteLength]))"
    )
    status, ctype, disposition, magic, size = got
    assert (status, ctype, magic) == (200, "application/gzip", [0x1F, 0x8B]), got
    assert 'filename="local_pageable.trace.json.gz"' in disposition and size > 1000

    x, y = _canvas_point(browser, widest)
    browser.click(x, y)
    browser.wait("window.kubeprofFlamegraph.zoomed().startsWith('copy_batch')")
    assert "zoomed into" in browser.eval("document.getElementById('kp-status').textContent")
    zoomed = {f["name"]: f for f in browser.eval(FRAMES)}
    width = browser.eval("document.getElementById('kp-canvas').clientWidth")
    assert abs(zoomed[widest["name"]]["w"] - width) < 1  # the clicked frame fills the width
    browser.screenshot(shots / "session-zoomed.png")


def test_deep_link_selects_the_gpu_view(browser, ui_url, shots):
    browser.goto(ui_url + "/sessions/local/pageable?view=gpu", SESSION_READY)
    names = [f["name"] for f in browser.eval(FRAMES)]
    assert any(n.startswith("memcpy HtoD") for n in names)
    pressed = browser.eval(
        "document.querySelector('.kp-views button[aria-pressed=true]').dataset.view"
    )
    assert pressed == "gpu"
    browser.screenshot(shots / "session-gpu.png")


def test_diff_view_colours_the_function_that_changed(browser, ui_url, shots):
    browser.goto(ui_url + "/diff?base=local/pageable_pinned&new=local/pageable&view=cpu", READY)
    frames = browser.eval(FRAMES)
    copy = max((f for f in frames if f["name"].startswith("copy_batch")), key=lambda f: f["w"])
    assert copy["change"] > 0.05
    x, y = _canvas_point(browser, copy)
    # Read back the pixel the browser drew at the frame's middle (left edge: not the label).
    pixel = browser.eval(
        "(() => { const c = document.getElementById('kp-canvas'), r = c.getBoundingClientRect()"
        ", d = window.devicePixelRatio || 1; return [...c.getContext('2d').getImageData("
        f"Math.round(({copy['x']} + 2) * d), Math.round(({copy['depth']} * 18 + 4) * d), 1, 1)"
        ".data]; })()"
    )
    red, green, blue = pixel[:3]
    assert red > green + 40 and red > blue + 40, json.dumps({"pixel": pixel, "at": [x, y]})
    browser.screenshot(shots / "diff.png")


def test_clicking_the_timeline_narrows_the_flame_graph_to_that_time(browser, ui_url, shots):
    browser.goto(ui_url + "/sessions/local/pageable?view=cpu", SESSION_READY)
    total = browser.eval(f"{FRAMES}[0].w")  # the root frame at full width: all samples
    status = "document.getElementById('kp-status').textContent"
    whole = browser.eval(status)
    box = browser.eval(
        "(() => { const r = document.querySelector('svg.kp-timeline')"
        ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()"
    )
    browser.eval("document.querySelector('svg.kp-timeline').scrollIntoView({block: 'center'})")
    box = browser.eval(
        "(() => { const r = document.querySelector('svg.kp-timeline')"
        ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()"
    )
    browser.click(box[0] + box[2] * 0.05, box[1] + box[3] / 2)  # start-up: the first 10 s
    browser.wait("document.getElementById('kp-range').textContent.startsWith('showing')")
    assert "view=cpu" in browser.eval("location.search") and "from=0" in browser.eval(
        "location.search"
    )
    browser.wait(f"{status} !== {whole!r}")
    assert browser.eval(f"{FRAMES}[0].w") == total  # the root still spans the graph ...
    narrowed = browser.eval(status)
    assert narrowed != whole  # ... but over fewer samples: the status line says how much
    title = browser.eval("document.querySelector('.kp-tops h2').textContent")
    assert title.startswith("Top functions (CPU, self time, 0–"), title
    browser.screenshot(shots / "session-range.png")
