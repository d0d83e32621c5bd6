"""The training step and a whole run: weights change, every metric is logged, ACE differs from GRPO only
through the advantages, dynamic sampling, gradient accumulation, EMA reference, re-invocation no-op."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from trainer_fixtures import DigitVerifier, Verdict, make_config, read_jsonl_records

from acerl.config import Run
from acerl.config.settings import resolve
from acerl.pipeline import paths
from acerl.train import train_run
from acerl.train.algorithm import (
    ACE_KEYS,
    ACTOR_KEYS,
    estimate_advantages,
    policy_forward,
    single_pass_update,
    train_step,
    update_policy,
)
from acerl.train.logprobs import batch_logprobs
from acerl.train.metrics import Timer
from acerl.train.rollouts import collect_rollouts
from acerl.train.run import init_state

TRAIN_KEYS = (
    "train/reward_mean",
    "train/pass_rate",
    "train/overlong_penalty_mean",
    "train/response_length_mean",
    "train/response_length_max",
    "train/response_clip_frac",
    "train/kept_groups_frac",
    "train/mixed_groups_frac",
    "train/gen_batches",
    "train/groups",
    "train/lr",
    "train/epoch",
    "actor/kl_coef",
)
TIMING_KEYS = tuple(f"timing/{k}" for k in ("rollout", "reward", "logprobs", "advantage", "update", "step"))


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _no_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


def test_one_step_changes_weights_and_logs_every_metric(tiny_root: Path, verifier: DigitVerifier):
    cfg = make_config("models.tiny.train.total_steps=1")
    run = Run("tiny", "ace_grpo", 0)
    final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    assert final == paths.policy_dir(tiny_root, run)
    before, after = _weights(paths.base_model_dir(tiny_root, "tiny")), _weights(final)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    (record,) = read_jsonl_records(paths.train_metrics_file(tiny_root, run))
    assert record["step"] == 1
    for key in (*TRAIN_KEYS, *ACTOR_KEYS, *ACE_KEYS, *TIMING_KEYS):
        assert key in record, key
        assert record[key] is not None and math.isfinite(record[key]), key
    # Step 1 samples from pi_ref itself, so c_i = 0 up to float rounding: the policy's log-probs come from the
    # update's forward (with grad, its own batching), the reference's from a separate no-grad pass, and CPU
    # kernels may block the two differently (seen: |c| ~ 1e-8 in float32 on some machines).
    assert record["ace/confidence_mean_neg"] == pytest.approx(0.0, abs=1e-6)
    assert record["ace/multiplier_mean_neg"] == pytest.approx(1 + math.log(2), abs=1e-6)  # 1 + softplus(0)
    assert record["train/groups"] == 4 and record["train/lr"] == pytest.approx(1e-3)
    # diagnostics (tiny/ace_grpo/seed0 is a diagnostic run): step 0 = the base model, and the last step
    assert _weights(paths.diag_step_dir(tiny_root, run, 0)).keys() == before.keys()
    assert torch.equal(
        _weights(paths.diag_step_dir(tiny_root, run, 0))["model.norm.weight"], before["model.norm.weight"]
    )
    assert (paths.diag_step_dir(tiny_root, run, 1) / "model.safetensors").is_file()
    # dvclive view of the same metrics, with no dvc.yaml and no repository side effects
    live = paths.run_dir(tiny_root, run) / "dvclive"
    assert (live / "plots" / "metrics" / "train" / "pass_rate.tsv").is_file()
    assert json.loads((live / "metrics.json").read_text())["train"]["pass_rate"] == record["train/pass_rate"]
    assert not list(tiny_root.rglob("dvc.yaml")) and not (tiny_root / ".dvc").exists()
    assert json.loads((paths.run_dir(tiny_root, run) / "run_spec.json").read_text())["method"] == "ace_grpo"


def test_ace_alpha_zero_is_grpo_bitwise(tmp_path: Path, tiny_root_template: Path):
    import shutil

    records, weights = {}, {}
    for method, extra in (("grpo", []), ("ace_grpo", ["methods.ace_grpo.estimator.alpha=0.0"])):
        root = tmp_path / method
        shutil.copytree(tiny_root_template, root)
        cfg = make_config("models.tiny.train.total_steps=2", *extra)
        final = train_run(
            resolve(cfg, Run("tiny", method, 0)), root, verifier=DigitVerifier(), progress=False
        )
        weights[method] = _weights(final)
        records[method] = _no_timing(
            read_jsonl_records(paths.train_metrics_file(root, Run("tiny", method, 0)))
        )
    assert all(torch.equal(weights["grpo"][k], weights["ace_grpo"][k]) for k in weights["grpo"])
    for a, b in zip(records["grpo"], records["ace_grpo"], strict=True):
        assert a.keys() == b.keys()
        assert a == b


def test_ace_differs_from_grpo_only_through_advantages(tiny_root: Path):
    """Same seed, same policy: identical prompts, rollouts, rewards and log-probs; only advantages differ."""
    cfg = make_config()
    got = {}
    for method in ("grpo", "ace_grpo"):
        run = Run("tiny", method, 0)
        settings = resolve(cfg, run)
        state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
        ro = collect_rollouts(state, settings, data, DigitVerifier(), Timer())
        old, _ = batch_logprobs(state.model, ro.batch, 1.0, 4)
        ref, _ = batch_logprobs(state.ref_model, ro.batch, 1.0, 4)
        got[method] = (ro, estimate_advantages(settings.estimator, ro, ref, old).advantages)
    (ro_g, adv_g), (ro_a, adv_a) = got["grpo"], got["ace_grpo"]
    assert torch.equal(ro_g.batch.input_ids, ro_a.batch.input_ids)
    assert torch.equal(ro_g.scores, ro_a.scores) and ro_g.sampled == ro_a.sampled
    neg = adv_g < 0
    assert neg.any()
    assert torch.equal(adv_a[~neg], adv_g[~neg])  # positive / zero advantages untouched
    torch.testing.assert_close(adv_a[neg], adv_g[neg] * (1 + math.log(2)))  # c_i = 0 at step 0


def test_dynamic_sampling_keeps_only_mixed_groups(tiny_root: Path):
    cfg = make_config("families.dapo.dynamic_sampling.max_batches=4")
    run = Run("tiny", "dapo", 0)
    settings = resolve(cfg, run)
    state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
    verifier = DigitVerifier()
    ro = collect_rollouts(state, settings, data, verifier, Timer())
    g = settings.hyper.group_size
    assert ro.batch is not None and len(ro.batch) == len(ro.scores) == len(ro.group_ids)
    assert 1 <= ro.sampled["train/gen_batches"] <= 4 and verifier.calls == ro.sampled["train/gen_batches"]
    assert ro.sampled["train/groups"] == len(ro.batch) // g
    assert ro.sampled["train/kept_groups_frac"] < 1.0  # some groups were filtered out
    correct = ro.scores > -0.5  # signed rewards: +1 (+ overlong penalty >= -1) vs -1 (+ penalty)
    assert torch.equal(ro.correct, correct)  # the kept rows' verdicts (ACE's amplify rule reads them)
    for k in range(len(ro.batch) // g):
        group = correct[k * g : (k + 1) * g]
        assert group.any() and not group.all(), f"group {k} is not mixed"
    if ro.sampled["train/gen_batches"] < 4:
        assert ro.sampled["train/groups"] == settings.hyper.prompts_per_step


class NeverCorrect:
    def grade_many(self, items, *, progress=None):
        return [Verdict(False) for _ in items]


class EveryOtherCorrect:
    """Every group mixed: dynamic sampling keeps the first batch."""

    def grade_many(self, items, *, progress=None):
        return [Verdict(i % 2 == 0) for i in range(len(items))]


def test_each_step_sees_the_same_prompts_and_draws_whatever_earlier_steps_consumed(tiny_root: Path):
    """Common random numbers across methods: a step's first batch takes the main prompt stream's next
    ``prompts_per_step`` prompts and draws from a generator seeded by (run seed, step, attempt), so a run whose
    earlier steps drew extra dynamic-sampling batches (DAPO vs ACE-DAPO, whose filters keep different groups)
    still sees the same prompts and the same uniforms at the next step; the extra batches use their own stream."""
    cfg = make_config("families.dapo.dynamic_sampling.max_batches=3")
    run = Run("tiny", "dapo", 0)
    settings = resolve(cfg, run)
    second = {}
    for name, first_verifier in (
        ("filters nothing", EveryOtherCorrect()),
        ("filters everything", NeverCorrect()),
    ):
        state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
        first = collect_rollouts(state, settings, data, first_verifier, Timer())
        state.step = 1
        state.generator.manual_seed(12345)  # whatever state the generator is in, the step reseeds it
        second[name] = (
            first.sampled["train/gen_batches"],
            collect_rollouts(state, settings, data, EveryOtherCorrect(), Timer()),
        )
        assert (
            state.stream.position == 2 * settings.hyper.prompts_per_step
        )  # one batch per step from the main stream
    (batches_a, a), (batches_b, b) = second["filters nothing"], second["filters everything"]
    assert (batches_a, batches_b) == (1, 3)  # the first steps consumed different numbers of batches
    assert torch.equal(a.batch.input_ids, b.batch.input_ids) and torch.equal(a.scores, b.scores)


@pytest.mark.parametrize("cap", [(2, 1), (1, 2)], ids=["2 batches", "1 batch of 2x"])
def test_dynamic_sampling_gives_up_after_max_batches(tiny_root: Path, cap: tuple[int, int]):
    """A step generates at most ``max_batches`` generation batches of ``gen_batch_factor`` training batches
    (the DAPO recipe's budget), drawn in training batches: 2 draws either way."""
    cfg = make_config(
        "models.tiny.train.total_steps=1",
        f"families.dapo.dynamic_sampling.max_batches={cap[0]}",
        f"families.dapo.dynamic_sampling.gen_batch_factor={cap[1]}",
    )
    run = Run("tiny", "dapo", 0)
    final = train_run(resolve(cfg, run), tiny_root, verifier=NeverCorrect(), progress=False)
    before, after = _weights(paths.base_model_dir(tiny_root, "tiny")), _weights(final)
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing to learn from: no update
    (record,) = read_jsonl_records(paths.train_metrics_file(tiny_root, run))
    assert record["train/gen_batches"] == 2 and record["train/groups"] == 0
    assert record["train/kept_groups_frac"] == 0.0 and record["actor/pg_loss"] is None


def test_micro_batches_accumulate_to_the_mini_batch_gradient(tiny_root: Path):
    """Gradient accumulation over micro-batches == one forward over the mini-batch (verl global batch info)."""
    grads = {}
    for micro, mode in (
        (16, "token-mean"),
        (3, "token-mean"),
        (16, "seq-mean-token-mean"),
        (5, "seq-mean-token-mean"),
    ):
        cfg = make_config(
            f"models.tiny.train.micro_batch_size_per_gpu={micro}",
            "models.tiny.train.mini_batch_size=4",
            f"families.grpo.loss_agg_mode={mode}",
            "models.tiny.train.lr=1.0e-8",
        )
        run = Run("tiny", "grpo", 0)
        settings = resolve(cfg, run)
        state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
        ro = collect_rollouts(state, settings, data, DigitVerifier(), Timer())
        old, _ = batch_logprobs(state.model, ro.batch, 1.0, 16)
        ref, _ = batch_logprobs(state.ref_model, ro.batch, 1.0, 16)
        from acerl.algos.advantages import grpo_estimator

        adv = grpo_estimator(ro.scores, ro.group_ids)
        captured: list[list[torch.Tensor]] = []

        def capture(captured=captured, model=state.model) -> None:  # record the gradient, skip the update
            captured.append([p.grad.clone() for p in model.parameters()])

        state.optimizer.step = capture
        metrics = update_policy(state, settings, ro.batch, old, ref, adv)
        grads[(micro, mode)] = (captured[0], metrics["actor/pg_loss"])
    for mode, (big, small) in (("token-mean", (16, 3)), ("seq-mean-token-mean", (16, 5))):
        (ga, la), (gb, lb) = grads[(big, mode)], grads[(small, mode)]
        assert la == pytest.approx(lb, abs=1e-6)
        for a, b in zip(ga, gb, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_ema_reference_moves_and_is_checkpointed(tiny_root: Path, verifier: DigitVerifier):
    from acerl.train.checkpoint import find_latest

    cfg = make_config("models.tiny.train.total_steps=2")
    run = Run("tiny", "grpo", 0)
    train_run(
        resolve(cfg, run, reference="ema", ref_ema_decay=0.5), tiny_root, verifier=verifier, progress=False
    )
    ckpt = find_latest(paths.checkpoints_dir(tiny_root, run))
    ref, policy = load_file(str(ckpt / "ref.safetensors")), load_file(str(ckpt / "model.safetensors"))
    base = _weights(paths.base_model_dir(tiny_root, "tiny"))
    k = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(ref[k], base[k]) and not torch.equal(ref[k], policy[k])
    with pytest.raises(Exception, match="reference override"):
        resolve(cfg, run, reference="bogus")  # type: ignore[arg-type]


def test_finished_run_is_a_noop(tiny_root: Path, verifier: DigitVerifier, caplog: pytest.LogCaptureFixture):
    cfg = make_config("models.tiny.train.total_steps=1")
    run = Run("tiny", "grpo", 1)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="acerl.train.run"):
        final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("tiny/grpo/seed1: step 1/1 reward "), messages
    assert messages[1:] == [
        f"tiny/grpo/seed1: final policy written to {final}"
    ]  # one progress line, then done
    stamp = {p: p.stat().st_mtime_ns for p in paths.run_dir(tiny_root, run).rglob("*")}
    calls = verifier.calls
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="acerl.train.run"):
        assert train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False) == final
    assert verifier.calls == calls
    assert {p: p.stat().st_mtime_ns for p in paths.run_dir(tiny_root, run).rglob("*")} == stamp
    assert [r.getMessage() for r in caplog.records] == [
        f"tiny/grpo/seed1: final policy {final} exists; nothing to do"
    ]


