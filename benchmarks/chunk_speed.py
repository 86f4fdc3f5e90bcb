"""simulate's chunk sizes against the hand-written JAX loop, in process CPU seconds (holds on a busy machine).

    python benchmarks/chunk_speed.py CONFIG CHUNKS [REPEATS] [OVERRIDES_JSON]
    e.g. taskset -c 0 python benchmarks/chunk_speed.py small 64,128,256,512,1024 3

CONFIG is one of `speed._configs.CONFIGS` (float32, post-LN, mu-only metrics), OVERRIDES_JSON
changes its fields (e.g. '{"n": 16, "d": 32, "batch": 4096, "layers": 64}'). Per chunk size:
median, min and max process CPU seconds of ``rankdyn.simulate(..., chunk=c)`` after a warm-up,
and the ratio to the hand-written ``jit`` + ``lax.scan`` over the whole batch
(`speed/_reference_jax.py`). This is the measurement behind `rankdyn._run._autotune`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import jax
    from speed._configs import CONFIGS, build
    from speed._hardware import cpu_name
    from speed._reference_jax import jax_inputs, make_jax_loop

    import rankdyn as rd

    name, chunks = argv[0], [int(c) for c in argv[1].split(",")]
    reps = int(argv[2]) if len(argv) > 2 else 3
    cfg = dict(CONFIGS[name], **(json.loads(argv[3]) if len(argv) > 3 else {}))
    layer, x0 = build(cfg)
    wq, wk, wv, mask, dqk = jax_inputs(layer)
    loop = make_jax_loop(cfg["layers"], cfg["per_layer"], dqk)

    def cpu(f):
        f()
        ts = []
        for _ in range(reps):
            c = time.process_time()
            f()
            ts.append(time.process_time() - c)
        return statistics.median(ts), min(ts), max(ts)

    print(f"{cpu_name()}, load average before {os.getloadavg()[0]:.2f}; {cfg}")
    rows = [("hand-written JAX loop", cpu(lambda: jax.block_until_ready(loop(x0, wq, wk, wv, mask))))]
    for c in chunks:
        run = lambda c=c: rd.simulate(layer, x0, cfg["layers"], metrics="mu,eps_min", chunk=c)  # noqa: E731
        rows.append((f"simulate chunk={c}", cpu(lambda: jax.block_until_ready(run().summary))))
    base = rows[0][1][0]
    for label, (med, lo, hi) in rows:
        print(f"{label}: CPU s median {med:.3f} (min {lo:.3f}, max {hi:.3f}), {med / base:.2f}x the loop")
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
