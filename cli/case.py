"""``replaybook case …``: portable incident capsules (``.rbcase``) — export a regression case
with its evidence, verify one, run it with a candidate with no stack, import it into a store,
list the cases, print the public key that verifies capsules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import JsonOption, capsule_key_settings, load_settings, print_json, run_async
from cli.exit_codes import EXIT_BROKEN, EXIT_INCONCLUSIVE
from models.errors import InvalidInputError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from app.capsules import OpenedCapsule

app = typer.Typer(no_args_is_help=True)
case_app = typer.Typer(
    help="Portable incident capsules: a regression case and its evidence in one signed file.",
    no_args_is_help=True,
)
app.add_typer(case_app, name="case")

PublicKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        help="The PEM public key the capsule must be signed with (default: "
        "REPLAYBOOK_CASE_PUBLIC_KEY, else this installation's signing key, else the key the "
        "capsule names: integrity without authorship).",
    ),
]


def trusted_key(path: Path | None) -> tuple[Ed25519PublicKey | None, str]:
    """The public key a capsule is checked with, and where it came from."""
    from app.capsule_keys import trusted_capsule_key

    return trusted_capsule_key(path, capsule_key_settings(load_settings().home))


def open_file(path: Path, public_key: Path | None) -> OpenedCapsule:
    """The capsule at ``path`` after every check (one line naming the failed one otherwise)."""
    from app.capsules import open_capsule
    from models.errors import CapsuleRefusedError

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"capsule {path}: cannot read: {exc.strerror}") from None
    key, source = trusted_key(public_key)
    try:
        capsule = open_capsule(data, key)
    except CapsuleRefusedError as exc:
        message = str(exc).split(": ", 1)[1]
        raise CapsuleRefusedError(exc.check, f"capsule {path}: {message}") from None
    typer.echo(
        f"capsule {path}: signature of key {capsule.manifest.key_id} checked ({source})", err=True
    )
    return capsule


@case_app.command("export")
@run_async
async def export(
    case_id: str,
    output: Annotated[Path, typer.Option("-o", "--output", help="The .rbcase file to write.")],
    as_json: JsonOption = False,
) -> None:
    """Write regression case CASE_ID and the evidence its replay needs as one signed file."""
    from app.capsule_keys import installation_signing_key
    from app.capsules import export_case
    from stores.bundle import open_stores

    key = installation_signing_key(capsule_key_settings(load_settings().home))
    async with open_stores(load_settings().stores) as stores:
        data, manifest = await export_case(stores, case_id, key)
    output.write_bytes(data)
    summary = {"path": str(output), "bytes": len(data), "key_id": manifest.key_id, **manifest.notes}
    if as_json:
        print_json(summary)
    else:
        typer.echo(
            f"{output}: case {case_id}, run {manifest.source_run_id}, {len(data)} bytes, "
            f"signed by key {manifest.key_id}"
        )


@case_app.command("verify")
def verify(path: Path, public_key: PublicKeyOption = None, as_json: JsonOption = False) -> None:
    """Check a capsule (format, signature, manifest, entries) and say what it holds."""
    from app.capsules import capsule_summary

    capsule = open_file(path, public_key)
    summary = capsule_summary(capsule, path.read_bytes())
    if as_json:
        print_json(summary)
    else:
        typer.echo(
            f"capsule {path} verifies: case {summary['case_id']} ({summary['incident_id']}), "
            f"run {summary['source_run_id']} head {summary['chain_heads'][0]['sequence']}, "
            f"{summary['entries']} entries, key {summary['key_id']} ({capsule.trust})"
        )


RepeatOption = Annotated[
    str, typer.Option(help="Replays of the case: a number, or auto (--power at --rate).")
]


@case_app.command("run")
def run(
    path: Path,
    candidate: Annotated[
        list[str] | None,
        typer.Option("--candidate", help="prompt=V, model=M, policy=V, retriever=V (repeatable)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Same as --candidate model=M.")
    ] = None,
    system_prompt_file: Annotated[
        Path | None,
        typer.Option("--system-prompt-file", help="A new compiled system prompt (tool loop)."),
    ] = None,
    tools_file: Annotated[
        Path | None, typer.Option("--tools-file", help="A changed tool catalogue (tool loop).")
    ] = None,
    repeat: RepeatOption = "5",
    power: Annotated[float, typer.Option(help="--repeat auto: chance to catch")] = 0.9,
    rate: Annotated[float, typer.Option(help="--repeat auto: a regression at this rate")] = 0.5,
    seeds: Annotated[
        str | None, typer.Option("--seeds", help="Comma-separated seeds (one per replay).")
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(help="The reproduction rate the candidate may show (default: the case's)."),
    ] = None,
    on_fixture_miss: Annotated[
        str, typer.Option("--on-fixture-miss", help="fail | stub | sandbox-live")
    ] = "sandbox-live",
    public_key: PublicKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay the capsule's case with the candidate in this process — no Temporal, database or
    artifact store — decided as ``regress`` decides (the 95% interval of its reproduction
    rate against the case's threshold); exit 0 it holds, 1 it breaks (or the capsule fails a
    check), 6 inconclusive."""
    from app.candidates import read_candidates

    pairs = _candidates(candidate, model)
    texts = read_candidates(system_prompt_file, tools_file)
    if not pairs and not texts:
        raise InvalidInputError(
            "name the candidate: --candidate prompt=V, --model M, --system-prompt-file F or "
            "--tools-file F",
            field="--candidate",
        )
    from app.regression import GateRepeats

    repeats = GateRepeats.from_flags(repeat, power, rate, seeds, threshold)
    capsule = open_file(path, public_key)
    result = _run(capsule, pairs, texts, repeats, on_fixture_miss)
    print_json(result) if as_json else _print_result(result)
    if result["verdict"] == "FAILED":
        raise typer.Exit(EXIT_BROKEN)
    if result["verdict"] == "INCONCLUSIVE":
        raise typer.Exit(EXIT_INCONCLUSIVE)


