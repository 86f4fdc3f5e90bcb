r"""Lyapunov spectra of the layer map: tangent space of the product of spheres, or $\mathbb R^{nd}$.

With post-LN onto a sphere (`rankdyn.SphereNorm`, the paper's eq. 3), or nGPT (whose layer ends
with the sphere norm, `rankdyn._model._placements`), the state space is
$(\mathbb S^{d-1})^n$, of dimension $n(d-1)$: after every layer each token's tangent vector is
projected, $v_i \leftarrow (I - u_i u_i^\top) v_i$ with $u_i = x_i / |x_i|$, so the $n$ radial
directions (which LN contracts to zero in one step, exponent $-\infty$) never appear. Every other
layer (pre-LN, no LN, RMS or affine LayerNorm, trained BERT, GPT-2, MPNet or Llama-family
stacks) uses the full space $\mathbb R^{nd}$. For per-layer weights (a non-autonomous map, cycled
with ``cycle``) the exponents are those of the product $DF_{T-1} \cdots DF_0$ of the layers'
Jacobians along the trajectory.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

from .._arguments import check_count
from .._errors import UsageError
from .._flow._field import tangent_project
from .._model._layer import SelfAttentionLayer
from .._model._norms import SphereNorm
from .._model._placements import on_spheres
from .._model._tokens import TokenSampler
from .._run._input_checks import check_logits, check_options, strong, validate_run
from ._budget import check_tangent_memory, default_chunk
from ._plan import check_counts, make_plan
from ._qr import assemble, check_key, gaussian_start, jvp_columns, run_qr
from ._result import LyapunovResult

__all__ = ["lyapunov_spectrum", "uses_tangent_space", "spectrum_dim"]


def uses_tangent_space(layer: SelfAttentionLayer) -> bool:
    """True when the layer's outputs lie on a product of spheres: post or ngpt placement (both end
    with the norm), every normalisation a `SphereNorm` (no per-sub-block affine norms). Mix-LN
    leaves the spheres at its pre-LN layers, peri and lns never reach them: the full space."""
    w = layer.weights
    return (
        on_spheres(layer)
        and isinstance(layer.norm, SphereNorm)
        and all(nm is None or isinstance(nm, SphereNorm) for nm in (w.norm_attn, w.norm_mlp))
    )


def spectrum_dim(layer: SelfAttentionLayer) -> int:
    """The dimension of the layer's state space: $n(d-1)$ on the spheres, else $nd$."""
    n, d = layer.num_tokens, layer.dim
    return n * (d - 1) if uses_tangent_space(layer) else n * d


def _project_columns(x, q):
    """Project every column of ``q`` ``(n*d, k)`` onto the tangent space at ``x`` ``(n, d)``."""
    n, d = x.shape
    # tangent_project works row by row: vmap it over the k columns (axis 2 of (n, d, k)).
    v = jax.vmap(tangent_project, in_axes=(None, 2), out_axes=2)(x, q.reshape(n, d, -1))
    return v.reshape(n * d, -1)


class _LayerStep(eqx.Module):
    r"""One layer on state and tangent vectors; projected onto the spheres' tangent space before
    each QR factorisation.

    The last operation of a post sphere-LN layer is $z \mapsto r z / |z|$, whose Jacobian
    $r (I - \hat z \hat z^\top) / |z|$ maps every vector into the tangent space at the output:
    between two factorisations the tangent vectors leave it only by rounding (O(u), as any
    rounding of the jvp), so projecting once per interval is enough.
    """

    layer: SelfAttentionLayer
    tangent: bool = eqx.field(static=True)

    def __call__(self, x, q, t):
        return jvp_columns(lambda z: self.layer(z, t)[0], x, q)

    def project(self, x, y):
        return _project_columns(x, y) if self.tangent else y


class _LayerStart(eqx.Module):
    k: int = eqx.field(static=True)
    tangent: bool = eqx.field(static=True)

    def __call__(self, x, key):
        proj = (lambda g: _project_columns(x, g)) if self.tangent else None
        return gaussian_start(key, x.size, self.k, x.dtype, proj)


