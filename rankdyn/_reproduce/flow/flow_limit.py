r"""Target ``flow-limit``: the discrete skip + post-LN map with step $h$ converges to the flow as $h \to 0$.

The step-$h$ map $X \leftarrow \mathrm{LN}(X + h\,A(X) X V^\top)$ is rankdyn's layer with a skip
connection, post-LN, and the attention branch scaled by $h$ (`rankdyn.SelfAttentionLayer` with
``skip=True``, ``placement="post"``, $W_V = h V^\top$, $W_Q = \beta Q^\top$, $W_K = K^\top$,
$d_{QK} = 1$). Since $\mathrm{LN}(x + h y) = x + h P_x y + O(h^2)$, it is a consistent one-step
method for the SA flow, so the error at a fixed time $T$ should be $O(h)$. We measure
$\max |X_h(T) - X(T)|$ against a Tsit5 reference at tolerance $10^{-12}$, for two settings
(random $Q, K, V$ with the causal and the complete mask), and fit the order on the three
smallest $h$ (the asymptotic regime).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .._target import Description, Measured, Rendered
from .._verdict import Check, check
from ._flow_runs import unit_starts

NAME = "flow-limit"
CLAIM = (
    "The discrete skip + post-LN map X <- LN(X + h A(X) X V) is a first-order time step of the "
    "self-attention flow: its error at fixed T tends to 0 as h -> 0, with order 1."
)
N, D, BETA, T = 8, 3, 1.0, 2.0
#: Accepted range of the fitted order.
ORDER_RANGE = (0.85, 1.15)


def sizes(quick: bool) -> dict:
    if quick:
        return dict(hs=[0.1, 0.05, 0.025, 0.0125], batch=4)
    return dict(hs=[0.2, 0.1, 0.05, 0.025, 0.0125, 0.00625, 0.003125], batch=32)


@jax.jit
def _discrete(mask, q, k, v, x0, h, steps):
    """``steps`` applications of the layer with step ``h`` (a traced count: one compilation)."""
    from ..._model._layer import SelfAttentionLayer

    layer = SelfAttentionLayer(mask, BETA * q.T, k.T, h * v.T, dqk=1.0, skip=True, placement="post")
    step = lambda _, x: jax.vmap(lambda y: layer(y)[0])(x)
    return jax.lax.fori_loop(0, steps, step, x0)


@dataclasses.dataclass(frozen=True)
class SettingErrors(Measured):
    """One setting (mask and random Q, K, V): the error at T per step size and the fitted order."""

    errors: tuple[float, ...]
    order: float
    reference_steps_limit_hit: int = 0


@dataclasses.dataclass(frozen=True)
class FlowLimitMeasured(Measured):
    """The step sizes and, per setting name, its `SettingErrors`."""

    hs: tuple[float, ...]
    settings: dict[str, SettingErrors]


def compute(sz: dict, seed: int) -> FlowLimitMeasured:
    from ..._model._masks import causal_mask, complete_mask
    from ...flow import FlowField, solve_flow

    rng = np.random.default_rng(seed)
    x0 = unit_starts(seed, sz["batch"], N, D, salt=41)
    out = {}
    for name, mask in (("causal", causal_mask(N)), ("complete", complete_mask(N))):
        q, k, v = (np.eye(D) + 0.5 * rng.normal(size=(D, D)) for _ in range(3))
        field = FlowField(mask, D, "sa", q=q, k=k, v=v)
        ref = solve_flow(field, x0, T, beta=BETA, saves=2, rtol=1e-12, atol=1e-14, save_states=True)
        xr = np.asarray(ref.states[:, -1])
        errs = []
        for h in sz["hs"]:
            steps = int(round(T / h))
            xh = _discrete(jnp.asarray(mask), *(jnp.asarray(a) for a in (q, k, v, x0)), jnp.asarray(h), steps)
            errs.append(float(np.max(np.abs(np.asarray(xh) - xr))))
        # The order is an h -> 0 statement: fitted on the three smallest steps.
        slope = float(np.polyfit(np.log(sz["hs"][-3:]), np.log(errs[-3:]), 1)[0])
        out[name] = SettingErrors(tuple(errs), slope, int(ref.steps_limit_hit))
    return FlowLimitMeasured(tuple(sz["hs"]), out)


def checks(m: FlowLimitMeasured) -> list[Check]:
    """Strict checks of the measured numbers (pure: tested on synthetic results)."""
    out = []
    lo, hi = ORDER_RANGE
    for name, r in m.settings.items():
        e = np.asarray(r.errors)
        out.append(
            check(
                f"{name}: error decreases as h halves",
                bool(np.all(np.diff(e) < 0)),
                ", ".join(f"{v:.3g}" for v in e),
            )
        )
        out.append(
            check(f"{name}: fitted order in [{lo}, {hi}]", lo <= r.order <= hi, f"order {r.order:.3f}")
        )
    return out


def render(out: Path, m: FlowLimitMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """The error-vs-h figure (every setting checked) and the notes, from the numbers."""
    from ... import plotting

    plotting.plot_order(
        m.hs,
        {k: v.errors for k, v in m.settings.items()},
        {k: v.order for k, v in m.settings.items()},
        title=f"skip + post-LN map vs SA flow, random Q K V, T={T:g}",
        path=out / "flow_limit.png",
    )
    lo, hi = ORDER_RANGE
    inside = [k for k, v in m.settings.items() if lo <= v.order <= hi]
    notes = "Fitted orders: " + ", ".join(f"{k}: {v.order:.3f}" for k, v in m.settings.items()) + "."
    notes += f" {len(inside)} of {len(m.settings)} settings have an order in [{lo}, {hi}], " + (
        "as a first-order method should."
        if len(inside) == len(m.settings)
        else "so the first-order claim is not met."
    )
    return Rendered(["flow_limit.png"], notes)


def describe(m: FlowLimitMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(sz, n=N, d=D, beta=BETA, T=T, dtype="float64", reference="tsit5 rtol 1e-12 atol 1e-14")
    return Description(
        dict(setting, seed=seed, quick=quick),
        key_numbers={f"order ({k})": v.order for k, v in m.settings.items()},
    )
