"""`python -m spade_jax.cli`."""

import sys

from spade_jax.cli import main

sys.exit(main())
