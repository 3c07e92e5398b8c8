"""Benchmark: the comparison of a replay with its source run (``compare_trajectories``) at
1,000 and 10,000 steps (issue 35 item 3: it was quadratic). ``python -m bench --only compare``.

Each step of the synthetic trajectories has a model decision, a tool call and a policy
decision; every 10th step a side effect, every 20th a retrieval (the facts every alignment of
``models.comparison`` works on). Two replays per size: one that reproduces the source (what a
RECORDED replay gives) and one that diverges (other arguments in the middle, the last 5% of
the steps missing). Both sizes are timed in interleaved rounds (CPU seconds); the goal is the
10k time at most 12x the 1k time (linear: 10x).
"""

from __future__ import annotations

import functools
import time

from bench.common import Row, Spread, emit, interleaved_samples, machine_load, ratio_spread
from models.comparison import compare_trajectories
from models.trajectory import (
    ModelDecision,
    PolicyFact,
    RetrievalFact,
    SideEffectFact,
    ToolCallFact,
    Trajectory,
)

GOAL_RATIO = 12.0


def trajectory(steps: int, *, changed_from: int | None = None, keep: float = 1.0) -> Trajectory:
    """A synthetic run of ``steps`` steps; ``changed_from``: step index from which the tool
    arguments differ; ``keep``: the share of the steps the run reached."""
    n = int(steps * keep)
    ids = [f"step-{i}" for i in range(n)]
    tools = ("search", "read_page", "sql_query", "send_email")

    def h(i: int, what: str) -> str:
        tag = "b" if changed_from is not None and i >= changed_from and what == "req" else "a"
        return f"sha256:{what}{tag}{i:060d}"

    return Trajectory(
        run_id=f"run-{steps}-{changed_from}-{keep}",
        steps=tuple(ids),
        model_decisions=tuple(
            ModelDecision(step_id=s, tool_names=(tools[i % 4],), argument_hashes=(h(i, "req"),))
            for i, s in enumerate(ids)
        ),
        tool_calls=tuple(
            ToolCallFact(
                step_id=s,
                capability_id=tools[i % 4],
                request_hash=h(i, "req"),
                arguments={"q": f"query {i}"},
                outcome="ok",
                side_effect_class="read",
            )
            for i, s in enumerate(ids)
        ),
        policy_decisions=tuple(
            PolicyFact(step_id=s, policy_id="budget", input_hash=h(i, "pol"), decision="allow")
            for i, s in enumerate(ids)
        ),
        side_effects=tuple(
            SideEffectFact(
                step_id=s, capability_id="send_email", action_hash=h(i, "act"), status="executed"
            )
            for i, s in enumerate(ids)
            if i % 10 == 0
        ),
        retrievals=tuple(
            RetrievalFact(step_id=s, query_hash=h(i, "ret"), chunks=("c1", "c2"))
            for i, s in enumerate(ids)
            if i % 20 == 0
        ),
        outcome={"answer": "done", "steps": steps},
        final_answer="done",
    )


def rows(rounds: int = 5, sizes: tuple[int, int] = (1_000, 10_000)) -> list[Row]:
    out: list[Row] = []
    small, large = sizes
    for case in ("reproducing", "diverging"):
        pairs = {}
        for n in sizes:
            source = trajectory(n)
            replay = (
                trajectory(n)
                if case == "reproducing"
                else trajectory(n, changed_from=n // 2, keep=0.95)
            )
            pairs[n] = (source, replay)
        samples = interleaved_samples(
            {str(n): functools.partial(compare_trajectories, *pairs[n]) for n in sizes},
            rounds=rounds,
            round_s=0.3,
            clock=time.process_time,
        )
        ratio = ratio_spread(samples[str(large)], samples[str(small)])
        out.append(
            emit(
                Row(
                    figure=f"compare_trajectories, {case} replay, {large:,} steps",
                    value=Spread.of(samples[str(large)]).text() + " CPU",
                    baseline=f"{small:,} steps " + Spread.of(samples[str(small)]).text(),
                    ratio=ratio.median,
                    goal=f"<= {GOAL_RATIO:g}x the {small:,}-step time "
                    f"(rounds {ratio.low:.1f}–{ratio.high:.1f}x)",
                    met=ratio.median <= GOAL_RATIO,
                    load=machine_load(),
                )
            )
        )
    return out


def main() -> list[dict[str, object]]:
    return [row.as_dict() for row in rows()]
