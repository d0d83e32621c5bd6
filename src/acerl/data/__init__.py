"""Datasets: JSON Lines I/O (:mod:`acerl.data.io`) and the synthetic task (:mod:`acerl.data.synthetic`)."""

from acerl.data.io import DataFormatError, read_jsonl, write_jsonl

__all__ = ["DataFormatError", "read_jsonl", "write_jsonl"]
