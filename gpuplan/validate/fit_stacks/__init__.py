"""Stack fits on measured and published rows: ``kernels`` fits the one-GPU stacks on the stack
campaign (``python3 -m gpuplan.validate.fit_stacks``), ``serving`` the serving engines on the
published serving rows (``python3 -m gpuplan.validate.fit_stacks.serving``)."""
