"""The seed's entry point: ``python main.py ...`` behaves exactly like ``pteforge ...``."""

import sys

from pteforge.cli import main

if __name__ == "__main__":
    sys.exit(main())