def lyapunov_spectrum(
    layer: SelfAttentionLayer,
    x0,
    num_layers: int,
    *,
    k: int | None = None,
    discard: int = 0,
    qr_every: int | str = "auto",
    key,
    chunk: int | None = None,
    devices=None,
    progress: bool = False,
) -> LyapunovResult:
    r"""Lyapunov spectrum of the layer map along trajectories from ``x0`` (QR / Benettin method).

    $X^{(t+1)} = F_t(X^{(t)})$ (eqs. 2-3); ``k`` tangent vectors are propagated by the
    linearisation of one layer (``jax.linearize``, matrix-free), projected onto
    $T(\mathbb S^{d-1})^n$ with post sphere-LN, and re-orthonormalised every ``qr_every`` layers:
    $\lambda_i = \frac{1}{T - T_0}\sum \log |R_{ii}|$ (natural log per layer; `rankdyn.lyapunov`).
    At a stable fixed point they are $\log|\mu_i|$ of its multipliers (`rankdyn.stability`).

    Arguments:
        layer: a `SelfAttentionLayer` (shared, per-layer or cycled weights; no dropout).
        x0: ``(n, d)`` or ``(*batch, n, d)`` initial tokens; on the spheres their rows are first
            scaled to the norm's radius (the state space).
        num_layers: depth $T$ (a multiple of an integer ``qr_every``).
        k: exponents computed, 1 <= k <= `spectrum_dim` (default: all).
        discard: layers $T_0$ before the averaging starts (< ``num_layers``; a multiple of an
            integer ``qr_every``).
        qr_every: layers between QR factorisations (an integer >= 1), or ``"auto"``: 1 to 8,
            chosen from the spread of the exponents as the run goes (`rankdyn._lyapunov._plan`;
            ``small``'s first 64 exponents get 4, a full spectrum 1).
        key: PRNG key of the initial tangent vectors (required; ``jax.random.key(0)`` or a
            legacy ``PRNGKey``).
        chunk: trajectories advanced together (default: ~256 MiB of tangent vectors on CPU,
            and with ``devices`` at most the batch over the device count).
        devices: as `rankdyn.simulate`: whole chunks run side by side, one per device, so a
            given ``chunk`` gives the same bits on any device count.
        progress: show a progress bar.

    Returns:
        A `LyapunovResult` (``space`` ``"tangent"`` or ``"full"``, ``unit="per layer"``).

    Raises:
        UsageError: as `rankdyn.simulate` for the layer, ``x0`` and ``devices``; a dropout layer;
            ``k`` outside [1, dim], a zero token under the sphere LayerNorm,
            ``discard >= num_layers``, ``qr_every`` neither ``"auto"``
            nor >= 1, or depths that are not multiples of it.
    """
    key = check_key(key, "lyapunov_spectrum")
    if isinstance(x0, TokenSampler):
        raise UsageError("x0 must be an array of tokens here; draw one with rankdyn.initial_tokens.")
    x0 = validate_run(layer, x0, num_layers if isinstance(num_layers, (int, np.integer)) else 0, 1)
    check_options(1e-6, devices)
    if layer.has_dropout:
        raise UsageError(
            "the layer has dropout, a random map with no Lyapunov spectrum here; build it with dropout 0."
        )
    tangent = uses_tangent_space(layer)
    dim = spectrum_dim(layer)
    k = dim if k is None else k
    check_counts(num_layers, k, dim, discard, qr_every, what="num_layers")
    check_logits(layer, x0, np.dtype(x0.dtype))
    if isinstance(layer.norm, SphereNorm) and not isinstance(x0, jax.core.Tracer):
        # x / |x| is undefined at a zero token: all-zero starts gave finite exponents, unflagged.
        zero = np.argwhere(np.all(np.asarray(x0).reshape((-1,) + x0.shape[-2:]) == 0, axis=-1))
        if zero.size:
            raise UsageError(
                f"x0 has {len(zero)} zero token(s) (first: trajectory {zero[0][0]}, token {zero[0][1]}): "
                "the sphere LayerNorm x/|x| is undefined there, so there is no spectrum; pass nonzero tokens."
            )
    layer, x0 = (strong(v) for v in (layer, x0))
    n, d = layer.num_tokens, layer.dim
    batch_shape = x0.shape[:-2]
    flat = x0.reshape((-1, n, d))
    if tangent:
        flat = jax.vmap(lambda z: layer.norm(z)[0])(flat)
    plan = make_plan(num_layers, discard, qr_every)
    chunk = (
        default_chunk(flat.shape[0], n * d, k, flat.dtype.itemsize, devices)
        if chunk is None
        else check_count(chunk, "chunk")
    )
    scores = layer.num_heads * n * n  # the attention's score-sized tangents (_budget.SCORE_COPIES)
    check_tangent_memory(
        flat.shape[0], chunk, n * d, k, flat.dtype.itemsize, len(plan.records), devices, scores=scores
    )
    exps, flags, acc = run_qr(
        _LayerStep(layer, tangent),
        _LayerStart(k, tangent),
        flat,
        k,
        plan,
        key=key,
        chunk=chunk,
        devices=devices,
        progress=progress,
    )
    return assemble(
        exps,
        flags,
        acc,
        batch_shape,
        plan,
        space="tangent" if tangent else "full",
        dim=dim,
        unit="per layer",
        num_steps=num_layers,
        discard=discard,
    )
