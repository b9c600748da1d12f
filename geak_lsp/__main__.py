import sys

from geak_lsp.main import main

sys.exit(main())
