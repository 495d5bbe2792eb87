"""A throw-away PostgreSQL 15 server (Debian's binaries) in a folder, on a free port.

PostgreSQL refuses to run as root, so when we are root the server runs as the ``postgres``
user (``runuser``) and the folder is handed to it. pg_ctl stops exactly the postmaster whose
PID is in the data folder's postmaster.pid - never anything found by name.
"""

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from . import ports

PG_BIN = Path(os.environ.get("KUBEPROF_PG_BIN", "/usr/lib/postgresql/15/bin"))
RUN_AS = os.environ.get("KUBEPROF_PG_USER", "postgres")
_TEST_SETTINGS = """
# kubeprof e2e: throw-away data, so trade durability for speed
fsync = off
synchronous_commit = off
full_page_writes = off
"""


@dataclass
class Postgres:
    """One server rooted at dir (data/, sock/, postgres.log, port)."""

    dir: Path
    user: str = "kubeprof"
    db: str = "kubeprof"

    def __post_init__(self) -> None:
        self.dir = Path(self.dir).resolve()

    @property
    def data(self) -> Path:
        """PGDATA."""
        return self.dir / "data"

    @property
    def logfile(self) -> Path:
        """Server log."""
        return self.dir / "postgres.log"

    @property
    def port(self) -> int:
        """TCP port on 127.0.0.1 (chosen at first start, reused while free)."""
        return int((self.dir / "port").read_text())

    @property
    def url(self) -> str:
        """SQLAlchemy URL (psycopg 3 driver)."""
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{self.db}"

    @property
    def dsn(self) -> str:
        """Plain libpq URI (psycopg.connect, psql)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.db}"

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        if shutil.which("runuser") is None:
            raise RuntimeError("running as root needs `runuser` to drop to the postgres user")
        return ["runuser", "-u", RUN_AS, "--", *argv]

    def _run(self, argv: list[str], what: str) -> None:
        r = subprocess.run(self._as_owner(argv), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(
                f"postgres: {what} failed (rc {r.returncode}); log: {self.logfile}\n"
                f"{r.stdout}{r.stderr}"
            )

    def _prepare_dirs(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        # Every ancestor must be traversable by the server's user; say so instead of chmod-ing.
        reach = self._as_owner(["test", "-x", str(self.dir)])
        if os.geteuid() == 0 and subprocess.run(reach).returncode:
            raise RuntimeError(
                f"postgres: user {RUN_AS!r} cannot reach {self.dir}; pick a folder under /tmp "
                "(or one whose parents are o+x)"
            )
        for sub in ("data", "sock"):
            (self.dir / sub).mkdir(exist_ok=True, mode=0o700)
        self.logfile.touch()
        if os.geteuid() == 0:
            for p in (self.data, self.dir / "sock", self.logfile):
                shutil.chown(p, RUN_AS, RUN_AS)

    def is_running(self) -> bool:
        """pg_ctl status finds a live postmaster for our data folder."""
        if not (self.data / "postmaster.pid").exists():
            return False
        argv = [str(PG_BIN / "pg_ctl"), "status", "-D", str(self.data)]
        st = subprocess.run(self._as_owner(argv), capture_output=True)
        return st.returncode == 0

    def start(self, timeout: int = 60) -> "Postgres":
        """initdb on first use, then pg_ctl start -w; a running server is reused."""
        if self.is_running():
            return self
        self._prepare_dirs()
        fresh = not (self.data / "PG_VERSION").exists()
        if fresh:
            self._run(
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    self.user,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
                "initdb",
            )
            with (self.data / "postgresql.conf").open("a") as f:
                f.write(_TEST_SETTINGS)
        port_file = self.dir / "port"
        if not port_file.exists() or not ports.is_free(int(port_file.read_text())):
            port_file.write_text(str(ports.pick(1)[0]))
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir / 'sock'}"
        self._run(
            [
                str(PG_BIN / "pg_ctl"),
                "start",
                "-w",
                "-t",
                str(timeout),
                "-D",
                str(self.data),
                "-l",
                str(self.logfile),
                "-o",
                opts,
            ],
            "pg_ctl start",
        )
        if fresh:
            self._run(
                [
                    str(PG_BIN / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    self.user,
                    self.db,
                ],
                "createdb",
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: int) -> None:
        deadline = time.monotonic() + timeout
        argv = [str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-d", self.db]
        while subprocess.run(argv, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres not ready after {timeout}s; log: {self.logfile}")
            time.sleep(0.2)

    def create_database(self, name: str) -> "Postgres":
        """A new empty database on this server; the returned view's url/dsn name it.

        Tests that share one server each get their own database, so they can run side by
        side (xdist workers, a child pytest) without seeing each other's rows.
        """
        self._run(self._client("createdb", name), f"createdb {name}")
        return replace(self, db=name)

    def drop_database(self, name: str) -> None:
        """Drop a database made by create_database, closing connections still open to it."""
        self._run(self._client("dropdb", "--if-exists", "--force", name), f"dropdb {name}")

    def _client(self, tool: str, *args: str) -> list[str]:
        return [str(PG_BIN / tool), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, *args]

    def stop(self) -> bool:
        """pg_ctl stop -m fast (signals the PID in postmaster.pid). True if it was running."""
        if not self.is_running():
            return False
        self._run(
            [str(PG_BIN / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.data)],
            "pg_ctl stop",
        )
        return True
