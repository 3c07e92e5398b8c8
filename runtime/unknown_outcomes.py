"""``agent_unknown_side_effect_total``: one count per UNKNOWN outcome, in the process that
records it, at the moment it is durable.

An UNKNOWN is recorded by whoever dispatched the write (``runtime.side_effects``, in an agent
run or a worker), by ingestion (the API, importers) and by the lease sweep (a process that died
mid-write). Counting there, rather than when an incident later looks at the run, counts every
unknowable outcome once, including those no incident was ever opened for. Defined here, below
``activities.metrics`` (which re-exports it with the seed's other metrics), so the recorder and
the sweep can count without importing the activity layer.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter

from models import SideEffectRecord, SideEffectStatus
from runtime.ports import NewEvent

UNKNOWN_SIDE_EFFECT_TOTAL = Counter(
    "agent_unknown_side_effect",
    "Side effects recorded UNKNOWN (outcome not known: an error after dispatch, an expired "
    "lease, an ingested timeout), by capability; counted by the process that recorded them.",
    ["capability"],
)


def count_unknown_recorded(events: Iterable[NewEvent]) -> None:
    """Count the UNKNOWN side-effect transitions among ``events``, which were just appended."""
    for event in events:
        record = event.record
        if isinstance(record, SideEffectRecord) and record.status is SideEffectStatus.UNKNOWN:
            UNKNOWN_SIDE_EFFECT_TOTAL.labels(capability=record.capability_id).inc()
