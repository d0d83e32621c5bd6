"""Paper-scale training with verl 0.9.1 + Ray (see ``docs/verl.md``).

- :mod:`acerl.verl_backend.plugin`: registers ACE in verl without a fork (loaded in every Ray process through
  ``VERL_USE_EXTERNAL_MODULES=acerl.verl_backend.plugin``; importing it imports verl).
- :mod:`acerl.verl_backend.launcher`: a run of the study -> a verl command line, multi-node launch on SLURM,
  checkpoint export to Hugging Face folders.
- :mod:`acerl.verl_backend.checkpoints`: the diagnostic-snapshot checkpoint callback and model-merger calls.

Importing this package does not import verl.
"""

PLUGIN_MODULE = "acerl.verl_backend.plugin"
GEN_BATCH_KEY = "trainer.acerl.gen_batch_size"
"""The DAPO recipe's generation batch in prompts (its ``data.gen_batch_size``, which verl's V1 trainer resets
to 1 under dynamic sampling): written by the launcher, read by the plugin's dynamic-sampling cap."""

VERL_BUILTIN_ESTIMATORS: frozenset[str] = frozenset({"grpo"})
"""acerl estimators that are verl's own: the launcher renders them as verl's and the plugin leaves them alone;
every other registered estimator runs through the plugin (docs/extending.md)."""

__all__ = ["GEN_BATCH_KEY", "PLUGIN_MODULE", "VERL_BUILTIN_ESTIMATORS"]
