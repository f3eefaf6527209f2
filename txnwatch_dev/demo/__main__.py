"""`python -m txnwatch_dev.demo [...]`: the demo (run.py; `--help` lists the options)."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
