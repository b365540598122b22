"""Files: read UTF-8 text (plain, .gz, or stdin), write a file atomically. Every reader and writer of
the package goes through these functions, so they agree on encodings and on failure.

Reading: UTF-8, a leading byte-order mark dropped, only "\\n" ends a line (not U+2028 and friends, so
parallel files stay aligned), a trailing "\\r" removed; an undecodable byte is an error naming the
file and the line (a checks.FileError). Writing: to a temporary file in the same directory, then a
rename, so a reader or a crash sees the old file or the new one, never half of one; the file gets
the mode a plain open() would give (the umask), and the temporary's name says which file it was for.
Imports only checks.py of the package. Left out on purpose: other encodings, streaming reads (corpora are read whole).
"""
import gzip
import os
import sys
import tempfile

from .checks import FileError

TEMP_PREFIX = ".tmp-"  # atomic_write's temporaries: .tmp-<random>-<final name>


def read_text(path):
    """The whole text of a UTF-8 file (gunzipped if the name ends in .gz; "-" reads stdin).

    read_text("train.de.gz") -> "Zwei junge weiße Männer ...\\n..."
    """
    path = os.fspath(path)
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise FileError(path, None, "is a directory, not a text file") from None
    except (OSError, EOFError) as e:  # gzip.BadGzipFile, a truncated archive
        raise ValueError(f"{path}: cannot read the file ({e})") from None
    try:
        return raw.decode("utf-8-sig")  # UTF-8, dropping a byte-order mark if there is one
    except UnicodeDecodeError as e:
        if raw[:2] == b"\x1f\x8b":  # the gzip magic number
            raise FileError(path, None, "holds gzip-compressed data, not text: name it *.gz, or gunzip it") from None
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - raw.rfind(b"\n", 0, e.start)  # 1-based byte position within the line
        raise FileError(path, line, f"is not valid UTF-8 ({e.reason} at byte {column} of the line)") from None


def read_lines(path):
    """The lines of read_text(path), without their line endings ("-" reads stdin).

    A file "a\\nb\\n" and a file "a\\nb" both give ["a", "b"]; "a\\r\\n" gives ["a"].
    """
    lines = read_text(path).split("\n")
    if lines[-1] == "":  # the file ended with a newline (or is empty)
        lines.pop()
    return [s[:-1] if s.endswith("\r") else s for s in lines]


def check_creatable(directory, what):
    """Before any work: `directory` is a folder this user may write in, or its nearest existing ancestor
    is (atomic_write makes the rest); else a ValueError "<what> cannot be written: ..."."""
    nearest = directory or "."
    while not os.path.lexists(nearest):
        nearest = os.path.dirname(nearest) or "."
    if not os.path.isdir(nearest):
        raise ValueError(f"{what} cannot be written: {nearest} is a file, not a directory")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ValueError(f"{what} cannot be written: no permission to write in {nearest}")


def check_writable_dir(path, what):
    """Before any work: `path` is a directory this user may write in, or one that can be made; else a
    ValueError "<what> <path> is a file, not a directory" or check_creatable's. Creates nothing."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{what} {path} is a file, not a directory")
    check_creatable(os.path.normpath(path), f"{what} {path}")


def atomic_write(path, write, mode="wb"):
    """Call write(file) on a temporary file in path's directory, then rename it to path (to the file
    a symbolic link points to, so that the link stays).

    mode is "wb" (write gets a binary file) or "w" (text, UTF-8). Returns path.
    atomic_write("tok.json", lambda f: f.write(text), mode="w")
    """
    path = os.fspath(path)
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix="-" + os.path.basename(target))
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0o22)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; give it a plain file's mode
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
