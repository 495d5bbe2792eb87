import pytest

from tests.support import chart


@pytest.fixture(scope="session")
def helm_built() -> None:
    if not chart.helm_path().exists():
        pytest.fail(
            f"helm {chart.HELM_VERSION} is not built: run make helm-build "
            f"({chart.BUILD_SCRIPT.relative_to(chart.ROOT)})"
        )
