"""`rebuild` (the reproduce targets' switch of placement, norm, skip...) keeps every constructor
argument of the layer it copies, on both attention paths."""

import jax.numpy as jnp
import jax.random as jr
import pytest

from rankdyn._model._layer import SelfAttentionLayer
from rankdyn._model._mask_structure import MaskStructure as MS
from rankdyn._reproduce._runs import rebuild


@pytest.mark.slow  # two layers compiled
def test_rebuild_keeps_the_path_and_its_block_and_changes_what_it_is_asked():
    w = jr.normal(jr.key(0), (4, 4))
    dense = SelfAttentionLayer(jnp.tril(jnp.ones((8, 8), bool)), w, w, w, attention="dense")
    blocked = SelfAttentionLayer(MS.causal(8), w, w, w, attention="blocked", block_size=4)
    x = jr.normal(jr.key(1), (8, 4))
    for layer in (dense, blocked):
        same = rebuild(layer)
        assert same.attention_path == layer.attention_path
        assert same.block_size == layer.block_size
        assert jnp.array_equal(same(x)[0], layer(x)[0])
        assert rebuild(layer, placement="pre").placement == "pre"
