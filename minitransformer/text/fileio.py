"""Files: read UTF-8 text (plain, .gz, or stdin), write a file atomically. Every reader and writer
of the package goes through these functions, so they agree on encodings and on failure.

Reading: UTF-8, a leading byte-order mark dropped, only "\\n" ends a line (not U+2028 and friends,
so parallel files stay aligned), a trailing "\\r" removed; an undecodable byte is an error naming
the file and the line (a checks.FileError). Writing: to a temporary file in the same directory, then
a rename, so a reader or a crash sees the old file or the new one, never half of one. A new file
gets the mode a plain open() would give (the umask), a replaced one keeps its own (0600 stays 0600);
a symbolic link that leads out of its folder is never written through; the temporary's name says
which file it was for (hashed when the name is long, so that any legal name fits NAME_MAX), and the
writer holds an flock on it, so that temporaries a killed writer left behind can be told from live
ones and removed by the next write in that folder. A failed write (a full disk) names the file, not
the temporary. Every read is bounded before it is made (a device refused, a line, a file and a
JSON text capped), so /dev/zero, an endless pipe or a gzip bomb is a sentence, not all memory.
Imports only checks.py of the package. Left out on purpose: other encodings, corpora larger than
memory (the lines are held; the cap keeps them within a few hundred MiB).
"""
import contextlib
import fcntl
import gzip
import hashlib
import json
import math
import os
import re
import stat
import sys
import tempfile
import time

from ..checks import FileError

# atomic_write's temporaries: .tmp-<8 random characters>-<final name, or its hash>
TEMP_PREFIX = ".tmp-"
TEMP_PATTERN = re.compile(r"\.tmp-[a-z0-9_]{8}-.+")  # mkstemp's random part: 8 of [a-z0-9_]
NAME_MAX = 255             # bytes in a file name (Linux, macOS)
# a temporary this old, and locked by no process, was left by a killed writer
STALE_SECONDS = 60
# Reading is bounded before it is done: a text file holds at most MAX_TEXT_BYTES (each line counted
# LINE_COST bytes more, about what a str in a list costs), a line at most MAX_LINE_BYTES; a JSON
# file (a tokenizer, a checkpoint's meta.json) at most MAX_JSON_BYTES and MAX_JSON_ITEMS values.
MAX_TEXT_BYTES = 1 << 27
LINE_COST = 64
MAX_LINE_BYTES = 1 << 21
MAX_JSON_BYTES = 1 << 27
MAX_JSON_ITEMS = 1 << 23


def _opened(path):
    """A binary stream of path ("-": stdin; a .gz name: inflated as it is read). A directory or a
    device (/dev/zero, which never ends) is refused before it is opened; a FIFO is read."""
    if path == "-":
        if sys.stdin is None:                                       # started with stdin closed
            raise FileError(path, None, "is closed: there is no standard input to read")
        return contextlib.nullcontext(sys.stdin.buffer)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"cannot read {path}: no such file") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the file ({e.strerror})") from None
    if stat.S_ISDIR(mode):
        raise FileError(path, None, "is a directory, not a text file")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise FileError(path, None, "is a device, not a file: give a file (or a pipe)")
    try:
        return (gzip.open if path.endswith(".gz") else open)(path, "rb")
    except OSError as e:
        raise ValueError(f"{path}: cannot read the file ({e.strerror or e})") from None


