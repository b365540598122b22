"""fileio.py: reading UTF-8 lines (plain, gzip, every error path named by file and line) and atomic
writes (the umask honoured, a symbolic link kept)."""
import gzip

import numpy as np
import pytest

from minitransformer.fileio import read_lines


def test_read_lines_plain_and_gzip(tmp_path):
    text = "ein Haus\r\nzwei Häuser\n\nletzte\u2028Zeile\n"
    (tmp_path / "a.txt").write_bytes(text.encode("utf-8"))
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.write(text.encode("utf-8"))
    expected = ["ein Haus", "zwei Häuser", "", "letzte\u2028Zeile"]  # U+2028 does not end a line
    assert read_lines(tmp_path / "a.txt") == expected
    assert read_lines(str(tmp_path / "a.txt.gz")) == expected
    (tmp_path / "b.txt").write_bytes(b"no newline at the end")
    assert read_lines(tmp_path / "b.txt") == ["no newline at the end"]


def test_read_lines_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot read .*nowhere.de: no such file"):
        read_lines(tmp_path / "nowhere.de")


def test_read_lines_names_the_bad_utf8_line(tmp_path):
    path = tmp_path / "bad.en"
    path.write_bytes(b"fine\nstill fine\nbroken \xff here\nfine again\n")
    with pytest.raises(ValueError, match=r"bad.en: line 3 is not valid UTF-8 .*byte 8 of the line"):
        read_lines(path)
    gz = tmp_path / "bad.en.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"\xc3\n")
    with pytest.raises(ValueError, match=r"bad.en.gz: line 1 is not valid UTF-8"):
        read_lines(gz)


def test_read_lines_bad_gzip(tmp_path):
    path = tmp_path / "fake.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="fake.gz: cannot read the file"):
        read_lines(path)


def test_gzip_data_under_a_plain_name_is_named_as_such(tmp_path):
    (tmp_path / "train.de").write_bytes(gzip.compress("ein Haus\n".encode("utf-8")))
    with pytest.raises(ValueError, match="train.de holds gzip-compressed data, not text"):
        read_lines(tmp_path / "train.de")


def test_atomic_writes_follow_the_umask_for_checkpoints_and_tokenizers(tmp_path):
    import os
    import stat
    from minitransformer import checkpoint
    from minitransformer.bpe import BPE
    previous = os.umask(0o027)
    try:
        checkpoint.save(tmp_path / "ck.npz", {"w": np.ones(2, np.float32)}, {"step": 1})
        BPE().save(tmp_path / "tok.json")
    finally:
        os.umask(previous)
    for name in ("ck.npz", "tok.json"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640, name       # 0o666 & ~0o027
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]


def test_an_atomic_write_through_a_symbolic_link_replaces_the_file_and_keeps_the_link(tmp_path):
    from minitransformer.fileio import atomic_write
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.txt").write_text("old")
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "real" / "out.txt")
    assert atomic_write(link, lambda f: f.write("new"), mode="w") == str(link)
    assert link.is_symlink() and (tmp_path / "real" / "out.txt").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.txt"]   # no temporary left
