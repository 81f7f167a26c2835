"""Ownership of pyACL resources: process-wide init/finalize, per-thread contexts, ordered release.

Why each piece:
- ``acl.init`` / ``acl.finalize`` are once per process, but several sessions (and other libraries,
  e.g. torch_npu) share the process. Older CANN allows one ``acl.init`` per process ("一个进程内只能
  调用一次acl.init接口": hiascend canncommercial/5046 inferapplicationdev/aclpythondevg/
  aclpythondevg_01_0004.html), so a program that closes its last session and opens another must
  not initialise again: ``AclRuntime`` initialises on the first session and finalizes once, at
  interpreter exit (``atexit``), as the finalize page asks ("应用的进程退出前,应显式调用该接口",
  not from a destructor: aclpythondevg_01_0005). It counts its users, tolerates
  ACL_ERROR_REPEAT_INITIALIZE (someone else initialised: then it is theirs to finalize) and
  ACL_ERROR_REPEAT_FINALIZE, like mmdeploy's ``Context`` (mmdeploy/backend/ascend/wrapper.py).
- A pyACL context is current per thread; a model or stream used under another context fails
  (ACL_ERROR_RT_MODEL_CONTEXT). ``CurrentContext.make_current`` sets it only when this thread's
  current context differs, so a session can be run from any thread at one comparison's cost.
- Every handle is released in the reverse order it was acquired, also when the constructor fails
  half-way (acllite returned FAILED from a constructor and leaked; hiascend's teardown order is
  buffers -> dataset -> unload -> desc -> stream -> context -> reset_device -> finalize).
  ``Resources`` is that stack. A release that fails is reported after all the others have run.
"""

from __future__ import annotations

import atexit
import importlib
import itertools
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from edgefuse.acl.return_codes import (
    ACL_ERROR_REPEAT_FINALIZE,
    ACL_ERROR_REPEAT_INITIALIZE,
    ACL_SUCCESS,
    AclError,
    check,
)
from edgefuse.errors import BackendUnavailableError

log = logging.getLogger(__name__)

NO_ACL_HINT = ("install the CANN toolkit or NNRT and source its set_env.sh (e.g. "
               "/usr/local/Ascend/ascend-toolkit/set_env.sh) so that `import acl` works")


def import_acl() -> ModuleType:
    """The ``acl`` module, or BackendUnavailableError: pyACL ships with CANN, not with pip."""
    try:
        acl = importlib.import_module("acl")
    except ImportError as exc:
        raise BackendUnavailableError(
            f"pyACL (module 'acl') is not importable: {exc}", hint=NO_ACL_HINT
        ) from exc
    # Another package (or a test folder on sys.path) can be called "acl" too.
    if not all(hasattr(acl, name) for name in ("init", "get_soc_name", "rt", "mdl")):
        raise BackendUnavailableError(
            f"the module 'acl' at {getattr(acl, '__file__', None) or '?'} is not pyACL",
            hint=NO_ACL_HINT,
        )
    return acl


class AclRuntime:
    """``acl.init`` on the first ``acquire`` of the process, ``acl.finalize`` at its exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._owned = False
        self._acl: ModuleType | None = None
        self._exit_hook = False

    @property
    def users(self) -> int:
        return self._users

    def acquire(self) -> ModuleType:
        with self._lock:
            acl = self._acl
            if acl is None:
                acl = import_acl()
                ret = acl.init()
                if ret not in (ACL_SUCCESS, ACL_ERROR_REPEAT_INITIALIZE):
                    raise AclError("acl.init", ret)
                self._owned = ret == ACL_SUCCESS
                self._acl = acl
                if not self._exit_hook:
                    atexit.register(self._shutdown_at_exit)
                    self._exit_hook = True
            self._users += 1
            return acl

    def release(self) -> None:
        """One user fewer; pyACL stays initialised for the next session of the process."""
        with self._lock:
            if self._users == 0:
                raise RuntimeError("AclRuntime.release() without a matching acquire()")
            self._users -= 1

    def shutdown(self) -> None:
        """``acl.finalize`` when edgefuse initialised pyACL and no session is open (the exit
        hook; a session still open at exit keeps pyACL, and the process ends either way)."""
        with self._lock:
            if self._users:
                log.warning("%d acl session(s) still open at exit: pyACL not finalized",
                            self._users)
                return
            acl, owned = self._acl, self._owned
            self._acl, self._owned = None, False
        if owned and acl is not None:
            ret = acl.finalize()
            if ret not in (ACL_SUCCESS, ACL_ERROR_REPEAT_FINALIZE):
                raise AclError("acl.finalize", ret)

    def _shutdown_at_exit(self) -> None:
        try:
            self.shutdown()
        except AclError as exc:  # the process ends anyway: say so, without a traceback
            log.warning("%s", exc)


RUNTIME = AclRuntime()

_current = threading.local()
_tokens = itertools.count(1)


class CurrentContext:
    """A context and a token unique to it, so a thread can tell whether it is still current.

    The token, not the handle, is what threads remember: pyACL handles are addresses, and a new
    context can reuse the address of a destroyed one.
    """

    def __init__(self, context: Any) -> None:
        self.context = context
        self.token = next(_tokens)
        _current.token = self.token  # acl.rt.create_context makes it current in this thread

    def make_current(self, acl: ModuleType) -> None:
        """Make the context current in the calling thread unless it already is."""
        if getattr(_current, "token", None) == self.token:
            return
        check(acl.rt.set_context(self.context), "acl.rt.set_context")
        _current.token = self.token

    def forget(self) -> None:
        """After the context is destroyed this thread must not believe it is still current."""
        if getattr(_current, "token", None) == self.token:
            _current.token = None


class Resources:
    """A stack of release actions, run newest first."""

    def __init__(self) -> None:
        self._stack: list[tuple[str, Callable[[], None]]] = []

    def __len__(self) -> int:
        return len(self._stack)

    def push(self, what: str, release: Callable[[], None]) -> None:
        self._stack.append((what, release))

    def push_call(self, api: str, function: Callable[..., int], *args: Any) -> None:
        """Release by calling the pyACL function ``api`` with ``args`` and checking its code."""
        self.push(api, lambda: check(function(*args), api))

    def release_all(self) -> None:
        """Run every release; raise the first AclError after all have run (the rest are logged)."""
        failures = self._unwind()
        if failures:
            first, *others = failures
            for other in others:
                log.error("while releasing pyACL resources: %s", other.message)
            raise first

    def release_after_error(self) -> None:
        """Unwind after a constructor failed: log release failures, keep the original error."""
        for failure in self._unwind():
            log.error("while cleaning up after a failed open: %s", failure.message)

    def _unwind(self) -> list[AclError]:
        failures: list[AclError] = []
        while self._stack:
            _, release = self._stack.pop()
            try:
                release()
            except AclError as exc:
                failures.append(exc)
        return failures
