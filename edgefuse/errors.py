"""Errors edgefuse raises, rendered like pip's diagnostics.

Why a tree of typed errors: the CLI must tell a user's mistake (exit 2, no traceback) from a bug in
edgefuse (exit 3, traceback, "please report"). Every user-facing error carries a stable kebab-case
``reference`` (searchable, testable), the ``message`` (what went wrong), ``context`` (where: the
file, the node, the log lines) and a ``hint`` (how to fix it).

This module imports nothing from edgefuse so that every other module can import it.
"""

from __future__ import annotations

import re

_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class EdgefuseError(Exception):
    """A problem the user can fix: bad input, a missing dependency, a failing external tool."""

    reference = "edgefuse-error"
    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        context: str | None = None,
        hint: str | None = None,
        reference: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        self.hint = hint
        if reference is not None:
            self.reference = reference
        if not _KEBAB.match(self.reference):
            raise ValueError(f"error reference must be kebab-case, got {self.reference!r}")

    def render(self) -> str:
        """The multi-line text the CLI prints on stderr."""
        lines = [f"error[{self.reference}]: {self.message}"]
        if self.context:
            context_lines = self.context.rstrip().splitlines()
            lines.append(f"  ╰─> {context_lines[0]}")
            lines.extend(f"      {line}" for line in context_lines[1:])
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


class InputError(EdgefuseError):
    """The user's input (a file, an argument, a spec) is wrong."""

    reference = "invalid-input"


class ModelLoadError(InputError):
    """A model file could not be read, parsed or checked."""

    reference = "model-load-failed"


class MissingDependencyError(EdgefuseError):
    """An optional dependency is not installed."""

    reference = "missing-dependency"

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package '{module}', which is not installed",
            hint=f"pip install 'edgefuse[{extra}]'",
        )
        self.module = module
        self.extra = extra


class ToolError(EdgefuseError):
    """An external tool (ATC, a device runtime) failed."""

    reference = "tool-failed"


class BackendUnavailableError(EdgefuseError):
    """No requested runtime backend can run here."""

    reference = "backend-unavailable"
