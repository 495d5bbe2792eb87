"""The PostgreSQL fixture is a real server that psycopg can use."""

import psycopg
import pytest

pytestmark = pytest.mark.e2e


def test_psycopg_roundtrip(postgres_dsn) -> None:
    assert postgres_dsn.url.startswith("postgresql+psycopg://")
    with psycopg.connect(postgres_dsn.libpq) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS e2e_roundtrip (id serial PRIMARY KEY, body text)")
        row_id = conn.execute(
            "INSERT INTO e2e_roundtrip (body) VALUES (%s) RETURNING id", ("h200 x8",)
        ).fetchone()[0]
        conn.commit()
    with psycopg.connect(postgres_dsn.libpq) as conn:
        got = conn.execute("SELECT body FROM e2e_roundtrip WHERE id = %s", (row_id,)).fetchone()
        assert got == ("h200 x8",)
        assert conn.execute("SHOW server_version").fetchone()[0].startswith("15.")
