"""Layer 5, hardware: how fast the silicon runs each kernel. The accelerator catalogue
(datasheet figures with their sources, ``accelerators``), kernel time models (``gemm``,
``attention``, ``elementwise``, ``collectives``, ``launch``, ``bulk`` for many shapes at once) and
the fitted efficiencies they are priced with (``efficiency``, data in ``data/``)."""