def test_a_final_folder_without_its_config_is_not_a_finished_run(tiny_root: Path, verifier: DigitVerifier):
    """Only a final folder with its ``config.json`` means the run is done (the trainer writes the folder
    atomically); one without it (a copy cut short, a folder made by hand) is trained over."""
    cfg = make_config("models.tiny.train.total_steps=1")
    run = Run("tiny", "grpo", 1)
    final = paths.policy_dir(tiny_root, run)
    final.mkdir(parents=True)
    assert train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False) == final
    assert (
        verifier.calls > 0 and (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    )


def test_bad_settings_fail_early(tiny_root: Path):
    from acerl.config import ConfigError

    with pytest.raises(ConfigError, match="overlong.buffer"):
        resolve(make_config("families.dapo.overlong.buffer=64"), Run("tiny", "dapo", 0))
    with pytest.raises(ValueError, match="base model"):
        resolve(make_config(), Run("tiny", "base", 0))
    cfg = make_config("models.tiny.train.max_prompt_length=8", "models.tiny.train.total_steps=1")
    too_long = rf"^{paths.data_file(tiny_root, 'train')}: row .+ has a \d+-token prompt, longer than max_prompt_length=8 "
    with pytest.raises(ValueError, match=too_long):  # names the file, the row and the key to change
        train_run(resolve(cfg, Run("tiny", "grpo", 0)), tiny_root, verifier=DigitVerifier(), progress=False)


def test_reference_logprobs_equal_policy_logprobs_before_training(tmp_path: Path):
    """At step 1 pi_ref == pi_old, so every c_i must be exactly 0 (not float noise with a random sign, which
    would make the batch OEF read ~0.5): policy and reference must take identical numerical paths."""
    from trainer_fixtures import make_root

    root = make_root(tmp_path, default_arch=True)
    for method in ("ace_grpo", "ace_dapo"):
        run = Run("tiny", method, 0)
        settings = resolve(make_config("models.tiny.train.micro_batch_size_per_gpu=64"), run)
        state, data = init_state(root, run, settings, torch.device("cpu"))
        ro = collect_rollouts(state, settings, data, DigitVerifier(), Timer())
        old, _ = batch_logprobs(state.model, ro.batch, 1.0, 64)
        ref, _ = batch_logprobs(state.ref_model, ro.batch, 1.0, 64)
        assert torch.equal(old, ref), method


@pytest.mark.parametrize("method", ["ace_grpo", "dapo"])
def test_single_pass_update_takes_log_pi_old_from_its_own_forward(
    tiny_root: Path, method: str, monkeypatch: pytest.MonkeyPatch
):
    """One epoch, one mini-batch, one micro-batch: log pi_old comes from the update's forward pass instead of
    a separate teacher-forced pass -- one policy forward fewer per step, bitwise the same training."""
    import acerl.train.algorithm as loop

    cfg = make_config(
        "models.tiny.train.mini_batch_size=4",
        "models.tiny.train.micro_batch_size_per_gpu=16",  # 4 prompts x G=4: the whole batch in one pass
    )
    run = Run("tiny", method, 0)
    results = {}
    for single in (True, False):
        if not single:  # the general path: a separate no-grad pass for log pi_old
            monkeypatch.setattr(loop, "single_pass_update", lambda settings, rows: False)
        settings = resolve(cfg, run)
        state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
        forwards = [0]
        state.model.register_forward_pre_hook(lambda *_, n=forwards: n.__setitem__(0, n[0] + 1))
        records = []
        for _ in range(3):
            before = forwards[0]
            records.append(loop.train_step(state, settings, data, DigitVerifier()))
            records[-1]["policy_forwards"] = forwards[0] - before
        results[single] = (records, [p.detach().clone() for p in state.model.parameters()])
    batch = collect_rollouts(state, settings, data, DigitVerifier(), Timer()).batch
    before = forwards[
        0
    ]  # model calls of one teacher-forced pass (prompt + responses when prompts are shared)
    batch_logprobs(state.model, batch, 1.0, 16)
    pass_calls = forwards[0] - before
    (fused, w_fused), (separate, w_separate) = results[True], results[False]
    assert all(torch.equal(a, b) for a, b in zip(w_fused, w_separate, strict=True))
    assert all(r["train/groups"] > 0 for r in fused)  # every step updated
    for a, b in zip(_no_timing(fused), _no_timing(separate), strict=True):
        assert b.pop("policy_forwards") - a.pop("policy_forwards") == pass_calls
        assert a.keys() == b.keys()
        assert all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a), a
    if method == "ace_grpo":  # step 1 samples from pi_ref itself: c_i = 0 exactly on the single-pass path too
        assert fused[0]["ace/confidence_mean_neg"] == 0.0
        assert fused[0]["ace/overconfident_frac_neg"] == 0.0  # c = 0 is not an overconfident error


