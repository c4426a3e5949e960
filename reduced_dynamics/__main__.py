"""``python -m reduced_dynamics`` is the same as the ``reduced-dynamics`` command."""

import sys

from reduced_dynamics.cli import main

sys.exit(main())
