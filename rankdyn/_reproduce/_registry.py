"""The reproduce targets, one record each, and the one way a target is run.

Registering a target is one `Target` record in `REGISTRY` (its module holds ``NAME``, ``CLAIM``,
``sizes``, ``compute``, ``checks``, ``render`` and ``describe``: `rankdyn._reproduce._target`).
`run_target` composes those parts the same way for every target, so no target repeats the
compute -> checks -> render -> result assembly, and the runner reads what a target needs (float64,
a trained checkpoint, the runs shared within one call) from its record instead of from its
function signatures.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from types import ModuleType

from ._target import Description, Rendered, TargetResult

__all__ = ["Target", "REGISTRY", "target", "run_target"]

#: The families of targets (sub-packages of rankdyn/_reproduce/), which do not import each other.
FAMILIES = ("sim", "theory", "pretrained", "flow")


@dataclasses.dataclass(frozen=True)
class Target:
    """One reproduce target.

    Attributes:
        name: the contract name (``rankdyn reproduce NAME``, ``out/NAME.json``).
        module: the module that holds the target's parts.
        float64: computes in float64 whatever ``--x64`` says (its tolerances are float64 ones).
        needs_checkpoint: runs on a trained checkpoint (``--checkpoint``, default MiniLM when
            installed); without one every check is "not testable here".
        shares_runs: its ``compute`` takes ``cache=``, a dict shared by the targets of one
            `rankdyn._reproduce.run_targets` call (the ablation runs reused by ``geometry``).
        default_checkpoint: the name (`rankdyn checkpoints`) of the checkpoint it runs on
            without ``--checkpoint``: ``minilm``, or ``smollm2`` for the causal decoder targets.
        full_checkpoint: the one it runs on in full mode when installed (``mpnet``: the paper's
            BERT-base scale); else ``default_checkpoint``.
        extended: a target beyond the paper's claims that does not fit the main job's budget
            (``reproduce --quick`` within 150 s cold and 60 s warm on a 2-core CPU): ``all`` leaves
            it out, ``--extended`` or its name runs it.
    """

    name: str
    module: str
    float64: bool = False
    needs_checkpoint: bool = False
    shares_runs: bool = False
    default_checkpoint: str = "minilm"
    full_checkpoint: str | None = None
    extended: bool = False

    @property
    def family(self) -> str:
        """The family sub-package (``sim``, ``theory``, ``pretrained`` or ``flow``)."""
        return self.module.split(".")[2]

    def load(self) -> ModuleType:
        """The target's module (imported on demand: a broken target cannot break the others)."""
        return importlib.import_module(self.module)

    @property
    def claim(self) -> str:
        """The paper's claim the target tests (its module's ``CLAIM``)."""
        return self.load().CLAIM

    def sizes(self, quick: bool) -> dict:
        """The sizes of a quick or a full run (its module's ``sizes``)."""
        return dict(self.load().sizes(quick))


_SIM, _THEORY, _PRETRAINED, _FLOW = (f"rankdyn._reproduce.{f}." for f in FAMILIES)

