"""Published runs as data, predicted and scored: ``training`` (the published training table),
``megatron`` (Narayanan et al. 2021 and Korthikanti et al. 2022), ``serving`` (published serving
rows); their rows and sources are in ``data/``."""
