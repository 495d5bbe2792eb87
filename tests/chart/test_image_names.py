"""One version and one image name scheme across the package, the chart, the operator's
defaults and `make images` (scripts/build_images.sh): what `helm install` pulls, what the
operator puts into agent DaemonSets and what the build tags must be the same names."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from kubeprof.operator.config import IMAGE_REPO, OperatorConfig, default_image, release
from kubeprof.operator.main import build_parser
from tests.support import chart

ROOT = Path(__file__).resolve().parents[2]


def chart_meta() -> dict:
    return yaml.safe_load((chart.CHART / "Chart.yaml").read_text())


def test_the_chart_app_version_is_the_package_version() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert chart_meta()["appVersion"] == pyproject["project"]["version"] == release()


def test_the_operator_default_agent_image_follows_the_scheme() -> None:
    want = f"{IMAGE_REPO}/kubeprof-agent:{chart_meta()['appVersion']}"
    assert default_image("agent") == want
    assert OperatorConfig(database_url="").agent_image == want
    assert build_parser().parse_args([]).agent_image == want


def test_the_chart_values_use_the_scheme() -> None:
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    assert values["operator"]["image"]["repository"] == f"{IMAGE_REPO}/kubeprof-operator"
    assert values["agent"]["image"]["repository"] == f"{IMAGE_REPO}/kubeprof-agent"
    assert values["operator"]["image"]["tag"] == values["agent"]["image"]["tag"] == ""


def test_make_images_tags_with_the_scheme_and_the_app_version() -> None:
    script = (ROOT / "scripts" / "build_images.sh").read_text()
    assert f"REPO=${{KUBEPROF_IMAGE_REPO:-{IMAGE_REPO}}}" in script
    assert 'tag="$REPO/kubeprof-$c:$VERSION"' in script
    assert "charts/kubeprof/Chart.yaml" in script  # VERSION is the chart's appVersion
    for c in ("operator", "agent"):
        text = (ROOT / "docker" / f"{c}.Dockerfile").read_text()
        assert re.search(r"^ARG BASE=", text, re.M), f"{c}: the base is a build argument"
        stages: list[str] = []  # a stage starts from BASE or from a stage named above it
        for line in text.splitlines():
            if line.startswith("FROM "):
                words = line.split()
                assert words[1] in ("${BASE}", *stages), f"{c}: every stage starts from BASE"
                stages += words[3:4] if words[2:3] == ["AS"] else []


@pytest.mark.usefixtures("helm_built")
def test_the_default_install_runs_the_scheme_images() -> None:
    docs = chart.render()
    deploy = chart.find(docs, "Deployment", "kp-kubeprof")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == default_image("operator")
    rendered = yaml.safe_dump(pod["containers"][0])
    assert default_image("agent") in rendered  # handed to the operator for the DaemonSets
