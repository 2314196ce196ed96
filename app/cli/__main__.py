"""`python -m app.cli ...` (torchrun, tests): the `earshot` command."""

import sys

from app.cli.main import main

sys.exit(main())
