"""The recorded protocol runs (tests/vectors/protocol) replayed against the networked driver:
the services as HTTPS processes, the users as HTTP clients, each party's view read from its own
transcript store (tests/support/network_vectors.py).

Every view is compared whole — users, proxy, S_tag and S_syn, every entry with its payload and
status — as one multiset per view: the proxy forwards windows of requests, each shuffled, so
the order within a view differs from the in-process run while the content may not. Seeded
draws do not depend on the batching (S_tag's proof nonce is keyed by the elements it proves,
the dummy user seals from its own seeded source), so the evaluations, the dummy envelopes and
the release are byte-identical to the vector's.

Failing cases go over HTTP, each request with a credential of its own. Eight of the nine apply:
an identity and a non-canonical blinded element in valid envelopes, a truncated envelope, a
replayed tag submission, the two shares for an unreleased tag and the two shares whose token no
phase-1 submission committed to (one phase-2 request carries each pair). The tampered evaluation
proof does not: it replaces S_tag's answer inside a user's TLS connection to the proxy
(``network_vectors.NOT_OVER_HTTP``). The truncated envelope is refused by the proxy, which records
it by digest and size rather than whole (``network_vectors.networked_case``).

Each deployment takes 10-20 s on two cores; the default suite runs two (dp_noise honestly,
noiseless under the failing cases), the honest noiseless replay is heavy.
"""

from __future__ import annotations

from typing import Any

import known_answers
import pytest
from network_vectors import (
    NOT_OVER_HTTP,
    HttpAttacker,
    networked_case,
    over_http,
    requests_for,
    run_network,
)
from protocol_vectors import (
    RESPONSE,
    Injection,
    Operation,
    compare_operations,
    compare_rejections,
    compare_release,
    replay_vector,
)

from fre_protocol.roles.base import PHASE1, PHASE1_SUBMIT, PHASE2


@pytest.fixture(scope="module")
def noiseless() -> dict[str, Any]:
    return known_answers.load("protocol/noiseless.json")


def test_network_driver_replays_the_dp_noise_vector() -> None:
    """Dummy submissions, DDG noise and several windows per phase: every view and the release."""
    replay_vector(known_answers.load("protocol/dp_noise.json"), run_network, ordering="per_view_multiset")


@pytest.mark.heavy
def test_network_driver_replays_the_noiseless_vector(noiseless: dict[str, Any]) -> None:
    honest = run_network(noiseless["inputs"])
    expected = [Operation.from_dict(o) for o in noiseless["operations"]]
    compare_operations(expected, honest.operations, ordering="per_view_multiset")
    compare_release(noiseless["release"], honest.release, what="release")


def test_failing_cases_sent_over_http_are_refused_as_recorded(noiseless: dict[str, Any]) -> None:
    """Each case that can be sent over HTTP is refused by its party with the vector's status and
    recorded with the vector's payload, nothing else is refused, and the release is the honest
    one. The proxy refuses the truncated envelope at admission (HTTP 400, recorded in its view by
    digest and size);
    it admits the others (202) and the servers refuse them when they open them."""
    cases = [c for c in noiseless["failing"]["cases"] if over_http(Injection.from_case(c))]
    assert sorted(c["name"] for c in noiseless["failing"]["cases"] if c not in cases) == ["tampered evaluation proof"]
    attacker = HttpAttacker(len(noiseless["inputs"]["embeddings"]), [Injection.from_case(c) for c in cases])
    attacked = run_network(noiseless["inputs"], attacker=attacker)
    compare_rejections([networked_case(c) for c in cases], attacked.operations, ordering="per_view_multiset")
    compare_release(noiseless["failing"]["release"], attacked.release, what="release under the failing cases")
    assert attacker.statuses == {PHASE1: [202, 202, 400], PHASE1_SUBMIT: [202], PHASE2: [202, 202]}


def test_injections_map_to_http_requests_or_say_why_not(noiseless: dict[str, Any]) -> None:
    injections = [Injection.from_case(c) for c in noiseless["failing"]["cases"]]
    sendable = [i for i in injections if over_http(i)]
    requests = requests_for(sendable)
    assert {phase: len(r) for phase, r in requests.items()} == {PHASE1: 3, PHASE1_SUBMIT: 1, PHASE2: 2}
    (tampered,) = [i for i in injections if i.hook == RESPONSE]
    with pytest.raises(ValueError, match="cannot be sent over HTTP: replaces S_tag's answer"):
        requests_for([tampered])
    assert RESPONSE in NOT_OVER_HTTP
    (one_share,) = [i for i in sendable if i.phase == PHASE2][:1]
    with pytest.raises(ValueError, match="must pair one envelope for S_tag with one for S_syn"):
        requests_for([one_share])
