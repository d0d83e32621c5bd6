"""Test stand-ins for what a CPU cannot run (CUDA, vLLM's GPU server), never on a GPU path and never in place of
the code under test. verl's processes import them by module name through the launcher's site hooks, with this
package's parent folder (``tests/``) on ``PYTHONPATH``:

- :mod:`fakes.verl_cpu_loop`: the environment and Hydra overrides that put verl 0.9.1's own trainer loop on CPU;
- :mod:`fakes.verl_cpu_platform`: a CPU "accelerator" platform for verl;
- :mod:`fakes.verl_cpu_rollout`: a transformers rollout server behind verl's server interface;
- :mod:`fakes.verl_cpu_step`: one verl training step with verl's own components, run as a script.

docs/verl.md ("What has executed on CPU") lists what each replaces and why.
"""
