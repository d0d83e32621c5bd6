"""Device placement of the local trainer, the HF sampler and the diagnostics, checked on a CPU machine.

Each runs under :class:`device_mixing.DeviceMixingMode` with the model on its stand-in device ``cpu:0``: an
op that combines a tensor on the model's device with one made on the host without a device fails here as it
would on a GPU (``Expected all tensors to be on the same device``). The bug this guards against: the rewards
and group ids of a step stayed on the host while the response mask was on the GPU, and every training job
crashed at its first update in ``AdvantageOutput.token_level``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.device_mixing import MODEL_DEVICE, DeviceMixingMode
from trainer_fixtures import DigitVerifier, make_config

from acerl.config import Run
from acerl.config.settings import resolve
from acerl.pipeline import paths
from acerl.train import train_run

DEVICE = str(MODEL_DEVICE)


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("grpo", ()),  # sequence-level advantages: the crash of the GPU run
        (
            "ace_dapo",
            (),
        ),  # token-level ACE advantages, dynamic sampling (re-packed batches), overlong shaping
        ("ace_grpo", ("models.tiny.train.old_logprobs=rollout",)),  # the sampler's log-probs as log pi_old
    ],
)
def test_training_steps_keep_every_tensor_on_the_model_device(
    tiny_root: Path, method: str, extra: tuple[str, ...]
) -> None:
    settings = resolve(make_config("models.tiny.train.total_steps=2", *extra), Run("tiny", method, 0))
    with DeviceMixingMode() as mode:
        final = train_run(settings, tiny_root, device=DEVICE, verifier=DigitVerifier(), progress=False)
    assert (final / "config.json").is_file()
    assert mode.checked > 1000  # the whole step ran under the mode


def test_sampler_and_diagnostics_keep_every_tensor_on_the_model_device(tiny_root: Path) -> None:
    from acerl.diagnostics.run import DiagnosticSettings, diagnose_checkpoint
    from acerl.generate import make_sampler

    base = paths.base_model_dir(tiny_root, "tiny")
    problems = [{"problem": "1+2=", "answer": "3"}, {"problem": "4+4=", "answer": "8"}]
    settings = DiagnosticSettings(
        rollouts_per_prompt=4,
        temperature=1.0,
        max_new_tokens=12,
        seed=0,
        run_seed=0,
        template="plain",
        prompt_ids=("a", "b"),
    )
    with DeviceMixingMode() as mode:
        diag = diagnose_checkpoint(
            0,
            base,
            base,
            problems,
            settings,
            DigitVerifier(),
            factory=lambda path: make_sampler("hf", path, device=DEVICE, batch_size=2),
        )
    assert diag.confidence.shape == (8,) and np.isfinite(diag.entropy_means).all()
    np.testing.assert_allclose(diag.confidence, 0.0, atol=1e-6)  # policy == reference: every c_i is 0
    assert mode.checked > 100


@pytest.mark.parametrize("amplify", ["negative_advantage", "incorrect"])
def test_ace_estimator_on_device_inputs_with_host_verdicts(amplify: str) -> None:
    """ACE's estimator with every batch tensor on the model's device: the exemption mask it builds on the host
    (``negative_advantage``) or the verdicts a caller hands it from the host (``incorrect``; verl's ``acc`` is
    read on the host) are moved to the advantages' device, not combined across devices."""
    import torch

    from acerl.algos.advantages import ADVANTAGE_ESTIMATORS

    with DeviceMixingMode() as mode:
        rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], device=DEVICE)
        group_ids = torch.tensor([0, 0, 1, 1], device=DEVICE)
        logprobs = torch.full((4, 3), -0.5, device=DEVICE)
        ref = torch.full((4, 3), -1.0, device=DEVICE)
        mask = torch.ones(4, 3, device=DEVICE)
        correct = torch.tensor([True, False, False, True])  # on the host
        for granularity in ("sequence", "token"):
            out = ADVANTAGE_ESTIMATORS.get("ace")(
                rewards, group_ids, logprobs, ref, mask, granularity=granularity, amplify=amplify,
                correct=correct,
            )  # fmt: skip
            assert mode.place(out.advantages) == "device" and mode.place(out.amplified) == "device"
            assert out.amplified.tolist() == [False, True, True, False]
    assert mode.checked > 10