def read_lines(path, limit=MAX_TEXT_BYTES):
    """The lines of a UTF-8 file (gunzipped if the name ends in .gz; "-" reads stdin), without
    their line endings, read line by line: a line over MAX_LINE_BYTES, or a file over `limit`
    (each line counted LINE_COST bytes more than its text: what holding it costs) is refused
    before more of it is read, so an endless pipe, stdin or a gzip bomb stops there.

    A file "a\\nb\\n" and a file "a\\nb" both give ["a", "b"]; "a\\r\\n" gives ["a"].
    """
    path = os.fspath(path)
    lines = []
    total = 0
    head = b""
    stream = _opened(path)
    try:
        with stream as f:
            info = os.fstat(f.fileno()) if path != "-" and not path.endswith(".gz") else None
            if info is not None and stat.S_ISREG(info.st_mode) and info.st_size > limit:
                total = info.st_size                     # too large by its size alone: nothing read
            while total <= limit:
                raw = f.readline(MAX_LINE_BYTES + 2)
                if not raw:
                    break
                head = head or raw[:2]
                _check_line(path, len(lines) + 1, raw)
                total += len(raw) + LINE_COST
                if total <= limit:
                    lines.append(_decode(path, len(lines) + 1, raw, head))
    except (OSError, EOFError) as e:  # gzip.BadGzipFile, a truncated archive
        raise ValueError(f"{path}: cannot read the file ({e})") from None
    if total > limit:
        raise FileError(path, None, f"holds more than the {limit:,} bytes of text a file may hold "
                        f"(a line counts {LINE_COST} bytes more than its text): split it into "
                        "smaller files")
    return lines


def _check_line(path, number, raw):
    """A FileError when line `number` (raw: its bytes as readline gave them, at most
    MAX_LINE_BYTES + 2) is over MAX_LINE_BYTES."""
    if len(raw) - raw.endswith(b"\n") > MAX_LINE_BYTES:
        raise FileError(path, number, f"is longer than the {MAX_LINE_BYTES:,} bytes a line may "
                        "have (is it text, one sentence a line?)")


