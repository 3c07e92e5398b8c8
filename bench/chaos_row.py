"""One line of ``python -m bench.chaos``: ``tried / completed / lost / duplicated / chains
intact / side effects left EXECUTING`` of one scenario."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    scenario: str
    tried: int = 0
    completed: int = 0
    lost: int = 0
    duplicated: int = 0
    intact: int = 0
    left_executing: int = 0
    #: seconds from each kill to the first event recorded after it
    lost_seconds: list[float] = field(default_factory=list)
    #: anything else measured (503 answers seen, …)
    extra: str = ""

    @property
    def note(self) -> str:
        notes = [self.extra] if self.extra else []
        if self.lost_seconds:
            worst = max(self.lost_seconds)
            mean = sum(self.lost_seconds) / len(self.lost_seconds)
            notes.append(f"time lost per fault: max {worst:.1f} s, mean {mean:.1f} s")
        return "; ".join(notes)


def render(rows: list[Row]) -> str:
    lines = [
        f"{'scenario':40} tried / completed / lost / duplicated / chains intact / "
        "side effects left EXECUTING"
    ]
    for r in rows:
        lines.append(
            f"{r.scenario:40} {r.tried} / {r.completed} / {r.lost} / {r.duplicated} / "
            f"{r.intact} / {r.left_executing}" + (f"   ({r.note})" if r.note else "")
        )
    return "\n".join(lines)
