"""metrics.auth: the chart puts the operator's /metrics behind a scrape token (issue 32,
item 6): one Secret, mounted into the operator as --metrics-token-file's file, and sent by
the ServiceMonitor as its bearer token. Off by default (and then nothing of it renders)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from kubeprof.operator.main import build_parser
from tests.support import chart

pytestmark = pytest.mark.usefixtures("helm_built")

SM = {"serviceMonitor": {"enabled": True}}


def _operator(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the operator container, its pod spec)."""
    pod = chart.find(docs, "Deployment")["spec"]["template"]["spec"]
    return pod["containers"][0], pod


def _token_file(docs: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(the file the operator is told to read, the Secret and the key mounted at that file)."""
    container, pod = _operator(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = env["KUBEPROF_METRICS_TOKEN_FILE"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    folder, file = path.rsplit("/", 1)
    vol = {v["name"]: v for v in pod["volumes"]}[mounts[folder]]["secret"]
    key = next(i["key"] for i in vol["items"] if i["path"] == file)
    return path, vol["secretName"], key


def _scrape_secret(docs: list[dict[str, Any]]) -> tuple[str, str]:
    auth = chart.find(docs, "ServiceMonitor")["spec"]["endpoints"][0]["authorization"]
    assert auth["type"] == "Bearer"
    return auth["credentials"]["name"], auth["credentials"]["key"]


def test_off_by_default_nothing_of_it_renders():
    docs = chart.render({"metrics": SM})
    container, pod = _operator(docs)
    assert "KUBEPROF_METRICS_TOKEN_FILE" not in {e["name"] for e in container["env"]}
    assert "metrics-token" not in {v["name"] for v in pod["volumes"]}
    assert not [d for d in docs if d["metadata"]["name"].endswith("-metrics-token")]
    assert "authorization" not in chart.find(docs, "ServiceMonitor")["spec"]["endpoints"][0]


def test_generated_token_reaches_the_operator_flag_and_the_service_monitor(monkeypatch, tmp_path):
    docs = chart.render({"metrics": {"auth": {"enabled": True}, **SM}})
    path, secret, key = _token_file(docs)
    assert (secret, key) == ("kp-kubeprof-metrics-token", "token")
    assert _scrape_secret(docs) == (secret, key), "Prometheus must send the token mounted"
    data = chart.find(docs, "Secret", secret)["data"]
    token = base64.b64decode(data[key]).decode()
    assert len(token) == 48 and token.isalnum()
    # Readable by the operator's user through its fsGroup, by nobody else.
    vol = {v["name"]: v for v in _operator(docs)[1]["volumes"]}["metrics-token"]
    assert vol["secret"]["defaultMode"] == 0o440

    # The operator's own parser takes the file from the env the chart sets...
    monkeypatch.setenv("KUBEPROF_METRICS_TOKEN_FILE", path)
    assert build_parser().parse_args(["--database-url", "sqlite://"]).metrics_token_file == path

    # ...and, with the Secret's value where the kubelet puts it, /metrics lets the
    # ServiceMonitor's credentials in and nobody without them.
    mounted = tmp_path / "token"
    mounted.write_text(token)
    db = tmp_path / "k.db"
    assert _scrape(db, mounted.read_text().strip(), f"Bearer {token}") == 200
    assert _scrape(db, mounted.read_text().strip(), None) == 401


def test_existing_secret_and_key_are_used_by_both_and_none_is_generated():
    values = {"metrics": {"auth": {"enabled": True, "existingSecret": "scrape", "key": "t"}, **SM}}
    docs = chart.render(values)
    _, secret, key = _token_file(docs)
    assert (secret, key) == ("scrape", "t")
    assert _scrape_secret(docs) == ("scrape", "t")
    assert not [d for d in docs if d["kind"] == "Secret" and "metrics" in d["metadata"]["name"]]


def test_auth_without_a_service_monitor_still_guards_the_operator():
    docs = chart.render({"metrics": {"auth": {"enabled": True}}})
    path, secret, _ = _token_file(docs)
    assert path == "/var/run/kubeprof-metrics/token"
    chart.find(docs, "Secret", secret)
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]


@pytest.mark.parametrize(
    "auth,where",
    [
        ({"enable": True}, "'enable' not allowed"),
        ({"enabled": "yes"}, "/metrics/auth/enabled"),
        ({"enabled": True, "existingSecret": "Bad_Name"}, "/metrics/auth/existingSecret"),
        ({"enabled": True, "key": ""}, "/metrics/auth/key"),
    ],
)
def test_a_bad_auth_value_is_refused_naming_it(auth, where):
    with pytest.raises(chart.RenderError) as err:
        chart.render({"metrics": {"auth": auth}})
    assert where in str(err.value)


def _scrape(db: Path, token: str, authorization: str | None) -> int:
    """GET /metrics of the operator's ingest API holding `token`; the status."""
    from aiohttp.test_utils import TestClient, TestServer

    from kubeprof.operator.db import BatchWriter
    from kubeprof.operator.ingest import SERVER_OPTIONS, IngestApi
    from kubeprof.operator.registry import Registry
    from kubeprof.storage import Store

    store = Store.open(f"sqlite:///{db}")
    api = IngestApi(Registry(), BatchWriter(store.engine), startup_grace_s=0, metrics_token=token)

    async def go() -> int:
        headers = {"Authorization": authorization} if authorization else {}
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            return (await client.get("/metrics", headers=headers)).status

    try:
        return asyncio.run(go())
    finally:
        api.pool.shutdown()
        store.close()


def test_lint_with_auth(tmp_path: Path):
    f = tmp_path / "values.yaml"
    f.write_text('{"metrics": {"auth": {"enabled": true}, "serviceMonitor": {"enabled": true}}}')
    r = chart.helm("lint", "--strict", str(chart.CHART), "--values", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
