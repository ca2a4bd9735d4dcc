"""T3: real power cuts. The store sits on a loop-mounted ext4 image; the harness shuts the file
system down (EXT4_IOC_SHUTDOWN, NOLOGFLUSH) mid-write, kills the writer, remounts (journal
replay) and recovers: every acknowledged-durable message is there byte for byte, nothing
unacknowledged appears out of order, ConsumeQueues and IndexFiles agree with the CommitLog."""

import pytest

from tests.crash.ext4 import t3_case
from tests.crash.tiers import RECOVERY_LOGS, check

pytestmark = [pytest.mark.crash, pytest.mark.loop_device, pytest.mark.allow_logs(*RECOVERY_LOGS)]


@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed{s}")
def test_power_cut_keeps_every_durable_ack(image, tmp_path, seed):
    check(t3_case(image, str(tmp_path), seed))
