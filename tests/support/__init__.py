"""Shared test helpers (not tests): the CI-scale study built once per `make test` (`study`), skip-or-fail under
`CI=true` (`ci_inputs`), the synthetic report inputs (`report_synthetic`), the local SLURM cluster's helpers
(`slurm_helpers`), weight perturbations (`perturb`) and the two-device replay mode (`device_mixing`)."""
