"""One BLAS thread for the forecast fits.

statsmodels' fits search a handful of parameters with L-BFGS-B, whose linear algebra is tiny: waking
OpenBLAS's threads for it costs more than it saves. Measured here (two cores, OpenBLAS 0.3.30): an
ETS fit took 0.14 s with OpenBLAS's default threads and 0.02 s with one; Theta 0.13 s and 0.03 s.
The backtest's worker processes are the parallelism instead, one process per core.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def _limits_available() -> bool:
    """threadpoolctl is importable, and the BLAS libraries to limit are loaded."""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:  # an install without the planning extra's threadpoolctl: fits are only slower
        return False
    # A limit reaches only the libraries loaded when it is set: scipy brings its own OpenBLAS, which
    # statsmodels' first fit would load after the limit, with its default threads.
    import scipy.linalg  # noqa: F401
    import scipy.optimize  # noqa: F401

    return True


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS libraries loaded in this process use one thread inside the block."""
    if not _limits_available():
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def one_blas_thread_for_good() -> None:
    """BLAS libraries loaded in this process use one thread from now on (a worker process's start)."""
    if _limits_available():
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
