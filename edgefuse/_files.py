"""Writing outputs atomically.

Why: a crash or a user error half-way through must never leave a truncated ``.onnx`` or report
behind that a later stage would pick up. Every output is written to a temporary name in the same
directory and renamed into place only once it is complete.

The temporary file and folder functions create 0600 files and 0700 folders; what is renamed into
place gets the modes a plain ``open``/``mkdir`` would have given it (0644/0755 under the usual
umask), so that ATC run as root, or the board's service user, can read a build made by someone
else.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import onnx

from edgefuse.errors import EdgefuseError, InputError, Ref

# protobuf cannot serialise a message of 2 GiB or more; larger models go to external data.
_PROTOBUF_LIMIT = 2**31 - 1
# What open() and mkdir() ask for before the umask: rw-rw-rw- and rwxrwxrwx.
FILE_MODE, DIRECTORY_MODE = 0o666, 0o777


def umask() -> int:
    """This process's umask, read without changing it (Linux's /proc), else set and restored."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    current = os.umask(0o022)  # no /proc: the classic read, racy only against another umask call
    os.umask(current)
    return current


PathLike = str | os.PathLike[str]
# What a verb names as one input: a path, several (a glob's files, a spec's sources), or nothing.
Inputs = Mapping[str, Any]


def check_distinct_outputs(**paths: PathLike | None) -> None:
    """Every output path is writable and no two name the same file (a report written over the
    model it describes would lose the model)."""
    for path in paths.values():
        if path is not None:
            check_output_path(path)
    check_outputs_spare_inputs(paths)


def check_outputs_spare_inputs(outputs: Mapping[str, PathLike | None],
                               inputs: Inputs | None = None) -> None:
    """Refuse (exit 2, before anything is written) any output that would destroy an input or
    another output.

    Why every verb calls this before it opens anything: ``--save clip.mp4`` over the source
    video, ``--jsonl det.onnx`` over the model or ``build -o proj --force`` over the spec's own
    folder used to succeed and lose the user's data. Two paths clash when, resolved (symbolic
    links followed, hard links compared by inode), they are the same file or one lies inside the
    other: a folder output holding an input would be replaced or filled around it, an output
    written inside an input folder changes that input (an image folder, a BUILD_DIR, a bundle).
    ``inputs`` values may be a path, several paths, or a glob pattern (its matches are compared);
    anything else (None, a model in memory) is skipped.
    """
    named_inputs = [(role, path) for role, value in (inputs or {}).items()
                    for path in _paths_of(value)]
    named_outputs = [(role, Path(path)) for role, path in outputs.items() if path is not None]
    for index, (role, output) in enumerate(named_outputs):
        for input_role, path in named_inputs:
            relation = _overlap(output, path)
            if relation:
                raise InputError(
                    f"the {role} '{output}' {relation} the {input_role} '{path}': writing it "
                    "would destroy it",
                    hint=f"give the {role} a path outside every input",
                    reference=Ref.OUTPUT_IS_INPUT,
                )
        for other_role, other in named_outputs[:index]:
            relation = _overlap(output, other)
            if relation == "is":
                raise InputError(
                    f"the {role} and the {other_role} are the same file: '{output}'",
                    hint=f"give the {role} a path of its own",
                    reference=Ref.BAD_OUTPUT_PATH,
                )
            if relation:
                raise InputError(
                    f"the {role} '{output}' {relation} the {other_role} '{other}'",
                    hint=f"give the {role} a path of its own, outside the {other_role}",
                    reference=Ref.BAD_OUTPUT_PATH,
                )


