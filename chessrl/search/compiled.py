"""numba's ``njit`` for the search's kernels, cached on disk where a cache can be written.

The kernels of :mod:`chessrl.search.mcts_compiled`, :mod:`chessrl.search.mcts_native` and
:mod:`chessrl.search.native_board` compile on their first call (about two seconds for all of them) and
numba keeps the machine code in ``__pycache__`` beside the module, or in the user's cache folder
(``NUMBA_CACHE_DIR`` chooses another). Where neither can be written (a read-only install with no
writable home), they compile in each process instead of failing at import.

>>> @jit
... def twice(x: int) -> int:
...     return 2 * x
>>> twice(21)
42
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba

__all__ = ["jit"]

F = TypeVar("F", bound=Callable[..., Any])


def jit(fn: F) -> F:
    """``numba.njit(cache=True)(fn)``, or ``numba.njit(fn)`` when numba finds nowhere to cache."""
    try:
        return numba.njit(cache=True)(fn)  # type: ignore[no-any-return]
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(fn)  # type: ignore[no-any-return]
