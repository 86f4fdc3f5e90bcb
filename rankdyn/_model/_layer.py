r"""One layer of masked self-attention with normalisation (paper eqs. 1-3; docs/theory.md#the-model).

The paper's layer (single head, no skip, no MLP) with post-LN is

$$X^{(t+1)} = \mathrm{LN}\big(A^{(t)} X^{(t)} W_V^{(t)}\big),\qquad
A^{(t)} = \mathrm{softmax}_{\mathcal G}\big(X^{(t)} W_Q (X^{(t)} W_K)^\top / \sqrt{d_{QK}}\big),$$

eq. (3); ``placement="none"`` gives eq. (2) and ``placement="pre"`` gives
$X^{(t+1)} = A^{(t)} \mathrm{LN}(X^{(t)}) W_V^{(t)}$ (§4.2). Multi-head attention with an output
projection, a skip connection and an MLP block are opt-in switches for the Fig. 2/6 ablations.
Biases on $Q, K, V, O$, one normalisation per sub-block and layer, and a per-layer stack cycled
beyond its depth serve trained checkpoints (`rankdyn.checkpoints`, docs/theory.md#trained-checkpoints);
rotary embeddings on $Q, K$ and a logit bias $R \mathrel{+}= B$ serve Llama and MPNet (`._positions`).

Dropout follows BERT in train mode: ``attn_dropout`` (``attention_probs_dropout_prob``) zeroes
entries of $A$ after the softmax, ``hidden_dropout`` (``hidden_dropout_prob``) zeroes entries of
the block outputs (attention output after $W_O$, MLP output) before the skip and the norm; kept
entries are scaled by $1/(1-p)$. A token whose every attention weight is dropped gets a zero row,
which LN keeps at zero (docs/theory.md#experiments).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from .._errors import UsageError
from ._attention import (
    PRECISIONS as PRECISIONS,
    AbstractAttention,
    BlockedAttention,
    DenseAttention,
    drop,
)
from ._blocked import BLOCK_SIZE, choose_block_size, layer_mask, masked_softmax as masked_softmax
from ._mask_structure import MaskStructure
from ._masks import check_fixed_attention
from ._mlp import GatedMLPWeights, MLPWeights
from ._names import PLACEMENTS as PLACEMENTS, default_dqk
from ._norms import AbstractNorm, SphereNorm, check_ngpt_norms
from ._placements import AbstractPlacement, LayerParts, make_placement
from ._positions import Rotary, check_positions
from ._products import _fold_qk as _fold_qk  # benchmarks/ and tests read the fold rule from here

__all__ = [
    "SelfAttentionLayer",
    "AttentionWeights",
    "MLPWeights",
    "LayerAux",
    "PLACEMENTS",
    "PRECISIONS",
    "default_dqk",
    "masked_softmax",
]


class AttentionWeights(eqx.Module):
    """The trainable arrays of a layer: per head ``w_q, w_k (heads, d, dk)``, ``w_v (heads, d, dv)``,
    optional ``w_o (heads * dv, d)`` and `MLPWeights`; all with an optional leading layer axis.

    Trained checkpoints add biases ``b_q, b_k (heads, dk)``, ``b_v (heads, dv)``, ``b_o (d,)`` and
    one normalisation per sub-block and layer (``norm_attn``, ``norm_mlp``: e.g. a `LayerNorm`
    whose gain and bias carry the layer axis); None means no bias and the layer's shared ``norm``.
    """

    w_q: Float[Array, "*layers heads d dk"]
    w_k: Float[Array, "*layers heads d dk"]
    w_v: Float[Array, "*layers heads d dv"]
    w_o: Float[Array, "*layers hdv d"] | None = None
    mlp: MLPWeights | GatedMLPWeights | None = None
    b_q: Float[Array, "*layers heads dk"] | None = None
    b_k: Float[Array, "*layers heads dk"] | None = None
    b_v: Float[Array, "*layers heads dv"] | None = None
    b_o: Float[Array, "*layers d"] | None = None
    norm_attn: AbstractNorm | None = None
    norm_mlp: AbstractNorm | None = None

    def at(self, t) -> "AttentionWeights":
        """The weights of depth ``t`` of a per-layer stack."""
        return jax.tree.map(lambda w: w[t], self)


class LayerAux(eqx.Module):
    """Per-layer diagnostics returned next to the new tokens.

    Attributes:
        eps_min: the smallest attention weight over mask edges (and heads): Theorem 1's epsilon.
        degenerate: True if a normalisation met a zero row in this layer.
    """

    eps_min: Float[Array, ""]
    degenerate: Bool[Array, ""]


class SelfAttentionLayer(eqx.Module):
    r"""Masked self-attention layer with normalisation; maps one ``(n, d)`` token matrix.

    Weights are stored with a head axis, and optionally a leading layer axis for weights that
    differ per layer (``num_layers`` is then that length, else ``None`` for shared weights).
    Temperatures and weights are arrays, so sweeping them (``jax.vmap`` or new values) never
    recompiles; only ``placement``, head count, switches and precision are static.

    Arguments:
        mask: boolean ``(n, n)``, ``M[i, j]`` = token i may attend to token j (diagonal True).
        w_q, w_k: ``(d, d_qk)``, ``(heads, d, d_qk)`` or ``(layers, heads, d, d_qk)``.
        w_v: ``(d, d_v)``, ``(heads, d, d_v)`` or ``(layers, heads, d, d_v)``. With one head and
            no ``w_o`` it must be square.
        dqk: the temperature $d_{QK}$ in $\sqrt{d_{QK}}$ (default: the key width). Must be > 0.
        norm: an `AbstractNorm`; default the paper's `SphereNorm`.
        placement: ``"none"`` (eq. 2), ``"post"`` (eq. 3), ``"pre"``, or ``"peri"``, ``"mix"``,
            ``"ngpt"``, ``"lns"`` (`rankdyn._model._placements`; peri, ngpt, lns imply ``skip``).
        mix_layers: ``"mix"`` only: post-LN for depths ``t < mix_layers``, pre-LN after.
        ngpt_alpha: ``"ngpt"`` only: the step $\alpha \in (0, 1]$ (a scalar array: sweepable).
        qk_norm: RMS-normalise queries and keys per head, no gain ($|q| = \sqrt{d_{QK}}$), before
            rotary embeddings and the temperature.
        w_o: optional output projection ``(heads * d_v, d)`` (or with a leading layer axis).
        mlp: optional `MLPWeights` (shapes with the same leading layer axis as the other weights).
        skip: residual connections ``X + SA(X)`` (and ``+ MLP``); post-LN normalises after the skip.
        attn_dropout: dropout rate on the attention probabilities $A$ (BERT's
            ``attention_probs_dropout_prob``); in [0, 1), needs a key when > 0.
        hidden_dropout: dropout rate on the block outputs (attention after $W_O$, MLP) before the
            skip and the norm (BERT's ``hidden_dropout_prob``); in [0, 1), needs a key when > 0.
        attention_from_normalized: pre-LN only: compute $A$ from $\mathrm{LN}(X)$ (default) or $X$.
        fixed_attention: optional ``(n, n)`` row-stochastic matrix used instead of softmax scores
            (e.g. uniform causal attention of the paper's constructions).
        precision: matmul precision, ``"highest"`` by default (GPU float32 otherwise uses TF32).
        b_q, b_k, b_v: optional biases ``(heads, d_qk)``, ``(heads, d_v)`` added to
            $X W_Q$, $X W_K$, $X W_V$ (with the leading layer axis of the weights, if any).
        b_o: optional bias ``(d,)`` added after $W_O$ (needs ``w_o``).
        norm_attn, norm_mlp: optional per-layer normalisations of the attention and the MLP
            sub-block (their arrays carry the layer axis of the weights); default ``norm`` for both.
        cycle: with per-layer weights, depth ``t`` uses the weights of layer ``t mod num_layers``
            (a trained stack iterated beyond its depth); without it a deeper run is refused.
        rotary: optional `Rotary` tables ``(n, d_qk)`` applied to $X W_Q + b_Q$ and $X W_K + b_K$ (Llama).
        logit_bias: optional ``(heads, n, n)`` added to the scaled scores, shared by all layers (MPNet).
        attention: ``"dense"`` (the ``(n, n)`` softmax), ``"blocked"`` (online softmax over the key
            blocks the mask touches, `rankdyn._model._blocked`) or ``"auto"`` (blocked from
            ``AUTO_BLOCKED_MIN_TOKENS`` tokens); ``mask`` may then be a `MaskStructure`.
        block_size: tokens per block of the blocked path (``attention_path``: the path taken); by
            default `choose_block_size` picks 128, 256 or 512 for the mask. Refused on the dense
            path, which would ignore it.

    Raises:
        ValueError: on inconsistent shapes, a bad mask, an unknown placement, a dqk <= 0 or a
            dropout rate outside [0, 1).
    """

    weights: AttentionWeights
    dqk: Float[Array, ""]
    mask: Bool[Array, "n n"] | MaskStructure
    norm: AbstractNorm
    fixed_attention: Float[Array, "n n"] | None
    rotary: Rotary | None
    logit_bias: Float[Array, "heads n n"] | None
    scheme: AbstractPlacement
    path: AbstractAttention
    qk_norm: bool = eqx.field(static=True)
    skip: bool = eqx.field(static=True)
    attn_dropout: float = eqx.field(static=True)
    hidden_dropout: float = eqx.field(static=True)
    attention_from_normalized: bool = eqx.field(static=True)
    num_layers: int | None = eqx.field(static=True)
    precision: str = eqx.field(static=True)
    cycle: bool = eqx.field(static=True)

    def __init__(
        self,
        mask: ArrayLike | MaskStructure,
        w_q: ArrayLike,
        w_k: ArrayLike,
        w_v: ArrayLike,
        *,
        dqk: ArrayLike | None = None,
        norm: AbstractNorm | None = None,
        placement: str = "post",
        w_o: ArrayLike | None = None,
        mlp: MLPWeights | GatedMLPWeights | None = None,
        skip: bool = False,
        attn_dropout: float = 0.0,
        hidden_dropout: float = 0.0,
        attention_from_normalized: bool = True,
        fixed_attention: ArrayLike | None = None,
        precision: str = "highest",
        b_q: ArrayLike | None = None,
        b_k: ArrayLike | None = None,
        b_v: ArrayLike | None = None,
        b_o: ArrayLike | None = None,
        norm_attn: AbstractNorm | None = None,
        norm_mlp: AbstractNorm | None = None,
        cycle: bool = False,
        rotary: Rotary | None = None,
        logit_bias: ArrayLike | None = None,
        attention: str = "dense",
        block_size: int | None = None,
        mix_layers: int | None = None,
        ngpt_alpha: ArrayLike | None = None,
        qk_norm: bool = False,
    ):
        self.scheme = make_placement(placement, mix_layers, ngpt_alpha)
        self.qk_norm = bool(qk_norm)
        if precision not in PRECISIONS:
            raise UsageError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}.")
        attn_dropout = _check_rate("attn_dropout", attn_dropout)
        hidden_dropout = _check_rate("hidden_dropout", hidden_dropout)
        # The path decides the mask field: (n, n) array (dense) or MaskStructure (blocked).
        path, self.mask = layer_mask(mask, attention, attn_dropout, fixed_attention, logit_bias)
        if block_size is not None and int(block_size) < 1:
            raise UsageError(f"block_size must be a positive number of tokens, got {block_size!r}.")
        if path == "blocked":
            size = choose_block_size(self.mask) if block_size is None else int(block_size)
            self.path = BlockedAttention(size)
        elif block_size is not None:
            # The dense path has no blocks: a block size given here would be ignored.
            raise UsageError(
                f"block_size={block_size!r} applies to the blocked attention path only, and this layer "
                f"takes the dense one (attention={attention!r}); pass attention='blocked' or drop block_size."
            )
        else:
            self.path = DenseAttention()
        w_q, w_k, w_v = (jnp.asarray(w) for w in (w_q, w_k, w_v))
        # Lift (d, k) -> (1, d, k): one head. A 4-D weight carries a leading layer axis.
        if w_q.ndim == 2:
            w_q, w_k, w_v = w_q[None], w_k[None], w_v[None]
        if not (w_q.ndim == w_k.ndim == w_v.ndim) or w_q.ndim not in (3, 4):
            raise UsageError(
                "w_q, w_k, w_v must all be (d, k), (heads, d, k) or (layers, heads, d, k); got shapes "
                f"{w_q.shape}, {w_k.shape}, {w_v.shape}."
            )
        self.num_layers = int(w_q.shape[0]) if w_q.ndim == 4 else None
        if w_q.shape != w_k.shape:
            raise UsageError(f"w_q and w_k must have the same shape, got {w_q.shape} and {w_k.shape}.")
        if w_v.shape[:-1] != w_q.shape[:-1]:
            raise UsageError(
                f"w_v {w_v.shape} must agree with w_q {w_q.shape} in layers, heads and input width d."
            )
        heads, d, dk, dv = w_q.shape[-3], w_q.shape[-2], w_q.shape[-1], w_v.shape[-1]
        if w_o is None:
            if heads != 1 or dv != d:
                raise UsageError(
                    f"without an output projection w_o the layer needs one head and a square w_v "
                    f"(d x d = {d} x {d}); got {heads} heads and w_v of width {dv}. Pass w_o."
                )
        else:
            w_o = jnp.asarray(w_o)
            want = ((self.num_layers,) if self.num_layers else ()) + (heads * dv, d)
            if w_o.shape != want:
                raise UsageError(f"w_o must have shape {want} (heads * d_v, d), got {w_o.shape}.")
        if mlp is not None and mlp.w1.shape[-2] != d:
            raise UsageError(f"mlp.w1 must map from d = {d}, got shape {mlp.w1.shape}.")
        if fixed_attention is not None:
            fixed_attention = check_fixed_attention(self.mask, jnp.asarray(fixed_attention))

        dqk = jnp.asarray(default_dqk(dk) if dqk is None else dqk)
        if dqk.ndim != 0:
            raise UsageError(f"dqk must be a scalar (vmap the layer to sweep it), got shape {dqk.shape}.")
        if not isinstance(dqk, jax.core.Tracer) and not float(dqk) > 0:
            raise UsageError(f"the temperature dqk must be > 0, got {float(dqk)}.")
        lead = (self.num_layers,) if self.num_layers else ()
        biases = _check_biases(
            dict(b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o), lead, heads, dk, dv, d, w_o is not None
        )
        self.weights = AttentionWeights(
            w_q, w_k, w_v, w_o, mlp, **biases, norm_attn=norm_attn, norm_mlp=norm_mlp
        )
        self.cycle = bool(cycle)
        self.rotary, self.logit_bias = check_positions(rotary, logit_bias, self.mask.shape[-1], heads, dk)
        self.dqk = dqk
        self.norm = SphereNorm() if norm is None else norm
        if placement == "ngpt":
            check_ngpt_norms(self.norm, norm_attn, norm_mlp)
        self.fixed_attention = fixed_attention
        self.skip = bool(skip) or self.scheme.residual
        self.attn_dropout = attn_dropout
        self.hidden_dropout = hidden_dropout
        self.attention_from_normalized = attention_from_normalized
        self.precision = precision

    # ------------------------------------------------------------------ structure
    @property
    def dropout(self) -> float:
        """The larger of the two dropout rates: ``layer.dropout > 0`` means "needs a key"."""
        return max(self.attn_dropout, self.hidden_dropout)

    @property
    def has_dropout(self) -> bool:
        """True when either dropout is active (the layer is then random and needs a key)."""
        return self.dropout > 0.0

    @property
    def num_tokens(self) -> int:
        return self.mask.shape[-1]

    @property
    def dim(self) -> int:
        return self.weights.w_q.shape[-2]

    @property
    def num_heads(self) -> int:
        return self.weights.w_q.shape[-3]

    def weights_at(self, t) -> AttentionWeights:
        """The weights of depth ``t`` (the shared weights when there is no layer axis; with
        ``cycle``, those of layer ``t mod num_layers``)."""
        if self.num_layers is None:
            return self.weights
        return self.weights.at(t % self.num_layers if self.cycle else t)

    def norm_of(self, w: AttentionWeights, block: str) -> AbstractNorm:
        """The normalisation of sub-block ``block`` ("attn" or "mlp") at these weights."""
        own = w.norm_attn if block == "attn" else w.norm_mlp
        return self.norm if own is None else own

    # ------------------------------------------------------------------ strategies, read as names
    @property
    def placement(self) -> str:
        """The placement's name (``"post"``, ...): ``scheme.name`` (`rankdyn._model._placements`)."""
        return self.scheme.name

    @property
    def mix_layers(self) -> int | None:
        """``"mix"``: the number of post-LN layers; None for the other placements."""
        return getattr(self.scheme, "layers", None)

    @property
    def ngpt_alpha(self):
        """``"ngpt"``: the step alpha, a scalar array (a leaf of ``scheme``: `eqx.tree_at` reaches it
        through this property, so it carries no return annotation to check); None for the others."""
        return getattr(self.scheme, "alpha", None)

    @property
    def attention_path(self) -> str:
        """The attention path taken, ``"dense"`` or ``"blocked"``: ``path.name`` (`._attention`)."""
        return self.path.name

    @property
    def block_size(self) -> int:
        """Tokens per block of the blocked path (`BLOCK_SIZE` on the dense path, which has none)."""
        return getattr(self.path, "block_size", BLOCK_SIZE)

    # ------------------------------------------------------------------ maths
    def attention(self, x: Float[Array, "n d"], t=0) -> Float[Array, "heads n n"]:
        """Masked attention matrices $A^{(t)}$ for tokens ``x`` (eq. 1), one per head."""
        return self.path.matrices(self, x, self.weights_at(t))

    def eps_min(self, x: Float[Array, "n d"], t=0) -> Float[Array, ""]:
        """Theorem 1's epsilon of `attention` ``(x, t)``: its smallest weight on the mask."""
        return self.path.eps_min(self, x, self.weights_at(t), PRECISIONS[self.precision])

    def _attention_block(
        self, x_att, x_in, w: AttentionWeights, key
    ) -> tuple[Float[Array, "n d"], Float[Array, ""]]:
        r"""The attention sub-block $F(X) = \big[A_1 X W_V^{(1)}, \dots\big] W_O$ (heads concatenated;
        $W_O$ and $b_O$ if present), before hidden dropout, the skip and any normalisation:
        ``(F(X), eps_min)`` from the attention strategy ``path`` (`._attention`)."""
        return self.path.sub_block(self, x_att, x_in, w, key, PRECISIONS[self.precision])

    def __call__(
        self, x: Float[Array, "n d"], t=0, *, key: PRNGKeyArray | None = None
    ) -> tuple[Float[Array, "n d"], LayerAux]:
        """Apply the layer of depth ``t`` to one token matrix.

        Returns:
            ``(x_next, aux)`` with `LayerAux` diagnostics (Theorem 1's epsilon, zero rows).
        """
        if self.has_dropout and key is None:
            raise UsageError(
                f"this layer has dropout (attn_dropout={self.attn_dropout}, "
                f"hidden_dropout={self.hidden_dropout}): "
                "pass `key=` (simulate does it given a key)."
            )
        keys = jr.split(key, 3) if key is not None else (None, None, None)
        w, prec, rate = self.weights_at(t), PRECISIONS[self.precision], self.hidden_dropout

        def attention(h_att, h_in):
            sa, eps_min = self._attention_block(h_att, h_in, w, keys[0])
            return drop(sa, keys[1], rate), eps_min

        mlp = None if w.mlp is None else (lambda h: drop(w.mlp(h, prec), keys[2], rate))
        norms = (self.norm_of(w, "attn"), self.norm_of(w, "mlp"))
        parts = LayerParts(attention, mlp, norms, self.skip, self.attention_from_normalized)
        # Where N sits around the attention and the MLP sub-blocks: the placement strategy.
        y, eps_min, degenerate = self.scheme.apply(parts, x, t)
        return y, LayerAux(eps_min=eps_min, degenerate=degenerate)


def _check_rate(name: str, rate) -> float:
    """A dropout rate as a Python float in [0, 1) (static: it decides whether keys are drawn)."""
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number in [0, 1), got {rate!r}.") from None
    if not 0.0 <= rate < 1.0:
        raise UsageError(f"{name} must be in [0, 1) (e.g. 0.1 as in BERT), got {rate}.")
    return rate


def _check_biases(biases: dict, lead: tuple, heads: int, dk: int, dv: int, d: int, has_w_o: bool) -> dict:
    """The given biases as arrays of the shapes the weights imply; ValueError naming the bias otherwise."""
    want = {"b_q": (heads, dk), "b_k": (heads, dk), "b_v": (heads, dv), "b_o": (d,)}
    out = {}
    for name, b in biases.items():
        if b is None:
            continue
        if name == "b_o" and not has_w_o:
            raise UsageError("b_o is the bias of the output projection: pass w_o too, or drop b_o.")
        b = jnp.asarray(b)
        if b.shape != lead + want[name]:
            raise UsageError(f"{name} must have shape {lead + want[name]}, got {b.shape}.")
        out[name] = b
    return out