def test_single_pass_update_needs_one_pass(tiny_root: Path):
    """The guard counts rows (sequences), not response tokens: responses of at most 4 tokens fit the 4 rows
    a single pass may hold, the batch's 16 rows do not."""
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.max_response_length=4")
    settings = resolve(cfg, run)  # 2 mini-batches of 2 prompts: not a single pass
    assert not single_pass_update(settings, 16) and single_pass_update(settings, 4)
    assert not single_pass_update(settings, 8)  # one mini-batch (2 prompts x 4), two micro-batches of 4
    two_epochs = resolve(make_config("models.tiny.train.ppo_epochs=2"), run)
    assert not single_pass_update(two_epochs, 4)  # one micro-batch, but two passes over it
    wide_micro = resolve(make_config("models.tiny.train.micro_batch_size_per_gpu=16"), run)
    assert not single_pass_update(wide_micro, 12)  # one micro-batch, but two mini-batches of 8 rows
    state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
    ro = collect_rollouts(state, settings, data, DigitVerifier(), Timer())
    rows = torch.arange(len(ro.batch))
    first = policy_forward(state, settings, ro.batch, rows, with_entropy=False)
    old = first.logprobs.detach()
    adv = estimate_advantages(settings.estimator, ro, None, old)
    with pytest.raises(ValueError, match="single forward pass"):  # 16 rows: not one pass
        update_policy(state, settings, ro.batch, old, None, adv, first)


