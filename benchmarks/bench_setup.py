"""How long installing a lock takes: `make setup`'s installer (scripts/install_lock.py: uv, hashes checked,
--no-deps) against its peer, `pip install --require-hashes --no-deps -r LOCK` (what setup ran before), each into a
fresh virtualenv, interleaved, medians of several runs. Both read the same package sources (pip's configuration);
"uv, empty cache" gives uv a new cache directory each run (a first setup on a fresh machine), "uv" and "pip" keep
their caches (a second clone on the same machine). The installed distributions are compared with `pip freeze`.

  python benchmarks/bench_setup.py [--lock requirements/cpu.txt] [--repeats 3]    (results: benchmarks/results/setup.md)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"


def _fresh_venv(root: Path) -> Path:
    target = root / "venv"
    venv.create(target, with_pip=True)
    return target


def install_with_pip(target: Path, lock: Path) -> None:
    cmd = [str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--require-hashes", "--no-deps"]
    subprocess.run([*cmd, "-r", str(lock)], check=True, capture_output=True)


def install_with_uv(target: Path, lock: Path, cache: Path | None) -> None:
    env = {"UV": str(UV), **({"UV_CACHE_DIR": str(cache)} if cache else {})}
    cmd = [str(target / "bin" / "python"), str(REPO / "scripts" / "install_lock.py"), str(target), str(lock)]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, **env})


def timed(installer: str, lock: Path) -> tuple[float, str]:
    """Seconds to install ``lock`` into a fresh virtualenv with ``installer``, and what was installed."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = _fresh_venv(root)
        start = time.perf_counter()
        if installer == "pip":
            install_with_pip(target, lock)
        else:
            install_with_uv(target, lock, root / "uv-cache" if installer == "uv, empty cache" else None)
        seconds = time.perf_counter() - start
        freeze = subprocess.run(
            [str(target / "bin" / "python"), "-m", "pip", "freeze"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return seconds, freeze


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=REPO / "requirements" / "cpu.txt")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    installers = ("pip", "uv", "uv, empty cache")
    times: dict[str, list[float]] = {name: [] for name in installers}
    freezes: dict[str, set[str]] = {name: set() for name in installers}
    for rep in range(args.repeats):
        for name in installers:
            seconds, freeze = timed(name, args.lock)
            times[name].append(seconds)
            freezes[name].add(freeze)
            print(f"run {rep + 1} {name}: {seconds:.1f} s", flush=True)
    same = len(set().union(*freezes.values())) == 1
    pip_median = statistics.median(times["pip"])
    print(f"\nlock {args.lock.relative_to(REPO)}; {args.repeats} runs each, interleaved")
    print("| installer | median s | runs s | pip / this |")
    print("|---|---:|---|---:|")
    for name in installers:
        med = statistics.median(times[name])
        runs = ", ".join(f"{t:.1f}" for t in times[name])
        print(f"| {name} | {med:.1f} | {runs} | {pip_median / med:.1f}x |")
    print(f"identical `pip freeze` across installers and runs: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
