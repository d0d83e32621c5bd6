"""The ``acerl`` command line: one subcommand per pipeline stage (Snakemake rules and DVC stages call these).

Every subcommand takes the same config arguments and a work directory ``--root`` (default ``.``). Config
composes as in the Snakemake workflow: the workflow default ``config/config.yaml`` first, then each
``--config FILE`` (later files win), then ``--set key.path=value`` overrides -- so ``acerl config --config
config/paper.yaml`` validates exactly what ``snakemake --configfile=config/paper.yaml`` runs. Stage functions live
in the library; this module only parses arguments, loads the config and calls them.

Errors follow one policy (:mod:`acerl.errors`): an expected failure prints one line naming the file / key / row
and the fix and exits with its documented status (2 config, 3 missing input, 4 unusable input; ``--verbose`` adds
the traceback); anything else is a bug and keeps its traceback (exit 1). A closed stdout (``acerl config runs |
head``) ends the command quietly with 141, as a Unix tool killed by SIGPIPE.

Some subcommands run a module that keeps its own arguments (:mod:`acerl.commands`): ``acerl dvc ...``,
``acerl sft ...``, ``acerl update-mass ...`` and the reports ``acerl report paper|power|sequential|training|methods|gate
...``. :func:`main` hands such a module the arguments after the command's name, before parsing anything, so its
help, exit codes and one-line errors are its own; ``acerl report`` without a report name is the study's report.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from acerl.commands import MODULE_COMMANDS, ModuleCommand
from acerl.config import BASE_METHOD, Config, ConfigError, Run, load_config
from acerl.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, UserError, access_denied, invocation_options
from acerl.pipeline.allocator import tune_allocator
from acerl.pipeline.stages import VIEW_CONFIG_ENV, Job, StageSpec, record_params, subcommand_stage

log = logging.getLogger("acerl")

DEFAULT_CONFIG = "config/config.yaml"


# --------------------------------------------------------------------------------------------- helpers
def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        action="append",
        default=None,
        metavar="FILE",
        help=f"config file stacked over the workflow default {DEFAULT_CONFIG} (repeatable; later files win)",
    )
    p.add_argument(
        "--no-default-config",
        action="store_true",
        help=f"do not stack the --config files over {DEFAULT_CONFIG} (a complete config of your own)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key")
    p.add_argument(
        "--root", default=".", type=Path, help="work directory holding data/, runs/, ... (default .)"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging; tracebacks of expected errors"
    )


def _add_run_args(p: argparse.ArgumentParser, method_default: str | None = None) -> None:
    p.add_argument("--model", required=True, help="model key (models.<key>)")
    p.add_argument(
        "--method", required=method_default is None, default=method_default, help="method key or 'base'"
    )
    p.add_argument("--seed", type=int, default=0, help="training seed (0 for the base model)")


def config_files(user_files: Sequence[str | Path] | None, *, default: bool = True) -> list[Path]:
    """The config files of a command, composed as the workflow composes them: the workflow default first
    (unless ``default`` is false), then the user's files in order, then the view-only overlays a Snakemake run
    passes in ``$ACERL_VIEW_CONFIG`` (:func:`acerl.pipeline.stages.split_view_files`); a file named twice counts
    once, where first named (as ``workflow/rules/common.smk``)."""
    files = [Path(f) for f in user_files or []]
    files += [Path(f) for f in os.environ.get(VIEW_CONFIG_ENV, "").split(os.pathsep) if f]
    if default:
        if not Path(DEFAULT_CONFIG).is_file():
            raise ConfigError(
                f"the workflow default {DEFAULT_CONFIG} is not in {Path.cwd()}: run acerl from the project "
                "directory, or pass --no-default-config with a complete --config FILE"
            )
        files.insert(0, Path(DEFAULT_CONFIG))
    if not files:
        raise ConfigError("no config file: give --config FILE (--no-default-config was set)")
    first: dict[Path, Path] = {}
    for f in files:
        first.setdefault(f.resolve(), f)
    return list(first.values())


def _load(args: argparse.Namespace) -> Config:
    return load_config(config_files(args.config, default=not args.no_default_config), args.set)


def _known(flag: str, what: str, name: str, valid: Sequence[str]) -> str:
    """``name`` if it is one of ``valid``, else a :class:`ConfigError` listing the valid names."""
    if name not in valid:
        raise ConfigError(f"{flag}: unknown {what} {name!r}; valid: {', '.join(valid)}")
    return name


def _run(args: argparse.Namespace, cfg: Config) -> Run:
    _known("--model", "model", args.model, list(cfg.models))
    _known("--method", "method", args.method, [BASE_METHOD, *cfg.resolved_methods])
    if getattr(args, "benchmark", None) is not None:
        _known("--benchmark", "benchmark", args.benchmark, cfg.evaluation.benchmarks)
    return Run(args.model, args.method, _seed("--seed", args.seed))


def _seed(flag: str, seed: int) -> int:
    """``seed`` if it is >= 0 (as the config's seeds: numpy refuses a negative one), else a :class:`ConfigError`."""
    if seed < 0:
        raise ConfigError(f"{flag}: a seed is a whole number >= 0, got {seed}")
    return seed


def _threads(cfg: Config) -> int:
    """Set this job's torch threads and its fast paths from ``cfg`` (a job that loads a model)."""
    from acerl.pipeline.runtime import configure_torch, job_threads

    _fast_paths(cfg)
    n = job_threads(cfg.compute.threads(), cfg.compute.device)
    configure_torch(n)
    return n


def _fast_paths(cfg: Config) -> None:
    """``compute.fast_paths`` for this process (:func:`acerl.pipeline.runtime.fast_paths`)."""
    from acerl.pipeline.runtime import set_fast_paths

    set_fast_paths(cfg.compute.fast_paths)


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
    elif args.action == "graph":
        from acerl.pipeline.stages import pipeline_graph

        print(pipeline_graph(cfg), end="")
    else:
        from acerl.data.real import missing_local_datasets

        for message in missing_local_datasets(cfg, args.root):
            # a warning, not an error: a config is often checked where the study does not run (a login node)
            print(f"acerl config: warning: {message}", file=sys.stderr)
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
    record_params(cfg, args.root, Job("prepare_data"))
    return 0


def cmd_prepare_base(args: argparse.Namespace) -> int:
    cfg = _load(args)
    _known("--model", "model", args.model, list(cfg.models))
    from acerl.models.prepare import prepare_base

    _threads(cfg)
    out = prepare_base(cfg, args.model, args.root)
    record_params(cfg, args.root, Job("prepare_base", args.model))
    log.info("base model ready: %s", out)
    return 0


def cmd_prepare_verl_data(args: argparse.Namespace) -> int:
    cfg = _load(args)
    _known("--model", "model", args.model, list(cfg.models))
    from acerl.data.real import prepare_verl_data

    for key, path in prepare_verl_data(cfg, args.root, [args.model]).items():
        log.info("wrote %s -> %s", key, path)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    cfg = _load(args)
    run = _run(args, cfg)
    from acerl.trainers import TrainOptions, train_from_config

    _fast_paths(cfg)
    options = TrainOptions(
        progress=not args.no_progress,
        device=args.device,
        threads=args.threads,
        reference=args.reference,
        ref_ema_decay=args.ref_ema_decay,
        old_logprobs=args.old_logprobs,
    )
    out = train_from_config(cfg, run, args.root, options)
    log.info("final policy: %s", out)
    print(out)
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

    report_study(
        cfg,
        args.root,
        partial=args.partial,
        config_files=config_files(args.config, default=not args.no_default_config),
    )
    return 0


def cmd_resample(args: argparse.Namespace) -> int:
    cfg = _load(args)
    from acerl.report.resample import noise_markdown

    model = _known("--model", "model", args.model or cfg.study.main.models[0], list(cfg.models))
    _known("--benchmark", "benchmark", args.benchmark, cfg.evaluation.benchmarks)
    if len(set(args.eval_seeds)) < 2:
        raise ConfigError("--eval-seeds: give at least two different evaluation seeds")
    comparisons = {}
    for pair in args.comparisons:
        method, sep, base = pair.partition(":")
        if not sep:
            raise ConfigError(f"--comparisons: {pair!r} must look like method:baseline (e.g. ace_grpo:grpo)")
        for name in (method, base):
            _known("--comparisons", "method", name, list(cfg.resolved_methods))
        comparisons[method] = base
    out = args.out or args.root / "resample"
    print(noise_markdown(cfg, args.root, out, args.benchmark, model, args.seed, args.eval_seeds, comparisons))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from acerl.pipeline.cluster import check_time_limits, require_profile

    profile = require_profile(args.name)
    if args.config and not check_time_limits(_load(args), profile):
        print("acerl profile: scontrol not found: partition time limits not checked", file=sys.stderr)
    print(profile)
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from acerl.verl_backend.estimate import Assumptions, apply_assumptions, estimate_grid, format_estimate

    cfg = _load(args)
    assumptions = apply_assumptions(Assumptions(), args.assume)
    params: dict[str, float] = {}
    for item in args.params:
        model, sep, value = item.partition("=")
        _known("--params", "model", model, list(cfg.models))
        try:
            params[model] = float(value)
        except ValueError:
            raise ConfigError(f"--params {item!r}: expected MODEL=COUNT, e.g. {model}=7.6e9") from None
    shapes: dict[str, tuple[int, int]] = {}
    for item in args.shape:
        model, _, value = item.partition("=")
        _known("--shape", "model", model, list(cfg.models))
        try:
            layers, width = (int(v) for v in value.split(","))
        except ValueError:
            raise ConfigError(
                f"--shape {item!r}: expected MODEL=LAYERS,WIDTH, e.g. {model}=28,3584"
            ) from None
        shapes[model] = (layers, width)
    cells, evals = estimate_grid(cfg, assumptions, params, shapes)
    print(
        format_estimate(
            cells, evals, assumptions, cfg.compute.verl_attention, cfg.compute.verl_remove_padding
        )
    )
    return 0


def cmd_canary(args: argparse.Namespace) -> int:
    from acerl.verl_backend.canary import CanaryLimits, canary_targets, check_canary, format_checks

    cfg = _load(args)
    if args.action == "targets":
        print(" ".join(canary_targets(cfg)))
        return 0
    grid_files = args.grid_config or (args.config or [])[:-1]
    grid = load_config(config_files(grid_files, default=not args.no_default_config), [])
    limits = CanaryLimits(gpu_memory_gb=args.gpu_memory_gb, max_jobs=args.max_jobs)
    checks = check_canary(cfg, grid, args.root, limits)
    print(format_checks(checks))
    return 0 if all(c.ok for c in checks) else 4


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "config": (cmd_config, "validate / show the resolved config, list the runs, print the key reference"),
    "prepare-data": (cmd_prepare_data, "write the training, evaluation and held-out sets"),
    "prepare-base": (cmd_prepare_base, "build (tiny) or fetch (hub) a base model"),
    "prepare-verl-data": (cmd_prepare_verl_data, "write verl's parquet files of one model (verl backend)"),
    "train": (cmd_train, "train one (model, method, seed) run with the compute.backend trainer; resumes"),
    "sample": (cmd_sample, "sample n completions per benchmark problem; resumable shards"),
    "grade": (cmd_grade, "grade stored generations with math-verify"),
    "passk": (cmd_passk, "Pass@k from graded samples"),
    "diagnose": (cmd_diagnose, "OEF, overconfidence magnitude and entropy at diagnostic checkpoints"),
    "report": (cmd_report, "the paper's tables and figures from the study's results"),
    "resample": (
        cmd_resample,
        "evaluation noise: re-evaluate the compared policies with other evaluation seeds (docs/reports.md)",
    ),
    "estimate": (
        cmd_estimate,
        "the grid's GPU-hours and peak disk per model and method before submitting it (verl backend)",
    ),
    "canary": (
        cmd_canary,
        "the canary's Snakemake targets, or the checks of its metrics before the grid (make paper-canary)",
    ),
    "profile": (
        cmd_profile,
        "check that the Snakemake site profile (slurm) is installed; name the installer",
    ),
}


