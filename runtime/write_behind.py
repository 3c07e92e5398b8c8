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
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from models import ExecutionEvent
from runtime.ports import NewEvent

#: the ledger's ``submit``: hand appends to its writer, a future of their commit
Submit = Callable[..., Awaitable["asyncio.Future[list[ExecutionEvent]]"]]

#: evidence writes in flight beyond which a new one first waits for the oldest (a store
#: slower than the agent holds at most this many payloads in memory)
MAX_PENDING_WRITES = 128


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Marks a failure as seen: it is reported through the hand-off that depends on it."""
    if not future.cancelled():
        future.exception()


def first_failure(futures: Sequence[asyncio.Future[Any]]) -> BaseException | None:
    """The first failure among done ``futures`` (in order), every one of them retrieved."""
    failure: BaseException | None = None
    for future in futures:
        if future.cancelled():
            failure = failure or asyncio.CancelledError()
        elif future.exception() is not None:
            failure = failure or future.exception()
    return failure


class HandOff:
    """One run's appends and the evidence writes they depend on, handed off in order."""

    def __init__(self, submit: Submit, run_id: str) -> None:
        self._submit = submit
        self.run_id = run_id
        #: evidence writes started since the last append was handed off (its dependencies)
        self._writes: list[asyncio.Future[Any]] = []
        #: every evidence write not known finished (for the bound on memory)
        self._unfinished: list[asyncio.Future[Any]] = []
        #: resolved once the last deferred append has reached the ledger (None: none pending)
        self._submitted: asyncio.Future[None] | None = None
        #: moved on by ``give_up``: a deferred append of an earlier generation never reaches
        #: the ledger (the sequences it names may have been taken since)
        self._generation = 0

    async def write(self, work: Coroutine[Any, Any, Any]) -> None:
        """Start an evidence write in the background; appends handed off after this wait for
        it to be durable before they reach the ledger."""
        self._unfinished = [w for w in self._unfinished if not w.done()]
        if len(self._unfinished) >= MAX_PENDING_WRITES:
            await asyncio.wait(self._unfinished[:1])
        task = asyncio.ensure_future(work)
        task.add_done_callback(_retrieved)
        self._writes.append(task)
        self._unfinished.append(task)

    async def append(
        self, events: list[NewEvent], expected_sequence: int, **extra: Any
    ) -> asyncio.Future[list[ExecutionEvent]]:
        """Hand ``events`` to the ledger's writer: at once when nothing before them is still
        being written, else by a task that waits for that first. The future resolves when they
        are committed, or fails with what kept them (or anything before them) from it.
        ``extra``: what else the ledger's ``submit`` is to write with them (its keywords)."""
        depends, self._writes = self._writes, []
        previous = self._submitted
        ready = all(d.done() and not d.cancelled() and d.exception() is None for d in depends)
        if ready and (previous is None or (previous.done() and previous.exception() is None)):
            self._submitted = None
            return await self._submit(
                self.run_id, events, expected_sequence=expected_sequence, **extra
            )
        submitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        submitted.add_done_callback(_retrieved)
        self._submitted = submitted
        return asyncio.ensure_future(
            self._deferred(
                self._generation, depends, previous, submitted, events, expected_sequence, extra
            )
        )

    async def _deferred(
        self,
        generation: int,
        depends: list[asyncio.Future[Any]],
        previous: asyncio.Future[None] | None,
        submitted: asyncio.Future[None],
        events: list[NewEvent],
        expected_sequence: int,
        extra: dict[str, Any],
    ) -> list[ExecutionEvent]:
        try:
            # ``wait``, not ``await``: a cancelled hand-off must not cancel what it waits for
            if depends:
                await asyncio.wait(depends)
                failure = first_failure(depends)
                if failure is not None:
                    raise failure
            if previous is not None:
                # the append before this one reached the ledger (or failed)
                await asyncio.wait([previous])
                failure = first_failure([previous])
                if failure is not None:
                    raise failure
            if generation != self._generation:
                raise SupersededAppendError(
                    f"run {self.run_id}: an append before sequence {expected_sequence} failed"
                )
            commit = await self._submit(
                self.run_id, events, expected_sequence=expected_sequence, **extra
            )
        except BaseException as exc:
            if not submitted.done():  # and every append after this one fails with it
                submitted.set_exception(exc)
            raise
        submitted.set_result(None)
        await asyncio.wait([commit])
        return commit.result()

    async def wait_writes(self) -> None:
        """Wait for the evidence writes no append depends on yet; raises the first failure."""
        writes, self._writes = self._writes, []
        if writes:
            await asyncio.wait(writes)
            failure = first_failure(writes)
            if failure is not None:
                raise failure

    def give_up(self) -> None:
        """After a failure: nothing handed off so far is waited for by what follows (the
        recorder goes on after the last committed event); a deferred append that has not
        reached the ledger yet never will."""
        self._writes = []
        self._submitted = None
        self._generation += 1


class SupersededAppendError(RuntimeError):
    """A deferred append dropped because one before it failed (reported through that one)."""
