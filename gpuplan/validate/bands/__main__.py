"""``python3 -m gpuplan.validate.bands``: write the error bands (``build.main``)."""

import sys

from gpuplan.validate.bands.build import main

sys.exit(main())
