"""`accum figures --family F --param k=v`: the family is validated before any work and drawn beside the built-ins."""

import pytest

from accum.cli import main


@pytest.mark.parametrize("argv, flag", [
    (["--param", "dim=8"], "--param needs --family"),
    (["--family", "nosuch"], "unknown family"),
    (["--family", "householder", "--param", "beta=3"], "'beta'"),
])
def test_bad_family_options_are_refused_before_any_work(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("accum.figures.make.make_figures", lambda *a, **k: pytest.fail("work ran"))
    assert main(["figures", "--quick", "--out", str(tmp_path / "o"), "--results", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
    assert list(tmp_path.iterdir()) == []


def test_the_family_reaches_the_figures(tmp_path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr("accum.figures.make.make_figures", lambda *a, **k: seen.update(k) or [])
    assert main(["figures", "--quick", "--out", str(tmp_path / "o"), "--results", str(tmp_path / "r"),
                 "--family", "accum.simulations.examples:SignedPermutation", "--param", "dim=8"]) == 0
    assert seen["extra"].name == "accum.simulations.examples:SignedPermutation" and seen["extra"].params == {"dim": "8"}
