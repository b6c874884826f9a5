import sys

from lakecluster.cli import main

sys.exit(main())
