r"""Target ``undirected``: numerical evidence, with certificates, on the paper's open question.

The paper's counterexamples to rank collapse with LN (Theorem 3, App. F) use the **causal** mask:
a token attends to earlier ones but not the reverse. App. F.4 asks whether LN can sustain
higher-rank states under **undirected** (symmetric) masks and conjectures that it cannot. See
docs/theory.md#constructions and docs/theory.md#ambiguities-and-choices.

Post-LN dynamics $X^{(t+1)} = \mathrm{LN}(A^{(t)} X^{(t)} W_V)$ (eq. 3), one shared $W_V$, on a
grid of sizes $N = d$, masks (complete, window $\pm1$, window $\pm2$ where it differs from
complete; the causal mask as the positive control) and attention families (uniform
$W_Q = W_K = 0$; symmetric logits $W_Q = W_K$; generic independent $W_Q, W_K$, BERT-uniform).

For every size and objective $\phi \in \{\sigma_2, \sigma_{\min}\}$ one batched search
(`rankdyn._theory._counterexample_search.search_value_matrices`: every setting and restart in one
compiled program) looks for a $W_V$ that keeps $\phi(X^{(T)})$ high at depth $T$ from random
inputs on the spheres; the complete mask gets a harder second pass (more restarts and steps, a
deeper curriculum) with the causal control at the same budget. Uniform starts iterated to depth
1000 then find the stable equilibria of each found map (attractors; `rankdyn.equilibrium_census`
cross-checks at N = 3), and every stable rank $\ge 2$ one gets a certificate
(`rankdyn._theory._certificates`: 50-digit Newton, interval Krawczyk existence proof, multipliers, an
interval bound on the spectral radius, basin fraction with a Wilson interval).

The verdict uses the open-question words: "inconclusive" when the positive control fails (a
search that cannot find the known causal case says nothing elsewhere), "counterexample found"
when an undirected setting sustains rank $\ge 2$ or has a stable rank $\ge 2$ equilibrium, else
"no evidence against" (evidence, never proof, for the conjecture).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax.random as jr

from ..._run._io import to_jsonable
from .. import _verdict as V
from .._target import Description, Measured, Rendered
from . import _undirected_known as K, _undirected_search as U

NAME = "undirected"
CLAIM = (
    "Open question of App. F.4: LN prevents rank collapse under the causal mask (Theorem 3), and the "
    "authors conjecture that it cannot sustain higher-rank states under undirected (symmetric) masks "
    "such as the complete graph. Tested numerically on the complete, window +-1 and window +-2 masks "
    "with uniform, symmetric-logit and generic attention, with the causal mask as the positive control."
)

SUSTAINED_FRACTION = U.SUSTAINED_FRACTION
ATTENTION = U.ATTENTION
PAPER_W = 4.0
#: The settings the quick run searches: the positive control, the oracle and the finding.
QUICK_PAIRS = (("causal", "uniform"), ("complete", "uniform"), ("complete", "symmetric"))


def sizes(quick: bool) -> dict:
    # Settings and restarts run vmapped (one program per size and objective); the discovery
    # happens at training depths 8-32, deeper training only refines, and the selection and
    # evaluation at depth T keep only what survives there.
    common = dict(
        lr=3e-2,
        select_every=20,
        restarts=8,
        dps=50,
        max_certificates=2,
        basin_depth=1000,
        deflation_rounds=0,
        stored_max_n=None,
    )
    if quick:
        # CI budget (its time: benchmarks/README.md): only the settings its checks and
        # its finding need. Each setting keeps the inits, batches and W_Q, W_K it has in the grid,
        # but the search is chaotic: a different batch of settings or input count can end at a
        # different W_V (the full run, 64 inputs per step, did not find this complete-mask state).
        return dict(
            common,
            ns=(3,),
            pairs=QUICK_PAIRS,
            num_layers=200,
            eval_factor=5,
            batch=128,
            steps=160,
            train_depth=32,
            eval_batch=512,
            select_batch=128,
            objectives=("sigma_2",),
            # The complete mask's harder pass runs in full mode only (quick: one compiled search).
            hard=dict(restarts=16, steps=160, train_depth=64, objectives=()),
            census_starts=128,
            census_ns=(),
            basin_trials=1024,
            # Stored certificates re-proven: N = 3 only (N = 5 costs ~6 s of mpmath each).
            stored_max_n=3,
        )
    # Full mode, sized from measured costs. A first full run (batch 32, T = 500, 32 selection
    # inputs; 13.2 CPU-min) lost the positive control at every size: with a basin of a few
    # percent, 32 inputs per step see about one that keeps its rank. The quick run's search
    # (T = 200, selection every 20 steps) with 64 inputs per step keeps it at N = 3 and 6
    # (its cost: benchmarks/HISTORY.md). The complete mask's harder pass (both
    # objectives, 16 restarts, deeper curriculum, the causal control at the same budget) runs
    # at N = 3 only, and sigma_min is searched on the complete mask only: the axes cut (its time:
    # benchmarks/README.md). With seed 0 the causal + uniform control passed in 2 of its 5 passes
    # (its check fails and says so).
    return dict(
        common,
        ns=(3, 4, 5, 6),
        pairs=None,
        num_layers=200,
        eval_factor=5,
        batch=64,
        steps=160,
        train_depth=32,
        eval_batch=512,
        select_batch=64,
        objectives=("sigma_2",),
        hard=dict(restarts=16, steps=160, train_depth=64, objectives=("sigma_2", "sigma_min"), ns=(3,)),
        census_starts=256,
        census_ns=(3,),
        basin_trials=2048,
    )


def verdict(control_ok: bool, undirected_found: list[str]) -> tuple[str, str]:
    """``(verdict, finding)``: `_verdict.open_question_verdict` (``OPEN_QUESTION_RULE``) and its sentence."""
    v = V.open_question_verdict(bool(undirected_found), control_ok)
    if v == "counterexample found":
        return v, (
            "numerical counterexample to the conjecture: a sustained higher-rank state or a stable rank >= 2 "
            "equilibrium under "
            + ", ".join(undirected_found)
            + ("" if control_ok else " (the positive control failed; the found cases stand on their own)")
        )
    if v == "no evidence against":
        return v, (
            "no evidence against the conjecture in these settings: the search that finds the causal "
            "counterexample found no sustained higher-rank state and no stable rank >= 2 equilibrium "
            "under the undirected masks"
        )
    return v, (
        "the search did not find a sustained rank-2 state under the causal mask (positive control), so its "
        "failures under undirected masks are not evidence"
    )


def _found(obj: str, s: dict) -> bool:
    """A sustained higher-rank state (for the objective searched) or a stable rank >= 2 equilibrium."""
    sustained = s["sustained_rank_ge2"] if obj == "sigma_2" else s["sustained_full_rank"]
    census = s.get("census", {}).get("stable_rank_ge2", 0)
    return bool(sustained or s["attractors"]["stable_rank_ge2"] or census)


@dataclasses.dataclass(frozen=True)
class UndirectedMeasured(Measured):
    """What the searches, attractor runs and certificates measured.

    Attributes:
        cells: ``"N=n/mask/attention"`` -> ``{"<pass>_<objective>": summary, "paper_W_V": ...}``
            (a summary: `_undirected_search.summary` plus ``attractors`` and, at ``census_ns``,
            ``census``).
        runs: ``(cell, search)`` in the order searched (the rows of the table).
        controls: ``"N=n pass objective"`` -> the causal + uniform search kept rank >= 2.
        found: the undirected settings with a higher-rank state (one sentence each).
        certificates: every certificate, with its ``setting`` and ``search``.
        points: the figure's points (share keeping rank >= 2 at the long depth, Wilson 95%).
        scope: what was searched, in words.
        eval_factor, basin_trials, basin_depth, census_ns, num_layers: sizes the prose cites.
    """

    cells: dict
    runs: tuple
    controls: dict
    found: tuple
    certificates: tuple
    points: tuple
    scope: str
    eval_factor: int
    basin_trials: int
    basin_depth: int
    census_ns: tuple
    num_layers: int
    stored: tuple = ()

    @property
    def symmetric_found(self) -> list[str]:
        """The found settings whose logits are symmetric (``W_Q = W_K``) or zero."""
        return [f for f in self.found if "symmetric attention" in f or "uniform attention" in f]

    def to_dict(self) -> dict:
        """The JSON's ``measured``: the cells at the top level (the file format of the target)."""
        certs = self.certificates
        return {
            **to_jsonable(self.cells),
            "scope": self.scope,
            "undirected_settings_with_higher_rank": list(self.found),
            "symmetric_logit_settings_with_higher_rank": self.symmetric_found,
            "certificates": len(certs),
            "certificates_proven": sum(bool(c["proven"]) for c in certs),
            "certificates_stability_proven": sum(bool(c.get("stability_proven")) for c in certs),
            "stored_certificates": to_jsonable(self.stored),
        }


