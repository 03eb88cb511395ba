"""A masked-diffusion VLM on the bundled world (the target's frozen vision tower and projector, its
decoder made bidirectional over a fixed answer canvas) and its decoding: LLaDA's semi-autoregressive
schedule, Fast-dLLM's threshold unmasking, a fixed-region confidence gate, and LATCH's
candidate-aware early exit (CVC + BWEC).

fovea.diffusion.model (the denoiser), .objective (the training loss), .candidate (the per-task
candidate-span parsers), .config (decoding settings and presets), .decode (the decode loop).
Training lives in fovea.training.diffusion, the benchmark in fovea.bench.diffusion. Never imports gradio.
"""
from fovea.diffusion.candidate import TokenText, candidate_span, char_span, question_task
from fovea.diffusion.config import (METHODS, DiffusionDecodeConfig, GateConfig, LatchConfig, ScheduleConfig)
from fovea.diffusion.decode import DenoiseStep, DiffusionResult, diffusion_generate
from fovea.diffusion.model import (DEFAULT_DIFFUSION_DIR, CanvasConfig, DiffusionVLM, from_target,
                                   load_diffusion, tiny_random)
from fovea.diffusion.objective import answer_canvas, diffusion_loss, mask_canvas

__all__ = [
    "CanvasConfig", "DEFAULT_DIFFUSION_DIR", "DenoiseStep", "DiffusionDecodeConfig", "DiffusionResult",
    "DiffusionVLM", "GateConfig", "LatchConfig", "METHODS", "ScheduleConfig", "TokenText", "answer_canvas",
    "candidate_span", "char_span", "diffusion_generate", "diffusion_loss", "from_target", "load_diffusion",
    "mask_canvas", "question_task", "tiny_random",
]
