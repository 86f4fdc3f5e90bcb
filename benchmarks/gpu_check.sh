#!/usr/bin/env bash
# GPU check for issues 5, 10 and 45 (speed at scale, default metrics, long context), one script, < 8 minutes wall on one H200.
#
#   bash benchmarks/gpu_check.sh            # run from the repository root; results in $OUT
#
# Installs nothing and needs no network: it uses the machine's python3 with JAX (CUDA),
# Equinox, Optax, Optimistix, Lineax, SciPy and PyTorch as provided by the GPU image, and
# imports rankdyn from this checkout through PYTHONPATH. It writes to $OUT (default ./gpu_out):
#   env.txt                     nvidia-smi, python and package versions, JAX devices
#   simulate_speed_gpu.json     benchmarks/simulate_speed.py on the GPU: rankdyn with the default
#                               metrics (SVD every layer) and mu-only, and PyTorch on CUDA computing
#                               the same metrics when importable, all three reference configs
#   simulate_speed_gpu.txt      its log and table
#   precision.json              mu and sigma_min at depth: float32 HIGHEST vs float32 DEFAULT
#                               (TF32 on Ampere+/Hopper) vs float64, with timings
#   precision.txt               its log
#   long_context.txt            issue 45: simulate at n = 65536 on the blocked path, causal and
#                               window +-64 (d = 64, one head, 4 layers, 2 trajectories): seconds of
#                               the first (compile + run) and second call, and peak device memory
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # device memory stats then show what is really used
start=$(date +%s)

{
  echo "== date"; date -u
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || true
  echo "== python"; "$PY" -c 'import sys; print(sys.version)'
  "$PY" - <<'EOF'
import importlib
for m in ("jax", "jaxlib", "equinox", "optax", "optimistix", "lineax", "jaxtyping", "numpy", "scipy", "torch"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # report, never stop
        print(m, "unavailable:", type(e).__name__, e)
import jax
print("backend", jax.default_backend(), "devices", jax.devices())
EOF
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1. The benchmark on the GPU (about 2 minutes: each rankdyn variant is its own process and
#    compiles). Both metric sets: the default metrics (the batched SVD path, cuSOLVER on GPU) and
#    mu-only; one device (--devices all only splits CPUs). The JSON is rewritten after each
#    configuration, so a timeout keeps the configurations already measured.
timeout 170 "$PY" benchmarks/simulate_speed.py --json "$OUT/simulate_speed_gpu.json" --no-readme --repeats 3 \
  --metrics default,mu --devices 1 > "$OUT/simulate_speed_gpu.txt" 2>&1
echo "simulate_speed exit code $? after $(( $(date +%s) - start )) s"
tail -n 20 "$OUT/simulate_speed_gpu.txt"

# 2. Precision at depth: TF32 (DEFAULT) vs HIGHEST float32 vs float64 (about 30-60 s, compiles).
timeout 60 "$PY" - "$OUT/precision.json" > "$OUT/precision.txt" 2>&1 <<'EOF'
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)   # float64 reference; float32 arrays stay float32
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import rankdyn as rd
from rankdyn._model._layer import SelfAttentionLayer
from rankdyn._observe._spectral import singular_values

out = {"device": str(jax.devices()[0]), "backend": jax.default_backend(), "jax": jax.__version__, "cases": {}}
n, d, T, B, every = 32, 64, 256, 1024, 4
obs = jax.tree_util.Partial(lambda x: {"mu": rd.mu(x), "sigma_min": singular_values(x)[-1],
                                       "mu_normalized": rd.mu_normalized(x)})
for norm in ("post", "none"):
    ref_layer = rd.make_layer(jr.PRNGKey(0), n=n, d=d, mask="causal", placement=norm, value="orthogonal", qk="bert",
                              dtype=jnp.float64)
    x64 = rd.initial_tokens(jr.PRNGKey(1), "sphere", n, d, batch=B, dtype=jnp.float64)
    res = {}
    for label, dtype, prec in (("float64", jnp.float64, "highest"), ("float32_highest", jnp.float32, "highest"),
                               ("float32_default_tf32", jnp.float32, "default")):
        w = ref_layer.weights
        layer = SelfAttentionLayer(np.asarray(ref_layer.mask), w.w_q.astype(dtype), w.w_k.astype(dtype),
                                      w.w_v.astype(dtype), dqk=float(ref_layer.dqk), norm=ref_layer.norm,
                                      placement=norm, precision=prec)
        x0 = x64.astype(dtype)
        tr = rd.simulate(layer, x0, T, save_every=every, observe=obs)   # compile + run
        jax.block_until_ready(tr.metrics)
        t0 = time.perf_counter()
        tr = rd.simulate(layer, x0, T, save_every=every, observe=obs)
        jax.block_until_ready(tr.metrics)
        secs = time.perf_counter() - t0
        s = tr.summary  # batch statistics streamed inside the scan (a field)
        res[label] = {"seconds": secs, "layers": np.asarray(tr.layers).tolist(),
                      **{k: np.asarray(s.mean[k]).tolist() for k in ("mu", "sigma_min", "mu_normalized")},
                      "nonfinite": int(s.nonfinite)}
        print(norm, label, f"{secs:.3f} s", "mu[-1]", res[label]["mu"][-1], "sigma_min[-1]", res[label]["sigma_min"][-1],
              flush=True)
    ref = res["float64"]
    for label in ("float32_highest", "float32_default_tf32"):
        for k in ("mu", "sigma_min"):
            a, b = np.asarray(res[label][k]), np.asarray(ref[k])
            rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-300)
            res[label][f"{k}_rel_err_vs_float64"] = rel.tolist()
            # First saved layer where the float32 run is off by more than 10 % from float64.
            bad = np.nonzero(rel > 0.1)[0]
            res[label][f"{k}_first_layer_off_10pct"] = int(res[label]["layers"][bad[0]]) if bad.size else None
            print(norm, label, k, "first layer off by >10% vs float64:", res[label][f"{k}_first_layer_off_10pct"],
                  "floor (min mean value reached):", float(np.min(a)), flush=True)
    out["cases"][f"norm={norm}"] = res
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
EOF
echo "precision check exit code $? after $(( $(date +%s) - start )) s"
cat "$OUT/precision.txt" | tail -n 20
ls -la "$OUT"

# Long context (issue 45): causal and window +-64 at n = 65536 on the blocked attention path.
timeout 240 "$PY" - > "$OUT/long_context.txt" 2>&1 <<'EOF'
import time
import jax
import jax.random as jr
import rankdyn as rd

for mask, kw in (("window", {"window": 64}), ("causal", {})):
    n, d, layers, batch = 65536, 64, 4, 2
    layer = rd.make_layer(jr.PRNGKey(0), n=n, d=d, mask=mask, attention="blocked", **kw)
    x0 = rd.TokenSampler(jr.PRNGKey(1), "sphere", n, d, batch)
    for call in ("compile+run", "run"):
        t0 = time.perf_counter()
        tr = rd.simulate(layer, x0, layers, metrics="mu")
        jax.block_until_ready(tr.summary.mean)
        secs = time.perf_counter() - t0
        print(mask, n, call, f"{secs:.2f} s", f"{secs / (n * layers * batch) * 1e9:.1f} ns/token/layer",
              "mu", float(tr.summary.mean["mu"][-1]), flush=True)
    stats = jax.devices()[0].memory_stats() or {}
    print(mask, "peak device bytes", stats.get("peak_bytes_in_use"), flush=True)
EOF
echo "long context exit code $? after $(( $(date +%s) - start )) s"
cat "$OUT/long_context.txt"
