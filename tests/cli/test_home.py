"""Where the ``statecore`` command finds its home, as git finds a repository: ``--home`` (before or
after the command), ``STATECORE_HOME``, the nearest ``.statecore`` in the current folder or a
parent, ``~/.statecore``. Read-only commands never create a catalog or a folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecore.catalog import Catalog
from statecore.cli import main
from statecore.config import StatecoreConfig

READ_ONLY = [
    ["checkpoints", "list"],
    ["checkpoints", "show", "clickstream", "1"],
    ["savepoints", "list"],
    ["sql", "SELECT 1"],
    ["state", "get", "clickstream", "visits", "u1"],
    ["diff", "clickstream", "1", "2"],
    ["rescale", "clickstream", "--parallelism", "3"],
    ["unlock", "clickstream"],
]


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current folder, no STATECORE_HOME, a user home with no .statecore."""
    cwd = tmp_path / "empty" / "project"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    (tmp_path / "user").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("STATECORE_HOME", raising=False)
    monkeypatch.delenv("STATECORE_CATALOG_URL", raising=False)
    monkeypatch.delenv("STATECORE_WAREHOUSE", raising=False)
    return tmp_path


def a_home_with_a_job(home: Path) -> None:
    config = StatecoreConfig.resolve(home=str(home), env={})
    home.mkdir(parents=True, exist_ok=True)
    with Catalog.connect(config.catalog_url) as catalog:
        catalog.ensure_job("found_me", parallelism=2, max_parallelism=128)


@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda a: " ".join(a[:2]))
def test_home_read_only_command_without_a_home_fails_and_creates_nothing(
    nowhere: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(nowhere.rglob("*"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no statecore home found" in err
    assert str(nowhere / "empty" / "project" / ".statecore") in err  # the paths it tried
    assert str(nowhere / "user" / ".statecore") in err
    assert "--home PATH or STATECORE_HOME" in err
    assert sorted(nowhere.rglob("*")) == before


def test_home_found_in_a_parent_folder(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a_home_with_a_job(nowhere / "empty" / ".statecore")
    deeper = nowhere / "empty" / "project" / "src" / "deeper"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)
    assert main(["checkpoints", "list", "--format", "csv"]) == 0
    capsys.readouterr()
    assert main(["sql", "SELECT 42 AS answer", "--format", "csv"]) == 0
    assert "42" in capsys.readouterr().out
    assert not (deeper / ".statecore").exists()


def test_home_falls_back_to_the_users_home(
    nowhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_home_with_a_job(nowhere / "user" / ".statecore")
    assert main(["savepoints", "list", "--format", "csv"]) == 0
    assert not (nowhere / "empty" / "project" / ".statecore").exists()


def test_home_option_before_or_after_the_command(
    nowhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = nowhere / "elsewhere"
    a_home_with_a_job(home)
    assert main(["--home", str(home), "checkpoints", "list", "--format", "csv"]) == 0
    assert main(["checkpoints", "list", "--home", str(home), "--format", "csv"]) == 0
    assert main(["unlock", "found_me", "--home", str(home)]) == 0
    missing = nowhere / "missing"
    capsys.readouterr()
    assert main(["checkpoints", "list", "--home", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"no statecore catalog at {missing / 'catalog.db'}" in err
    assert "from --home" in err
    assert not missing.exists()


def test_home_from_the_environment_wins_over_a_parent_folder(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a_home_with_a_job(nowhere / "empty" / ".statecore")
    monkeypatch.setenv("STATECORE_HOME", str(nowhere / "unset-home"))
    assert main(["checkpoints", "list"]) == 2
    assert "from STATECORE_HOME" in capsys.readouterr().err
