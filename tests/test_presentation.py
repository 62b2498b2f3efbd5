"""The one presentation module: alignment and the paper formats."""

from __future__ import annotations

from harness.presentation import Bold, align, csv_text, latex_table, markdown_table


def test_align_pads_columns_and_right_aligns_numbers():
    lines = align([["name", "docs", "note"], ["scifact", "5,183", "ok"], ["nq", "2,681,468", ""]])
    assert lines == ["name          docs  note", "scifact      5,183  ok", "nq       2,681,468"]
    assert align([["a", "b"], ["x", "y"]], right=[True, False]) == ["a  b", "x  y"]
    assert align([]) == []


def test_numbers_deltas_dashes_and_tiny_p_values_count_as_numeric():
    lines = align([["metric", "delta", "p"], ["nDCG@10", "+0.0020", "< 1e-4"], ["MRR@10", "–", "0.0312"]])
    assert lines[1].endswith("+0.0020  < 1e-4") and lines[2].endswith("      –  0.0312")


def test_bold_cells_render_per_format():
    header, body = ["dataset", "a"], [["scifact", Bold("0.7")]]
    assert "| scifact | **0.7** |" in markdown_table(header, body)
    assert r"scifact & \textbf{0.7} \\" in latex_table(header, body)
    assert csv_text(header, [["scifact", 0.1 + 0.2], ["nq", None]]) == "dataset,a\nscifact,0.30000000000000004\nnq,\n"