@run_async
async def _run(
    capsule: OpenedCapsule,
    pairs: list[tuple[str, str]],
    texts: dict[str, str],
    repeats: Any,
    on_fixture_miss: str,
) -> dict[str, Any]:
    from app.capsule_run import run_capsule
    from app.replays import parse_miss_policy
    from worker.catalogs import catalogs

    settings = load_settings()
    known = catalogs(None, settings.models, settings.model_registry)
    miss = parse_miss_policy(on_fixture_miss)
    return await run_capsule(
        capsule, pairs, known, repeat=repeats, miss=miss, candidate_texts=texts
    )


def _candidates(values: list[str] | None, model: str | None) -> list[tuple[str, str]]:
    from app.incidents import parse_candidates

    # the file candidates come as files (--system-prompt-file, --tools-file), not digests
    pairs = parse_candidates(values, "--candidate", ("prompt", "model", "policy", "retriever"))
    return pairs + ([("model", model)] if model else [])


def _print_result(result: dict[str, Any]) -> None:
    shown = {"PASSED": "PASS", "FAILED": "FAIL", "INCONCLUSIVE": "INCONCLUSIVE"}
    typer.echo(f"{shown[result['verdict']]}  {result['case_id']}  ({result['incident_id']})")
    reasons = dict.fromkeys(f"{f['assertion']}: {f['reason']}" for f in result["failures"])
    reasons |= dict.fromkeys(
        f"inconclusive replay {i['replay_id']}: {i['reason']}" for i in result["inconclusive"]
    )
    for reason in reasons:
        typer.echo(f"      {reason}")
    candidate = ", ".join(f"{k}={v}" for k, v in result["candidate"].items())
    low, high = result["ci95"]
    decide = result.get("repeats_to_decide")
    typer.echo(
        f"capsule gate {result['verdict']} for {candidate}: {len(result['replays'])} replays "
        f"offline (seeds {','.join(map(str, result['seeds']))}), broke the case in "
        f"{result['reproduced']} of {result['conclusive']} conclusive (95% {low:.2f}–{high:.2f}, "
        f"threshold {result['threshold']:.2f} from {result['threshold_source']})"
        + (f"; about {decide} conclusive replays would decide" if decide else "")
    )


@case_app.command("import")
@run_async
async def import_(path: Path, public_key: PublicKeyOption = None) -> None:
    """Bring a capsule's run and case into this installation's store (the run must verify)."""
    from app.capsules import import_capsule
    from stores.bundle import open_stores

    capsule = open_file(path, public_key)
    async with open_stores(load_settings().stores) as stores:
        run_id = await import_capsule(stores, capsule)
    typer.echo(f"imported run {run_id} and case {capsule.case.case_id} (verified intact)")


@case_app.command("list")
@run_async
async def list_(as_json: JsonOption = False) -> None:
    """The regression cases: id, incident, status and the last gate replay."""
    from app.capsules import list_cases
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        cases = await list_cases(stores)
    if as_json:
        print_json(cases)
        return
    for case in cases:
        gate = case["last_gate"]
        last = f"{gate['result']} ({gate['replay_id']} at {gate['at']})" if gate else "never gated"
        typer.echo(f"{case['case_id']}  {case['incident_id']}  {case['status']}  last gate: {last}")


@case_app.command("public-key")
def public_key_(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write it here.")] = None,
) -> None:
    """Print (or write) the PEM public key that verifies this installation's capsules."""
    from app.capsule_keys import installation_public_pem

    pem = installation_public_pem(capsule_key_settings(load_settings().home))
    if output is None:
        typer.echo(pem.decode(), nl=False)
    else:
        output.write_bytes(pem)
        typer.echo(str(output))