@pytest.mark.parametrize("micro_batch", [16, 4], ids=["single-pass", "accumulated"])
def test_a_family_without_kl_loss_trains_without_a_reference(tiny_root: Path, micro_batch: int):
    """GRPO with ``use_kl_loss: false`` needs no reference model: the update runs with ``log pi_ref`` None, on
    the single-pass and the accumulated path, and its KL loss is 0."""
    run = Run("tiny", "grpo", 0)
    cfg = make_config(
        "families.grpo.use_kl_loss=false",
        "models.tiny.train.mini_batch_size=4",
        f"models.tiny.train.micro_batch_size_per_gpu={micro_batch}",
    )
    settings = resolve(cfg, run)
    state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
    assert state.ref_model is None
    before = [p.detach().clone() for p in state.model.parameters()]
    metrics = train_step(state, settings, data, DigitVerifier())
    assert metrics["train/groups"] > 0 and metrics["actor/kl_loss"] == 0.0
    assert any(not torch.equal(b, p) for b, p in zip(before, state.model.parameters(), strict=True))


def test_loss_of_one_micro_batch_uses_the_family_clip_range_aggregation_and_kl_by_hand():
    """The trainer's loss wiring where the ratio leaves the clip range (a later mini-batch or epoch; a single
    pass never does, its ratio is 1): every family setting reaches the policy loss and the KL term. One row,
    three tokens (seq-mean-token-sum: the sum over tokens), ratios 1.25 / 0.5 / 20 with A = +1 / -1 / -1:
    clip-higher 0.28 keeps 1.25 (0.2 would clip it to 1.2); clip_ratio_low 0.1 lifts 0.5 to 0.9; the dual clip
    caps 20 at c = 10. KL k1 = 0.1 per token, beta = 0.5: + 0.5 * 0.3."""
    from acerl.train.algorithm import _ActorStats, _aggregation, _loss

    overrides = ("families.dapo.clip_ratio_low=0.1", "families.dapo.loss_agg_mode=seq-mean-token-sum",
                 "families.dapo.kl_type=k1", "families.dapo.kl_coef=0.5")  # fmt: skip
    old = torch.zeros(1, 3)
    logprobs = torch.log(torch.tensor([[1.25, 0.5, 20.0]]))
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    ref, mask = logprobs - 0.1, torch.ones(1, 3)
    pg = -1.25 + 0.9 + 10.0
    for use_kl, expected in [("true", pg + 0.5 * 0.3), ("false", pg)]:
        settings = resolve(
            make_config(*overrides, f"families.dapo.use_kl_loss={use_kl}"), Run("tiny", "dapo", 0)
        )
        loss = _loss(settings, _ActorStats(), logprobs, old, adv, ref, mask, _aggregation(settings, mask))
        assert loss.item() == pytest.approx(expected, rel=1e-6), use_kl


