"""acerl: the reproducible pipeline behind "Overconfident Errors Need Stronger Correction" (ACE)."""

__version__ = "0.1.0"
