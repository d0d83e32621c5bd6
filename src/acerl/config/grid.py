"""The study grid: the runs a config asks for and what each part of the study derives from them (the methods
the alpha sweep adds, the rows of Tables 3 and 4, the (benchmark, run) pairs evaluated, diagnostic steps,
resources and vLLM settings per rule).

:class:`StudyGrid` holds them as methods of :class:`acerl.config.Config`, which inherits them; they read the
validated sections and never retype a key. The sections they read are declared on :class:`StudyGrid` for type
checkers, so this module needs nothing from :mod:`acerl.config.root`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from acerl.config.schema import (
    Ablation,
    AceEstimator,
    AlphaSweep,
    ComputeConfig,
    ConfigError,
    DataConfig,
    EvaluationConfig,
    FamilyConfig,
    MethodConfig,
    ModelConfig,
    Resources,
    StudyConfig,
)

if TYPE_CHECKING:
    from acerl.config.report import ReportConfig

BASE_METHOD = "base"  # the method key under which an untrained base model is evaluated
SYNTHETIC_BENCHMARKS = ("synth_easy", "synth_hard")
#: Synthetic splits that are never a benchmark; any other split a config sizes (``data.synthetic.params.sizes``,
#: e.g. the gate's ``synth_mix``) is one more benchmark after :data:`SYNTHETIC_BENCHMARKS`.
SYNTHETIC_NON_BENCHMARKS = ("train", "sft", "heldout")
#: The study's parts that are a table of their own: Table 4 (the alpha sweep) and Table 3 (the ablation).
TablePart = Literal["alpha_sweep", "ablation"]
TABLE_PARTS: tuple[TablePart, ...] = ("alpha_sweep", "ablation")


@dataclass(frozen=True, order=True)
class Run:
    """One (model, method, seed) cell of the study; ``method == 'base'`` is the untrained model."""

    model: str
    method: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.model}/{self.method}/seed{self.seed}"

    @property
    def is_base(self) -> bool:
        return self.method == BASE_METHOD


def alpha_variant_key(method: str, alpha: float, default_alpha: float) -> str:
    """Method key of an alpha-sweep variant; the default alpha maps to the method itself (no duplicate run).
    :meth:`Config.sweep_method` also maps alpha = 0 to the method's GRPO counterpart when the config has one."""
    if float(alpha) == float(default_alpha):
        return method
    return f"{method}-alpha{float(alpha):g}"


def require(key: str, table: Mapping[str, Any], where: str) -> Any:
    """``table[key]``, or a ``ValueError`` naming ``where`` and the valid keys."""
    if key not in table:
        raise ValueError(f"{where}: unknown name {key!r}; valid: {', '.join(sorted(table))}")
    return table[key]


