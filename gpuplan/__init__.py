"""gpuplan: performance modelling of large language models on GPU systems.

Kept import-light on purpose: the GPU measurement harness imports ``gpuplan.validate.harness``
on machines that have torch but not the analytical core's optional dependencies.
"""

__version__ = "0.1.0"
