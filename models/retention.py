"""Retention periods of the retention classes (rule 17)."""

from __future__ import annotations

from datetime import datetime, timedelta

from models.enums import RetentionClass

RETENTION_PERIODS: dict[RetentionClass, timedelta] = {
    RetentionClass.EPHEMERAL: timedelta(days=7),
    RetentionClass.STANDARD: timedelta(days=90),
    RetentionClass.INCIDENT: timedelta(days=730),
    RetentionClass.REGULATORY: timedelta(days=3650),
}


def retention_until(recorded_at: datetime, retention_class: RetentionClass) -> datetime:
    """The instant until which evidence of this class, recorded at ``recorded_at``, is kept."""
    return recorded_at + RETENTION_PERIODS[retention_class]