REPORTS_HEADING = "reports with options of their own (acerl report NAME ...; acerl report NAME --help):"


def _reports_epilog() -> str:
    """The ``acerl report NAME`` reports, one line each (``acerl --help``, ``acerl report --help``)."""
    reports = [c for c in MODULE_COMMANDS if c.command.startswith("report ")]
    width = max(len(c.name) for c in reports) + 2
    return "\n".join([REPORTS_HEADING, *(f"  {c.name:<{width}}{c.help}" for c in reports)])


def build_parser() -> argparse.ArgumentParser:
    """The parser of the CLI's own subcommands. The module commands (:mod:`acerl.commands`) are listed with their
    one-line help, but :func:`main` runs them before this parser sees their arguments."""
    parser = argparse.ArgumentParser(
        prog="acerl",
        description=__doc__.splitlines()[0],
        epilog=_reports_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (fn, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=fn)
        if name == "profile":
            p.add_argument("name", nargs="?", default="slurm", help="profile name or folder (default slurm)")
            p.description = (
                f"{help_text}; with --config, also each rule's runtime against its partition's MaxTime"
            )
            _add_config_args(p)
            continue
        _add_config_args(p)
        if name == "config":
            p.formatter_class = argparse.RawDescriptionHelpFormatter
            p.epilog = CONFIG_ACTIONS
            p.add_argument(
                "action",
                nargs="?",
                choices=["validate", "show", "runs", "reference", "graph"],
                default="validate",
                help="what to do with the composed config (default validate; see below)",
            )
        if name == "report":
            p.formatter_class = argparse.RawDescriptionHelpFormatter
            p.description = f"{help_text}.\n`acerl report NAME ...` runs one of the reports below instead."
            p.epilog = _reports_epilog()
            p.add_argument(
                "--partial",
                action="store_true",
                help="report the runs whose result files exist (default: a missing one is an error, exit 3)",
            )
        if name == "resample":
            _add_resample_args(p)
        if name == "canary":
            p.add_argument(
                "action", choices=["targets", "check"], help="print the targets / check the metrics"
            )
            p.add_argument(
                "--grid-config",
                action="append",
                default=None,
                metavar="FILE",
                help="the grid's config files to project the step time to (default: every --config but the last)",
            )
            p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="memory of one GPU (default 80)")
            p.add_argument(
                "--max-jobs", type=int, default=4, help="SLURM jobs a run may take (default 4: retries 3 + 1)"
            )
        if name == "estimate":
            p.add_argument(
                "--assume", action="append", default=[], metavar="KEY=VALUE", help="override one assumption"
            )
            p.add_argument(
                "--params",
                action="append",
                default=[],
                metavar="MODEL=COUNT",
                help="a model's parameter count",
            )
            p.add_argument(
                "--shape",
                action="append",
                default=[],
                metavar="MODEL=LAYERS,WIDTH",
                help="a model's decoder layers and attention width (heads x head dimension), for attention FLOPs",
            )
        stage = subcommand_stage(name)
        if stage is not None:
            _add_job_args(p, stage)
        if name == "train":
            _add_local_train_args(p)
    for command in MODULE_COMMANDS:
        if " " not in command.command:  # the reports are listed in the epilogs
            p = sub.add_parser(command.command, help=command.help, description=command.help, add_help=False)
            p.add_argument("args", nargs=argparse.REMAINDER, help=f"the arguments of {command.module}")
    return parser


