"""Environment defaults that must be in place before DSPy or LiteLLM are imported anywhere in autofocus.

DSPy reads ``DSPY_CACHEDIR`` once, at import: the LM cache goes under the autofocus cache root unless the
user chose a place. ``LITELLM_LOCAL_MODEL_COST_MAP`` makes DSPy/LiteLLM use the bundled model metadata
instead of fetching it from GitHub, which stalls or warns on offline machines.
"""

import os

from autofocus import paths

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DSPY_CACHEDIR", str(paths.sub("dspy_cache")))
