"""`flashcheck validate|audit ...`: the command line (also `python -m flashcheck`)."""
from __future__ import annotations

import sys

USAGE = """usage: flashcheck {validate,audit} ...

  validate TARGET [options]   check a kernel against the derived bounds and invariants (flashcheck validate -h)
  audit [TARGET ...] [--out DIR]   numerical-stability report (flashcheck audit -h)"""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "validate":
        from flashcheck.validate import main as run
    elif command == "audit":
        from flashcheck.audit import main as run
    else:
        print(f"{USAGE}\nflashcheck: error: unknown command {command!r}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
