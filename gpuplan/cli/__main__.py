"""``python -m gpuplan.cli``: the same as the ``gpuplan`` command."""

from gpuplan.cli import main

raise SystemExit(main())
