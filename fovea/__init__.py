"""FOVEA: focused on-demand visual evidence adaptation for multimodal speculative decoding.

A lossless tree speculative decoder for vision-language models whose drafter retrieves a
state-conditioned subset of the image's visual tokens and corrects its hidden state before the
LM head. Importing this package is light (no gradio, no model loading).
"""
from fovea.config import (CorrectionConfig, DecodingConfig, DrafterConfig, FoveaConfig, RetrievalConfig,
                          TreeConfig)

__all__ = ["CorrectionConfig", "DecodingConfig", "DrafterConfig", "FoveaConfig", "RetrievalConfig", "TreeConfig"]
__version__ = "0.1.0"