def _scope(sz: dict, seed: int) -> str:
    h = sz["hard"]
    pairs = sz.get("pairs")
    grid = (
        "settings " + ", ".join(f"{m} mask + {a} attention" for m, a in pairs)
        if pairs
        else "masks complete, window +-1, window +-2 (N >= 4); attention uniform, symmetric logits "
        "(W_Q = W_K), generic"
    )
    hard = (
        f"complete mask again with {h['restarts']} x {h['steps']}, objectives {', '.join(h['objectives'])}, "
        f"and the causal control at the same budget, for N in {list(h.get('ns', sz['ns']))}"
        if h["objectives"]
        else "no harder complete-mask pass in quick mode"
    )
    return (
        f"scope: N = d in {list(sz['ns'])}; {grid}; {sz['restarts']} restarts x {sz['steps']} Adam steps "
        f"per setting and objective ({hard}); T = {sz['num_layers']}; seed {seed}"
    )


def _passes(n: int, sz: dict, settings: list) -> list:
    """``(pass, objective, settings, search options)`` for size n: the main pass, then the
    complete mask's harder pass with the causal + uniform control."""
    h = sz["hard"]
    out = [("main", o, settings, {}) for o in sz["objectives"]]
    if n in h.get("ns", sz["ns"]):
        hard = [s for s in settings if s[0] == "complete" or s[:2] == ("causal", "uniform")]
        opts = {k: h[k] for k in ("restarts", "steps", "train_depth")}
        out += [("complete-hard", o, hard, opts) for o in h["objectives"]]
    return out


