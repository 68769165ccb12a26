"""Is it true: the record contract (``records``, ``record_kinds``) and its predictor
(``record_prediction``), scoring (``score``), calibration of the hardware fits (``calibrate``),
the stack fits (``fit_stacks``), error bands (``bands``), published runs reproduced
(``published``), and the torch/CUDA measurement harnesses (``harness``, ``stack_campaign``,
``serving``) that run on a GPU machine."""
