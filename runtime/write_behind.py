"""Write-behind hand-off of one run's evidence (``RunRecorder(write_behind=True)``).

The recorder hands its events to the ledger's group-commit writer and goes on; the evidence
writes an event depends on — an artifact it references (a checkpoint's state, a prompt, the
messages of a context snapshot), the sealed raw form of a sanitized artifact, the run's new
data subjects — run in the background too. What stays true:

- the ledger receives a run's appends in recording order, each naming the sequence it must
  land at;
- an event is handed to the ledger only once every evidence write started before it is
  durable (a committed event never references an artifact that is not there, and raw content
  is never durable before the subjects who may ask for its deletion are);
- ``wait`` returns once everything handed off so far is durable, and raises what kept any of
  it from being so (the write-ahead points: a side effect's intent, the run's end).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from models import ExecutionEvent
from runtime.ports import NewEvent

#: the ledger's ``submit``: hand appends to its writer, a future of their commit
Submit = Callable[..., Awaitable["asyncio.Future[list[ExecutionEvent]]"]]

#: an evidence write under way
Write = asyncio.Future[Any]

#: evidence writes in flight beyond which a new one first waits for the oldest (a store
#: slower than the agent holds at most this many payloads in memory)
MAX_PENDING_WRITES = 128


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Marks a failure as seen: it is reported through the hand-off that depends on it."""
    if not future.cancelled():
        future.exception()


def first_failure(futures: Sequence[Write]) -> BaseException | None:
    """The first failure among done ``futures`` (in order), every one of them retrieved."""
    failure: BaseException | None = None
    for future in futures:
        if future.cancelled():
            failure = failure or asyncio.CancelledError()
        elif future.exception() is not None:
            failure = failure or future.exception()
    return failure


async def wait_for_writes(writes: Sequence[Write]) -> None:
    """Wait until ``writes`` are done (without cancelling them if the caller is)."""
    waiting = [w for w in writes if not w.done()]
    if waiting:
        await asyncio.wait(waiting)


