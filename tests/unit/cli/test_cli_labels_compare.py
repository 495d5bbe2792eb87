"""`kubeprof record --label/--cloud-provider` and `kubeprof compare` as a user types them."""

import pytest

from kubeprof import cli


def test_bad_label_is_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["record", "--label", "batch_size", "--", "true"])
    assert exc.value.code == 2
    assert "--label 'batch_size': expected KEY=VALUE" in capsys.readouterr().err


def test_region_without_provider_is_refused(capsys):
    assert cli.main(["record", "--region", "us-east-1", "--", "true"]) == 2
    assert "--cloud-provider and --region go together" in capsys.readouterr().err


def test_carbon_flags_become_session_meta():
    args = cli.build_parser().parse_args(
        ["record", "--cloud-provider", "aws", "--region", "us-east-1", "--pue", "1.2", "--", "true"]
    )
    assert cli._carbon_meta(args) == {
        "carbon:cloudProvider": "aws",
        "carbon:region": "us-east-1",
        "carbon:pue": "1.2",
    }


def test_compare_unknown_session_is_a_clear_error(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/s.db"
    assert cli.main(["compare", "nope", "--store", url]) == 2
    assert "no sessions stored yet" in capsys.readouterr().err
