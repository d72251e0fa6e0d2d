"""`python -m trainer`."""

import sys

from trainer.main import main

sys.exit(main())
