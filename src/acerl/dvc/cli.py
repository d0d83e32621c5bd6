"""The pipeline as DVC stages: ``dvc.yaml`` is generated from the config, never written by hand.

``acerl dvc``: write / check ``dvc.yaml``, sync a pulled study for Snakemake, verify the DVC cache
(docs/sharing.md).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import subprocess
import sys
from pathlib import Path

from acerl.config import ConfigError, load_config
from acerl.dvc.cache import damaged_cache_objects
from acerl.dvc.render import DEFAULT_CONFIG_FILES, DVC_YAML, check_dvc_yaml, write_dvc_yaml
from acerl.dvc.sync import missing_outputs, snakemake_touch_argv, sync_config_files


# ------------------------------------------------------------------------------------------------ CLI
def _config_files(args: argparse.Namespace) -> list[str]:
    return list(args.config or DEFAULT_CONFIG_FILES)


def _cmd_write(args: argparse.Namespace) -> int:
    out = Path(args.out)
    path = write_dvc_yaml(_config_files(args), out)
    print(f"wrote {path}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    out = Path(args.out)
    diff = check_dvc_yaml(_config_files(args), out)
    if diff is None:
        print(f"{out} is current")
        return 0
    print(f"{out} is stale: run `acerl dvc write` (same --config arguments)\n{diff}", file=sys.stderr)
    return 1


def _cmd_sync_snakemake(args: argparse.Namespace) -> int:
    files = sync_config_files(args.config, DVC_YAML)
    missing = missing_outputs(load_config(files))
    if missing:
        print(
            f"acerl dvc sync-snakemake: {len(missing)} output(s) of the study of {' + '.join(files)} "
            f"are missing, e.g. {missing[0]}: nothing was marked done; `dvc pull` them (or `dvc repro` the "
            "stages that make them), then sync again",
            file=sys.stderr,
        )
        return 3
    argv = snakemake_touch_argv(files)
    print("+ " + shlex.join(argv), file=sys.stderr)
    return subprocess.run(argv, check=False).returncode


def _cmd_verify_cache(args: argparse.Namespace) -> int:
    damaged = damaged_cache_objects(args.root)
    for obj in damaged:
        print(f"damaged: {obj}", file=sys.stderr)
        if args.repair:
            obj.cache_path.unlink()
    if not damaged:
        print("every cache file used by dvc.lock matches its hash")
        return 0
    if args.repair:
        print(
            f"removed {len(damaged)} damaged cache file(s): now `dvc pull` (fetches them again from the remote) "
            "and `dvc checkout --relink` (replaces the workspace copies)",
            file=sys.stderr,
        )
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="acerl dvc", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config",
            action="append",
            metavar="FILE",
            help="config file, relative to the directory of dvc.yaml (repeatable, later files win; "
            f"default {DEFAULT_CONFIG_FILES[0]})",
        )

    p = sub.add_parser("write", help="render dvc.yaml from the config")
    with_config(p)
    p.add_argument(
        "--out", default=DVC_YAML, help="where to write (default dvc.yaml); stages run in its folder"
    )
    p.set_defaults(func=_cmd_write)

    p = sub.add_parser("check", help="exit 1 if dvc.yaml differs from what `write` would render")
    with_config(p)
    p.add_argument("--out", default=DVC_YAML, help="the dvc.yaml to check (default dvc.yaml)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser(
        "sync-snakemake",
        help="after `dvc pull`/`dvc checkout`: make Snakemake see the pulled outputs as up to date",
    )
    with_config(p)
    p.set_defaults(func=_cmd_sync_snakemake)

    p = sub.add_parser("verify-cache", help="re-hash the cache files dvc.lock uses; exit 1 if any is damaged")
    p.add_argument("--root", default=".", help="the DVC repository (default .)")
    p.add_argument("--repair", action="store_true", help="delete damaged cache files (then `dvc pull`)")
    p.set_defaults(func=_cmd_verify_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, ValueError) as e:
        print(f"acerl dvc: {e}", file=sys.stderr)
        return 2
