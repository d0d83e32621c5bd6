"""The site profile a cluster run needs: found exactly where Snakemake looks, or an error naming the installer.

``snakemake --profile slurm ...`` stops before reading the Snakefile when no ``slurm`` profile is installed, with
Snakemake's own message that does not say how to make one. ``acerl profile`` (and ``make paper-dryrun`` /
``make paper``, which call it first) runs Snakemake's own profile search and, when it finds nothing, names
``scripts/install_slurm_profile.sh``. See docs/cluster.md.
"""

from __future__ import annotations

from pathlib import Path

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
