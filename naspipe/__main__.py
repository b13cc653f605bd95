"""``python -m naspipe``: the command line; a Ctrl-C while it is still being imported is one line too."""

import sys

try:
    from naspipe.cli import main
except KeyboardInterrupt:  # before main's own handler exists (start-up imports)
    sys.stderr.write("naspipe: error: interrupted by SIGINT\n")
    sys.exit(130)

sys.exit(main())
