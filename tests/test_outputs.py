"""Files are written whole or not at all."""

import os
import re

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.outputs import check_output, write_atomically, write_csv, write_text


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


def test_a_link_is_followed_and_kept_and_a_new_file_has_the_umask_mode(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target.name)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    umask = os.umask(0o022)
    try:
        fresh = write_text(tmp_path / "fresh.csv", "x")
    finally:
        os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "--out='' is invalid: give a file name"),
        ("missing/out.csv", "the folder"),
        ("folder", "is a folder"),
        ("out.bogus", "unknown extension: use one of .pdf, .png"),
    ],
)
def test_an_output_path_is_checked_naming_the_flag(tmp_path, monkeypatch, name, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    with pytest.raises(GpuplanError, match=re.escape(message)):
        check_output(name, "--out", suffixes=("png", "pdf"))


def test_a_failed_write_names_the_target_not_the_temporary(tmp_path):
    def fail(tmp):
        raise OSError(28, "No space left on device", str(tmp))

    with pytest.raises(OSError) as err:
        write_atomically(tmp_path / "out.csv", fail)
    assert err.value.filename == str(tmp_path / "out.csv") and list(tmp_path.iterdir()) == []
