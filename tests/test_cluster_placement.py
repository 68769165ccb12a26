"""Placement policies on a small cluster: whole nodes, leaf groups, packing, GPU-granular splits."""

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.cluster.placement import place

GPN, NPL = 8, 4  # 8 GPUs per node, 4 nodes per leaf group


def state(free_per_node):
    free = np.array(free_per_node)
    return free, np.ones(len(free), bool)


def test_topology_keeps_a_multi_node_job_in_one_leaf_group_on_whole_nodes():
    # leaf 0 has 2 whole free nodes, leaf 1 has 3: a 24-GPU job fits only in leaf 1
    free, usable = state([8, 8, 0, 4, 8, 8, 8, 0])
    alloc = place("topology", 24, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL)
    assert alloc.nodes == (4, 5, 6) and alloc.counts == (8, 8, 8)
    assert alloc.shape(NPL).leaf_groups == 1 and alloc.shape(NPL).aligned == 8


def test_topology_packs_a_small_job_on_the_fullest_node_with_room():
    free, usable = state([8, 3, 5, 8])
    alloc = place("topology", 3, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL)
    assert alloc.nodes == (1,)


def test_first_fit_ignores_leaf_groups_and_random_is_seeded():
    free, usable = state([8, 8, 0, 0, 8, 8, 8, 8])
    alloc = place("first-fit", 24, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL)
    assert alloc.nodes == (0, 1, 4) and alloc.shape(NPL).leaf_groups == 2
    a = place("random", 16, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL,
              rng=np.random.default_rng(3))  # fmt: skip
    b = place("random", 16, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL,
              rng=np.random.default_rng(3))  # fmt: skip
    assert a == b


def test_gpu_first_fit_splits_a_tensor_parallel_group_over_nodes():
    free, usable = state([3, 8, 5, 8])
    alloc = place("gpu-first-fit", 16, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL)
    assert alloc.counts == (3, 8, 5) and alloc.shape(NPL).aligned == 1


def test_nothing_is_placed_on_unusable_nodes_or_when_it_does_not_fit():
    free = np.array([8, 8, 8, 8])
    usable = np.array([True, False, False, True])
    assert place("topology", 24, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL) is None
    alloc = place("topology", 16, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL)
    assert set(alloc.nodes) == {0, 3}


def test_an_unknown_placement_is_a_clear_error():
    free, usable = state([8])
    with pytest.raises(GpuplanError, match="placement='best'"):
        place("best", 1, free, usable, gpus_per_node=GPN, nodes_per_leaf=NPL)