def _paths_of(value: Any) -> list[Path]:
    """The existing files and folders an input names (a glob: its matches). What does not exist
    (a catalogue name, a camera index, a URL) cannot be overwritten and is left out."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if Path(text).exists():
            return [Path(text)]
        return [Path(match) for match in sorted(glob.glob(text, recursive=True))] \
            if glob.has_magic(text) else []
    if isinstance(value, (list, tuple, set, frozenset)):
        return [path for item in value for path in _paths_of(item)]
    return []  # None, or a model in memory (a ModelProto, a torch module): no file to destroy


def _overlap(output: Path, other: Path) -> str | None:
    """How ``output`` clashes with ``other``: "is", "holds", "lies inside", or None."""
    mine, theirs = output.resolve(), other.resolve()
    if mine == theirs or _same_inode(output, other):
        return "is"
    if mine in theirs.parents:
        return "holds"
    if theirs in mine.parents:
        return "lies inside"
    return None


def _same_inode(first: Path, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def cannot_write(where: str | os.PathLike[str], exc: OSError) -> InputError:
    """The user error for an output folder this process may not write in."""
    return InputError(
        f"cannot write in '{where}': {exc.strerror or exc}",
        hint="choose an output folder you can write to, or fix its permissions (ls -ld)",
        reference=Ref.CANNOT_WRITE,
    )


# Below this much free space, a writer that failed without an errno (OpenCV's) failed on space.
FULL_BELOW_BYTES = 1 << 20
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class WriteFailedError(EdgefuseError):
    """An output could not be written whole: ``error[disk-full]`` for no space (ENOSPC, EDQUOT,
    EFBIG), ``error[write-failed]`` for any other errno, which the message names.

    Why an error of its own and not the OSError: a one-shot run that could not write must exit
    2 with the file named and what to do, not 3 with a traceback (or, worse, 0), and a live run
    must tell a recording to suspend (``reason``, a Prometheus label) from a bug."""

    def __init__(self, path: PathLike, exc: OSError | None = None, *,
                 what: str | None = None) -> None:
        self.path = Path(path)
        code = exc.errno if exc is not None else None
        if exc is not None:
            name = errno.errorcode.get(code) if code is not None else None
            detail = f"{name}: {exc.strerror or exc}" if name else str(exc)
        else:  # a writer that says only that it failed (OpenCV's): was the disk full?
            free = free_bytes(self.path.parent)
            code = errno.ENOSPC if 0 <= free < FULL_BELOW_BYTES else None
            detail = (what or "the writer failed") + (
                f" (the file system has {free} bytes free)" if free >= 0 else "")
        self.errno_name = errno.errorcode.get(code) if code is not None else None
        self.disk_full = code in _DISK_FULL
        self.reason = "disk-full" if self.disk_full else (self.errno_name or "write-failed")
        super().__init__(
            f"cannot write '{self.path}': {detail}",
            hint=(f"free space on the file system of '{self.path.parent}' (df -h) or write "
                  "elsewhere; nothing incomplete was left at that path") if self.disk_full
            else "check the file system (dmesg, mount); nothing incomplete was left at that path",
            reference=Ref.DISK_FULL if self.disk_full else Ref.WRITE_FAILED,
        )


def free_bytes(folder: PathLike) -> int:
    """Bytes an unprivileged writer may still use in ``folder``'s file system (``df``'s Avail);
    -1 when it cannot be asked (the folder is gone)."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return -1
    return stat.f_bavail * stat.f_frsize


def fsync_file(path: PathLike) -> int:
    """Flush ``path`` to the disk and return its size: what a delayed allocation could not
    place (ext4, XFS: ENOSPC at write-back) is raised here, before the rename that publishes it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def temporary_file_beside(path: PathLike, suffix: str) -> Path:
    """An empty 0600 file next to ``path`` to write before renaming; a user error when the
    folder cannot be written."""
    target = Path(path)
    parent = check_output_path(target)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=parent)
    except OSError as exc:
        raise cannot_write(parent, exc) from exc
    os.close(fd)
    return Path(name)


def check_folder_writable(folder: PathLike) -> None:
    """A user error now, when an existing ``folder`` cannot take new files (read-only, another
    owner's), instead of an OSError at the first file written in it."""
    temporary_file_beside(Path(folder) / "probe", ".tmp").unlink()


def temporary_directory_in(parent: str | os.PathLike[str], prefix: str) -> Path:
    """``tempfile.mkdtemp`` in ``parent``, as a user error when the folder is not writable."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise cannot_write(parent, exc) from exc


def publish_directory(path: str | os.PathLike[str]) -> None:
    """Give a folder made by ``tempfile.mkdtemp`` (0700) the mode ``mkdir`` would have given it."""
    os.chmod(path, DIRECTORY_MODE & ~umask())


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """The directory ``path`` will be written in; a user error when it cannot be written there.

    Why callable on its own: a command that writes several files checks them all before writing
    the first, so that a bad second path does not leave the first file behind.
    """
    target = Path(path)
    if target.is_dir():
        raise InputError(
            f"output path '{target}' is a directory",
            hint="give a file name, for example -o model.onnx",
            reference=Ref.BAD_OUTPUT_PATH,
        )
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(
            f"output directory '{parent}' does not exist",
            hint=f"create it first: mkdir -p {parent}",
            reference=Ref.BAD_OUTPUT_PATH,
        )
    return parent


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` only if the block succeeds."""
    target = Path(path)
    tmp = temporary_file_beside(target, suffix or ".tmp")
    try:
        yield tmp
        os.chmod(tmp, FILE_MODE & ~umask())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_onnx(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Save a model atomically; models over protobuf's 2 GiB limit get one external-data file."""
    target = Path(path)
    if model.ByteSize() < _PROTOBUF_LIMIT:
        with atomic_output(target) as tmp:
            onnx.save_model(model, str(tmp))
        return
    # Save model and data under their final names in a scratch folder, then move both into place.
    data_name = f"{target.name}.data"
    with tempfile.TemporaryDirectory(prefix=".edgefuse-", dir=target.parent or ".") as scratch:
        onnx.save_model(
            model, str(Path(scratch) / target.name), save_as_external_data=True,
            all_tensors_to_one_file=True, location=data_name,
        )
        os.replace(Path(scratch) / data_name, target.parent / data_name)
        os.replace(Path(scratch) / target.name, target)
