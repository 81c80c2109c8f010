"""Each test leaves ``os.environ`` as it found it (tests/conftest.py): a framework run in one
test's process (Lightning, torch.distributed) sets rendezvous variables that a later test's
job would inherit. The two tests run in this order, in one process (also under
``--dist loadfile``)."""

from __future__ import annotations

import os

_NAME = "TENSORTAP_TEST_LEAKED_RENDEZVOUS_PORT"


def test_a_test_that_sets_a_rendezvous_variable() -> None:
    os.environ[_NAME] = "35397"
    os.environ["PATH"] = os.environ.get("PATH", "") + os.pathsep + "/nonexistent"


def test_the_next_test_does_not_see_it() -> None:
    assert _NAME not in os.environ
    assert "/nonexistent" not in os.environ.get("PATH", "").split(os.pathsep)
