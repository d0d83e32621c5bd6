"""verify-cache: a cache file damaged in place is found (DVC 3.67 itself checks it out silently)."""

from __future__ import annotations

from pathlib import Path

from dvc_helpers import ACERL_DVC, commit_all, copy_src, init_repo, sh

from acerl.dvc import damaged_cache_objects

PIPELINE = """\
stages:
  make:
    cmd: mkdir -p out && seq 1 2000 > out/a.txt && seq 1 50 > out/b.txt && seq 1 9 > single.txt
    outs:
      - out
      - single.txt
"""


def _toy_repo(path: Path) -> Path:
    copy_src(path)  # tool_env puts <repo>/src on PYTHONPATH
    (path / "dvc.yaml").write_text(PIPELINE)
    init_repo(path, remote=path.parent / "remote")
    sh(path, "dvc", "repro")
    sh(path, "dvc", "push")
    commit_all(path, "toy")
    return path


def _cache_file(repo: Path, content: bytes) -> Path:
    import hashlib

    md5 = hashlib.md5(content).hexdigest()
    return repo / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def _damage_in_place(path: Path) -> None:
    mode = path.stat().st_mode
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:-3] + b"!!\n")
    path.chmod(mode)  # still read-only, as DVC left it


def test_damage_in_place_is_used_by_dvc_but_found_and_repaired(tmp_path):
    """DVC checks a damaged read-only cache file out silently; verify-cache names it and --repair + pull fix it."""
    repo = _toy_repo(tmp_path / "repo")
    good = (repo / "out" / "b.txt").read_bytes()
    assert damaged_cache_objects(repo) == []

    cached = _cache_file(repo, good)
    _damage_in_place(cached)
    (repo / "out" / "b.txt").unlink()
    sh(repo, "dvc", "checkout")
    assert (repo / "out" / "b.txt").read_bytes() != good  # DVC 3.67: a read-only cache file is trusted
    assert "up to date" in sh(repo, "dvc", "status").stdout

    (damaged,) = damaged_cache_objects(repo)
    assert damaged.cache_path == cached and damaged.used_by == ("out/b.txt",)
    proc = sh(repo, *ACERL_DVC, "verify-cache", check=False)
    assert proc.returncode == 1 and "out/b.txt" in proc.stderr

    sh(repo, *ACERL_DVC, "verify-cache", "--repair", check=False)
    assert not cached.exists()
    sh(repo, "dvc", "pull")
    sh(repo, "dvc", "checkout", "--relink")
    assert (repo / "out" / "b.txt").read_bytes() == good
    assert damaged_cache_objects(repo) == []

    # A single-file output and a directory's listing (its .dir object) are checked too.
    single = _cache_file(repo, (repo / "single.txt").read_bytes())
    listing = next((repo / ".dvc" / "cache" / "files" / "md5").rglob("*.dir"))
    _damage_in_place(single)
    _damage_in_place(listing)
    found = {d.cache_path: d.used_by for d in damaged_cache_objects(repo)}
    assert found == {single: ("single.txt",), listing: ("out",)}
