"""The `mean-field-limit` target: its exponent fit against exact power laws, and its checks, which
pass on numbers that meet the rule and fail on each plausible miss (the quick run is in
docs/reproduce.md)."""

import dataclasses

import figure_measured
import numpy as np

from rankdyn._reproduce.flow import mean_field_limit as M


def test_fit_exponent_recovers_a_power_law_and_its_interval_covers_it():
    ns = (64, 128, 256, 512, 1024)
    exact = [[2.0 * n**-0.5] * 6 for n in ns]
    p, (lo, hi) = M.fit_exponent(ns, exact, 0)
    assert abs(p + 0.5) < 1e-12 and abs(lo + 0.5) < 1e-12 and abs(hi + 0.5) < 1e-12
    # Noisy seeds around n^-0.7: the slope is near -0.7, and the interval holds it but not -0.5.
    rng = np.random.default_rng(1)
    noisy = [list(3.0 * n**-0.7 * np.exp(0.05 * rng.standard_normal(16))) for n in ns]
    p, (lo, hi) = M.fit_exponent(ns, noisy, 0)
    assert abs(p + 0.7) < 0.03 and lo < -0.7 < hi and hi < -0.5, (p, lo, hi)
    # The bootstrap's least-squares slope equals np.polyfit's on the unresampled data.
    x = np.repeat(np.log(ns), 16)
    assert abs(p - np.polyfit(x, np.log(np.ravel(noisy)), 1)[0]) < 1e-12


def test_checks_pass_on_numbers_within_the_rule():
    _, m = figure_measured.mean_field_limit()
    assert all(c.passed for c in M.checks(m)), M.checks(m)


def test_each_check_fails_on_a_miss():
    _, m = figure_measured.mean_field_limit()
    top = tuple(v * 3 for v in m.w1[-1])
    misses = [
        (0, dict(exponent=-0.62, interval=(-0.7, -0.45))),  # |p + 1/2| > 0.1, interval holds -1/2
        (0, dict(exponent=-0.45, interval=(-0.48, -0.42))),  # interval misses -1/2
        (1, dict(w1=m.w1[:-1] + (top,))),  # the particles no nearer rho_t than rho_0
        (2, dict(density_status="not successful")),
        (2, dict(density_mass_error=1e-9)),
        (3, dict(steps_limit_hit=(1,))),
    ]
    for index, change in misses:
        passed = [c.passed for c in M.checks(dataclasses.replace(m, **change))]
        assert passed[index] is False, (index, change)
        assert sum(not p for p in passed) == 1, (index, change)
