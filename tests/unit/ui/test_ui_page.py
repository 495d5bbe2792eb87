"""The UI's page and the report's HTML page run the same flamegraph.js: both carry every
element it binds to, from one markup, with no template placeholder left over."""

from __future__ import annotations

import re
from importlib import resources

from kubeprof.report.flamegraph import render_html
from kubeprof.ui.routes import Routes
from tests.support.synthetic import synthetic_profile


def test_the_ui_page_and_the_report_page_carry_the_flame_graph_elements() -> None:
    script = resources.files("kubeprof.report").joinpath("flamegraph.js").read_text("utf-8")
    bound = set(re.findall(r'getElementById\("(kp-[a-z-]+)"\)', script)) - {"kp-data"}
    assert {"kp-canvas", "kp-search", "kp-views"} <= bound
    ui = Routes(engine=None).handle("GET", "/sessions", {}).body.decode()  # type: ignore[arg-type]
    report = render_html(synthetic_profile(5))
    for page in (ui, report):
        assert "{{" not in page
        missing = [i for i in sorted(bound) if page.count(f'id="{i}"') != 1]
        assert not missing, missing
    assert '<span id="kp-legend" class="kp-legend"></span>' in ui  # app.js fills it
    assert "python</span>" in report.split('id="kp-legend"', 1)[1].split("</nav>", 1)[0]
