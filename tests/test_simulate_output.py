"""`rankdyn simulate` shows what was asked: the table's columns and the figures follow --metrics
and --plot, and --help lists the metric names one per line."""

import json
import re

import numpy as np
import pytest

from rankdyn._commands._table import METRIC_HELP, plot_names, table_columns
from rankdyn._errors import UsageError
from rankdyn._observe._metric_observer import ALL_METRICS
from rankdyn.cli import build_parser, main


def _help(capsys) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["simulate", "--help"])
    return capsys.readouterr().out


def test_help_lists_every_metric_once_per_line(capsys):
    text = _help(capsys)
    assert set(METRIC_HELP) == set(ALL_METRICS)
    lines = text.splitlines()
    for name in ALL_METRICS:
        # The name starts its own line, followed by its description on that line.
        (line,) = [ln for ln in lines if re.match(rf"\s+{name}\s{{2,}}\S", ln)]
    assert "(default: all) (default: all)" not in " ".join(text.split())
    gaussian = " ".join(text[text.index("\n  --value {") :].split())[:400]
    assert "std 1/sqrt(d)" in gaussian


def test_table_and_plot_choices():
    recorded = ("mu", "sigma_ratio", "eff_rank")  # in ALL_METRICS order, as the summary holds them
    assert table_columns(recorded, "eff_rank, mu,sigma_ratio") == ("eff_rank", "mu", "sigma_ratio")
    assert table_columns(ALL_METRICS, "all") == (
        "mu",
        "mu_normalized",
        "min_cos",
        "sigma_min",
        "num_rank",
        "eps_min",
    )
    assert plot_names(None, recorded) == recorded
    assert plot_names(None, ALL_METRICS) == ("mu",)
    assert plot_names("eff_rank", recorded) == ("eff_rank",)
    with pytest.raises(UsageError, match="--plot min_cos is not recorded"):
        plot_names("min_cos", recorded)
    with pytest.raises(UsageError, match="--plot: unknown metric 'rank'"):
        plot_names("rank", recorded)


@pytest.mark.slow  # end to end: `rankdyn simulate` with three figures
def test_simulate_table_and_figures_follow_metrics(tmp_path, capsys):
    out = tmp_path / "run"
    argv = (
        "simulate --n 5 --d 4 --num-layers 6 --batch 3 --x64 --no-progress --metrics mu,sigma_ratio,eff_rank"
    )
    assert main([*argv.split(), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    header = next(ln for ln in printed.splitlines() if ln.startswith("layer"))
    assert header.split() == ["layer", "mu", "sigma_ratio", "eff_rank"]
    assert sorted(p.name for p in out.glob("*.png")) == ["eff_rank.png", "mu.png", "sigma_ratio.png"]
    # The printed values are the saved means (first row: layer 0).
    data = json.loads((out / "metrics.json").read_text())
    row0 = next(ln for ln in printed.splitlines() if ln.split()[:1] == ["0"]).split()[1:]
    for name, value in zip(["mu", "sigma_ratio", "eff_rank"], row0, strict=True):
        np.testing.assert_allclose(float(value), data["metrics"][name]["mean"][0], rtol=1e-4)


def test_plot_flag_refused_before_compute(tmp_path, capsys):
    argv = "simulate --n 5 --d 4 --num-layers 6 --batch 3 --metrics mu --plot eff_rank"
    assert main([*argv.split(), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--plot eff_rank" in err
    assert not (tmp_path / "r").exists()
