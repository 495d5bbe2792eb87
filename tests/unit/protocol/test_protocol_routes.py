"""The ingest API's paths, as the agent builds them."""

from kubeprof.protocol import routes


def test_paths_an_agent_requests():
    assert routes.batches_path("ml", "train") == "/v1/sessions/ml/train/batches"
    assert routes.targets_path("ml", "train", "gpu-1") == "/v1/sessions/ml/train/targets?node=gpu-1"


def test_segments_are_quoted():
    assert routes.batches_path("a b", "x/y") == "/v1/sessions/a%20b/x%2Fy/batches"
    assert routes.targets_path("n", "s", "a&b") == "/v1/sessions/n/s/targets?node=a%26b"


def test_route_templates_match_the_builders():
    built = routes.batches_path("NS", "NAME")
    assert routes.BATCHES_ROUTE.format(namespace="NS", name="NAME") == built
    assert routes.TARGETS_ROUTE.format(
        namespace="NS", name="NAME"
    ) + "?node=N" == routes.targets_path("NS", "NAME", "N")
