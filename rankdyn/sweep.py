r"""Declarative parameter sweeps: a TOML grid -> one labelled dataset, resumable on disk.

A sweep is the Cartesian product of the values in ``[axes]`` with the parameters in ``[fixed]``
(masks x temperatures x normalisations x value families x sizes x seeds, ``docs/sweep.md``). Each grid
cell is an ensemble of ``batch`` trajectories $X^{(t+1)} = F_t(X^{(t)})$ (eqs. 2-3).

Cells are grouped by the parameters that change shapes or program structure (`STRUCTURAL`:
``n``, ``d``, ``num_layers``, ``batch``, norm placement, LN variant, ...). Inside a group every
other parameter (temperature ``dqk``, ``w``, value and query/key families, masks of equal ``n``,
seeds, initial conditions) only changes arrays: the cells' layers are stacked along a leading
axis and run by ONE compiled program, ``vmap`` over cells and over samples, ``lax.scan`` over
depth. Groups are cut into chunks of equal size (the last one padded by repeating a cell, so
the group compiles once); each chunk is written atomically to ``DIR/chunks/`` as soon as it is
done, so an interrupted sweep loses at most the chunk in flight and ``resume=True`` computes
only what is missing. The final dataset is assembled from the chunk files alone, so a resumed
sweep gives the same ``DIR/sweep.nc`` as an uninterrupted one.

Modules: `_params` (names, defaults, checks), `_schema` (TOML -> `SweepConfig`), `_plan` (groups
and chunks), `_program` (the compiled program on `rankdyn._run._scan`), `_store` (folder, chunks,
manifest, resume), `_assemble` (the xarray dataset), `_tasks` (a grid split into independent
tasks, ``rankdyn sweep --task I/N``: chunk ownership and the locks).
"""

from ._run._sharding import batch_mesh as batch_mesh, shard_batch as shard_batch
from ._sweep._assemble import NETCDF_ENGINE as NETCDF_ENGINE, assemble_sweep as assemble_sweep
from ._sweep._params import (
    CHEAP_METRICS as CHEAP_METRICS,
    STRUCTURAL as STRUCTURAL,
    SWEEP_PARAMS as SWEEP_PARAMS,
)
from ._sweep._plan import SweepPlan as SweepPlan, sweep_plan as sweep_plan
from ._sweep._schema import (
    MAX_CELLS as MAX_CELLS,
    SweepConfig as SweepConfig,
    load_sweep_config as load_sweep_config,
    parse_sweep_config as parse_sweep_config,
)
from ._sweep._store import assemble_folder as assemble_folder, run_sweep as run_sweep
from ._sweep._tasks import TaskShare as TaskShare, parse_task as parse_task
