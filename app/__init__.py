"""FOVEA Studio: the Gradio app over the `fovea` library.

`app.render`, `app.focus` and `app.plots` are pure renderers (trace records -> HTML strings,
PIL images, plotly figures) with no gradio import; `app.settings` and `app.ui` hold the
Gradio layout and `app.callbacks` the thin event handlers. Importing this package loads no
model: `app.ui.build_demo(pipeline)` takes a ready `fovea.pipeline.FoveaPipeline`.
"""
