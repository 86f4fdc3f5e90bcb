"""The order in which the test command's notebook step hands out its files (notebooks/conftest.py).

``pytest --nbmake notebooks tests/site`` runs ``-n 2 --dist loadfile``: each file is one unit, and
pytest-xdist's scheduler (``LoadScopeScheduling``) gives a worker a unit at the start and another
whenever one of its tests ends while it holds two or fewer pending tests. So a worker always holds
its running file and the next one: a unit is committed one file ahead, and the longest-first order
does not balance the two workers as it would with hand-out on demand.

This script replays that scheduler on the measured wall seconds of each file (``SECONDS``, the
notebook step of four clean-clone runs), under noise (the box's speed x 0.93-1.07 for a run, each
file x 0.9-1.1), and prints the orders with the smallest mean finishing time of the slower worker,
beside the current order (``notebooks/conftest.py``'s ``ORDER``) and the ideal (half the total).

    python benchmarks/notebook_order.py [--samples 300] [--fraction 0.02]

It tries a random ``--fraction`` of the 10! orders on a subset of the samples, then the best 300
of them on every sample.
"""

import argparse
import itertools
import random
import statistics
import sys
from pathlib import Path

#: Mean wall seconds per file (its tests' setup + call + teardown) in the clean-clone runs s11b-s11e
#: of benchmarks/README.md, "The test command on a clean clone"; the site file's two tests apart.
SECONDS = {
    "01_masks_and_collapse.ipynb": (8.4,),
    "02_layernorm_counterexample.ipynb": (14.6,),
    "03_equilibria_and_stability.ipynb": (15.9,),
    "04_sweeping_thousands.ipynb": (9.9,),
    "05_trained_models.ipynb": (32.8,),
    "06_flow.ipynb": (19.7,),
    "07_continuation.ipynb": (24.9,),
    "08_lyapunov.ipynb": (21.5,),
    "09_densities_and_noise.ipynb": (17.9,),
    "test_docs_site.py": (7.2, 7.3),
}


def finish(order, seconds) -> float:
    """When the slower of two workers ends, under xdist's loadfile hand-out (see the docstring)."""
    queue = list(order)
    pending: list[list[float]] = [[], []]
    clock = [0.0, 0.0]

    def hand_out(w):
        if queue:
            pending[w].extend(seconds[queue.pop(0)])

    for w in (0, 1):  # one unit each, then a second each ("at least two work units", xdist #277)
        hand_out(w)
    for w in (0, 1):
        if len(pending[w]) <= 2:
            hand_out(w)
    while any(pending):
        w = min((v for v in (0, 1) if pending[v]), key=lambda v: clock[v] + pending[v][0])
        clock[w] += pending[w].pop(0)
        if len(pending[w]) <= 2:
            hand_out(w)
    return max(clock)


def noisy(rng) -> dict:
    speed = rng.uniform(0.93, 1.07)
    return {f: tuple(s * speed * rng.uniform(0.9, 1.1) for s in t) for f, t in SECONDS.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--fraction", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))
    from conftest import ORDER  # noqa: PLC0415 (the notebooks' conftest, by path)

    rng = random.Random(a.seed)
    samples = [noisy(rng) for _ in range(a.samples)]
    mean = lambda order, some: statistics.mean(finish(order, s) for s in some)  # noqa: E731
    tried = [o for o in itertools.permutations(SECONDS) if rng.random() < a.fraction]
    tried.sort(key=lambda o: mean(o, samples[:60]))
    best = sorted(tried[:300], key=lambda o: mean(o, samples))[:5]
    for order in best:
        print(f"{mean(order, samples):6.2f} s  {', '.join(f[:2] for f in order)}")
    print(f"{mean(ORDER, samples):6.2f} s  the current ORDER: {', '.join(f[:2] for f in ORDER)}")
    ideal = statistics.mean(sum(map(sum, s.values())) / 2 for s in samples)
    print(f"{ideal:6.2f} s  ideal (half the total)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
