"""The memory facts of a MoE model take their MoE block's sizes from a MoE block, also when the
first MoE block is block 0 (no leading dense blocks)."""

import dataclasses

from gpuplan.sim.parallel.model_facts import model_facts, sac_saved_bytes
from gpuplan.workloads.presets import get_model


def test_a_moe_block_at_index_zero_sets_the_moe_sizes():
    cfg = dataclasses.replace(get_model("deepseek-v3"), name="moe-first", n_dense_layers=0,
                              moe_layer_freq=2)  # fmt: skip
    assert cfg.is_moe_layer(0) and not cfg.is_moe_layer(1)
    facts = model_facts(cfg)
    assert facts.sac_rep == (sac_saved_bytes(cfg, 1)[0], sac_saved_bytes(cfg, 0)[0])
    assert facts.sac_split == (sac_saved_bytes(cfg, 1)[1], sac_saved_bytes(cfg, 0)[1])
    assert sac_saved_bytes(cfg, 0) != sac_saved_bytes(cfg, 1)  # the case the test is about
