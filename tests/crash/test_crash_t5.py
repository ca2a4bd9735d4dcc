"""T5: damage to a cleanly closed store (manifest, swapped and missing files, a flipped bit in
every record field, ConsumeQueue flips, zeroed pages, damaged config): the open refuses
changing nothing or serves every intact message, read-only opens serve it, and repair then
verify passes with every intact message at its acknowledged offsets. A case whose store has no
room for its damage fails: it would check an undamaged store."""

import pytest

from tests.crash.corruption import T5_KINDS, t5_case
from tests.crash.tiers import RECOVERY_LOGS, check

pytestmark = [pytest.mark.crash, pytest.mark.allow_logs(*RECOVERY_LOGS)]


@pytest.mark.parametrize("kind", T5_KINDS)
@pytest.mark.parametrize("seed", range(2), ids=lambda s: f"seed{s}")
def test_damaged_store_is_refused_or_served_and_repaired(tmp_path, seed, kind):
    check(t5_case(str(tmp_path), seed, kind))


@pytest.mark.parametrize("seed, kind", [(90855, "cq-flip"), (9812, "cq-flip")])
def test_campaign_finds_stay_fixed(tmp_path, seed, kind):
    """Cases a campaign failed once. 90855: the sign bit of a queue's first unit flipped, and
    the negative offset passed for a unit retention had expired, so the message was lost to
    the read-only open instead of served from the CommitLog. 9812: a flip sent a queue's last
    unit past the CommitLog's end, and the read-only open dropped it as a writer's next unit
    before the damage check, so the message was not served."""
    check(t5_case(str(tmp_path), seed, kind))
