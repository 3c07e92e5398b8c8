"""The recorder of evidence appended to a run after its recording session ended (rule 17).

A side-effect retry (``runtime.side_effect_retry``), a reconciliation or a person's verdict
(``forensics.reconcile``, through the incident's activities) append to the chain of a run that
was recorded earlier, often by another process. They must sanitize what they append exactly as
the run's own recording did, or a redacted run gets events with no raw-payload row: their
pseudonyms then read as a raw row somebody deleted (``runs verify`` fails on an untouched
run), and a provider's receipt naming a person lands in clear in the chained view.

So their recorder applies the policy the run's header pins, its raw forms sealed under the
run's data key like the session's. One recorder serves both kinds of appended content:

- content made only of sanitized evidence (the UNKNOWN copy of an interrupted retry, an
  EXECUTING copy of a record read from the lookup rows) sanitizes to itself: its raw-payload
  row says its raw form is itself (no ciphertext), as the lease sweep's and a replay's
  ``RUN_STARTED``'s do;
- new content (a provider's receipt, a reconciler's evidence, a person's verdict) is
  sanitized in the chain and its raw form sealed in the vault, readable by the forensic read.

The policy is built with no personal field names: those are capability argument names, and
what is appended here is a ``SideEffectRecord`` whose keys are its own fields (the pattern
rules apply to every string in it). Limit: a ``redact-v2`` run's learned names (read from its
providers while it ran, kept only in raw form) are not known here, so a name alone (no e-mail,
phone, card or secret) in a new receipt is not redacted.
"""

from __future__ import annotations

from models import RunRecord
from models.privacy import run_subjects
from runtime.ports import ArtifactStore, EventLedger
from runtime.privacy.redaction import recording_redaction
from runtime.recorder import RunRecorder


def appending_recorder(
    ledger: EventLedger, artifacts: ArtifactStore, run: RunRecord
) -> RunRecorder:
    """A recorder that appends to ``run`` under the redaction policy its header pins (as given
    for a run that pins none or ``none``), raw forms kept under the run's primary subject as
    the session's recorder keeps them (``runtime.session.record_run``)."""
    subjects = run_subjects(run.labels)
    return RunRecorder(
        ledger,
        artifacts,
        run.run_id,
        redaction=recording_redaction(run.pinned.redaction_policy_version, ()),
        subject_id=subjects[0].subject_id if subjects else None,
    )


async def run_appender(ledger: EventLedger, artifacts: ArtifactStore, run_id: str) -> RunRecorder:
    """``appending_recorder`` of the run ``run_id`` (its header read from ``ledger``)."""
    return appending_recorder(ledger, artifacts, await ledger.get_run(run_id))
