"""fileio.py: reading UTF-8 lines (plain, gzip, every error path named by file and line) and atomic
writes (the umask honoured, a symbolic link kept)."""
import gzip

import numpy as np
import pytest

from minitransformer.text.fileio import read_lines


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
    from minitransformer.run import checkpoint
    from minitransformer.text.bpe import BPE
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
    from minitransformer.text.fileio import atomic_write
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.txt").write_text("old")
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "real" / "out.txt")
    assert atomic_write(link, lambda f: f.write("new"), mode="w") == str(link)
    assert link.is_symlink() and (tmp_path / "real" / "out.txt").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.txt"]   # no temporary left


def test_a_replaced_file_keeps_its_permission_bits(tmp_path):
    import os
    import stat
    from minitransformer.text.fileio import atomic_write
    private = tmp_path / "secret.json"
    private.write_text("old")
    os.chmod(private, 0o600)                                  # it became 0644 when replaced
    atomic_write(private, lambda f: f.write("new"), mode="w")
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600 and private.read_text() == "new"


def test_a_symbolic_link_out_of_its_folder_is_not_written_through(tmp_path):
    from minitransformer.checks import FileError
    from minitransformer.text.fileio import atomic_write
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    (tmp_path / "run").mkdir()
    planted = tmp_path / "run" / "checkpoint_best.npz"
    planted.symlink_to(outside)
    with pytest.raises(FileError, match=r"checkpoint_best\.npz is a symbolic link to .*outside\.txt, outside its folder"):
        atomic_write(planted, lambda f: f.write(b"model"))
    assert outside.read_text() == "not yours" and planted.is_symlink()


