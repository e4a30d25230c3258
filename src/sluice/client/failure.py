"""A failure kept to be raised to every caller that comes after it (a background task's,
a broken connection's).

Raising one exception object again adds the raising frames to its traceback every time,
so a caller that retries in a loop (``except: continue``) makes it grow without bound:
a test that did so used up the machine's memory. :class:`StoredFailure` raises it with
the traceback it had when it was kept, plus only the current call's frames."""

from __future__ import annotations

from typing import Generic, NoReturn, TypeVar

E = TypeVar("E", bound=BaseException)


class StoredFailure(Generic[E]):
    __slots__ = ("_traceback", "error")

    def __init__(self, error: E) -> None:
        self.error = error
        self._traceback = error.__traceback__

    def raise_again(self) -> NoReturn:
        raise self.error.with_traceback(self._traceback)
