"""Whether a JIT-compiled group kernel may run in this process (shared by the kernel wrappers).

A kernel is used while numba imports and nothing has gone wrong with it; the first failure to
build or run it switches it off for the rest of the process, with one warning, and its callers
fall back to libsodium. ``warm_up`` loads (or, without a cache, compiles) a kernel ahead of any
timed call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache


@lru_cache(maxsize=1)
def numba_available() -> bool:
    """True when numba can be imported (it ships with galois, a declared dependency)."""
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        return False
    return True


class JitSwitch:
    """On/off state of one kernel; ``failures`` holds why it was switched off, if it was."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failures: list[str] = []

    def usable(self) -> bool:
        """Importable and not switched off after a failure in this process."""
        return not self.failures and numba_available()

    def disable(self, reason: BaseException) -> None:
        """Stop using the kernel in this process (callers fall back to libsodium), with a warning."""
        self.failures.append(repr(reason))
        warnings.warn(
            f"{self.what} disabled, falling back to libsodium: {reason!r}", RuntimeWarning, stacklevel=4
        )

    def warm_up(self, call: Callable[[], object]) -> bool:
        """Run ``call`` (a tiny use of the kernel) so it is loaded before anything is timed;
        False, with the kernel switched off, when it cannot be used."""
        if not self.usable():
            return False
        try:
            call()
        except Exception as exc:  # a JIT that fails to build must not take the caller down
            self.disable(exc)
            return False
        return True