def compute(sz: dict, seed: int) -> UndirectedMeasured:
    """Search, find attractors, certify (float64: call inside ``jax.enable_x64``)."""
    from ..._run._progress import plan_steps, step_done
    from ._intervals import wilson_interval

    key = jr.key(seed)
    cells, runs, controls, found, certs, points = {}, [], {}, [], [], []
    # One progress step per batched search pass (ETA from the measured ones).
    plan_steps(sum(len(_passes(n, sz, [])) for n in sz["ns"]))
    for n in sz["ns"]:
        settings = U.settings_for(n, jr.fold_in(key, 1000 + n), pairs=sz.get("pairs"))
        paper = U.paper_values(key, settings, sz, PAPER_W)
        for pname, obj, sets, opts in _passes(n, sz, settings):
            results = U.run_searches(key, sets, sz, obj, **opts)
            step_done(f"N={n} {pname} {obj}")
            found_layers = [U.with_value(lay, r.w_v) for (_, _, lay), r in zip(sets, results)]
            for (m, att, _), r, a, flay in zip(
                sets, results, U.attractors(found_layers, key, sz), found_layers
            ):
                s = dict(U.summary(r), attractors=a)
                if n in sz["census_ns"] and (pname, obj) == ("main", "sigma_2") and m != "causal":
                    # The full census (unstable and marginal equilibria too) as a cross-check.
                    s["census"] = U.census(flay, key, sz)
                tag, search = f"N={n}/{m}/{att}", f"{pname}_{obj}"
                cells.setdefault(tag, {})[search] = s
                runs.append((tag, search))
                # The control is judged on the sigma_2 searches (rank >= 2 is what it must find;
                # full-rank causal equilibria are saddles, so a sigma_min search is reported only).
                if (m, att, obj) == ("causal", "uniform", "sigma_2"):
                    controls[f"N={n} {pname} {obj}"] = s["sustained_rank_ge2"]
                if m != "causal" and _found(obj, s):
                    found.append(f"N = d = {n}, {m} mask, {att} attention ({pname} {obj} search)")
                certs += [
                    {"setting": tag, "search": search, **e["certificate"]}
                    for e in a["rank_ge2"]
                    if "certificate" in e
                ]
                if search == "main_sigma_2":
                    k = round(s["frac_rank_ge2"][1] * sz["eval_batch"])
                    lo, hi = wilson_interval(k, sz["eval_batch"])
                    p = paper[[x[:2] for x in settings].index((m, att))]
                    cells[tag]["paper_W_V"] = p
                    share = k / sz["eval_batch"]
                    pt = dict(
                        n=n, mask=m, attention=att, share=share, lo=lo, hi=hi, paper=p["frac_rank_ge2"][1]
                    )
                    points.append(pt)
    # The stored certificates (`_undirected_known`): proofs re-run now, whatever the search found.
    stored = tuple(K.recheck(K.load(sz["stored_max_n"])))
    found += K.found_sentences(stored)
    return UndirectedMeasured(
        cells=cells,
        runs=tuple(runs),
        controls=controls,
        found=tuple(found),
        certificates=tuple(certs),
        points=tuple(points),
        scope=_scope(sz, seed),
        eval_factor=sz["eval_factor"],
        basin_trials=sz["basin_trials"],
        basin_depth=sz["basin_depth"],
        census_ns=tuple(sz["census_ns"]),
        num_layers=sz["num_layers"],
        stored=stored,
    )


