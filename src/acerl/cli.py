"""The ``acerl`` command line: one subcommand per pipeline stage (Snakemake rules and DVC stages call these).

Every subcommand takes the same config arguments (``--config FILE`` repeatable, later files win, and
``--set key.path=value`` overrides) and a work directory ``--root`` (default ``.``). Stage functions live in the
library; this module only parses arguments, loads the config and calls them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from acerl.config import BASE_METHOD, Config, ConfigError, Run, load_config

log = logging.getLogger("acerl")

DEFAULT_CONFIG = "config/config.yaml"


# --------------------------------------------------------------------------------------------- helpers
def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        action="append",
        default=None,
        metavar="FILE",
        help=f"config file (repeatable; later files override earlier ones; default {DEFAULT_CONFIG})",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key")
    p.add_argument(
        "--root", default=".", type=Path, help="work directory holding data/, runs/, ... (default .)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _add_run_args(p: argparse.ArgumentParser, method_default: str | None = None) -> None:
    p.add_argument("--model", required=True, help="model key (models.<key>)")
    p.add_argument(
        "--method", required=method_default is None, default=method_default, help="method key or 'base'"
    )
    p.add_argument("--seed", type=int, default=0, help="training seed (0 for the base model)")


def _load(args: argparse.Namespace) -> Config:
    return load_config(args.config or [DEFAULT_CONFIG], args.set)


def _run(args: argparse.Namespace, cfg: Config) -> Run:
    run = Run(args.model, args.method, args.seed)
    if args.model not in cfg.models:
        raise ConfigError(f"--model: unknown model {args.model!r}; valid: {', '.join(cfg.models)}")
    if run.method != BASE_METHOD:
        cfg.method(run.method)  # raises with the list of valid names
    return run


def _threads(cfg: Config) -> int:
    from acerl.runtime import configure_torch

    n = cfg.compute.threads()
    configure_torch(n)
    return n


def _device(cfg: Config) -> str:
    from acerl.generate import resolve_device

    return resolve_device(cfg.compute.device)


# -------------------------------------------------------------------------------------------- commands
def cmd_config(args: argparse.Namespace) -> int:
    cfg = _load(args)
    if args.action == "show":
        print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    elif args.action == "reference":
        from acerl.config import reference_markdown

        print(reference_markdown(), end="")
    elif args.action == "runs":
        for run in cfg.base_runs() + cfg.runs():
            print(run.id)
    else:
        print(
            f"ok: {len(cfg.runs())} training runs, {len(cfg.base_runs())} base models, "
            f"benchmarks {', '.join(cfg.evaluation.benchmarks)}"
        )
    return 0


def cmd_prepare_data(args: argparse.Namespace) -> int:
    cfg = _load(args)
    from acerl.data.prepare import prepare_data

    for split, path in prepare_data(cfg, args.root).items():
        log.info("wrote %s -> %s", split, path)
    return 0


def cmd_prepare_base(args: argparse.Namespace) -> int:
    cfg = _load(args)
    if args.model not in cfg.models:
        raise ConfigError(f"--model: unknown model {args.model!r}; valid: {', '.join(cfg.models)}")
    from acerl.models.prepare import prepare_base

    _threads(cfg)
    out = prepare_base(cfg, args.model, args.root)
    log.info("base model ready: %s", out)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    cfg = _load(args)
    run = _run(args, cfg)
    if cfg.compute.backend == "verl":
        from acerl.verl_backend.launcher import train_run_verl

        out = train_run_verl(cfg, run, args.root)
    else:
        from acerl.train import train_run

        threads = _threads(cfg)
        out = train_run(
            cfg, run, args.root, device=_device(cfg), threads=threads, progress=not args.no_progress
        )
    log.info("final policy: %s", out)
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    cfg = _load(args)
    run = _run(args, cfg)
    from acerl.evaluate.pipeline import sample_run

    _threads(cfg)
    sample_run(cfg, run, args.benchmark, args.root, progress=not args.no_progress)
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    cfg = _load(args)
    run = _run(args, cfg)
    from acerl.evaluate.pipeline import grade_run

    grade_run(cfg, run, args.benchmark, args.root)
    return 0


def cmd_passk(args: argparse.Namespace) -> int:
    cfg = _load(args)
    run = _run(args, cfg)
    from acerl.evaluate.pipeline import passk_run

    passk_run(cfg, run, args.benchmark, args.root)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    cfg = _load(args)
    run = _run(args, cfg)
    from acerl.diagnostics import diagnose_run

    _threads(cfg)
    diagnose_run(cfg, run, args.root, progress=not args.no_progress)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    cfg = _load(args)
    from acerl.report.study import report_study

    report_study(cfg, args.root)
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "config": (cmd_config, "validate / show the resolved config, list the runs"),
    "prepare-data": (cmd_prepare_data, "write the training, evaluation and held-out sets"),
    "prepare-base": (cmd_prepare_base, "build (tiny) or fetch (hub) a base model"),
    "train": (cmd_train, "train one (model, method, seed) run with the local backend; resumes"),
    "sample": (cmd_sample, "sample n completions per benchmark problem; resumable shards"),
    "grade": (cmd_grade, "grade stored generations with math-verify"),
    "passk": (cmd_passk, "Pass@k from graded samples"),
    "diagnose": (cmd_diagnose, "OEF, overconfidence magnitude and entropy at diagnostic checkpoints"),
    "report": (cmd_report, "the paper's tables and figures from the study's results"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="acerl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (fn, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_config_args(p)
        p.set_defaults(func=fn)
        if name == "config":
            p.add_argument(
                "action", nargs="?", choices=["validate", "show", "runs", "reference"], default="validate"
            )
        if name in {"train", "sample", "grade", "passk", "diagnose"}:
            _add_run_args(p)
        if name in {"sample", "grade", "passk"}:
            p.add_argument("--benchmark", required=True, help="benchmark name (evaluation.benchmarks)")
        if name == "prepare-base":
            p.add_argument("--model", required=True, help="model key (models.<key>)")
        if name in {"train", "sample", "diagnose"}:
            p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"acerl: config error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
