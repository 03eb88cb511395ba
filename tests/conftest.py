"""Shared fixtures: tiny random-weight models built in-process (no network, no assets)."""
import pytest
import torch

# Tiny models are dominated by per-op overhead; one thread is fastest and avoids oversubscribing
# the 2-core CI machine when a test launches an app in a thread.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_pipeline():
    from fovea.pipeline import FoveaPipeline

    return FoveaPipeline.tiny_random(seed=0)
