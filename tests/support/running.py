"""The with-block shape of the tests' servers and networks: started on entering, stopped on
leaving, whatever happened inside."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Running:
    """Subclasses define ``start`` and ``stop``; ``with X() as x:`` runs them around a block."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
