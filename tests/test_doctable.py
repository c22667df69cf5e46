"""testbed/doctable.py: the measured tables tests write into the docs."""

import pytest

from testbed.doctable import DocTable

pytestmark = pytest.mark.unit

DOC = """intro
<!-- t:begin -->
| case | result |
| --- | --- |
| b | 2 |
| a | 1 |
<!-- t:end -->
after
"""


def first_cell(row):
    return row.split("|")[1].strip()


def test_a_row_replaces_its_keys_row_in_place_and_leaves_the_rest_of_the_doc(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    table = DocTable(doc, "t", first_cell)
    table.put("| a | 10 |")
    assert table.rows() == {"b": "| b | 2 |", "a": "| a | 10 |"}
    assert doc.read_text() == DOC.replace("| a | 1 |", "| a | 10 |")


def test_a_new_row_is_added_and_the_order_given_sorts_them(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    table = DocTable(doc, "t", first_cell)
    table.put("| c | 3 |", order=["a", "b", "c"])
    assert list(table.rows()) == ["a", "b", "c"]


def test_a_doc_without_the_markers_has_no_rows(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("nothing here\n")
    assert DocTable(doc, "t", first_cell).rows() == {}
