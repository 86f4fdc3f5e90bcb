"""The S^2 mean-field solver at band limit 64: SA, beta = 3, sigma = 0.5, to t = 100 at rtol 1e-8.

The circle's benchmark problem (`meanfield_speed.py`) on the sphere. Warm wall time (the second of
two identical calls; the first builds s2fft's kernels and compiles), float64. Target (issue 53):
at most 60 s on the 2-core CPU. Run quiet: ``python benchmarks/meanfield_sphere_speed.py``. The
start is the uniform density with 1e-3 perturbations of degrees 1 and 3, which clusters (the
uniform state is unstable: sigma = 0.5 < sigma_c = 0.669 for SA at beta = 3 on S^2).
"""

import os
import time

os.environ.setdefault("RANKDYN_NO_COMPILE_CACHE", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from rankdyn._run._io import cpu_model  # noqa: E402
from rankdyn.meanfield import solve_sphere_density, sphere_grid  # noqa: E402
from rankdyn.theory import critical_noise  # noqa: E402

BAND, BETA, SIGMA, T1, RTOL = 64, 3.0, 0.5, 100.0, 1e-8


def main() -> None:
    theta, phi = sphere_grid(BAND)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    x, z = np.sin(t) * np.cos(p), np.cos(t)
    rho0 = 1.0 + 1e-3 * x + 1e-3 * (5 * z**3 - 3 * z)
    kw = dict(
        beta=BETA, sigma=SIGMA, t1=T1, times=np.linspace(0, T1, 11), dynamics="sa", band_limit=BAND, rtol=RTOL
    )
    t0 = time.perf_counter()
    sol = solve_sphere_density(rho0, **kw)
    sol.coefficients.block_until_ready()
    cold = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    sol = solve_sphere_density(rho0, **kw)
    sol.coefficients.block_until_ready()
    warm, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"CPU: {cpu_model()}; load average {os.getloadavg()[0]:.1f} (after the run)")
    sc = critical_noise(BETA, d=3, dynamics="sa")
    print(f"band limit {BAND}, SA, beta {BETA}, sigma {SIGMA} (sigma_c {sc:.3f})")
    print(f"t1 {T1}, rtol {RTOL}")
    print(f"cold {cold:.2f} s, warm {warm:.2f} s (CPU {cpu:.2f} s), steps {int(sol.num_steps)}")
    print(f"result {sol.result!r}")
    print(f"order parameter at the saved times: {np.round(np.asarray(sol.order_parameter), 4).tolist()}")
    drift = float(np.max(np.abs(sol.mass - sol.mass[0])))
    low = float(np.min(sol.min_density))
    print(f"mass drift {drift:.1e}, min density {low:.2e}, tail {float(sol.tail[-1]):.1e}")


if __name__ == "__main__":
    main()
