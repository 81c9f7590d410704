"""``python -m amqp10.cli``: the ``amqp10`` command."""

import sys

from . import main

sys.exit(main())
