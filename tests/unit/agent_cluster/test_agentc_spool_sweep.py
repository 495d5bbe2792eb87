"""Old spool folders (no session UID) are removed once long idle, without ever following a
symbolic link out of the spool root (issue 32, item 6)."""

import os
import time
from pathlib import Path

from kubeprof.agent.cluster.spool_sweep import LEGACY_IDLE_S, is_legacy, sweep_legacy

UID = "0f0e0d0c-0b0a-4900-8800-070605040302"


def _aged(path: Path, days: float) -> Path:
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def _folder(root: Path, name: str, days: float) -> Path:
    (root / name).mkdir()
    return _aged(root / name, days)


def test_names_of_the_old_form_are_told_from_uid_keyed_ones():
    assert is_legacy("ml_train") and is_legacy("ml_train-2.b")
    assert not is_legacy(f"ml_train_{UID}")
    assert not is_legacy("quarantine") and not is_legacy("ML_x") and not is_legacy("_x")


def test_old_idle_folders_go_links_are_never_followed(tmp_path: Path):
    root, outside = tmp_path / "spool", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    precious = outside / "precious.txt"
    precious.write_text("not the spool's")
    old = root / "ml_old"
    old.mkdir()
    (old / "000000000001-b1.batch.gz").write_bytes(b"x")
    (old / "link-out").symlink_to(outside)  # inside an old folder: the link goes, not outside/
    (old / "file-link").symlink_to(precious)
    _aged(old, 8)
    _folder(root, "ml_recent", 1)
    _folder(root, f"ml_keyed_{UID}", 30)
    _folder(root, "ml_mine", 30)  # the caller's own
    (root / "ml_file").write_text("a file, not a folder")
    _aged(root / "ml_file", 30)
    (root / "ml_link").symlink_to(outside)  # a link named like an old folder
    _aged(root / "ml_link", 30)

    removed = sweep_legacy(root, keep="ml_mine")

    assert sorted(removed) == ["ml_link", "ml_old"]
    assert sorted(p.name for p in root.iterdir()) == [
        "ml_file",
        f"ml_keyed_{UID}",
        "ml_mine",
        "ml_recent",
    ]
    assert precious.read_text() == "not the spool's" and sorted(os.listdir(outside)) == [
        "precious.txt"
    ]


def test_a_root_that_is_a_link_is_left_alone(tmp_path: Path):
    real = tmp_path / "real"
    real.mkdir()
    _folder(real, "ml_old", 30)
    (tmp_path / "root").symlink_to(real)
    assert sweep_legacy(tmp_path / "root") == []
    assert (real / "ml_old").is_dir()
    assert sweep_legacy(real, now=time.time() + LEGACY_IDLE_S) == ["ml_old"]
