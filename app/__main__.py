import sys

from app.cli.main import main

sys.exit(main())