def test_a_long_legal_name_is_written_and_a_name_past_name_max_is_refused_before_any_work(tmp_path):
    from minitransformer.text.fileio import NAME_MAX, atomic_write, check_name
    name = "t" * 246 + ".json"                                # 251 bytes: .tmp-XXXXXXXX- + name would not fit
    atomic_write(tmp_path / name, lambda f: f.write("{}"), mode="w")
    assert [p.name for p in tmp_path.iterdir()] == [name]
    check_name(tmp_path / ("ü" * (NAME_MAX // 2)), "--output")  # 254 bytes
    with pytest.raises(ValueError, match=r"--output .*: the file name is 256 bytes long, more than the 255"):
        check_name(tmp_path / ("ü" * 128), "--output")


def test_temporaries_of_killed_writers_are_removed_and_live_ones_kept(tmp_path):
    import fcntl
    import os
    import time
    from minitransformer.text.fileio import atomic_write
    old = time.time() - 3600
    names = {".tmp-abcd1234-tok.json": True,                 # killed mid-write an hour ago: removed
             ".tmp-live0000-ck.npz": False,                  # an hour old, but a live writer holds its lock
             ".tmp-fresh000-ck.npz": False,                  # just made: its writer may not hold the lock yet
             ".tmp-mine-notes.txt": False,                   # not our pattern (8 random characters)
             "notes.txt": False}
    for name in names:
        (tmp_path / name).write_text("x")
        if name != ".tmp-fresh000-ck.npz":
            os.utime(tmp_path / name, (old, old))
    live = os.open(tmp_path / ".tmp-live0000-ck.npz", os.O_RDONLY)
    fcntl.flock(live, fcntl.LOCK_EX)
    try:
        atomic_write(tmp_path / "out.txt", lambda f: f.write("new"), mode="w")
    finally:
        os.close(live)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {name for name, removed in names.items() if not removed} | {"out.txt"}


def test_a_full_disk_names_the_file_not_the_temporary(tmp_path):
    import errno
    from minitransformer.text.fileio import atomic_write

    def full(f):
        raise OSError(errno.ENOSPC, "No space left on device")
    (tmp_path / "tok.json").write_text("old")
    with pytest.raises(OSError, match=r"No space left on device: '.*tok\.json'") as caught:
        atomic_write(tmp_path / "tok.json", full, mode="w")
    assert caught.value.errno == errno.ENOSPC and ".tmp-" not in str(caught.value)
    assert [p.name for p in tmp_path.iterdir()] == ["tok.json"] and (tmp_path / "tok.json").read_text() == "old"


def test_a_fifo_is_read_like_a_file(tmp_path):
    import os
    import threading
    fifo = tmp_path / "lines.fifo"                            # what a shell's <(...) gives: a pipe with a name
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as f:
            f.write("ein Haus\nzwei\n".encode("utf-8"))
    writer = threading.Thread(target=feed)
    writer.start()
    assert read_lines(fifo) == ["ein Haus", "zwei"]
    writer.join()


# ---- reading is bounded before it is done: devices, endless pipes, long lines, large files, JSON bombs
def test_a_device_is_refused_before_it_is_opened(tmp_path):
    from minitransformer.text.fileio import read_json
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"zero is a device, not a file"):
        read_lines(tmp_path / "zero")
    with pytest.raises(ValueError, match=r"zero is a device, not a file"):
        read_json(tmp_path / "zero", "a tokenizer file")


def test_an_endless_pipe_stops_at_the_limit_not_at_the_end_of_memory(tmp_path):
    """A FIFO fed for ever (`yes | ...`): read_lines refuses it once `limit` bytes (a line counted
    LINE_COST bytes more) have come, and the writer is released by the closed pipe."""
    import os
    import threading
    from minitransformer.text.fileio import LINE_COST
    fifo = tmp_path / "endless.fifo"
    os.mkfifo(fifo)
    written = []

    def feed():
        try:
            with open(fifo, "wb") as f:
                while sum(written) < 1 << 24:                 # stops by itself, should the bound fail
                    f.write(b"y\n" * 1000)
                    written.append(2000)
        except BrokenPipeError:
            pass
    writer = threading.Thread(target=feed)
    writer.start()
    with pytest.raises(ValueError, match=r"endless\.fifo holds more than the 100,000 bytes of text a file may hold"):
        read_lines(fifo, limit=100_000)
    writer.join()
    assert sum(written) < 1 << 24 and 100_000 // (2 + LINE_COST) < 1600


def test_a_line_over_the_limit_is_refused_with_its_number(tmp_path, monkeypatch):
    from minitransformer.text import fileio
    monkeypatch.setattr(fileio, "MAX_LINE_BYTES", 10)
    path = tmp_path / "a.txt"
    path.write_bytes(b"0123456789\n012345678\r\n01234567890\n")      # 10, 9 and \r, then 11 bytes
    with pytest.raises(ValueError, match=r"a\.txt: line 3 is longer than the 10 bytes a line may have"):
        read_lines(path)
    path.write_bytes(b"0123456789\n0123456789")
    assert read_lines(path) == ["0123456789", "0123456789"]


def test_a_gzip_that_inflates_past_the_limit_is_refused_as_it_inflates(tmp_path):
    """Concatenated gzip members: a few KB that inflate to 64 MiB; read with a 1 MiB limit, refused after
    about 1 MiB of it, never holding the rest."""
    import tracemalloc
    path = tmp_path / "bomb.txt.gz"
    path.write_bytes(gzip.compress(b"abc\n" * (1 << 18), 9) * 64)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"bomb\.txt\.gz holds more than the 1,048,576 bytes of text"):
            read_lines(path, limit=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_json_is_bounded_before_it_is_parsed(tmp_path):
    """parse_json counts the values first ("[{},{},...]" is 24 times its bytes as objects) and refuses NaN,
    Infinity and numbers that overflow; read_json caps the bytes it reads."""
    from minitransformer.text.fileio import JSONLimitError, MAX_JSON_ITEMS, parse_json, read_json
    assert parse_json('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    with pytest.raises(JSONLimitError, match=r"holds [\d,]+ values or more, more than 8,388,608"):
        parse_json("[" + "{}," * MAX_JSON_ITEMS + "{}]")
    for bad, reason in (("[NaN]", "NaN is not a JSON number"), ("[-Infinity]", "-Infinity is not a JSON number"),
                        ("[1e400]", "the number 1e400 is out of range")):
        with pytest.raises(ValueError, match=reason):
            parse_json(bad)
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000)
    (tmp_path / "big.json").write_text("[" + "1," * 600 + "1]")
    with pytest.raises(ValueError, match=r"big\.json is larger than the 1,000 bytes a tokenizer file may have"):
        read_json(tmp_path / "big.json", "a tokenizer file", limit=1000)


def test_a_file_too_large_by_its_size_is_refused_before_a_byte_is_read(tmp_path):
    """A regular file over MAX_TEXT_BYTES (here a sparse one: no disk, no time) is refused by its size."""
    import tracemalloc
    from minitransformer.text.fileio import MAX_TEXT_BYTES
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"huge\.txt holds more than the 134,217,728 bytes of text"):
            read_lines(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_stdin_closed_is_named(monkeypatch):
    """`translate --input - <&-`: Python sets sys.stdin to None; the reader says so in one sentence."""
    import sys
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(ValueError, match=r"^stdin is closed: there is no standard input to read$"):
        read_lines("-")
