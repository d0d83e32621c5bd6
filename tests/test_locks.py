"""The lock files (requirements/*.txt, scripts/lock.py): each satisfies pyproject.toml, the CPU lock CI tests
holds the GPU lock's versions of every package both share (bar the documented exceptions), and each lock is
what `make lock` resolves today (a metadata-only resolution: no wheel is downloaded, CUDA ones included)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("lock", REPO / "scripts" / "lock.py")
lock = importlib.util.module_from_spec(_spec)
sys.modules["lock"] = lock
_spec.loader.exec_module(lock)
MARKERS = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}  # fmt: skip


def _requirements(env: lock.LockEnv) -> list[Requirement]:
    """What ``env`` must satisfy: pyproject's dependencies with its extras (self-references followed), or
    its extra requirements."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in env.extra_requirements]
    todo, seen = list(env.extras), set()
    if env.extras:
        reqs += [Requirement(r) for r in project["dependencies"]]
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in map(Requirement, project["optional-dependencies"][extra]):
            if r.name == project["name"]:
                todo += sorted(r.extras)
            else:
                reqs.append(r)
    return [r for r in reqs if r.marker is None or r.marker.evaluate({**MARKERS, "extra": ""})]


@pytest.mark.parametrize("name", ["cpu", "gpu", "vllm-cpu"])
def test_lock_satisfies_pyproject(name: str) -> None:
    env = lock.environments()[name]
    pins = lock.read_pins(env.path)
    bad = []
    for req in _requirements(env):
        version = pins.get(lock.normalise(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            bad.append(f"{req} (lock: {version})")
    assert not bad, f"{env.path.name} disagrees with pyproject.toml (run make lock): {bad}"
    assert not set(env.no_emit) & pins.keys()
    entries = re.split(r"\n(?=[A-Za-z0-9])", env.path.read_text())
    unhashed = [e.split()[0] for e in entries if "==" in e.split("\n")[0] and "--hash=sha256:" not in e]
    assert not unhashed and len(entries) > len(pins)


def test_cpu_lock_holds_the_gpu_locks_versions() -> None:
    """What CI tests is what a cluster imports: every package both locks hold is at one version, except the
    documented ones (lock.CPU_GPU_DIFFERENCES; docs/cluster.md says why)."""
    cpu, gpu = (lock.read_pins(lock.environments()[e].path) for e in ("cpu", "gpu"))
    assert {
        "snakemake",
        "snakemake-executor-plugin-slurm",
        "transformers",
        "dvc",
        "math-verify",
        "pandas",
    } <= (cpu.keys() & gpu.keys())
    assert set(lock.shared_differences(cpu, gpu)) == set(lock.CPU_GPU_DIFFERENCES)


def test_shared_differences_sees_a_skewed_package(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("torch==2.13.0+cpu \\\n    --hash=sha256:00\nsnakemake-executor-plugin-slurm==2.8.0\nx==1\n")
    b.write_text("torch==2.13.0\nsnakemake_executor_plugin_slurm==2.6.1\n")
    assert lock.shared_differences(lock.read_pins(a), lock.read_pins(b)) == {
        "snakemake-executor-plugin-slurm": ("2.8.0", "2.6.1")
    }


def _index_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/uv/", timeout=10).close()
        return True
    except OSError:
        return False


def test_unemitted_packages_leave_the_via_annotations() -> None:
    """A package the lock leaves out (torchaudio) is not named as a parent: its presence there followed the
    releases the index served that day, so an unchanged lock once went stale overnight."""
    compiled = (
        "torch==2.13.0+cpu \\\n    --hash=sha256:00\n    # via\n    #   -r (scripts/lock.py vllm-cpu)\n"
        "    #   torchaudio\n    #   vllm-cpu\nsoxr==1.0 \\\n    --hash=sha256:11\n    # via\n    #   torchaudio\n"
        "lark==1.2 \\\n    --hash=sha256:22\n    # via torchvision\n"
    )
    want = (
        "torch==2.13.0+cpu \\\n    --hash=sha256:00\n    # via\n    #   -r (scripts/lock.py vllm-cpu)\n"
        "    #   vllm-cpu\nsoxr==1.0 \\\n    --hash=sha256:11\nlark==1.2 \\\n    --hash=sha256:22\n"
    )
    assert lock.drop_unemitted_parents(compiled, ("torchvision", "torchaudio")) == want
    assert lock.drop_unemitted_parents(compiled, ()) == compiled


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpu", "cpu", "vllm-cpu"])
def test_lock_is_what_pyproject_resolves_to(name: str) -> None:
    """`scripts/lock.py --check`: uv resolves the environment again (metadata only; the GPU lock without a GPU
    and without downloading CUDA wheels) with the lock's pins preferred, and the result must be the lock."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists() or not _index_reachable():
        if os.environ.get("CI") == "true":
            pytest.fail("uv or the package index is missing in CI: the locks cannot be checked")
        pytest.skip("uv or the package index is not reachable (make setup installs uv)")
    if name != "gpu" and not (os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS")
                              or os.environ.get("UV_EXTRA_INDEX_URL")):  # fmt: skip
        pytest.skip(
            "no source for torch's CPU wheel: set UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu"
        )
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lock.py"), "--check", name],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PATH": f"{Path(uv).parent}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


# What verl's FSDP worker imports beyond the lock's own requirements, per attention implementation
# (transformers' check in `from_pretrained`); sdpa and eager are torch's own.
ATTENTION_PACKAGES = {"flash_attention_2": "flash-attn", "sdpa": None, "eager": None}
VERL_DEFAULT_ATTENTION = "flash_attention_2"  # verl/workers/config/model.py, HFModelConfig.__post_init__


def _rendered(overrides: list[str], key: str) -> str | None:
    values = [ov.split("=", 1)[1] for ov in overrides if ov.split("=", 1)[0].lstrip("+") == key]
    return values[-1] if values else None


def test_gpu_lock_builds_verls_workers_with_the_launchers_settings() -> None:
    """Every paper run's FSDP workers, built with the attention the launcher renders (verl's default where it
    renders none), find what that attention needs in the GPU lock; and verl's trl probe cannot break them: the
    lock holds no trl that lacks the value-head class verl 0.9.1's ``apply_monkey_patch`` imports."""
    from acerl.config import load_config
    from acerl.verl_backend.launcher import verl_overrides

    cfg = load_config([REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"])
    pins = lock.read_pins(lock.environments()["gpu"].path)
    runs = [r for r in cfg.runs() if not r.is_base]
    assert runs
    for run in runs:
        overrides = verl_overrides(cfg, run, "/work")
        attention = _rendered(overrides, "actor_rollout_ref.model.override_config.attn_implementation")
        attention = attention or VERL_DEFAULT_ATTENTION
        assert attention in ATTENTION_PACKAGES, (run.id, attention)
        needs = ATTENTION_PACKAGES[attention]
        assert needs is None or needs in pins, f"{run.id}: attn_implementation={attention} needs {needs}"
        assert _rendered(overrides, "actor_rollout_ref.model.use_remove_padding") is not None, run.id
    trl = pins.get("trl")
    assert trl is None or int(trl.split(".")[0]) < 1, f"gpu.txt holds trl=={trl}, which breaks verl's worker"


def test_the_conda_environment_pins_the_cpu_locks_versions() -> None:
    """workflow/envs/acerl.yaml (``snakemake --sdm conda``) is what scripts/lock.py writes from the CPU lock: every
    package at the lock's version, the CPU torch index, the project itself last; none unpinned."""
    env = (REPO / "workflow" / "envs" / "acerl.yaml").read_text()
    pins = lock.read_pins(REPO / "requirements" / "cpu.txt")
    assert env == lock.conda_env_text(pins), "workflow/envs/acerl.yaml is stale: run make lock"
    listed = [ln.strip()[2:] for ln in env.splitlines() if ln.startswith("      - ")]
    assert listed[0] == f"--extra-index-url {lock.TORCH_CPU_INDEX}" and listed[-1] == "-e ../.."
    assert {lock.normalise(r.split("==")[0]): r.split("==")[1] for r in listed[1:-1]} == pins
    assert pins["torch"].endswith("+cpu") and len(pins) > 100
