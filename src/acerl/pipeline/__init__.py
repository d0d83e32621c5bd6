"""The pipeline's plumbing: what every stage shares, below the algorithms.

- :mod:`~acerl.pipeline.io`: atomic, fsync'd file writes and the one-line errors of unreadable files.
- :mod:`~acerl.pipeline.records`, :mod:`~acerl.pipeline.provenance`: the result records and what made them.
- :mod:`~acerl.pipeline.paths`: every file's place under ``--root``.
- :mod:`~acerl.pipeline.stages`: the stage table both Snakemake and DVC read (commands, inputs, outputs, params).
- :mod:`~acerl.pipeline.runtime`, :mod:`~acerl.pipeline.allocator`, :mod:`~acerl.pipeline.cluster`: a job's
  torch settings, its C allocator and the SLURM profile check.
- :mod:`~acerl.pipeline.seeds`: the random streams.

Each module has its own layer (``tests/test_architecture.py``), so this package imports none of them: ``io`` sits
below the config and ``paths`` above it.
"""
