"""The printed table of ``rankdyn simulate``: every saved layer up to a screenful, then the elided
layers named; and the line saying what was written (no compute: the helpers of commands/_table)."""

import numpy as np

from rankdyn._commands._table import SCREEN_ROWS, elided_ranges, print_written, shown_rows


def test_every_row_up_to_a_screenful():
    assert shown_rows(8) == list(range(8))  # 7 layers + layer 0: all of them (was 0, 1, 2, 4, 5, 6, 7)
    assert shown_rows(SCREEN_ROWS) == list(range(SCREEN_ROWS))
    assert elided_ranges(np.arange(8), set(shown_rows(8))) == ""


def test_beyond_a_screenful_the_first_rows_the_last_and_the_floor_crossing():
    rows = shown_rows(101, must=(60,))
    assert rows == [*range(SCREEN_ROWS - 1), 60, 100]
    layers = np.arange(0, 202, 2)  # saved every 2 layers: the ranges name layers, not rows
    assert elided_ranges(layers, set(rows)) == "78-118, 122-198"


def test_written_files_are_named(capsys, tmp_path):
    print_written(tmp_path, ["metrics.json", "mu.png"])
    print_written(tmp_path, ["metrics.json"])
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote in {tmp_path}: metrics.json, mu.png", f"wrote {tmp_path}/metrics.json"]