def test_mini_batch_counts_for_loss_aggregation_by_hand():
    """verl's ``global_batch_info`` of a mini-batch: its response tokens, and its rows with at least one response
    token (an empty response does not count; a one-token response does)."""
    from acerl.train.algorithm import _aggregation

    settings = resolve(make_config(), Run("tiny", "grpo", 0))
    agg = _aggregation(
        settings, torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    )
    assert agg["batch_num_tokens"].item() == 3 and agg["global_batch_size"].item() == 2
    assert agg["loss_scale_factor"] == settings.hyper.max_response_length


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_each_optimizer_step_logs_only_its_own_mini_batch_losses(tiny_root: Path, monkeypatch):
    """Two mini-batches (4 groups, 2 per mini-batch), the optimizer step a no-op: the policy stays the reference,
    so each mini-batch's KL loss is 0 and so is their logged mean. A loss carried from one optimizer step into
    the next (the accumulators not reset to 0) would show in the second mini-batch and in the mean."""
    run = Run("tiny", "grpo", 0)
    settings = resolve(make_config(), run)
    assert settings.kl_loss_coef > 0
    state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
    steps: list[int] = []
    monkeypatch.setattr(state.optimizer, "step", lambda *a, **k: steps.append(1))
    metrics = train_step(state, settings, data, DigitVerifier())
    assert metrics["train/groups"] == 4 and len(steps) == 2  # two mini-batches, two optimizer steps
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)


