"""``address_subject``: the subject id ``delete-subject`` uses for an address given in clear."""

from __future__ import annotations

import pytest

from models.redaction import REDACT_V1, RedactionPolicy, address_subject, pseudonym_subjects

ADDRESS = "grace.hopper@example.org"


def registered(text: str) -> str:
    """The subject ingestion registers for the one address or number in ``text``."""
    (subject,) = pseudonym_subjects(str(RedactionPolicy(REDACT_V1).sanitize(text)).encode())
    return subject


@pytest.mark.parametrize(
    ("given", "clear"),
    [
        (ADDRESS, ADDRESS),
        (f"email:{ADDRESS}", ADDRESS),  # the subject-id prefix with the address in clear
        (f" email: {ADDRESS} ", ADDRESS),
        ("phone:+1-555-0100", "+1-555-0100"),
    ],
)
def test_an_address_in_clear_names_its_registered_subject(given: str, clear: str) -> None:
    subject = address_subject(given)
    assert subject == registered(f"write to {clear} today")
    assert clear not in subject


@pytest.mark.parametrize("given", ["customer:C-1001", "email:b4449288493af34a", "email:", "ada"])
def test_anything_else_is_no_address(given: str) -> None:
    assert address_subject(given) is None