@dataclass
class _Deferred:
    """An append waiting for the evidence writes started before it."""

    events: list[NewEvent]
    expected_sequence: int
    extra: dict[str, Any]
    depends: list[Write]
    #: resolved with the append's commit (or what kept it from the ledger)
    result: asyncio.Future[list[ExecutionEvent]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class HandOff:
    """One run's appends and the evidence writes they depend on, handed off in order."""

    def __init__(self, submit: Submit, run_id: str) -> None:
        self._submit = submit
        self.run_id = run_id
        #: evidence writes started since the last append was handed off (its dependencies)
        self._writes: list[Write] = []
        #: every evidence write not known finished (for the bound on memory)
        self._unfinished: list[Write] = []
        #: appends waiting for their writes, in recording order
        self._deferred: deque[_Deferred] = deque()
        #: held while appends are handed to the ledger: none overtakes another
        self._handing = asyncio.Lock()
        #: hands the deferred appends on as their writes finish (when no append does)
        self._pump: asyncio.Future[None] | None = None
        #: what kept a deferred append from the ledger: every append after it fails with it
        #: (the sequences they name would be wrong), until ``give_up``
        self._failure: BaseException | None = None
        #: moved on by ``give_up``: a hand-off of an earlier generation failing then fails
        #: none of the appends made since
        self._generation = 0

    async def write(self, work: Coroutine[Any, Any, Any] | Write) -> None:
        """Start an evidence write in the background (or take a task started); appends
        handed off after this wait for it to be durable before they reach the ledger."""
        self._unfinished = [w for w in self._unfinished if not w.done()]
        if len(self._unfinished) >= MAX_PENDING_WRITES:
            await wait_for_writes(self._unfinished[:1])
        if isinstance(work, Coroutine):
            task = asyncio.ensure_future(work)
            task.add_done_callback(_retrieved)
            work = task
        self._writes.append(work)
        self._unfinished.append(work)

    async def append(
        self, events: list[NewEvent], expected_sequence: int, **extra: Any
    ) -> asyncio.Future[list[ExecutionEvent]]:
        """Queue ``events`` for the ledger's writer and return at once: the pump hands them
        on when the loop next turns (the caller's next real wait: a provider's answer, a
        durable point), once every evidence write started before them is durable. The future
        resolves when they are committed, or fails with what kept them (or anything before
        them) from it. ``extra``: what else the ledger's ``submit`` is to write with them (its
        keywords).

        Nothing is handed on here: the ledger's ``submit`` prepares each payload (its
        canonical form and hash) on this thread, and a step's caller would pay it between
        its provider's answer and its next call. The pump pays it while the step waits.
        Appends queued together are handed on in order, in one go, so the ledger's writer
        finds them all queued at its next transaction instead of committing the first alone.
        What ``submit`` refuses fails this future, as a failed commit does: the recorder
        raises it at its next event or durable point."""
        depends, self._writes = self._writes, []
        deferred = _Deferred(events, expected_sequence, extra, depends)
        deferred.result.add_done_callback(_retrieved)
        self._deferred.append(deferred)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._pumping())
        return deferred.result

    async def _hand_on(self) -> None:
        """Hand the deferred appends whose writes are done to the ledger, in order, in one
        go; one whose write failed fails, and every one after it."""
        if not self._deferred:  # the usual case: nothing waits (no lock taken and released)
            return
        async with self._handing:
            while self._deferred:
                head = self._deferred[0]
                if self._failure is None and not all(d.done() for d in head.depends):
                    return
                self._deferred.popleft()
                failure = self._failure or first_failure(head.depends)
                if failure is None:
                    generation = self._generation
                    try:
                        commit = await self._submit(
                            self.run_id,
                            head.events,
                            expected_sequence=head.expected_sequence,
                            **head.extra,
                        )
                    except BaseException as exc:
                        if generation == self._generation:
                            self._failure = exc
                        _fail(head, exc)
                        if not isinstance(exc, Exception):
                            raise  # a cancellation goes on; what follows fails with it
                        continue
                    commit.add_done_callback(functools.partial(_pass_on, to=head.result))
                    continue
                self._failure = failure
                _fail(head, failure)

    async def _pumping(self) -> None:
        while self._deferred:
            await wait_for_writes(self._deferred[0].depends)
            await self._hand_on()

    async def wait_writes(self) -> None:
        """Wait for the evidence writes no append depends on yet; raises the first failure."""
        writes, self._writes = self._writes, []
        if writes:
            await wait_for_writes(writes)
            failure = first_failure(writes)
            if failure is not None:
                raise failure

    def give_up(self) -> None:
        """After a failure: nothing handed off so far is waited for by what follows (the
        recorder goes on after the last committed event); a deferred append that has not
        reached the ledger yet never will."""
        self._writes = []
        self._failure = None
        self._generation += 1
        while self._deferred:
            deferred = self._deferred.popleft()
            if not deferred.result.done():
                deferred.result.set_exception(
                    SupersededAppendError(
                        f"run {self.run_id}: an append before sequence "
                        f"{deferred.expected_sequence} failed"
                    )
                )


def _fail(deferred: _Deferred, failure: BaseException) -> None:
    if not deferred.result.done():
        deferred.result.set_exception(failure)


def _pass_on(
    commit: asyncio.Future[list[ExecutionEvent]], *, to: asyncio.Future[list[ExecutionEvent]]
) -> None:
    if to.done():
        return
    if commit.cancelled():
        to.cancel()
    elif commit.exception() is not None:
        to.set_exception(commit.exception())  # type: ignore[arg-type]
    else:
        to.set_result(commit.result())


class SupersededAppendError(RuntimeError):
    """A deferred append dropped because one before it failed (reported through that one)."""
