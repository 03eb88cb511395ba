"""FOVEA Studio: the Gradio app over the `fovea` library.

Pure pieces (no gradio import): `app.render` (answer, draft tree, metrics as HTML), `app.focus`
(focus trajectory, heatmap overlays), `app.plots` (plotly figures) and `app.streaming` (runs a
decoder stream in a worker thread). Gradio pieces: `app.settings` (the Settings controls and
their mapping to `FoveaConfig`), `app.callbacks` (thin event handlers) and `app.ui` (layout and
wiring). `app.screenshots` drives the app in headless Chromium. Importing this package loads no
model: `app.ui.build_demo(pipeline)` takes a ready `fovea.pipeline.FoveaPipeline`.
"""
