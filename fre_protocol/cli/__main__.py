import sys

from fre_protocol.cli import main

sys.exit(main())
