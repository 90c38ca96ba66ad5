"""Environment defaults that must be in place before DSPy or LiteLLM are imported anywhere in autofocus.

DSPy reads ``DSPY_CACHEDIR`` once, at import: the LM cache goes under the autofocus cache root unless the
user chose a place. ``LITELLM_LOCAL_MODEL_COST_MAP`` makes DSPy/LiteLLM use the bundled model metadata
instead of fetching it from GitHub, which stalls or warns on offline machines. DSPy's disk cache is SQLite
files: a damaged one is moved aside first (``sqlite_cache``), as autofocus's own caches are.
"""

import os
from pathlib import Path

from autofocus import paths
from autofocus.sqlite_cache import check_folder

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DSPY_CACHEDIR", str(paths.sub("dspy_cache")))
check_folder(Path(os.environ["DSPY_CACHEDIR"]))
