"""build.sh and versions.py carry the same pins (cheap; no cluster needed)."""

import re

from tests.e2e.cluster import versions


def test_build_script_pins_match_python() -> None:
    text = versions.BUILD_SCRIPT.read_text()
    pins = dict(re.findall(r"^(\w+)_VERSION=(\S+)$", text, re.M))
    assert pins["K8S"] == versions.KUBERNETES
    assert pins["ETCD"] == versions.ETCD
    assert pins["KWOK"] == versions.KWOK
    assert pins["K8S_STAGING"] == "v0." + versions.KUBERNETES.removeprefix("v1.")
