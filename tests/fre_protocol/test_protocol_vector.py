"""The recorded protocol runs (tests/vectors/protocol) replayed against the in-process driver.

A replay re-runs the seeded protocol from the vector's inputs and must reproduce every recorded
message entry by entry, the release bit for bit, and the typed refusal of every failing case.
The comparison itself is checked too: a changed byte, a reordered view, a missing entry or a
wrong status must each fail with a message that says where.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import known_answers
import pytest
from protocol_vectors import (
    VECTOR_DIR,
    Injection,
    Observed,
    Operation,
    compare_operations,
    compare_rejections,
    compare_release,
    readme_checksums,
    replay_vector,
    run_in_process,
    sha256_of,
)

FILES = ("noiseless.json", "dp_noise.json")


@pytest.fixture(scope="module")
def noiseless() -> dict[str, Any]:
    return known_answers.load("protocol/noiseless.json")


def test_files_match_the_readme_checksums() -> None:
    listed = readme_checksums()
    assert sorted(listed) == sorted(p.name for p in VECTOR_DIR.glob("*.json")) == sorted(FILES)
    for name, sha in listed.items():
        assert sha256_of(VECTOR_DIR / name) == sha, f"{name} differs from the checksum its README records"


@pytest.mark.parametrize("name", FILES)
def test_in_process_driver_replays_the_vector(name: str) -> None:
    replay_vector(known_answers.load(f"protocol/{name}"), run_in_process)


def test_a_driver_that_reorders_within_views_replays_as_multisets(noiseless: dict[str, Any]) -> None:
    """A driver whose batching delivers messages in another order within a view (here: each
    view's entries reversed) fails the sequence comparison and passes the per-view one."""

    def reordered(inputs: Mapping[str, Any], injections: Sequence[Injection]) -> Observed:
        observed = run_in_process(inputs, injections)
        views = sorted({o.view for o in observed.operations})
        ops = [o for view in views for o in reversed([o for o in observed.operations if o.view == view])]
        return dataclasses.replace(observed, operations=ops)

    replay_vector(noiseless, reordered, ordering="per_view_multiset")
    with pytest.raises(AssertionError, match=r"^operation 0 \(view "):
        replay_vector(noiseless, reordered)


def test_the_failing_cases_cover_each_kind_of_refusal(noiseless: dict[str, Any]) -> None:
    refusals = {(c["party"], c["phase"], c["status"]) for c in noiseless["failing"]["cases"]}
    assert refusals == {
        ("S_tag", "phase1", "rejected:DecodeError"),  # identity and non-canonical elements
        ("proxy", "phase1", "rejected:DecodeError"),  # truncated envelope
        ("user", "phase1", "rejected:VerificationError"),  # tampered proof
        ("S_syn", "phase1_submit", "rejected:ProtocolStateError"),  # replay
        ("S_syn", "phase2", "rejected:ProtocolStateError"),  # share for an unreleased tag
        ("S_tag", "phase2", "rejected:ProtocolStateError"),
        ("S_syn", "phase2", "rejected:VerificationError"),  # a share whose token no submission committed to
        ("S_tag", "phase2", "rejected:VerificationError"),
    }
    for case in noiseless["failing"]["cases"]:
        assert case["recorded"]["view"] == case["party"] and case["recorded"]["status"] == case["status"]


# -- the comparison reports the first difference --------------------------------------------------
def _operations(vector: dict[str, Any]) -> list[Operation]:
    return [Operation.from_dict(o) for o in vector["operations"]]


def _flip(op: Operation, byte: int) -> Operation:
    assert op.payload is not None
    raw = bytearray.fromhex(op.payload)
    raw[byte] ^= 1
    return dataclasses.replace(op, payload=raw.hex())


def test_a_changed_byte_is_reported_with_its_index_view_phase_and_type(noiseless: dict[str, Any]) -> None:
    expected = _operations(noiseless)
    got = list(expected)
    index = next(i for i, o in enumerate(expected) if o.message_type == "evaluation")
    got[index] = _flip(got[index], 5)
    message = f"operation {index} (view {got[index].view}, phase phase1, type evaluation): payload differs at byte 5 of "
    for ordering in ("sequence", "per_view_multiset"):
        with pytest.raises(AssertionError) as caught:
            compare_operations(expected, got, ordering=ordering)
        if ordering == "sequence":
            assert str(caught.value).startswith(message)
        else:
            assert f"view {got[index].view}: 1 operations missing, 1 unexpected" in str(caught.value)


def test_a_missing_or_reordered_entry_is_reported(noiseless: dict[str, Any]) -> None:
    expected = _operations(noiseless)
    with pytest.raises(AssertionError, match=rf"operation {len(expected) - 1} \(view .*\) is missing from the run"):
        compare_operations(expected, expected[:-1], ordering="sequence")
    with pytest.raises(AssertionError, match="1 operations missing, 0 unexpected"):
        compare_operations(expected, expected[:-1], ordering="per_view_multiset")
    i, j = [k for k, o in enumerate(expected) if o.view == "S_tag" and o.message_type == "blind_request"][:2]
    swapped = list(expected)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    compare_operations(expected, swapped, ordering="per_view_multiset")
    with pytest.raises(AssertionError, match=rf"^operation {i} \(view S_tag, phase phase1, type blind_request\)"):
        compare_operations(expected, swapped, ordering="sequence")


def test_a_changed_status_or_release_is_reported(noiseless: dict[str, Any]) -> None:
    cases = noiseless["failing"]["cases"]
    recorded = [Operation.from_dict(c["recorded"]) for c in cases]
    # a run whose rejections are exactly the cases' entries, at their indices
    run: list[Operation] = []
    for seq, op in sorted(zip((c["seq"] for c in cases), recorded, strict=True)):
        run += [dataclasses.replace(op, status="accepted")] * (seq - len(run)) + [op]
    compare_rejections(cases, run, ordering="sequence")
    wrong = [dataclasses.replace(o, status="rejected:DecodeError") if o.status.endswith("VerificationError") else o for o in run]
    with pytest.raises(AssertionError, match="failing case 'tampered evaluation proof'.*status must be"):
        compare_rejections(cases, wrong, ordering="sequence")
    with pytest.raises(AssertionError, match="failing case 'tampered evaluation proof'.*no entry with status"):
        compare_rejections(cases, wrong, ordering="per_view_multiset")
    release = noiseless["release"]
    last_bit = bytearray.fromhex(release["centroids"][0])
    last_bit[0] ^= 1  # the last bit of the first coordinate: CPU-dependent rounding, accepted
    compare_release(release, {**release, "centroids": [last_bit.hex(), *release["centroids"][1:]]}, what="release")
    first = bytearray.fromhex(release["centroids"][0])
    first[5] ^= 1  # a change of about 2^-12 of the first coordinate
    changed = {**release, "centroids": [first.hex(), *release["centroids"][1:]]}
    with pytest.raises(AssertionError, match="release: centroid 0 .* must be"):
        compare_release(release, changed, what="release")
