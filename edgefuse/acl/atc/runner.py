"""Run ATC as a subprocess: stream its log to a file, bound its time, and judge the result.

Why not ``subprocess.call`` and ``assert ret == 0`` (mmdeploy's way): ATC's exit status alone is
not proof of a model (edgefuse also requires the ``.om`` on disk), its useful output is a coded
error line (E19010, EZ3003, ...) that must reach the user with the failing node and a fix, and on
a 4 GB board it can run for hours or be killed by the OOM killer; each case gets its own error.

ATC's documented console protocol: "ATC start working now, please wait for a moment." then either
"ATC run success" or "ATC run failed, Please check the detail log, Try 'atc --help' for more
information" followed by coded lines (reference ascend-toolchain.md §1.7; msit's parser keys on
"ATC run success"). The exact non-zero exit value is undocumented, so any non-zero status fails.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from edgefuse.acl.atc.codes import AtcDiagnostic, find_diagnostics, hint_for
from edgefuse.errors import Ref, ToolError

SUCCESS_MARKER = "ATC run success"
_TAIL_LINES = 15
_KILL_GRACE_S = 5.0


@dataclasses.dataclass(frozen=True)
class AtcResult:
    om_path: Path
    log_path: Path
    seconds: float
    success_marker_seen: bool


_REFERENCES = {"failed": Ref.ATC_FAILED, "timeout": Ref.ATC_TIMEOUT, "crashed": Ref.ATC_CRASHED,
               "no-output": Ref.ATC_NO_OUTPUT}


class AtcError(ToolError):
    """ATC did not produce a model. ``kind`` says how: failed, timeout, crashed, no-output."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        log_path: Path,
        log_tail: Sequence[str],
        diagnostics: Sequence[AtcDiagnostic] = (),
        returncode: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.kind = kind
        self.log_path = Path(log_path)
        self.log_tail = list(log_tail)
        self.diagnostics = list(diagnostics)
        self.returncode = returncode
        self._hint = hint
        self._message = message
        super().__init__(
            message, context=self._context(), hint=hint, reference=_REFERENCES[kind]
        )

    def relocated(self, log_path: Path) -> AtcError:
        """The same error, pointing at the log's new place."""
        return AtcError(
            self.kind,
            self._message,
            log_path=log_path,
            log_tail=self.log_tail,
            diagnostics=self.diagnostics,
            returncode=self.returncode,
            hint=self._hint,
        )

    def _context(self) -> str:
        lines = []
        first = self.diagnostics[0] if self.diagnostics else None
        if first is not None and first.known is not None:
            lines.append(f"{first.code}: {first.known.meaning}")
        nodes = _failing_nodes(self.diagnostics)
        if nodes:
            lines.append("failing nodes: " + ", ".join(nodes))
        if self.log_tail:
            lines.append("last lines of the ATC log:")
            lines.extend(f"  {line}" for line in self.log_tail)
        lines.append(f"full log: {self.log_path}")
        return "\n".join(lines)


def find_atc() -> str | None:
    """The ``atc`` on PATH (set by CANN's ``set_env.sh``), or None."""
    return shutil.which("atc")


def cann_version(environ: Mapping[str, str] = os.environ) -> str | None:
    """The CANN toolkit version ``set_env.sh`` points at, or None when it cannot be told.

    Read from ``<ASCEND_HOME_PATH>/<arch>-linux/ascend_toolkit_install.info``, the file CANN's
    installer documents for "software package version, CPU architecture, and installation path"
    (hiascend canncommercial/800 softwareinst/instg/instg_0044.html); its ``version=`` line is
    [UNCONFIRMED] from the docs, hence None rather than a guess when it is absent.
    """
    for variable in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = environ.get(variable)
        if not root:
            continue
        for info in sorted(Path(root).glob("*-linux/ascend_toolkit_install.info")):
            for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "version" and value.strip():
                    return value.strip()
    return None


TOOLKIT_VERSION_FILES = ("version.cfg", "*/version.info", "*-linux/ascend_toolkit_install.info")


