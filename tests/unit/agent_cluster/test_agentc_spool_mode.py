"""The session's spool folder on the host is readable by its owner only."""

import stat

from kubeprof.agent.cluster.spool import Spool


def test_spool_folder_is_made_private_even_when_it_exists_already(tmp_path):
    folder = tmp_path / "ml_train"
    folder.mkdir(mode=0o755)  # as the kubelet creates a DirectoryOrCreate hostPath
    Spool(folder).put(b"x", "b1")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    fresh = tmp_path / "new" / "ns_s"
    Spool(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
