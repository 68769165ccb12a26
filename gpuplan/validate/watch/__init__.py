"""Holding a running job against the plan it was priced from (``gpuplan watch``): step records
from a training log (``logs``), figures from a serving engine's ``/metrics`` (``prometheus``),
the plan's targets and bands (``plan``), drift against them (``drift``), its layer
(``attribute``) and the following of a source (``run``)."""