def toolkit_version_files(atc: Path, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The version records of the toolkit ``atc`` belongs to: ``<toolkit>/latest/version.cfg``
    (the record of each component's running version, ``runtime_running_version=[...]``,
    ``compiler_running_version=[...]``, that the toolkit's multi-version ``latest`` manager keeps:
    gitcode.com/cann/asc-devkit, latest_manager; Ascend/samples' CMake files read
    ``runtime_running_version`` from it), each component's ``version.info`` (``compiler/``,
    ``runtime/``, ...) and ``<arch>-linux/ascend_toolkit_install.info``.

    The toolkit folder is ``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME`` as ``set_env.sh`` sets
    them, else the nearest folder above ``atc`` (``latest/compiler/bin/atc``, ``latest/bin/atc``)
    that holds a ``version.cfg``. Empty when none is found."""
    roots = [Path(environ[name]) for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
             if environ.get(name)]
    roots += [folder for folder in list(atc.parents)[:4] if (folder / "version.cfg").is_file()]
    for root in roots:
        found = sorted({path for pattern in TOOLKIT_VERSION_FILES for path in root.glob(pattern)
                        if path.is_file()})
        if found:
            return found
    return []


def run_atc(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    om_path: str | os.PathLike[str],
    log_path: str | os.PathLike[str],
    timeout: float,
    echo: Callable[[str], None] | None = None,
) -> AtcResult:
    """Run ATC; success means exit status 0 and ``om_path`` on disk, anything else raises.

    stdout and stderr go, merged and line by line, to ``log_path`` (and to ``echo`` if given) as
    they arrive, so the log of a killed or timed-out run is complete up to that moment.
    """
    om, log = Path(om_path), Path(log_path)
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # ATC forks TBE compilers; a timeout must stop them all
        )
    except OSError as exc:
        raise ToolError(
            f"cannot start {argv[0]}: {exc}",
            hint="source the CANN set_env.sh so that `atc` is on PATH",
            reference=Ref.ATC_NOT_FOUND,
        ) from exc
    with log.open("w", encoding="utf-8") as sink:
        reader = threading.Thread(target=_pump, args=(process.stdout, sink, echo), daemon=True)
        reader.start()
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            reader.join()
            raise _error(
                "timeout",
                f"ATC did not finish within {timeout:g} s and was stopped",
                log,
                hint="ATC is slow on small boards: compile on an x86 host with the same CANN, or "
                "export TE_PARALLEL_COMPILER=1 MAX_COMPILE_CORE_NUMBER=1 and raise the timeout",
            ) from None
        reader.join(timeout=_KILL_GRACE_S)
        if reader.is_alive():  # a child of ATC outlived it and still holds the pipe
            _signal_group(process, signal.SIGKILL)
            reader.join()
    seconds = time.monotonic() - started
    if returncode < 0:
        name = _signal_name(-returncode)
        raise _error(
            "crashed",
            f"ATC was killed by {name}",
            log,
            returncode=returncode,
            hint="SIGKILL during a build is usually the out-of-memory killer: free memory, add "
            "swap, or compile on a bigger host" if -returncode == signal.SIGKILL else None,
        )
    text = log.read_text(encoding="utf-8", errors="replace")
    if returncode != 0:
        diagnostics = find_diagnostics(text)
        first = diagnostics[0] if diagnostics else None
        if first is None:
            message = f"ATC failed (exit status {returncode}) without an error code"
        else:
            where = f" at node {first.node}" if first.node else ""
            what = f" ({first.op_type})" if first.op_type else ""
            message = f"ATC failed with {first.code}{where}{what}"
        hint = hint_for(first) if first is not None else None
        raise _error("failed", message, log, diagnostics, returncode, hint, text)
    if not om.is_file():
        raise _error(
            "no-output",
            f"ATC exited with status 0 but wrote no {om.name}",
            log,
            returncode=returncode,
            hint="check that --output names a writable place and that the disk is not full",
            text=text,
        )
    return AtcResult(om, log, seconds, SUCCESS_MARKER in text)


def _pump(stream: IO[bytes], sink: IO[str], echo: Callable[[str], None] | None) -> None:
    for raw in stream:
        line = raw.decode("utf-8", errors="replace")
        sink.write(line)
        sink.flush()
        if echo is not None:
            echo(line.rstrip("\n"))


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM ATC's process group (ATC and the compilers it forked), SIGKILL it after a grace."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    """Signal the session ATC was started in (its id is ATC's pid), if anything is left of it."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _error(
    kind: str,
    message: str,
    log: Path,
    diagnostics: Sequence[AtcDiagnostic] = (),
    returncode: int | None = None,
    hint: str | None = None,
    text: str | None = None,
) -> AtcError:
    if text is None:
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    tail = [line for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
    return AtcError(
        kind,
        message,
        log_path=log,
        log_tail=tail,
        diagnostics=diagnostics,
        returncode=returncode,
        hint=hint,
    )


def _failing_nodes(diagnostics: Sequence[AtcDiagnostic]) -> list[str]:
    seen: dict[str, None] = {}
    for diagnostic in diagnostics:
        if diagnostic.node or diagnostic.op_type:
            label = diagnostic.node or "?"
            if diagnostic.op_type:
                label += f" ({diagnostic.op_type})"
            seen.setdefault(label, None)
    return list(seen)
