"""The settings of older configs, read into today's: a saved program, ``best_config.json`` or run
manifest written before a setting was replaced, retired or moved loads as it ran.

- Step 3b's repair switches (``repair``, ``repair_mentions``, ...) became the ``repairs`` list: a switch
  that is off drops its rules (``repair: false`` drops them all).
- Rules retired because neither labelled benchmark lost anything without them are dropped from a list.
- Step 1's cue weight (1: off) and prior size (0: off) became its ``target_type_inputs``.
- Settings ``experimental`` held and their step's group holds now are read there, with a deprecation line.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

# rules removed because neither labelled benchmark lost anything without them (docs/results.md, 2026-11-28): an
# older config that lists one runs without it
RETIRED_RULES = frozenset({"names_as_text", "drop_unsupported", "bind_names", "named_relations", "extend_to_asked",
                           "either_target"})  # fmt: skip
# settings of older configs that the lists replaced: the switches -> the rules they turned off (an empty tuple:
# every rule); step 1's cue weight (1: off) and prior size (0: off) -> its inputs
LEGACY_REPAIR_SWITCHES: dict[str, tuple[str, ...]] = {
    "repair": (), "repair_mentions": ("names_as_text", "name_from_question", "constrain_mentions"),
    "repair_asked": ("extend_to_asked",), "repair_class": ("asked_class",), "either_target": ("either_target",),
    "turn_round": ("turn_round",), "own_links": ("own_links",),
}
LEGACY_TYPE_SETTINGS: dict[str, tuple[str, float]] = {"target_type_cue": ("spelled", 1.0), "target_type_prior_k": ("prior", 0)}
LEGACY_SETTINGS = frozenset({*LEGACY_REPAIR_SWITCHES, "target_type_cue"})

# settings that ``experimental`` held and their step's group now holds: an older file's
# ``experimental.alpha_relaxed`` is read as ``merge.alpha_relaxed``, with a deprecation line
MOVED_FROM_EXPERIMENTAL: dict[str, str] = {
    "alpha_relaxed": "merge", "alpha_repaired": "merge", "alpha_large": "merge", "alpha_large_size": "merge",
    "alpha_disagree": "merge", "rerank_keep_block": "rerank", "scan_shards": "runtime",
}  # fmt: skip


def moved(name: str) -> str:
    """The group that holds ``experimental.name`` now, said once per setting as a deprecation line."""
    group = MOVED_FROM_EXPERIMENTAL[name]
    warnings.warn(f"setting experimental.{name} is now {group}.{name}; the old name is read for now",
                  FutureWarning, stacklevel=4)
    return group


def older_query_settings(data: Mapping[str, Any], repairs: Sequence[str], type_inputs: Sequence[str]) -> dict[str, Any]:
    """The query group's settings with those of older configs read into ``repairs`` and
    ``target_type_inputs`` (``repairs`` and ``type_inputs``: their defaults, where a file names none)."""
    data = dict(data)
    if LEGACY_REPAIR_SWITCHES.keys() & data.keys():
        rules = list(data.get("repairs", repairs))
        for switch, dropped in LEGACY_REPAIR_SWITCHES.items():
            if data.pop(switch, True) is False:
                rules = [r for r in rules if r not in dropped] if dropped else []
        data["repairs"] = rules
    if isinstance(data.get("repairs"), list):
        data["repairs"] = [r for r in data["repairs"] if r not in RETIRED_RULES]
    for key, (name, off) in LEGACY_TYPE_SETTINGS.items():
        if key in data and data[key] == off:
            data.pop(key)
            data["target_type_inputs"] = [i for i in data.get("target_type_inputs", type_inputs) if i != name]
    data.pop("target_type_cue", None)  # a weight above 1: the spelled label stays an input
    return data
