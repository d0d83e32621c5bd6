"""One look for every figure: fonts, sizes, and a fixed colour / line style per method.

Baselines are drawn dashed in a light tint, their ACE version solid in the dark tint of the same hue
(GRPO / ACE-GRPO blue, DAPO / ACE-DAPO orange), the base model dotted grey, ACE-ReLU green. Any other method
(e.g. an alpha-sweep variant) gets a colour from :data:`FALLBACK_COLORS` in order of first request, so one
report draws a method the same way in every figure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import matplotlib as mpl

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = ["MethodStyle", "METHOD_STYLES", "FALLBACK_COLORS", "RC_PARAMS", "method_style", "report_style"]


@dataclass(frozen=True)
class MethodStyle:
    color: str
    linestyle: str = "-"
    marker: str = "o"
    zorder: int = 2

    def line_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot``."""
        return {
            "color": self.color,
            "linestyle": self.linestyle,
            "marker": self.marker,
            "zorder": self.zorder,
            "markersize": 3.5,
            "linewidth": 1.6,
        }


METHOD_STYLES: dict[str, MethodStyle] = {
    "base": MethodStyle("#7f7f7f", ":", "s", 1),
    "grpo": MethodStyle("#6baed6", "--", "v", 2),
    "ace_grpo": MethodStyle("#08519c", "-", "o", 4),
    "dapo": MethodStyle("#fd8d3c", "--", "^", 2),
    "ace_dapo": MethodStyle("#a63603", "-", "D", 4),
    "ace_grpo_relu": MethodStyle("#31a354", "-.", "P", 3),
}

FALLBACK_COLORS = ("#756bb1", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#1b9e77", "#666666")

_assigned: dict[str, MethodStyle] = {}


def method_style(method: str) -> MethodStyle:
    """The style of a method key (fixed for the paper's methods, assigned on first use for others)."""
    if method in METHOD_STYLES:
        return METHOD_STYLES[method]
    if method not in _assigned:
        color = FALLBACK_COLORS[len(_assigned) % len(FALLBACK_COLORS)]
        _assigned[method] = MethodStyle(color, "-", "o", 3)
    return _assigned[method]


RC_PARAMS: dict[RcKeyType, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "mathtext.fontset": "dejavusans",
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.8,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "grid.linestyle": "-",
    "axes.axisbelow": True,
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.03,
    "pdf.fonttype": 42,  # TrueType in PDFs (editable text, accepted by publishers)
    "ps.fonttype": 42,
}
"""Matplotlib settings shared by every report figure."""


@contextmanager
def report_style() -> Iterator[None]:
    """Apply :data:`RC_PARAMS` for the duration of the block (global rcParams are restored afterwards)."""
    with mpl.rc_context(RC_PARAMS):
        yield