class StudyGrid:
    """The derived values of :class:`acerl.config.Config`, which inherits them: the run grid, the tables' rows,
    resources and vLLM settings."""

    if TYPE_CHECKING:  # the sections these methods read: fields of Config, declared here for type checkers
        data: DataConfig
        models: dict[str, ModelConfig]
        families: dict[str, FamilyConfig]
        methods: dict[str, MethodConfig]
        study: StudyConfig
        evaluation: EvaluationConfig
        compute: ComputeConfig
        report: ReportConfig

    @property
    def benchmark_names(self) -> list[str]:
        if self.data.kind == "real":
            assert self.data.real is not None
            return list(self.data.real.benchmarks)
        sized = self.data.synthetic.params.sizes or {}
        known = (*SYNTHETIC_BENCHMARKS, *SYNTHETIC_NON_BENCHMARKS)
        extra = sorted(s for s, n in sized.items() if n > 0 and s not in known)
        return [*SYNTHETIC_BENCHMARKS, *extra]

    @property
    def primary_endpoint(self) -> tuple[str, int]:
        """``(benchmark, k)`` of ``report.primary`` (defaults: the first evaluated benchmark, the largest k)."""
        p = self.report.primary
        return (p.benchmark or self.evaluation.benchmarks[0], p.k or max(self.evaluation.ks))

    @property
    def data_splits(self) -> list[str]:
        """Every JSON Lines file prepare_data writes: train (+ sft for the tiny model), benchmarks, held-out."""
        extra = ["sft"] if self.data.kind == "synthetic" else []
        return ["train", *extra, *self.benchmark_names, "heldout"]

    @cached_property
    def resolved_methods(self) -> dict[str, MethodConfig]:
        """Every method the study trains: the configured ones plus alpha-sweep variants."""
        out = dict(self.methods)
        sweep = self.study.alpha_sweep
        if sweep:
            for alpha in sweep.alphas:
                key = self.sweep_method(alpha)
                if key not in out:
                    base = self.methods[sweep.method]
                    est = self.swept_estimator().model_copy(update={"alpha": float(alpha)})
                    out[key] = base.model_copy(
                        update={"estimator": est, "display": f"{base.display} (α={alpha:g})"}
                    )
        return out

    def method(self, key: str) -> MethodConfig:
        return require(key, self.resolved_methods, "method")

    def family(self, method_key: str) -> FamilyConfig:
        return self.families[self.method(method_key).family]

    def grpo_counterpart(self, method: str, candidates: Iterable[str] | None = None) -> str | None:
        """The GRPO-estimator method of the same family as ACE method ``method`` with the same group
        normalisation (``eps``, ``norm_by_std``): ACE at alpha = 0 is exactly that method (ACE-GRPO -> GRPO).
        Searched in ``candidates`` (default: the main grid's methods, then every configured method)."""
        me = require(method, self.methods, "method")  # configured methods only: no alpha-sweep variants
        pool = candidates if candidates is not None else [*self.study.main.methods, *self.methods]
        for other in dict.fromkeys(pool):
            o = require(other, self.methods, "method")
            if (
                other != method
                and o.family == me.family
                and o.estimator.name == "grpo"
                and (o.estimator.eps, o.estimator.norm_by_std) == (me.estimator.eps, me.estimator.norm_by_std)
            ):
                return other
        return None

    def sweep_method(self, alpha: float) -> str:
        """Method key of the alpha sweep's row ``alpha``: the swept method itself at its own alpha, its GRPO
        counterpart at alpha = 0 (:meth:`grpo_counterpart`; the same run ids as the main grid, so Snakemake and
        DVC train them once), else a variant ``<method>-alpha<alpha>`` (:func:`alpha_variant_key`)."""
        sw = self.study.alpha_sweep
        assert sw is not None, "no study.alpha_sweep"
        if float(alpha) == 0.0:
            zero = self.grpo_counterpart(sw.method)
            if zero is not None:
                return zero
        return alpha_variant_key(sw.method, alpha, self.swept_estimator().alpha)

    def swept_estimator(self) -> AceEstimator:
        """The ACE estimator of ``study.alpha_sweep.method`` (the validation checked it is one)."""
        sw = self.study.alpha_sweep
        assert sw is not None, "no study.alpha_sweep"
        est = self.methods[sw.method].estimator
        assert isinstance(est, AceEstimator), "study.alpha_sweep.method is validated to be an ACE method"
        return est

    def table_rows(self, part: TablePart) -> dict[str, list[int]]:
        """Method key -> the seeds its row of Table 4 (``alpha_sweep``) or Table 3 (``ablation``) averages.

        A row that is a main-grid run (the part's model in ``study.main.models``, the method in
        ``study.main.methods``) averages the main grid's seeds (its runs exist anyway); the others average the
        part's ``seeds`` (default: the main grid's seeds, so every row averages the same runs).
        """
        main = self.study.main
        chosen = getattr(self.study, part)
        if chosen is None:
            return {}
        keys = (
            [self.sweep_method(a) for a in chosen.alphas] if part == "alpha_sweep" else list(chosen.methods)
        )
        own = list(chosen.seeds) if chosen.seeds is not None else list(main.seeds)
        in_main = chosen.model in main.models
        return {k: list(main.seeds) if in_main and k in main.methods else own for k in dict.fromkeys(keys)}

    def _part_runs(self) -> dict[str, list[Run]]:
        """The runs each part of the study asks for: ``main``, ``alpha_sweep``, ``ablation``, ``diagnostics``
        (a run may appear in several parts)."""
        s = self.study
        parts: dict[str, list[Run]] = {
            "main": [
                Run(m, me, seed) for m in s.main.models for me in s.main.methods for seed in s.main.seeds
            ]
        }
        tables: list[tuple[TablePart, AlphaSweep | Ablation | None]] = [
            ("alpha_sweep", s.alpha_sweep),
            ("ablation", s.ablation),
        ]
        for key, part in tables:
            if part is not None:
                rows = self.table_rows(key)
                parts[key] = [Run(part.model, me, seed) for me, seeds in rows.items() for seed in seeds]
        if s.diagnostics:
            d = s.diagnostics
            parts["diagnostics"] = [
                Run(m, me, seed) for m in d.models for me in d.methods for seed in d.seeds
            ]
        return parts

    def runs(self) -> list[Run]:
        """Every training run the study needs (deduplicated, in a stable order)."""
        return list(dict.fromkeys(r for part in self._part_runs().values() for r in part))

    def table_benchmark(self, part: TablePart) -> str:
        """The benchmark Table 4 (``alpha_sweep``) or Table 3 (``ablation``) reports."""
        chosen = getattr(self.study, part)
        return (chosen.benchmark if chosen else None) or self.evaluation.benchmarks[0]

    def evaluations(self) -> list[tuple[str, Run]]:
        """Every (benchmark, run) the reports need Pass@k of, benchmark-major, in a stable order.

        The base models and the main grid's runs on every benchmark (Tables 1-2, Pass@k curves); the alpha
        sweep's and the ablation's runs on their table's benchmark only (Tables 4 and 3; the paper reports both on
        MATH-500); diagnostic-only runs on none (Figs. 2-3 use their diagnostics).
        """
        parts = self._part_runs()
        wanted: dict[Run, set[str]] = {
            r: set(self.evaluation.benchmarks) for r in self.base_runs() + parts["main"]
        }
        for part in TABLE_PARTS:
            for r in parts.get(part, []):
                wanted.setdefault(r, set()).add(self.table_benchmark(part))
        runs = self.base_runs() + self.runs()
        return [(b, r) for b in self.evaluation.benchmarks for r in runs if b in wanted.get(r, ())]

    def base_runs(self) -> list[Run]:
        """Untrained base models evaluated (method 'base', seed 0)."""
        models = self.study.main.models if self.study.main.include_base else []
        return [Run(m, BASE_METHOD, 0) for m in models]

    def diagnostic_runs(self) -> list[Run]:
        d = self.study.diagnostics
        if d is None:
            return []
        return [Run(m, me, s) for m in d.models for me in d.methods for s in d.seeds]

    def diagnostic_steps(self, model: str) -> list[int]:
        """Training steps at which a diagnostic checkpoint is saved (step 0 = the base model)."""
        d = self.study.diagnostics
        if d is None:
            return []
        total = self.models[model].train.total_steps
        steps = set(range(0, min(d.early_steps, total) + 1, d.early_every))
        steps.update(range(0, total + 1, d.every))
        steps.add(total)
        return sorted(steps)

    def resources(self, rule: str, model: str | None = None) -> Resources:
        """Resources for a rule (and model): model override > rule entry > 'default' > built-in defaults."""
        res = self.compute.resources
        out = res.get(rule) or res.get("default") or Resources()
        if model is not None:
            override = self.compute.model_resources.get(model, {}).get(rule)
            if override is not None:
                out = override
        return out

    def vllm_engine(self, model: str, rule: str = "sample") -> dict[str, Any]:
        """The vLLM engine settings for ``model`` in ``rule``'s job, nulls of ``evaluation.vllm`` resolved
        (keyword arguments of :func:`acerl.generate.vllm_backend.engine_kwargs`)."""
        v = self.evaluation.vllm
        return {
            "tensor_parallel_size": v.tensor_parallel_size or max(1, self.resources(rule, model).gpus),
            "gpu_memory_utilization": v.gpu_memory_utilization
            or self.models[model].train.gpu_memory_utilization,
            "kv_cache_gib": v.kv_cache_gib,
            "seed": self.evaluation.seed,
            "dtype": v.dtype,
            "max_model_len": v.max_model_len,
            "enforce_eager": v.enforce_eager,
        }


def check_overlong(cfg: StudyGrid, run: Run) -> None:
    """DAPO's overlong buffer must fit in the model's response budget (it is the last ``buffer`` tokens)."""
    method = cfg.method(run.method)
    family, hyper = cfg.families[method.family], cfg.models[run.model].train
    if family.overlong.enable and family.overlong.buffer > hyper.max_response_length:
        raise ConfigError(
            f"families.{method.family}.overlong.buffer ({family.overlong.buffer}) exceeds "
            f"models.{run.model}.train.max_response_length ({hyper.max_response_length}), which run "
            f"{run.id} trains with; lower the buffer"
        )
