"""`python -m flashcheck validate|audit ...`."""
import sys

from flashcheck.cli import main

sys.exit(main())