def test_confidence_metrics_of_an_estimator_without_confidences_leave_out_correct_rollouts():
    """GRPO/DAPO log ACE's statistics as ACE with its defaults would measure them: over the rollouts it would
    amplify, negative *and incorrect*. A correct rollout whose overlong penalty puts it below its group's mean
    (DAPO) has a negative advantage but is not an error. One group, rewards 1, 1, 0.2 (correct, overlong) and
    -1 (incorrect): the negative rollouts are the last two, the amplified one only the last, with
    ``c = (0 - 1) / 1 = -1`` (the correct one has ``c = +2``)."""
    from acerl.algos.advantages import grpo_estimator
    from acerl.train.algorithm import _confidence_metrics

    out = grpo_estimator(torch.tensor([1.0, 1.0, 0.2, -1.0]), torch.zeros(4, dtype=torch.long))
    assert out.negative.tolist() == [False, False, True, True] and out.confidence is None
    old = torch.tensor([[0.0], [0.0], [0.0], [-1.0]])
    ref = torch.tensor([[0.0], [0.0], [-2.0], [0.0]])
    correct = torch.tensor([True, True, True, False])
    metrics = _confidence_metrics(out, old, ref, torch.ones(4, 1), correct)
    assert metrics == {
        "ace/negative_frac": 0.5,
        "ace/confidence_mean_neg": -1.0,
        "ace/overconfident_frac_neg": 0.0,
        "ace/multiplier_mean_neg": 1.0,
        "ace/multiplier_max": 1.0,
    }