#: Every target, in the order of the issue ("rankdyn reproduce"). The main job (``reproduce --quick``)
#: runs the paper's claims; the targets beyond the paper (other papers' flow results, continuation,
#: Lyapunov exponents, attention sinks) are the extended tier: with them the main job ran over its
#: 60 s warm budget (measured: benchmarks/README.md, "Cold and warm time of each reproduce target").
REGISTRY: tuple[Target, ...] = (
    Target("masks-collapse", _SIM + "masks_collapse"),
    Target("temperature", _SIM + "temperature"),
    Target("layernorm-orthogonal", _SIM + "layernorm_orthogonal"),
    Target("depth-table", _SIM + "depth_table"),
    Target("counterexample-2d", _THEORY + "counterexample_2d", float64=True),
    Target("equilibria-ranks", _THEORY + "equilibria_ranks", float64=True),
    Target("positive-measure", _THEORY + "positive_measure", float64=True),
    Target("ablation", _SIM + "ablation", shares_runs=True),
    Target(
        "geometry", _PRETRAINED + "geometry", needs_checkpoint=True, shares_runs=True, full_checkpoint="mpnet"
    ),
    Target("undirected", _THEORY + "undirected", float64=True),
    Target(
        "pretrained-ablation",
        _PRETRAINED + "pretrained_ablation",
        needs_checkpoint=True,
        shares_runs=True,
        full_checkpoint="mpnet",
    ),
    Target(
        "pretrained-temperature",
        _PRETRAINED + "pretrained_temperature",
        needs_checkpoint=True,
        shares_runs=True,
        full_checkpoint="mpnet",
    ),
    Target("flow-clustering", _FLOW + "flow_clustering", float64=True, extended=True),
    Target("flow-metastability", _FLOW + "flow_metastability", float64=True, extended=True),
    Target("flow-causal", _FLOW + "flow_causal", float64=True, extended=True),
    Target("flow-limit", _FLOW + "flow_limit", float64=True, extended=True),
    Target("bifurcation", _THEORY + "bifurcation", float64=True, extended=True),
    Target("design-fold", _THEORY + "design_fold", float64=True, extended=True),
    Target("lyapunov-rates", _SIM + "lyapunov_rates", float64=True, extended=True),
    Target(
        "attention-sinks",
        _PRETRAINED + "attention_sinks",
        needs_checkpoint=True,
        default_checkpoint="smollm2",
        extended=True,
    ),
    Target("long-context-radius", _SIM + "long_context_radius", float64=True, extended=True),
    Target("critical-temperature", _SIM + "critical_temperature", float64=True, extended=True),
    Target(
        "long-context-sinks",
        _PRETRAINED + "long_context_sinks",
        needs_checkpoint=True,
        default_checkpoint="smollm2",
        extended=True,
    ),
    Target("normalisation-speed", _FLOW + "normalisation_speed", float64=True, extended=True),
    Target("noisy-transition", _THEORY + "noisy_transition", float64=True, extended=True),
    Target("equiangular", _FLOW + "equiangular", float64=True, extended=True),
    Target("mean-field-limit", _FLOW + "mean_field_limit", float64=True, extended=True),
)

_BY_NAME = {t.name: t for t in REGISTRY}


def target(name: str) -> Target:
    """The record of the target ``name``.

    Raises:
        KeyError: for an unknown name (`rankdyn._reproduce.resolve_targets` validates user input).
    """
    return _BY_NAME[name]


def run_target(
    spec: Target | str,
    out,
    *,
    quick: bool,
    seed: int,
    size: dict | None = None,
    cache: dict | None = None,
    checkpoint=None,
) -> dict:
    """Run one target: sizes -> compute -> checks -> render -> describe, as its result dict.

    Arguments:
        spec: the target's record, or its name.
        out: folder for its figures (created).
        quick: the reduced sizes (the target's ``sizes(True)``).
        seed: base PRNG seed.
        size: sizes that replace ``sizes(quick)`` (tests run tiny versions this way).
        cache: the dict shared by the targets of one call (used by those that share runs).
        checkpoint: a trained checkpoint (path or loaded) for the targets that need one.

    Returns:
        The result dict of the reproduce contract (`TargetResult.to_dict`).
    """
    spec = target(spec) if isinstance(spec, str) else spec
    mod = spec.load()
    ctx: dict = {}
    if spec.shares_runs:
        ctx["cache"] = cache
    if spec.needs_checkpoint:
        from .pretrained.pretrained_common import checkpoint_or_none, not_testable

        default = spec.default_checkpoint
        if not quick and checkpoint is None and spec.full_checkpoint is not None:
            from .._trained._installed import KNOWN

            if KNOWN[spec.full_checkpoint][1]() is not None:
                default = spec.full_checkpoint
        ckpt = checkpoint_or_none(checkpoint, cache, default)
        if ckpt is None:
            return not_testable(
                spec.name,
                mod.CLAIM,
                mod.CHECK_NAMES,
                quick=quick,
                seed=seed,
                checkpoint=checkpoint,
                default=spec.default_checkpoint,
            )
        ctx["ckpt"] = ckpt
    sz = dict(mod.sizes(quick) if size is None else size)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if spec.float64:
        import jax

        with jax.enable_x64(True):
            m = mod.compute(sz, seed, **ctx)
    else:
        m = mod.compute(sz, seed, **ctx)
    cs = mod.checks(m)
    shown: Rendered = mod.render(out, m, cs, quick=quick)
    told: Description = mod.describe(m, cs, sz, seed=seed, quick=quick)
    return TargetResult(
        mod.NAME,
        mod.CLAIM,
        told.setting,
        m if told.measured is None else told.measured,
        cs,
        figures=shown.figures,
        notes=shown.notes,
        key_numbers=told.key_numbers,
        model=told.model,
        tables=shown.tables,
        verdict_word=told.verdict_word,
        criterion=told.criterion,
        extra=told.extra,
    ).to_dict()
