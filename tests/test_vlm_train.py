"""A vision-language model's training step: the language model's, plus the encoder's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.whole_model import model_breakdown
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")
BASE = {"micro_batch": 1, "seq": 512, "recompute": "full"}


def _train(model, **params):
    return model_breakdown("train_step", H200, EFF, model, {**BASE, **params}, stack="fsdp2")


def test_a_vlm_trained_without_images_is_its_language_model():
    cfg = get_model("qwen2-vl-7b")
    assert _train(cfg).total_s == _train(replace(cfg, vision_tower=None)).total_s


def test_inline_images_train_the_longer_sequence_plus_the_encoder():
    cfg = get_model("qwen2-vl-7b")
    got = _train(cfg, images=1, image_size="448x448")
    lm = _train(cfg, seq=512 + 256)  # the 256 image tokens join the sequence
    vision = [i for i in got.items if i.op.startswith("vision.")]
    assert {i.phase for i in vision} == {"fwd", "bwd", "optimizer"}
    assert got.total_s > lm.total_s + sum(i.time_s for i in vision if i.phase == "fwd")
    assert got.memory_bytes["vision_gradients"] > 0


def test_a_frozen_encoder_runs_forward_only_and_keeps_no_state():
    cfg = get_model("qwen2-vl-7b")
    trained = _train(cfg, images=2, image_size="448x448")
    frozen = _train(cfg, images=2, image_size="448x448", freeze_vision=True)
    assert not [i for i in frozen.items if i.op.startswith("vision.") and i.phase == "bwd"]
    assert frozen.memory_bytes["vision_gradients"] == 0
    assert frozen.memory_bytes["vision_weights"] == trained.memory_bytes["vision_weights"]
    assert frozen.total_s < trained.total_s


def test_cross_attention_blocks_train_even_with_a_frozen_encoder():
    frozen = _train("llama3.2-11b-vision", images=1, image_size="560x560", freeze_vision=True)
    bwd = {i.op for i in frozen.items if i.phase == "bwd" and i.op.startswith("cross_attn.")}
    assert "cross_attn.q_proj.dgrad" in bwd and frozen.memory_bytes["vision_gradients"] > 0


def test_freeze_vision_without_images_is_an_error():
    with pytest.raises(GpuplanError, match="freeze_vision"):
        _train("qwen2-vl-7b", freeze_vision=True)


def test_a_vision_encoder_train_step_is_a_one_line_error_not_a_zero_division(capsys):
    assert main(["estimate", "train-step", "--model", "vit-l-14", "--gpu", "h200"]) != 0
    err = capsys.readouterr().err
    assert "vit-l-14 is a vision encoder" in err and "Traceback" not in err


def _cli_json(capsys, *argv):
    import json

    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_train_on_one_gpu_with_images_is_estimate_train_step(capsys):
    case = ["--model", "qwen2-vl-7b", "--gpu", "h200", "--stack", "fsdp2", "--seq", "512",
            "--images", "1", "--json"]
    train = _cli_json(capsys, "train", "--gpus", "1", "--global-batch", "1", *case)
    step = _cli_json(capsys, "estimate", "train-step", *case)
    assert train["step_time_s"] == step["time_s"]


def test_train_with_images_on_several_gpus_is_a_one_line_error(capsys):
    assert main(["train", "--model", "qwen2-vl-7b", "--gpus", "8", "--gpu", "h200",
                 "--images", "1"]) != 0
    assert "priced on one GPU" in capsys.readouterr().err
