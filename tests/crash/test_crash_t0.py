"""T0: corrupt tails of a cleanly closed store (Kafka LogLoaderTest style, plus RocketMQ's
testRecover zeroing 16 bytes of the last message), with and without the abort file: recovery
gives back exactly the intact prefix and the oracle's invariants hold."""

import pytest

from tests.crash.tiers import RECOVERY_LOGS, T0_KINDS, check, t0_case

pytestmark = [pytest.mark.crash, pytest.mark.allow_logs(*RECOVERY_LOGS)]


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abort"])
@pytest.mark.parametrize("kind", T0_KINDS)
@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"seed{s}")
def test_corrupt_tail_recovers_the_intact_prefix(tmp_path, seed, kind, abort):
    check(t0_case(str(tmp_path), seed, kind, abort))


@pytest.mark.parametrize("seed, kind, abort", [
    (1086, "cq-overwrite", False),  # garbage cut a queue's tail: its records were not re-dispatched
])
def test_regression_seeds_from_campaigns(tmp_path, seed, kind, abort):
    check(t0_case(str(tmp_path), seed, kind, abort))
