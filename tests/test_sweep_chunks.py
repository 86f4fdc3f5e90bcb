"""Sweep chunk files: each is checked against the plan's cells on assembly and resume."""

import pytest

from rankdyn.cli import main

_TWO_CHUNKS = """
name = "two"
[axes]
dqk = [0.25, 4.0]
[fixed]
mask = "causal"
n = 3
d = 2
num_layers = 2
batch = 2
save_every = 1
[observe]
per_layer = ["mu"]
final = ["mu"]
[run]
chunk = 2
"""


@pytest.mark.slow
def test_assemble_and_resume_check_each_chunks_cells_against_the_plan(tmp_path, capsys):
    """A copy of chunk 0 saved as chunk 1 used to give a sweep.nc with cell 1 all NaN, exit 0;
    ``--assemble`` now refuses it naming the cells the file holds, ``--resume`` recomputes it,
    and a truncated chunk is called damaged, not missing."""
    import shutil

    import numpy as np
    import xarray as xr

    from rankdyn._sweep._assemble import NETCDF_ENGINE

    config, out = tmp_path / "two.toml", tmp_path / "out"
    config.write_text(_TWO_CHUNKS)
    base = ["sweep", str(config), "--out", str(out), "--no-plots", "--no-progress"]
    assert main(base) == 0
    chunks = out / "chunks"
    shutil.copy(chunks / "chunk_00000.npz", chunks / "chunk_00001.npz")
    capsys.readouterr()
    assert main(["sweep", "--assemble", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "chunk_00001.npz: it holds cells [0], not this chunk's [1]" in err, err
    assert main(base + ["--resume"]) == 0
    assert "chunk_00001.npz: it holds cells [0]" in capsys.readouterr().err
    ds = xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load()
    assert np.isfinite(ds["mu"].values).all()
    data = (chunks / "chunk_00001.npz").read_bytes()
    (chunks / "chunk_00001.npz").write_bytes(data[: len(data) // 2])
    assert main(["sweep", "--assemble", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "missing or unusable" in err and "chunk_00001.npz: it is damaged" in err, err
