from tests.support.chart import helm_built  # noqa: F401 - the fixture