def test_actor_stats_average_per_optimizer_step_and_entropy_per_response_token():
    """``actor/pg_loss`` (and the other per-step sums) is the mean over optimizer steps; ``actor/entropy`` the
    mean over the response tokens of every micro-batch (padding excluded), 0 when there were none."""
    from acerl.train.algorithm import _ActorStats

    stats = _ActorStats()
    stats.sums["actor/pg_loss"] += [1.0, 3.0]
    stats.add_entropy(torch.tensor([[1.0, 2.0, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]]))
    stats.add_entropy(torch.tensor([[3.0, 7.0]]), torch.tensor([[1.0, 0.0]]))
    stats.add_entropy(None, torch.ones(1, 2))  # a later epoch: no entropy
    assert stats.metrics() == {"actor/pg_loss": 2.0, "actor/entropy": 2.0}
    one = _ActorStats()
    one.add_entropy(torch.tensor([[0.5]]), torch.ones(1, 1))
    assert one.metrics() == {"actor/entropy": 0.5}
    assert _ActorStats().metrics() == {"actor/entropy": 0.0}


def test_the_trainer_overrides_reach_the_run(tiny_root: Path, verifier: DigitVerifier):
    """``resolve``'s ``reference``, ``ref_ema_decay`` and ``old_logprobs`` arguments override the config: the
    written run spec (the run's cache identity) carries them, in canonical JSON."""
    cfg = make_config("models.tiny.train.total_steps=1")
    run = Run("tiny", "grpo", 2)
    overrides = {"reference": "ema", "ref_ema_decay": 0.25, "old_logprobs": "rollout"}
    train_run(resolve(cfg, run, **overrides), tiny_root, verifier=verifier, progress=False)
    text = paths.run_spec_file(tiny_root, run).read_text()
    spec = json.loads(text)
    assert spec["trainer"] == overrides
    # One canonical form (sorted keys at every level, two-space indent, a final newline): the file is a tracked
    # output, so its bytes must not follow the order in which the code happens to build the spec.
    assert text == json.dumps(spec, indent=2, sort_keys=True) + "\n"
    assert list(spec) == sorted(spec) and list(spec["trainer"]) == sorted(spec["trainer"]) != list(overrides)


