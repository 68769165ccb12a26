"""Error bands: ``build`` derives them from held-out residuals
(``python3 -m gpuplan.validate.bands``), ``lookup`` composes a prediction's band from them."""