def module_command(argv: Sequence[str]) -> tuple[ModuleCommand, list[str]] | None:
    """The module command ``argv`` starts with (``dvc ...``, ``report power ...``) and the arguments it hands
    the module; ``None`` for the CLI's own subcommands (``report --partial`` included)."""
    for command in MODULE_COMMANDS:
        words = command.command.split()
        if list(argv[: len(words)]) == words:
            return command, list(argv[len(words) :])
    return None


def run_module_command(command: ModuleCommand, argv: list[str]) -> int:
    """``command``'s module's ``main(argv)``: its own parser, logging, messages and exit code (0 for ``None``)."""
    module_main: Callable[[list[str]], int | None] = importlib.import_module(command.module).main
    return module_main(argv) or 0


CONFIG_ACTIONS = """actions:
  validate   check the composed config (unknown keys, bad values, the run grid) and summarise it (default)
  show       print the composed, validated config as JSON, defaults filled in
  runs       print the id of every run the study trains or evaluates, one a line (base models first)
  reference  print the reference of every config key (docs/config.md is this output)
  graph      print the study's stages and what each reads and writes as a Mermaid flowchart (the README's)"""


def _add_job_args(p: argparse.ArgumentParser, stage: StageSpec) -> None:
    """The arguments that name one job of ``stage`` (acerl.pipeline.stages), and ``--no-progress`` for a quiet stage."""
    if stage.shape in ("run", "evaluation"):
        _add_run_args(p)
    if stage.shape == "evaluation":
        p.add_argument("--benchmark", required=True, help="benchmark name (evaluation.benchmarks)")
    if stage.shape == "model":
        p.add_argument("--model", required=True, help="model key (models.<key>)")
    if stage.quiet:
        p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_resample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="work directories (default: <root>/resample)")
    p.add_argument("--benchmark", required=True, help="benchmark name (evaluation.benchmarks)")
    p.add_argument("--model", default=None, help="model key (default: the main grid's first model)")
    p.add_argument("--seed", type=int, default=0, help="training seed of the policies (default 0)")
    p.add_argument("--eval-seeds", type=int, nargs="+", required=True, help="evaluation seeds (at least two)")
    p.add_argument(
        "--comparisons",
        nargs="+",
        default=["ace_grpo:grpo", "ace_dapo:dapo"],
        help="method:baseline pairs (default ace_grpo:grpo ace_dapo:dapo)",
    )


