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
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from models import ExecutionEvent
from runtime.ports import NewEvent, WriteBehindLedger

#: an evidence write under way
Write = asyncio.Future[Any]

#: evidence writes in flight beyond which a new one first waits for the oldest (a store
#: slower than the agent holds at most this many payloads in memory)
MAX_PENDING_WRITES = 128

#: how long appends ready to go wait for the writes of the appends queued behind them, to be
#: handed on with them (``HandOff._gather_behind``): a durable point waits for all of them
#: anyway, so waiting only delays the commit of the first when a write is slow
PUMP_GATHER_SECONDS = 0.05


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
    #: what the ledger prepared of it (``prepare_append``) while its writes ran, or what
    #: kept it from preparing; None: not prepared yet
    prepared: Any = None
    failed_to_prepare: BaseException | None = None
    #: resolved with the append's commit (or what kept it from the ledger)
    result: asyncio.Future[list[ExecutionEvent]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def is_prepared(self) -> bool:
        return self.prepared is not None or self.failed_to_prepare is not None


class HandOff:
    """One run's appends and the evidence writes they depend on, handed off in order."""

    def __init__(self, ledger: WriteBehindLedger, run_id: str) -> None:
        self._ledger = ledger
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
        #: the deferred appends not prepared yet, in order, and the task preparing them
        #: (one at a time: two preparations at once would each make a new subject's key)
        self._unprepared: deque[_Deferred] = deque()
        self._preparer: asyncio.Future[None] | None = None
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
        them) from it. ``extra``: what else the ledger is to write with them (the keywords
        of its ``prepare_append``).

        Nothing is prepared or handed on here: the ledger prepares each payload (its
        canonical form and hash, ``prepare_append``) on this thread, and a step's caller
        would pay it between its provider's answer and its next call. The pump prepares the
        queued appends while the step waits and their writes run, then hands them on in
        order, in one go (``enqueue_append``), so the ledger's writer finds them all queued
        at its next transaction instead of committing the first alone. What the ledger
        refuses fails this future, as a failed commit does: the recorder raises it at its
        next event or durable point."""
        depends, self._writes = self._writes, []
        deferred = _Deferred(events, expected_sequence, extra, depends)
        deferred.result.add_done_callback(_retrieved)
        self._deferred.append(deferred)
        self._unprepared.append(deferred)
        # the preparer first: at the loop's next turn it runs while the writes go to the disk
        if self._preparer is None or self._preparer.done():
            self._preparer = asyncio.ensure_future(self._prepare_queued())
            self._preparer.add_done_callback(_retrieved)
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
                        await self._prepared(head)
                        if head.failed_to_prepare is not None:
                            raise head.failed_to_prepare
                        commit = await self._ledger.enqueue_append(head.prepared)
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

    async def _prepare(self, deferred: _Deferred) -> None:
        """Have the ledger prepare ``deferred`` (what it refuses is kept, to fail the append
        when it is handed on, as a refused submit does)."""
        try:
            deferred.prepared = await self._ledger.prepare_append(
                self.run_id,
                deferred.events,
                expected_sequence=deferred.expected_sequence,
                **deferred.extra,
            )
        except Exception as exc:
            deferred.failed_to_prepare = exc

    async def _prepare_queued(self) -> None:
        """Prepare the queued appends in order: the ledger's CPU work (canonical forms,
        hashes, sealing) runs while their evidence writes wait for the disk, not after."""
        while self._unprepared:
            deferred = self._unprepared.popleft()
            if not deferred.is_prepared:
                await self._prepare(deferred)

    async def _prepared(self, deferred: _Deferred) -> None:
        """Wait until ``deferred`` is prepared (by the preparer, or here when none runs)."""
        while not deferred.is_prepared:
            if self._preparer is not None and not self._preparer.done():
                await asyncio.shield(self._preparer)
            else:
                await self._prepare(deferred)

    async def _pumping(self) -> None:
        while self._deferred:
            await wait_for_writes(self._deferred[0].depends)
            await self._gather_behind()
            await self._hand_on()

    async def _gather_behind(self) -> None:
        """Once the first queued append may go: wait a little for the writes of those
        behind it too (``PUMP_GATHER_SECONDS`` at most). The writes run side by side, and
        appends handed on together go in one transaction: handing the first on alone made
        the next wait for a group commit of its own, and a write call's durable point waited
        for two or three in a row (issue 35 item 7). The bound keeps a slow write (a store
        outage) from holding back the commits of the appends before it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PUMP_GATHER_SECONDS
        while True:
            pending = [w for d in self._deferred for w in d.depends if not w.done()]
            remaining = deadline - loop.time()
            if not pending or remaining <= 0:
                return
            await asyncio.wait(pending, timeout=remaining)

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
        self._unprepared.clear()
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
