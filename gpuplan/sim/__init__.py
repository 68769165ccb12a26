"""How the work is run (layers 2-4 and the stack): ``estimate`` prices one GPU's work,
``parallel`` splits it over many (layer 2), ``runtime`` plays it out over time on simpy (layer 3:
serving, one training step, a cluster over weeks), ``stacks`` names the software that runs it,
``diagnose`` walks the five layers for the next gain, and ``sweep`` maps a search's independent
pieces over this process or a Dask cluster. The map: docs/architecture.md."""
