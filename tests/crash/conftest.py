"""What the crash tiers share as fixtures."""

import pytest

from tests.crash.ext4 import Ext4Image, unavailable


@pytest.fixture(scope="module")
def image(tmp_path_factory, request):
    """A loop-mounted ext4 image for a tier's power cuts (T3, T6), removed after its module."""
    reason = unavailable()
    if reason:
        print(f"skipping the power cuts of {request.module.__name__}: {reason}")
        pytest.skip(reason)
    with Ext4Image(str(tmp_path_factory.mktemp("ext4"))) as img:
        yield img