def _decode(path, number, raw, head):
    """Line `number` of path as text, without "\\n" and a trailing "\\r" (a byte-order mark
    dropped from line 1); an undecodable byte: a FileError naming the line and the byte."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as e:
        if head == b"\x1f\x8b":  # the gzip magic number
            raise FileError(path, None, "holds gzip-compressed data, not text: "
                                        "name it *.gz, or gunzip it") from None
        raise FileError(path, number, f"is not valid UTF-8 ({e.reason} at byte {e.start + 1} "
                                      "of the line)") from None


def read_json(path, what, limit=MAX_JSON_BYTES):
    """The JSON value of a UTF-8 file (parse_json's bounds), read with a cap of `limit` bytes:
    a device or an endless pipe is refused, never read to the end. Errors (ValueError,
    FileNotFoundError) name the file and `what` it should be ("a tokenizer file")."""
    path = os.fspath(path)
    stream = _opened(path)
    try:
        with stream as f:
            data = _read_capped(f, limit)
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read the file ({e})") from None
    if len(data) > limit:
        raise FileError(path, None, f"is larger than the {limit:,} bytes {what} may have")
    try:
        return parse_json(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FileError(path, None, f"is not {what}: it is not valid JSON (not UTF-8: {e.reason} "
                        f"at byte {e.start})") from None
    except JSONLimitError as e:
        raise FileError(path, None, f"is refused as {what}: {e}") from None
    except ValueError as e:
        raise FileError(path, None, f"is not {what}: it is not valid JSON ({e})") from None


def _read_capped(f, limit, chunk=1 << 16):
    """The bytes of stream f, read a chunk at a time (f.read(limit) would reserve `limit` bytes
    at once), stopping once more than `limit` have come."""
    parts = []
    size = 0
    while size <= limit:
        part = f.read(chunk)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


class JSONLimitError(ValueError):
    """JSON text past parse_json's bounds."""


def _finite(text):
    """A JSON number as a float, refusing one that overflows to infinity (1e400)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text, limit=MAX_JSON_BYTES):
    """json.loads(text), bounded before it runs: at most `limit` characters and MAX_JSON_ITEMS
    values (counted as the commas, "[" and "{" anywhere in it: an upper bound), so that a small
    file cannot become gigabytes of objects ("[{},{},...]" costs 24 times its bytes); NaN,
    Infinity and numbers that overflow are refused. A JSONLimitError (a ValueError) names the
    bound; invalid JSON is a ValueError."""
    if len(text) > limit:
        raise JSONLimitError(f"its JSON text has {len(text):,} characters, more than {limit:,}")
    items = text.count(",") + text.count("[") + text.count("{")
    if items > MAX_JSON_ITEMS:
        raise JSONLimitError(f"its JSON holds {items:,} values or more, more than "
                             f"{MAX_JSON_ITEMS:,}")
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("it is nested too deeply") from None


def check_creatable(directory, what):
    """Before any work: `directory` is a folder this user may write in, or its nearest existing
    ancestor is (atomic_write makes the rest); else a ValueError "<what> cannot be written: ..."."""
    nearest = directory or "."
    while not os.path.lexists(nearest):
        nearest = os.path.dirname(nearest) or "."
    if not os.path.isdir(nearest):
        raise ValueError(f"{what} cannot be written: {nearest} is a file, not a directory")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ValueError(f"{what} cannot be written: no permission to write in {nearest}")


def check_writable_dir(path, what):
    """Before any work, creating nothing: `path` is a directory this user may write in, or one
    that can be made; else a ValueError "<what> <path> is a file, not a directory" or
    check_creatable's."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{what} {path} is a file, not a directory")
    check_creatable(os.path.normpath(path), f"{what} {path}")


def check_name(path, what):
    """Before any work: path's last part fits NAME_MAX bytes; else a ValueError naming `what`."""
    size = len(os.fsencode(os.path.basename(os.fspath(path))))
    if size > NAME_MAX:
        raise ValueError(f"{what} {path}: the file name is {size} bytes long, "
                         f"more than the {NAME_MAX} a file name may have")


def temp_suffix(name):
    """The end of a temporary's name for a file called `name`: "-" + name, or "-" + a hash of it
    when the temporary's name would pass NAME_MAX (.tmp- and 8 random characters come before it)."""
    if len(TEMP_PREFIX) + 9 + len(os.fsencode(name)) <= NAME_MAX:
        return "-" + name
    return "-" + hashlib.sha256(os.fsencode(name)).hexdigest()[:16] + ".long-name"


def inside_target(path):
    """The real file that writing `path` changes: path itself, or the file its symbolic link
    points to when that lies in the link's own folder (or below it); else a FileError."""
    path = os.fspath(path)
    target = os.path.realpath(path)
    folder = os.path.realpath(os.path.dirname(path) or ".")
    if os.path.islink(path) and not target.startswith(folder + os.sep):
        raise FileError(path, None, f"is a symbolic link to {target}, outside its folder "
                                    f"{folder}: it is not written through; remove the link or "
                                    "give another file name")
    return target


def remove_stale_temporaries(directory):
    """Delete the temporaries a killed atomic_write left in `directory` (named by TEMP_PATTERN,
    older than STALE_SECONDS, locked by no live writer); returns their names. Other files are
    never touched."""
    removed = []
    names = os.listdir(directory) if os.path.isdir(directory) else []
    for name in filter(TEMP_PATTERN.fullmatch, names):
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # gone already, or a link: not ours
            continue
        try:
            info = os.fstat(fd)
            if time.time() - info.st_mtime > STALE_SECONDS and stat.S_ISREG(info.st_mode):
                # BlockingIOError: a live writer holds it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(path)
                removed.append(name)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return removed


def atomic_write(path, write, mode="wb"):
    """Call write(file) on a temporary file in path's directory, then rename it to path (to the
    file a symbolic link points to, when that is in the link's folder, so that the link stays).

    mode is "wb" (write gets a binary file) or "w" (text, UTF-8). Returns path.
    atomic_write("tok.json", lambda f: f.write(text), mode="w")
    """
    path = os.fspath(path)
    target = inside_target(path)
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    remove_stale_temporaries(directory)
    if os.path.isfile(target):  # a file replaced keeps its permission bits
        file_mode = stat.S_IMODE(os.stat(target).st_mode)
    else:                       # a new file gets a plain open()'s: 0666 less the umask
        umask = os.umask(0o22)
        os.umask(umask)
        file_mode = 0o666 & ~umask
    suffix = temp_suffix(os.path.basename(target))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=suffix)
    try:
        # held until closed: remove_stale_temporaries leaves it alone
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.chmod(tmp, file_mode)  # mkstemp makes it private
            os.replace(tmp, target)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        # a full disk: name the file, not the temporary
        if isinstance(e, OSError) and e.errno is not None:
            raise OSError(e.errno, e.strerror, path) from None
        raise
    return path