def checks(m: UndirectedMeasured) -> list[V.Check]:
    """The positive controls, the complete-uniform oracle and the certificates (pure)."""
    cu = [c["main_sigma_2"]["mean_phi_T"] for t, c in m.cells.items() if t.endswith("/complete/uniform")]
    paper = m.cells["N=3/causal/uniform"]["paper_W_V"]["frac_rank_ge2"]
    stable = [c for c in m.certificates if float(c["spectral_radius"]) < 1]
    out = [
        V.check(
            f"positive control: causal + uniform search keeps rank >= 2 for >= {SUSTAINED_FRACTION:.0%} of "
            f"held-out inputs at T and {m.eval_factor} T ({', '.join(m.controls)})",
            bool(m.controls) and all(m.controls.values()),
            ", ".join(f"{k}: {'pass' if v else 'FAIL'}" for k, v in m.controls.items()),
        ),
        V.check(
            "paper's W_V = I + 4S, causal + uniform, N = 3: rank 2 kept by >= 1% (the measurement sees "
            "the known case)",
            min(paper) >= 0.01,
            f"fractions {paper}",
        ),
        V.check(
            "oracle: uniform attention over the complete mask makes all tokens equal (mean sigma_2 < 1e-12)",
            bool(cu) and max(cu) < 1e-12,
            f"max mean sigma_2 {max(cu, default=float('nan')):.3g}",
        ),
    ]
    if m.stored:
        out.append(K.stored_check(m.stored))
    if not m.certificates:
        return out + [
            V.untestable(
                "every reported stable rank >= 2 equilibrium is certified", "no stable rank >= 2 equilibrium"
            )
        ]
    out.append(
        V.check(
            "every reported rank >= 2 attractor has a proven existence box (interval Krawczyk)",
            all(c["proven"] for c in m.certificates),
            f"{sum(bool(c['proven']) for c in m.certificates)} of {len(m.certificates)} proven",
        )
    )
    if stable:
        out.append(
            V.check(
                "every stable one (50-digit multipliers) is proven stable: interval bound on the spectral "
                "radius of DF over the Krawczyk box < 1",
                all(c.get("stability_proven") for c in stable),
                "bounds " + ", ".join(str(c.get("spectral_radius_bound")) for c in stable),
            )
        )
    return out


