"""A small zoo of test cases (n <= 8, d <= 8) shared by the test modules."""

import numpy as np

import rankdyn as rd

PAPER_MASKS = ("complete", "causal", "window", "window-uni")


def small_layer(key, *, n=6, d=6, mask="causal", placement="post", value="orthogonal", qk="gaussian", **kw):
    return rd.make_layer(key, n=n, d=d, mask=mask, placement=placement, value=value, qk=qk, **kw)


def python_loop(layer, x0, num_layers):
    """Reference: iterate the layer in a plain Python loop (what peers write)."""
    xs = [x0]
    for t in range(num_layers):
        xs.append(layer(xs[-1], t)[0])
    return np.stack([np.asarray(x) for x in xs])


def sphere_tokens(key, n, d, batch=None):
    return rd.initial_tokens(key, "sphere", n, d, batch=batch)


