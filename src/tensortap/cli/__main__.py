import sys

from tensortap.cli import main

sys.exit(main())
