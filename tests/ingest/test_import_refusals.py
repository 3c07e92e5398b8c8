"""What the importers once coerced or dropped silently: a reward or a trial given as text is
refused naming its place (``"0"`` made a second run of one trial), a tau2 message of an
unknown role is refused naming it, and OTel spans in a parent cycle or a first model span
whose input messages do not parse are kept as opaque events and reported with their place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingest.otel import convert_otel_file
from integrations.tau2_bench.importer import convert_tau2_file
from integrations.tau_bench.importer import convert_tau_file
from models.errors import InvalidInputError
from tests.fixtures_import import OTEL_FILES, TAU
from tests.integrations.test_tau2_bench import _results

_TRAJ = [
    {"role": "system", "content": "policy"},
    {"role": "user", "content": "cancel my booking"},
    {"role": "assistant", "content": "Done."},
]


@pytest.mark.parametrize(
    ("change", "place"),
    [
        ({"trial": "0"}, "runs[0].trial: must be a whole number, not '0'"),
        ({"trial": 0.0}, "runs[0].trial: must be a whole number"),
        ({"reward": "1.0"}, "runs[0].reward: must be a number, not '1.0'"),
        ({"reward": True}, "runs[0].reward: must be a number"),
    ],
)
def test_tau_bench_numbers_given_as_text_are_refused(
    change: dict[str, Any], place: str, tmp_path: Path
) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"task_id": 1, "trial": 0, "reward": 1.0, "traj": _TRAJ} | change]))
    with pytest.raises(InvalidInputError, match=place.replace("[", r"\[").replace("]", r"\]")):
        convert_tau_file(path, "airline", TAU / "tools_info.json")
    # as numbers they import
    path.write_text(json.dumps([{"task_id": 1, "trial": 0, "reward": 1.0, "traj": _TRAJ}]))
    assert len(convert_tau_file(path, "airline", TAU / "tools_info.json")) == 1


def test_tau2_an_unknown_role_and_a_text_trial_are_refused_naming_the_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.json"
    results = _results()
    results["simulations"][0]["messages"].insert(2, {"role": "wizard", "content": "abracadabra"})
    path.write_text(json.dumps(results))
    with pytest.raises(InvalidInputError, match=r"simulations\[0\]\.messages\[2\]\.role: 'wizard'"):
        convert_tau2_file(path, TAU / "tools_info.json")
    results = _results()
    results["simulations"][0]["trial"] = "0"
    path.write_text(json.dumps(results))
    with pytest.raises(InvalidInputError, match=r"simulations\[0\]\.trial: must be a whole number"):
        convert_tau2_file(path, TAU / "tools_info.json")
    results = _results()
    results["simulations"][0]["reward_info"]["reward"] = "1.0"
    path.write_text(json.dumps(results))
    with pytest.raises(InvalidInputError, match=r"simulations\[0\]\.reward_info\.reward"):
        convert_tau2_file(path, TAU / "tools_info.json")


def test_otel_spans_in_a_parent_cycle_are_kept_and_reported(tmp_path: Path) -> None:
    data = json.loads(OTEL_FILES[0].read_text())
    spans = data["spans"]
    whole = len(convert_otel_file(OTEL_FILES[0], ["write_file"])[0].events)
    # two more spans, each the other's parent: no root leads to them
    for n, parent in ((9001, 9002), (9002, 9001)):
        span = dict(spans[-1], name=f"looping {n}", attributes={})
        span["context"] = dict(span["context"], span_id=n)
        span["parent"] = {"span_id": parent}
        spans.append(span)
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps(data))
    (run,) = convert_otel_file(path, ["write_file"])
    cycle = [line for line in run.opaque if "parent cycle" in line]
    assert len(cycle) == 2 and all(f"{path}: spans[" in line for line in cycle)
    assert len(run.events) == whole + 2
    assert [e.type for e in run.events[-3:]] == ["opaque", "opaque", "run_end"]


def test_otel_input_messages_that_do_not_parse_are_kept_and_reported(tmp_path: Path) -> None:
    data = json.loads(OTEL_FILES[0].read_text())
    first = next(s for s in data["spans"] if "gen_ai.input.messages" in (s.get("attributes") or {}))
    first["attributes"]["gen_ai.input.messages"] = '[{"role": "system", "content": "be kind"'
    path = tmp_path / "unparsed.json"
    path.write_text(json.dumps(data))
    (run,) = convert_otel_file(path, ["write_file"])
    (reported,) = [line for line in run.opaque if "gen_ai.input.messages" in line]
    assert reported.startswith(f"{path}: spans[") and "is not JSON" in reported
    kept = [e for e in run.events if e.type == "opaque" and "not JSON" in e.reason]
    assert len(kept) == 1 and "be kind" in json.dumps(kept[0].data)
