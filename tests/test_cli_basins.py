"""``rankdyn basins`` and the token-class labels it matches attractors by.

Oracles: a label is the same for every image of a token matrix under the permutations it is
given and under the sign flip, and differs between coincidence patterns and ranks; the CLI's
dataset holds, for the 2-token causal family, the consensus x1 = x2 (rank 1) as an attractor
whose fractions and intervals are those of its per-start labels.
"""

import itertools
import json

import jax
import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn.cli import main
from rankdyn.theory import token_class_label, token_class_name


def test_token_class_label_is_invariant_and_separating():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 3))
    x = np.stack([a, a, -a, b, c])
    perms = np.array(list(itertools.permutations(range(5))))
    images = np.stack([s * x[p] for p in perms[::11] for s in (1, -1)])
    for lab in (token_class_label(5, all_permutations=True), token_class_label(5, permutations=perms)):
        values = set(np.asarray(jax.jit(jax.vmap(lab))(images)).tolist())
        assert len(values) == 1
        (v,) = values
        assert token_class_name(v, 5).startswith("rank 3: ") and token_class_name(v, 5).count("=") == 2
    plain = jax.jit(jax.vmap(token_class_label(5)))
    ys = np.stack([x, x[[1, 0, 3, 2, 4]], np.stack([a, a, b, b, c]), np.stack([a, -a, -a, b, c]),
                   np.stack([a] * 5), np.stack([a, b, c, a + b, c])])  # fmt: skip
    got = np.asarray(plain(ys)).tolist()
    assert token_class_name(got[0], 5) == "rank 3: x1 = x2 = -x3"
    assert got[1] != got[0]  # the identity alone: the order of the tokens matters
    names = [token_class_name(v, 5) for v in got[2:]]
    assert names == ["rank 3: x1 = x2; x3 = x4", "rank 3: x1 = -x2 = -x3", "rank 1: x1 = x2 = x3 = x4 = x5",
                     "rank 3: x3 = x5"]  # fmt: skip
    with pytest.raises(UsageError, match="1 to 9 tokens"):
        token_class_label(10)
    with pytest.raises(UsageError, match="permutations of range"):
        token_class_label(3, permutations=[[0, 0, 1]])


@pytest.mark.slow  # about 10 s: the symmetry probe, the batch's compile and the figure
def test_cli_basins_dataset_and_figure(tmp_path, capsys):
    import xarray as xr

    out = tmp_path / "b"
    argv = ["basins", "--param", "w", "--from", "0.6", "--to", "1.2", "--steps", "3", "--starts", "24",
            "--horizon", "300", "--settle-tol", "1e-5", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    ds = xr.open_dataset(out / "basins.nc")
    assert (
        ds.period.shape == (3, 24)
        and ds.starts.shape == (24, 2, 2)
        and np.allclose(ds.param, [0.6, 0.9, 1.2])
    )
    names = [str(v) for v in ds.attractor.values]
    assert "fixed point, rank 1: x1 = x2" in names
    idx = ds.attractor_index.values
    assert np.array_equal(idx >= 0, ds.status.values == "successful")
    for j in range(len(names)):
        frac = (idx == j).mean(axis=1)
        assert np.allclose(ds.fraction.values[:, j], frac)
        assert np.all(ds.ci95_low.values[:, j] <= frac) and np.all(frac <= ds.ci95_high.values[:, j])
    assert np.allclose(ds.fraction.sum("attractor") + ds.not_settled, 1)
    cfg = json.loads(ds.attrs["config"])
    assert cfg["param"] == "w" and cfg["starts"] == 24 and ds.attrs["seed"] == 0 and cfg["settle_tol"] > 0
    ds.close()
    assert (out / "basins.png").stat().st_size > 0
    assert "basin fraction" in capsys.readouterr().out


def test_cli_basins_refuses_bad_flags(tmp_path, capsys, monkeypatch):
    import rankdyn._run._memory as memory

    monkeypatch.setattr(memory, "available_memory", lambda backend=None: (2**34, "host RAM"))  # 16 GiB
    base = ["basins", "--param", "w", "--from", "1", "--to", "2", "--steps", "3"]
    refusals = {
        "--from and --to are equal": ["basins", "--param", "w", "--from", "1", "--to", "1", "--steps", "3"],
        "--to inf: expected a finite number": ["basins", "--param", "w", "--from", "1", "--to", "inf",
                                               "--steps", "3"],
        "--steps 1: expected an integer >= 2": ["basins", "--param", "w", "--from", "1", "--to", "2",
                                                "--steps", "1"],
        "--starts 0": base + ["--starts", "0"],
        "--horizon 0": base + ["--horizon", "0"],
        "--max-period 0": base + ["--max-period", "0"],
        "--settle-tol nan": base + ["--settle-tol", "nan"],
        "--class-tol 2.0": base + ["--class-tol", "2"],
        "--w 3.0 is ignored": base + ["--w", "3"],
        "uniform attention does not read the temperature": ["basins", "--param", "dqk", "--from", "1", "--to",
                                                            "2", "--steps", "3"],
        "a stochastic map has no attractors": base + ["--dropout", "0.1"],
        "--per-layer-weights is not supported": base + ["--per-layer-weights"],
        "at most 9 tokens": base + ["--n", "12", "--d", "4"],
        "lower --starts or --steps": base + ["--starts", "2000000000", "--steps", "1000"],
    }  # fmt: skip
    for text, argv in refusals.items():
        assert main(argv + ["--out", str(tmp_path / "r")]) == 2, text
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and text in err and "Traceback" not in err, (text, err)
    assert not (tmp_path / "r").exists()
    # Positive control: the defaults (1000 starts) pass every check, and the check writes nothing.
    from rankdyn._commands import basins
    from rankdyn.cli import build_parser

    basins._check(build_parser().parse_args(base + ["--out", str(tmp_path / "ok")]))
    assert not (tmp_path / "ok").exists()