def test_a_run_without_a_verifier_grades_with_the_configured_grader(tiny_root: Path, monkeypatch):
    """Without a ``verifier`` the run builds its grader from ``cfg.grading`` (the CLI's and the workflow's path):
    the real math-verify pool, with the configured hard limit and workers, closed when the run ends."""
    import acerl.grading
    from acerl.grading import Grader

    built: list[Grader] = []

    class Recorded(Grader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(acerl.grading, "Grader", Recorded)
    cfg = make_config("models.tiny.train.total_steps=1", "grading.timeout_s=7", "grading.workers=1")
    run = Run("tiny", "grpo", 0)
    train_run(resolve(cfg, run), tiny_root, progress=False)
    (grader,) = built
    assert (grader.timeout_s, grader._pool.n_workers) == (7.0, 1)
    assert grader._pool.worker_pids() == []  # closed with the run
    (record,) = read_jsonl_records(paths.train_metrics_file(tiny_root, run))
    assert 0.0 <= record["train/pass_rate"] <= 1.0


def test_the_training_set_needs_a_problem_and_an_answer_per_row_and_nothing_else(tiny_root: Path):
    """The trainer reads ``problem`` and ``answer`` of each training row: a row without an ``id`` (which only the
    evaluation needs) trains; a row without an answer is a one-line error naming the file, the line and the key."""
    from acerl.pipeline.io import DataFormatError, write_jsonl

    train_file = paths.data_file(tiny_root, "train")
    rows = read_jsonl_records(train_file)
    run = Run("tiny", "grpo", 0)
    settings = resolve(make_config(), run)
    write_jsonl(train_file, [{k: v for k, v in r.items() if k != "id"} for r in rows])
    _, data = init_state(tiny_root, run, settings, torch.device("cpu"))
    assert len(data) == len(rows)
    write_jsonl(train_file, [rows[0], {"id": "x", "problem": "1+1"}])
    with pytest.raises(DataFormatError, match=rf"^{train_file}:2: missing required key\(s\) 'answer' "):
        init_state(tiny_root, run, settings, torch.device("cpu"))


def test_the_prompt_streams_are_seeded_from_the_run_seed(tiny_root: Path):
    """The step's prompts come from a stream seeded with the run seed (runs of two methods with one seed see the
    same prompts) and dynamic sampling's extra batches from a second stream with its own derived seed."""
    from acerl.pipeline.seeds import FILL_SEED_STREAM, derive_seed
    from acerl.train.data import PromptStream

    run = Run("tiny", "dapo", 1)  # seed 1: derive_seed(stream, 0) == derive_seed(stream)
    state, data = init_state(tiny_root, run, resolve(make_config(), run), torch.device("cpu"))
    main, fill = (
        PromptStream(len(data), seed=1),
        PromptStream(len(data), seed=derive_seed(FILL_SEED_STREAM, 1)),
    )
    assert (state.stream.seed, state.fill_stream.seed) == (main.seed, fill.seed)
    drawn = state.stream.next(8), state.fill_stream.next(8)
    assert drawn == (main.next(8), fill.next(8)) and drawn[0] != drawn[1]


def test_a_mini_batch_that_does_not_divide_the_step_is_warned_about(caplog: pytest.LogCaptureFixture):
    """``prompts_per_step`` not a multiple of ``mini_batch_size``: allowed (the last optimizer step of each
    training step sees fewer prompts), with one warning naming both keys; none when it divides."""
    from acerl.train.run import _warn_short_mini_batch

    run = Run("tiny", "grpo", 0)
    with caplog.at_level(logging.WARNING, logger="acerl.train.run"):
        _warn_short_mini_batch(resolve(make_config(), run))  # 4 prompts, mini-batches of 2
        assert caplog.records == []
        _warn_short_mini_batch(resolve(make_config("models.tiny.train.mini_batch_size=3"), run))
    assert [r.getMessage() for r in caplog.records] == [
        "models.tiny.train.prompts_per_step (4) is not a multiple of mini_batch_size (3): "
        "the last mini-batch of each step is smaller"
    ]
