"""The site profile a cluster run needs: found exactly where Snakemake looks, or an error naming the installer.

``snakemake --profile slurm ...`` stops before reading the Snakefile when no ``slurm`` profile is installed, with
Snakemake's own message that does not say how to make one. ``acerl profile`` (and ``make paper-dryrun`` /
``make paper``, which call it first) runs Snakemake's own profile search and, when it finds nothing, names
``scripts/install_slurm_profile.sh``. Given the config (``--config``), it also compares each rule's ``runtime``
with its partition's ``MaxTime`` (``scontrol show partition``), so a job SLURM would refuse, or a limit that
kills every training attempt early, is named before anything is submitted. See docs/cluster.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from acerl.config import Config, ConfigError
from acerl.errors import MissingInputError

SLURM_PROFILE = "slurm"
INSTALLER = "scripts/install_slurm_profile.sh"


def find_profile(name: str = SLURM_PROFILE) -> Path | None:
    """The config file of Snakemake profile ``name`` as ``snakemake --profile name`` would use it, or None.

    Snakemake's own search (``./``, the user's ``$XDG_CONFIG_HOME/snakemake/``, the site's
    ``/etc/xdg/snakemake/``, or a path), so the answer cannot differ from what Snakemake does.
    """
    from snakemake.cli import get_profile_dir

    found = get_profile_dir(name)
    return None if found is None else Path(found[1])


def require_profile(name: str = SLURM_PROFILE) -> Path:
    """:func:`find_profile`, raising :class:`~acerl.errors.MissingInputError` that names the installer."""
    path = find_profile(name)
    if path is None:
        from snakemake.common import get_appdirs

        dirs = get_appdirs()
        raise MissingInputError(
            f"no Snakemake profile {name!r} (searched ./{name}, {dirs.user_config_dir}/{name}, "
            f"{dirs.site_config_dir}/{name}): install the site profile once with "
            f"`{INSTALLER} --partition P --account A` (docs/cluster.md), then rerun"
        )
    return path


# ------------------------------------------------------------------------------------ partition time limits
_UNLIMITED = ("UNLIMITED", "INFINITE")


def parse_slurm_time(text: str) -> int | None:
    """Minutes of a SLURM time (``scontrol``'s ``MaxTime``, ``sinfo -o %l``): ``D-HH:MM:SS``, ``HH:MM:SS``,
    ``MM:SS``, ``D-HH``, ``D-HH:MM`` or plain minutes; None for ``UNLIMITED`` / ``INFINITE``. Seconds round up."""
    text = text.strip()
    if text.upper() in _UNLIMITED:
        return None
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = [int(p) for p in rest.split(":")]
    if "-" in text:  # D-HH, D-HH:MM, D-HH:MM:SS
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, minutes, seconds = 0, *parts
    else:
        hours, minutes, seconds = 0, parts[0], 0
    return int(days) * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def partition_max_time(show_partition: str) -> int | None:
    """``MaxTime`` in minutes from ``scontrol show partition P``'s output (None: unlimited)."""
    found = re.search(r"\bMaxTime=(\S+)", show_partition)
    if found is None:
        raise ValueError(f"no MaxTime in scontrol's answer: {show_partition[:200]!r}")
    return parse_slurm_time(found.group(1))


def profile_partitions(profile: Path) -> tuple[str | None, dict[str, str]]:
    """The site profile's partition: ``default-resources``' ``slurm_partition`` and each rule's own in
    ``set-resources``."""
    data = yaml.safe_load(profile.read_text(encoding="utf-8")) or {}

    def partition(resources: Any) -> str | None:
        if isinstance(resources, dict):
            value = resources.get("slurm_partition")
        else:  # the command-line form: ["slurm_partition=gpu", ...]
            pairs = [str(r).split("=", 1) for r in resources or []]
            value = dict(p for p in pairs if len(p) == 2).get("slurm_partition")
        return None if value is None else str(value).strip("'\"")

    rules = {r: partition(v) for r, v in (data.get("set-resources") or {}).items()}
    return partition(data.get("default-resources")), {r: p for r, p in rules.items() if p}


def time_limit_errors(
    cfg: Config, default: str | None, per_rule: Mapping[str, str], max_time: Callable[[str], int | None]
) -> list[str]:
    """One line per (rule, model) whose ``runtime`` exceeds its partition's ``MaxTime`` (``max_time(partition)``,
    minutes, None for unlimited), naming the rule, the partition and the fix; longest first."""
    rules = {r for r in cfg.compute.resources if r != "default"}
    rules |= {r for per_model in cfg.compute.model_resources.values() for r in per_model}
    found: list[tuple[int, str]] = []
    limits: dict[str, int | None] = {}
    for rule in sorted(rules):
        partition = per_rule.get(rule, default)
        if partition is None:
            continue
        if partition not in limits:
            limits[partition] = max_time(partition)
        limit = limits[partition]
        own = [m for m in cfg.models if rule in cfg.compute.model_resources.get(m, {})]
        for model in [None, *own]:
            runtime = cfg.resources(rule, model).runtime
            if limit is None or runtime <= limit:
                continue
            key = f"compute.model_resources.{model}.{rule}" if model else f"compute.resources.{rule}"
            where = f"{rule} ({model})" if model else rule
            found.append(
                (
                    runtime,
                    f"{where} asks for {_hours(runtime)} but partition {partition} allows {_hours(limit)} (MaxTime): "
                    f"set {key}.runtime <= {limit} (a run resumes across jobs, docs/cluster.md) or install the "
                    f"profile for a partition that allows it (scripts/install_slurm_profile.sh --partition)",
                )
            )
    return [line for _, line in sorted(found, key=lambda f: -f[0])]


def _hours(minutes: int) -> str:
    return f"{minutes} min ({minutes / 60:g} h)"


def scontrol_max_time(partition: str) -> int | None:
    """``MaxTime`` of ``partition`` in minutes by ``scontrol show partition`` (None: unlimited)."""
    proc = subprocess.run(
        ["scontrol", "show", "partition", partition], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise MissingInputError(
            f"scontrol show partition {partition}: {(proc.stderr or proc.stdout).strip() or 'failed'}: "
            f"install the profile for a partition `sinfo -s` lists (scripts/install_slurm_profile.sh --partition)"
        )
    return partition_max_time(proc.stdout)


def check_time_limits(cfg: Config, profile: Path) -> bool:
    """Raise :class:`~acerl.config.ConfigError` (one line, the longest offender) when a rule's ``runtime``
    exceeds its partition's ``MaxTime``; returns False where ``scontrol`` is missing (nothing checked)."""
    if shutil.which("scontrol") is None:
        return False
    default, per_rule = profile_partitions(profile)
    errors = time_limit_errors(cfg, default, per_rule, scontrol_max_time)
    if errors:
        more = f" ({len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(errors[0] + more)
    return True
