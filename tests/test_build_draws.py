"""`build_layer` draws every weight in one compiled program (`_draw_weights`): the same bits as
the weight families called eagerly one by one, the way the layer was built before.

Inside one program XLA may fuse a product into the normal draw or fold a division into its
producer and round differently (1 entry in 4 by one ulp for a gaussian with the default
1/sqrt(d), d = 48, in float32 and float64): the optimization barriers in `gaussian` and
`spectral_normalized` prevent it, and without them this test fails.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from rankdyn import make_layer
from rankdyn._model._build import _draw_weights
from rankdyn._model._weights import bert_uniform, query_key_matrices, value_matrix


def _eager(key, *, d, heads, qk, value, dtype, w=2.0, qk_std=None, value_std=None, w_o=False, mlp=None):
    """The weights drawn op by op, each family function called eagerly (`build_layer` before)."""
    dh = d // heads
    kq, kv, ko, km = jr.split(key, 4)
    qks = [query_key_matrices(kk, qk, d, dh, std=qk_std, dtype=dtype) for kk in jr.split(kq, heads)]
    w_v = value_matrix(kv, value, d, w=w, std=value_std, dtype=dtype)
    w_v = w_v[None] if heads == 1 else jnp.moveaxis(w_v.reshape(d, heads, dh), 1, 0)
    out = [jnp.stack([q for q, _ in qks]), jnp.stack([k for _, k in qks]), w_v]
    if w_o:
        out.append(bert_uniform(ko, (d, d), dtype))
    if mlp is not None:
        k1, k2 = jr.split(km)
        out += [bert_uniform(k1, (d, mlp * d), dtype), bert_uniform(k2, (mlp * d, d), dtype)]
    return out


def _weights(layer):
    w = layer.weights
    out = [w.w_q, w.w_k, w.w_v] + ([w.w_o] if w.w_o is not None else [])
    return out + ([w.mlp.w1, w.mlp.w2] if w.mlp is not None else [])


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_one_program_draws_the_eager_bits():
    key = jr.key(3)
    # Gaussian W_V at the default std 1/sqrt(48) (inexact), two bert heads, W_O and an MLP; float32.
    kw = dict(d=48, heads=2, qk="bert", value="gaussian", dtype=jnp.float32)
    layer = make_layer(key, n=9, output_projection=True, mlp=True, mlp_ratio=2, **kw)
    ref = _eager(key, w_o=True, mlp=2, **kw)
    got = _weights(layer)
    assert len(got) == len(ref) == 6 and all(_same_bits(a, b) for a, b in zip(got, ref))
    # A per-layer stack (vmapped draws) of scaled W_V (gaussian / spectral norm) and gaussian
    # queries and keys with a given std; float64.
    kw = dict(d=6, heads=1, qk="gaussian", value="scaled", dtype=jnp.float64, qk_std=0.7)
    layer = make_layer(key, n=9, num_layers=3, **kw)
    ref = jax.vmap(lambda k: _eager(k, **kw))(jr.split(key, 3))
    got = _weights(layer)
    assert got[0].shape == (3, 1, 6, 6) and all(_same_bits(a, b) for a, b in zip(got, ref))


def test_draw_program_is_compiled_once_per_shape():
    # A module-level jit keyed by the configuration's shape, not a closure per call: layers with
    # other keys and other values of w reuse the one program (three compiles if each call traced).
    before = _draw_weights._cache_size()
    for i in range(3):
        make_layer(jr.key(i), n=5, d=3, value="bidiagonal", w=1.0 + i, dtype=jnp.float64)
    assert _draw_weights._cache_size() - before <= 1
