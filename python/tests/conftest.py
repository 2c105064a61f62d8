"""pytest setup: four host devices for the shard_map tests (set before jax is imported), and
a fresh random generator per test whose seed is printed (shown on failure) and can be pinned
with SSMKIT_TEST_SEED."""
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=4").strip()
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("SSMKIT_TEST_SEED", np.random.SeedSequence().entropy % 2**63))
    print(f"seed {seed} (rerun with SSMKIT_TEST_SEED={seed})")
    return np.random.default_rng(seed)
