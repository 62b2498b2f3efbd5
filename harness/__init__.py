"""beir-harness: honest retrieval evaluation on BEIR-format data.

Importing the package is cheap: nothing here loads torch, faiss, sentence-transformers or
pandas. The heavy libraries are imported inside the functions that need them.
"""

import logging

__version__ = "0.1.0"

# A library never configures logging for its user; the CLI does (see harness.cli).
logging.getLogger(__name__).addHandler(logging.NullHandler())
