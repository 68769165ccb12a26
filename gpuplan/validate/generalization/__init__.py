"""Accuracy on what no fit has seen: leave-one-source-out for published runs, leave-one-device-out
for measured kernels and models, leave-one-model-family-out for whole models.

``published``: every published training and serving row priced with the values fitted without its
own source. ``devices``: the measured records of one device priced by the fits of the other.
``families``: the stack fit refitted without each model family, scored on that family.
``benchmarks/generalization.py`` prints all of it in one run.
"""
