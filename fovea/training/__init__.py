"""Training of the bundled target VLM and of FOVEA drafters (entry point: `python -m fovea.train`)."""
