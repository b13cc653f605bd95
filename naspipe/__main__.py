import sys

from naspipe.cli import main

sys.exit(main())
