"""The circle's mean-field solver: 256 modes, SA, beta = 3, sigma = 0.5, to t = 100 at rtol 1e-8.

Warm wall time (the second of two identical calls; the first compiles), float64. Target
(issue 53): at most 5 s on the 2-core CPU. Run quiet: ``python benchmarks/meanfield_speed.py``.
The start is the uniform density with a 1e-3 cosine perturbation, which clusters (the uniform
state is unstable: sigma = 0.5 < sigma_c = 0.735 for SA at beta = 3).
"""

import os
import time

os.environ.setdefault("RANKDYN_NO_COMPILE_CACHE", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from rankdyn._run._io import cpu_model  # noqa: E402
from rankdyn.meanfield import solve_density  # noqa: E402

MODES, BETA, SIGMA, T1, RTOL = 256, 3.0, 0.5, 100.0, 1e-8


def main() -> None:
    theta = 2 * np.pi * np.arange(4 * MODES) / (4 * MODES)
    rho0 = 1.0 + 1e-3 * np.cos(theta) + 1e-3 * np.sin(3 * theta)
    kw = dict(
        beta=BETA, sigma=SIGMA, t1=T1, times=np.linspace(0, T1, 11), dynamics="sa", num_modes=MODES, rtol=RTOL
    )
    t0 = time.perf_counter()
    sol = solve_density(rho0, **kw)
    sol.coefficients.block_until_ready()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    sol = solve_density(rho0, **kw)
    sol.coefficients.block_until_ready()
    warm = time.perf_counter() - t0
    r = np.pi * np.hypot(sol.coefficients[:, 1], sol.coefficients[:, MODES + 1])
    print(f"CPU: {cpu_model()}")
    print(f"modes {MODES}, SA, beta {BETA}, sigma {SIGMA}, t1 {T1}, rtol {RTOL}")
    print(f"cold {cold:.2f} s, warm {warm:.2f} s, steps {int(sol.num_steps)}, result {sol.result!r}")
    print(f"order parameter at the saved times: {np.round(np.asarray(r), 4).tolist()}")
    print(f"mass drift {float(np.max(np.abs(sol.mass - 1))):.1e}, tail {float(sol.tail[-1]):.1e}")


if __name__ == "__main__":
    main()
