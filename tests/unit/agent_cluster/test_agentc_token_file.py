"""The agent sends the token its file holds now: the kubelet rotates a projected
ServiceAccount token by swapping a `..data` symlink, and a token read once would expire."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kubeprof.agent.cluster.client import IngestClient, TokenFile


def _kubelet_writes(folder: Path, version: str, token: str) -> None:
    """The kubelet's atomic writer: a new timestamped folder, `..data` swapped to it."""
    (folder / version).mkdir()
    (folder / version / "token").write_text(token + "\n")
    link = folder / "..data_tmp"
    link.symlink_to(version)
    link.replace(folder / "..data")
    if not (folder / "token").is_symlink():
        (folder / "token").symlink_to("..data/token")


def test_each_request_carries_the_token_the_file_holds_now(tmp_path: Path):
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # HTTP/1.0: the body ends with the connection, so no length is needed.
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"pods": []}')

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _kubelet_writes(tmp_path, "..2026_01", "first")
        client = IngestClient(
            f"http://127.0.0.1:{server.server_port}", "ns", "s", TokenFile(tmp_path / "token")
        )
        assert client.targets("n1").status == 200
        _kubelet_writes(tmp_path, "..2026_02", "second")
        assert client.targets("n1").status == 200
        (tmp_path / "..data").unlink()  # mid-swap: the last token read stands in
        assert client.targets("n1").status == 200
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["Bearer first", "Bearer second", "Bearer second"]