def _add_local_train_args(p: argparse.ArgumentParser) -> None:
    """The local trainer's per-invocation overrides (default: the config's value)."""
    g = p.add_argument_group("local trainer (compute.backend: local)")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None, help="default compute.device")
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads on a GPU (default compute.torch_threads; on CPU one: docs/training.md, Threads)",
    )
    g.add_argument(
        "--reference",
        choices=["initial", "ema"],
        default=None,
        help="reference policy (default families.<family>.reference)",
    )
    g.add_argument(
        "--ref-ema-decay",
        type=float,
        default=None,
        help="EMA decay (default families.<family>.ref_ema_decay)",
    )
    g.add_argument(
        "--old-logprobs",
        choices=["recompute", "rollout"],
        default=None,
        help="source of log pi_old (default models.<model>.train.old_logprobs)",
    )


def configure_logging(verbose: bool) -> None:
    """acerl's own messages at INFO (DEBUG with ``--verbose``); other libraries' (fontTools subsetting every
    PDF font, ...) only from WARNING."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    log.setLevel(logging.DEBUG if verbose else logging.INFO)


def _invocation_options(args: argparse.Namespace) -> list[str]:
    """The options of this command that decide its config and work directory, as the user gave them: every
    fix command an error prints repeats them (:func:`acerl.errors.fix_command`)."""
    options: list[str] = []
    for file in getattr(args, "config", None) or []:
        options += ["--config", str(file)]
    if getattr(args, "no_default_config", False):
        options.append("--no-default-config")
    for override in getattr(args, "set", None) or []:
        options += ["--set", override]
    root = getattr(args, "root", None)
    if root is not None and Path(root) != Path("."):
        options += ["--root", str(root)]
    return options


def report_error(command: str, err: UserError, verbose: bool) -> int:
    """Print an expected failure as one line (after its traceback with ``verbose``); returns its exit code."""
    if verbose:
        traceback.print_exception(err)
    print(f"acerl {command}: {err.kind}: {err}", file=sys.stderr)
    return err.exit_code


def _quiet_broken_pipe() -> int:
    """stdout was closed by its reader: point it at /dev/null so the final flush is silent; exit as SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


