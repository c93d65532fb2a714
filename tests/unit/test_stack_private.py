"""The local stack's home is its user's alone, on a throwaway CRONFLEET_HOME: `stack up`
makes the home private, takes group and other permissions off what an older `up` left,
and runs (and starts its servers) under umask 077. Nothing is started here: the
services are stand-ins that write a file and start a process, as the real ones do."""

from __future__ import annotations

import argparse
import grp
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kit.stack import cli
from kit.stack.private import tighten, tightened_mode


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def old_up_layout(home: Path) -> dict[str, Path]:
    """What `stack up` left before: a 0755 home, 0644 logs and Kafka data."""
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    paths = {
        "stack.json": home / "stack.json",
        "kafka.log": home / "kafka" / "kafka.log",
        "segment": home / "kafka" / "data" / "runs-0" / "00000000000000000000.log",
        "pg log": home / "postgres" / "postgres.log",
    }
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
        path.chmod(0o644)
    for directory in (home / "kafka", home / "kafka" / "data", home / "postgres"):
        directory.chmod(0o755)
    (home / "kafka" / "link").symlink_to("/etc/hostname")
    return paths


class Stand:
    """A service that writes its log and starts a process writing its data, the way
    the broker does (a child of `stack up`, inheriting its umask)."""

    def __init__(self, home: Path, name: str) -> None:
        self.home, self.name = home, name

    def up(self) -> None:
        (self.home / f"{self.name}.log").write_text("started\n")
        data = self.home / f"{self.name}-data"
        code = "import os, sys; os.mkdir(sys.argv[1]); open(sys.argv[1] + '/seg', 'w').write('x')"
        subprocess.run([sys.executable, "-c", code, str(data)], check=True, timeout=60)

    def down(self) -> None:  # pragma: no cover - the Service protocol's
        pass

    def answers(self) -> bool:  # pragma: no cover - the Service protocol's
        return True


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cronfleet-home"
    monkeypatch.setenv("CRONFLEET_HOME", str(home))
    monkeypatch.setattr(cli, "services", lambda name, on_disk=False: [Stand(home, name)])
    umask = os.umask(0o022)
    yield home
    os.umask(umask)


def postgres_group() -> int | None:
    if os.geteuid() != 0:
        return None
    try:
        return grp.getgrnam("postgres").gr_gid
    except KeyError:
        return None


def test_up_makes_the_home_private_tightens_what_was_left_and_creates_privately(
    home: Path,
) -> None:
    left = old_up_layout(home)
    assert cli.up(argparse.Namespace(only=None, shards=None)) == 0
    gid = postgres_group()
    if gid is None:
        assert mode(home) == 0o700
    else:  # PostgreSQL runs as `postgres`: only that group may pass, none may list
        assert (mode(home), home.stat().st_gid) == (0o710, gid)
    for name, path in left.items():
        assert mode(path) == 0o600, name
    for directory in (home / "kafka", home / "kafka" / "data", home / "postgres"):
        assert mode(directory) == 0o700, directory
    assert (home / "kafka" / "link").is_symlink()  # left alone, its target untouched
    assert mode(Path("/etc/hostname")) & 0o044
    for name in ("postgres", "kafka"):  # written by `up` and by the processes it started
        assert mode(home / f"{name}.log") == 0o600
        assert mode(home / f"{name}-data") == 0o700
        assert mode(home / f"{name}-data" / "seg") == 0o600
    assert mode(home / "stack.env") == 0o600
    assert os.umask(0o022) == 0o077  # `up` left its process under umask 077


def test_a_directory_of_the_postgres_group_keeps_only_its_search_bit() -> None:
    dir_mode = stat.S_IFDIR | 0o755
    assert tightened_mode(dir_mode, 104, postgres=104) == 0o710
    assert tightened_mode(dir_mode, 0, postgres=104) == 0o700
    assert tightened_mode(dir_mode, 104, postgres=None) == 0o700
    assert tightened_mode(stat.S_IFREG | 0o664, 104, postgres=104) == 0o600


def test_tighten_counts_what_it_changed_and_is_idempotent(tmp_path: Path) -> None:
    left = old_up_layout(tmp_path / "home")
    assert len(left) == 4
    assert tighten(tmp_path / "home") == 8  # four files, four directories (not the home)
    assert tighten(tmp_path / "home") == 0
