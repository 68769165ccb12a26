"""Files are written whole or not at all."""

import pytest

from gpuplan.outputs import write_atomically, write_csv, write_text


def test_a_written_file_holds_exactly_its_content(tmp_path):
    path = write_text(tmp_path / "a.json", '{"x": 1}')
    assert path.read_text() == '{"x": 1}' and list(tmp_path.iterdir()) == [path]


def test_a_failed_write_leaves_neither_a_partial_file_nor_the_temporary(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomically(target, fail)
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_frames_are_written_as_csv(tmp_path):
    pd = pytest.importorskip("pandas")
    path = write_csv(tmp_path / "t.csv", pd.DataFrame({"a": [1, 2]}))
    assert path.read_text().splitlines() == ["a", "1", "2"]