UNGUARDED_SCRIPT = (
    "acerl: this process is a worker starting up, and the script that runs acerl called main() while Python "
    'imported it: add the `if __name__ == "__main__":` guard to that script, or run `python -m acerl` or the '
    "`acerl` that pip installs"
)


def reimported_in_a_worker() -> bool:
    """True while a spawn/forkserver child process imports the parent's main script (``multiprocessing`` marks
    the process as inheriting for exactly that window): a script calling :func:`main` without the
    ``if __name__ == "__main__":`` guard would otherwise run the whole command again inside every grader worker."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def main(argv: list[str] | None = None) -> int:
    if reimported_in_a_worker():
        print(UNGUARDED_SCRIPT, file=sys.stderr)
        return 2
    found = module_command(sys.argv[1:] if argv is None else argv)
    if found is not None:
        return run_module_command(*found)
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        tune_allocator()
        with invocation_options(_invocation_options(args)):
            code = args.func(args)
        sys.stdout.flush()  # a closed pipe surfaces here, inside the policy, not at interpreter exit
        return code
    except UserError as e:
        return report_error(args.command, e, args.verbose)
    except PermissionError as e:  # an unwritable work directory: the path and its permissions, in one line
        return report_error(args.command, access_denied(e), args.verbose)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        print(f"acerl {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