def render(out: Path, m: UndirectedMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """The figure and the notes (the finding, its scope, what is proven), from the numbers."""
    from ._undirected_figure import draw_undirected

    draw_undirected(m, out / "undirected.png")
    control_ok = cs[0].passed and cs[1].passed
    _, finding = verdict(control_ok, list(m.found))
    sym = m.symmetric_found
    certs = m.certificates
    stable = [c for c in certs if float(c["spectral_radius"]) < 1]
    proven = [c for c in stable if c["proven"] and c.get("stability_proven")]
    notes = (
        f"{finding}. {m.scope}. Symmetric logits (W_Q = W_K or uniform): "
        + ("; ".join(sym) if sym else "no higher-rank state found")
        + ". Evidence, not proof: a search that finds nothing says little beyond its scope. "
        f"Stable equilibria are looked for as attractors of {m.basin_trials} uniform starts per found W_V "
        f"at depth {m.basin_depth} (a basin below ~1/{m.basin_trials} is missed)"
        + (f"; the full census (N in {list(m.census_ns)}) cross-checks that" if m.census_ns else "")
        + ". "
    )
    if certs:
        notes += (
            f"Certified: {sum(bool(c['proven']) for c in certs)} of {len(certs)} rank >= 2 attractors have "
            "a proven existence box (interval Krawczyk, radius "
            f"{certs[0]['radius']} around the stored 45-digit point, for the map with the stored float64 "
            f"weights); of the {len(stable)} with 50-digit spectral radius < 1, {len(proven)} are also "
            "proven stable (an interval bound < 1 on the spectral radius of DF over that box)."
        )
    notes += K.stored_notes(m.stored)
    return Rendered(["undirected.png"], notes)


def describe(m: UndirectedMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    v, finding = verdict(cs[0].passed and cs[1].passed, list(m.found))
    long_t = sz["eval_factor"] * sz["num_layers"]
    setting = {
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in sz.items()},
        "eval_layers_long": long_t,
        "paper_W_V": f"I + {PAPER_W:g} S (bidiagonal)",
        "norm": "sphere, post-LN",
        "dtype": "float64",
        "rank threshold": "sigma_k > 1e-3 sigma_1",
        "sustained_fraction": SUSTAINED_FRACTION,
        "seed": seed,
        "quick": quick,
        "keys": "key(seed) for every search (same inits and inputs across settings); W_Q, W_K per size "
        "and family from fold_in(key, 1000 + N), shared by the masks",
    }
    certs = m.certificates
    key_numbers = {
        "undirected settings with a higher-rank state": len(m.found),
        "of them with symmetric or uniform attention": len(m.symmetric_found),
        "certified equilibria (existence proven)": f"{sum(bool(c['proven']) for c in certs)} / {len(certs)}",
        "of them proven stable (intervals)": sum(bool(c.get("stability_proven")) for c in certs),
    }
    criterion = (
        f"open question, {m.scope}. {V.OPEN_QUESTION_RULE} Positive control: under the causal mask with "
        "uniform attention every search pass must find a W_V that keeps rank >= 2 (sigma_2 > 1e-3 sigma_1) "
        f"for >= {SUSTAINED_FRACTION:.0%} of held-out inputs at T and {long_t}, and the paper's W_V must be "
        "seen at N = 3. A counterexample is an undirected setting with a sustained higher-rank state (same "
        "threshold, for the objective searched) or a stable rank >= 2 equilibrium (attractor or census). "
        "Marginal equilibria are reported, not judged."
    )
    return Description(
        setting,
        key_numbers=key_numbers,
        criterion=criterion,
        verdict_word=v,
        measured=dict(m.to_dict(), finding=finding),
        extra={"certificates": list(certs)},
    )
