"""`python -m validation run|grid|report`; see validation/cli.py."""

import sys

from validation.cli import main

if __name__ == "__main__":
    sys.exit(main())
