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
the temporary. Imports only checks.py of the package. Left out on purpose: other encodings,
streaming reads (corpora are read whole).
"""
import fcntl
import gzip
import hashlib
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
            raise FileError(path, None, "holds gzip-compressed data, not text: "
                                        "name it *.gz, or gunzip it") from None
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - raw.rfind(b"\n", 0, e.start)  # 1-based byte position within the line
        raise FileError(path, line, f"is not valid UTF-8 ({e.reason} at byte {column} "
                                    "of the line)") from None


def read_lines(path):
    """The lines of read_text(path), without their line endings ("-" reads stdin).

    A file "a\\nb\\n" and a file "a\\nb" both give ["a", "b"]; "a\\r\\n" gives ["a"].
    """
    lines = read_text(path).split("\n")
    if lines[-1] == "":  # the file ended with a newline (or is empty)
        lines.pop()
    return [s[:-1] if s.endswith("\r") else s for s in lines]


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
