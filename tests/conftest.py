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


class SteeredDenoiser:
    """A tiny random diffusion model whose denoising logits get `strength` added at the gold answer's
    tokens for the questions in `answers` ({question: answer}); other questions decode unsteered. The
    canvas then settles on the gold answer at a confidence set by `strength` (10: ~0.95 with the tiny
    preset), so CVC and BWEC fire on a real forward. The steering rides in the prefill's cache tuple,
    so the wrapper keeps no per-request state."""

    def __init__(self, model, answers: dict[str, str], strength: float):
        from fovea.diffusion import answer_canvas

        self.model, self.strength = model, strength
        self.gold = {q: answer_canvas(model.tokenizer(" " + a, add_special_tokens=False)["input_ids"],
                                      model.canvas.length, model.eos_id) for q, a in answers.items()}

    def __getattr__(self, name):
        return getattr(self.model, name)

    def prefill(self, image, question):
        cache, last, start = self.model.prefill(image, question)
        return (cache, self.gold.get(question)), last, start

    def denoise(self, cache, last_id, start, canvas):
        cache, gold = cache
        logits = self.model.denoise(cache, last_id, start, canvas)                 # [L, V]
        if gold is not None:
            logits[torch.arange(len(gold)), torch.tensor(gold)] += self.strength
        return logits


@pytest.fixture(scope="session")
def steered_diffusion():
    """steered_diffusion(answers, strength=10.0) -> a SteeredDenoiser over one shared tiny random model
    (a 48-token canvas: blocks 0-31 and 32-47, the final one)."""
    from fovea.diffusion import tiny_random

    model = tiny_random(length=48)
    return lambda answers, strength=10.0: SteeredDenoiser(model, answers, strength)
