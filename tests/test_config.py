"""The grouped configuration: every setting described, flat files and overrides still understood."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from autofocus import runtime
from autofocus.cli import app
from autofocus.config import (
    GROUPS,
    LEGACY_SETTINGS,
    REPAIR_RULES,
    AutofocusConfig,
    Steps,
    describe,
    flat_settings,
    nest_settings,
    setting_groups,
)
from autofocus.evaluation.runner import without_waits
from autofocus.program.systems.registry import resolve_config

FLAT_V1 = Path(__file__).parent / "fixtures" / "flat_config_v1.json"  # written flat, before the grouping


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """``model`` and every model its fields hold, however deep."""
    found = [model]
    for info in model.model_fields.values():
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            found += _models(sub)
    return found


@pytest.mark.parametrize("model", _models(AutofocusConfig), ids=lambda m: m.__name__)
def test_every_setting_says_what_it_does(model: type[BaseModel]) -> None:
    undescribed = [n for n, info in model.model_fields.items() if len((info.description or "").split()) < 3]
    assert not undescribed, f"{model.__name__} fields without a description: {undescribed}"


def test_the_mapping_covers_every_grouped_setting_once() -> None:
    groups = setting_groups()
    assert sum(len(m.model_fields) for m in GROUPS.values()) == len(groups)
    assert groups["alpha"] == "merge" and groups["l_max"] == "grounding" and groups["lm"] == "runtime"
    assert groups["reranker"] == "rerank" and groups["query_votes"] == "experimental"
    assert not set(groups) & set(AutofocusConfig.model_fields)  # steps, and the groups themselves, are top level


def test_a_flat_file_of_the_old_form_loads_with_every_value() -> None:
    flat = json.loads(FLAT_V1.read_text())
    assert "alpha" in flat and "merge" not in flat  # the fixture is the old form
    cfg = AutofocusConfig.load(FLAT_V1)
    assert (cfg.merge.alpha, cfg.grounding.l_max, cfg.rerank.rerank_depth, cfg.steps) == (0.45, 33, None, "1-7")
    assert cfg.runtime.lm.default == "openai/m" and cfg.runtime.lm.for_step("rerank") == "local"
    assert cfg.runtime.scan_shards == 2 and cfg.systems.critic_rounds == 3
    loaded = cfg.flat(mode="json")
    kept = {k: v for k, v in flat.items() if k != "lm" and k not in LEGACY_SETTINGS}
    assert {k: v for k, v in loaded.items() if k in kept} == kept
    assert flat["lm"].items() <= loaded["lm"].items()  # nothing lost (LM settings added since at their defaults)
    assert flat["repair_mentions"] and cfg.query.repairs == list(REPAIR_RULES)  # switches on: every rule
    assert runtime.load_config(FLAT_V1) == cfg


def test_settings_graduated_from_experimental_read_under_their_old_group_with_a_deprecation_line() -> None:
    old = {"experimental": {"alpha_relaxed": 0.25, "rerank_keep_block": True, "query_samples": 1}, "experimental.scan_shards": 3}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        cfg = AutofocusConfig.model_validate(old)
    assert sorted(str(w.message).split(";")[0] for w in said if w.category is FutureWarning) == [
        "setting experimental.alpha_relaxed is now merge.alpha_relaxed",
        "setting experimental.rerank_keep_block is now rerank.rerank_keep_block",
        "setting experimental.scan_shards is now runtime.scan_shards"]
    assert (cfg.merge.alpha_relaxed, cfg.rerank.rerank_keep_block, cfg.runtime.scan_shards) == (0.25, True, 3)
    assert "alpha_relaxed" not in cfg.model_dump()["experimental"]  # saved under the new group
    assert AutofocusConfig.model_validate(cfg.model_dump()) == cfg


def test_steps_is_a_named_value_that_says_which_strands_run() -> None:
    assert [s.value for s in Steps] == ["1+7", "1-5", "1-6", "1-7", "1-8"]
    runs = {s.value: (s.grounds, s.ranks_grounded, s.searches_rest, s.reranks) for s in Steps}
    assert runs == {"1+7": (False, True, True, False), "1-5": (True, False, False, False),
                    "1-6": (True, True, False, False), "1-7": (True, True, True, False), "1-8": (True, True, True, True)}
    cfg = AutofocusConfig(steps="1-7")
    assert cfg.steps is Steps.RETRIEVAL and cfg.model_dump(mode="json")["steps"] == "1-7" and json.loads(cfg.model_dump_json())["steps"] == "1-7"
    with pytest.raises(ValidationError, match="the paper's ablations"):
        AutofocusConfig(steps="2-3")


def test_switches_of_older_configs_drop_their_rules_from_the_list(tmp_path: Path) -> None:
    old = {"query": {"repair_class": False, "repair_mentions": False}, "turn_round": False}
    (tmp_path / "old.json").write_text(json.dumps(old))
    rules = AutofocusConfig.load(tmp_path / "old.json").query.repairs
    assert rules == [r for r in REPAIR_RULES if r not in ("asked_class", "name_from_question", "constrain_mentions",
                                                          "turn_round")]
    # a list naming rules retired since runs without them
    assert AutofocusConfig().updated({"repairs": ["bind_names", "solve", "turn_round"]}).query.repairs == ["solve", "turn_round"]
    assert AutofocusConfig().updated({"repair": False}).query.repairs == []
    assert AutofocusConfig().updated({"repairs": ["solve"], "own_links": True}).query.repairs == ["solve"]
    assert AutofocusConfig(target_type_cue=1.0, target_type_prior_k=0).query.target_type_inputs == []
    assert AutofocusConfig(target_type_cue=4.0, target_type_prior_k=30).query.target_type_inputs == ["prior", "spelled"]
    with pytest.raises(ValueError, match="repairs"):
        AutofocusConfig().updated({"repairs": ["no_such_rule"]})
    with pytest.raises(ValueError, match="no language resource 'xx'"):
        AutofocusConfig().updated({"language": "xx"})


def test_grouped_form_round_trips_and_is_what_is_saved(tmp_path: Path) -> None:
    cfg = AutofocusConfig.load(FLAT_V1)
    cfg.save(tmp_path / "c.json")
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["merge"]["alpha"] == 0.45 and "alpha" not in saved
    assert AutofocusConfig.load(tmp_path / "c.json") == cfg


def test_flat_dotted_and_grouped_names_mean_the_same_setting() -> None:
    by_flat = AutofocusConfig(alpha=0.5, k=7)
    assert by_flat == AutofocusConfig(**{"merge.alpha": 0.5, "merge.k": 7})
    assert by_flat == AutofocusConfig(merge={"alpha": 0.5, "k": 7})
    assert by_flat == AutofocusConfig().updated({"alpha": 0.5, "merge.k": 7})
    assert by_flat.updated({"merge.alpha": 0.25}).merge.k == 7  # a group keeps the settings not named
    # a flat name given beside its group wins; a group given whole is merged, not replaced
    assert AutofocusConfig(merge={"alpha": 0.1, "k": 3}, alpha=0.9).merge.model_dump(include={"alpha", "k"}) == {
        "alpha": 0.9, "k": 3}


def test_unknown_or_misplaced_settings_are_errors_where_a_user_names_them() -> None:
    with pytest.raises(ValueError, match="unknown setting 'alhpa'"):
        AutofocusConfig().updated({"alhpa": 0.5})
    with pytest.raises(ValueError, match=r"unknown setting merge\.l_max"):
        AutofocusConfig().updated({"merge.l_max": 5})
    with pytest.raises(ValidationError):  # a grouped file with a misspelt setting
        AutofocusConfig.model_validate({"merge": {"alhpa": 0.5}})
    with pytest.raises(ValueError, match=r"unknown setting 'alhpa'.*afr:alhpa=1"):
        resolve_config("afr:alhpa=1")
    # a misspelt top-level setting is refused as one in a group is, naming the closest known one
    with pytest.raises(ValueError, match=r"unknown setting 'alhpa' \(did you mean 'alpha'\?\)"):
        AutofocusConfig.model_validate({"alhpa": 0.3})


def test_presets_specs_and_load_config_take_both_forms() -> None:
    assert resolve_config("afr:merge.alpha=0.5")[1] == resolve_config("afr:alpha=0.5")[1]
    assert resolve_config("afr:alpha=0.5")[1].merge.alpha == 0.5
    code = resolve_config("afr-code")[1]
    assert (code.grounding.l_max, code.merge.alpha, code.rerank.reranker) == (3, 0.65, "listwise")
    assert runtime.load_config(None, "openai/x", k=5, **{"rerank.reranker": "none"}).flat()["k"] == 5
    cfg = runtime.load_config({"alpha": 0.2}, "openai/x", reranker="none")
    assert (cfg.merge.alpha, cfg.rerank.reranker, cfg.runtime.lm.default) == (0.2, "none", "openai/x")


def test_tuning_studies_name_settings_flat_and_take_grouped_names() -> None:
    from autofocus.optimize.tune_space import config_with, parse_params

    assert parse_params("merge.alpha,l_max,grounding.expansion", rerank=False) == ["alpha", "l_max", "expansion"]
    with pytest.raises(ValueError, match=r"query\.alpha"):
        parse_params("query.alpha", rerank=False)
    tuned = config_with(AutofocusConfig(), {"alpha": 0.3, "l_max": 7, "alpha_relaxed": 0.9})
    assert (tuned.merge.alpha, tuned.grounding.l_max, tuned.merge.alpha_relaxed) == (0.3, 7, 0.9)


def test_run_identities_compare_flat_so_old_runs_still_resume() -> None:
    cfg = AutofocusConfig.load(FLAT_V1)
    flat = cfg.flat(mode="json")  # what a manifest or study of the same config held before the grouping
    assert without_waits(flat) == without_waits(cfg.model_dump(mode="json"))
    assert flat_settings(nest_settings(flat)) == flat


def test_describe_lists_every_setting_with_its_default() -> None:
    rows = list(describe(AutofocusConfig(alpha=0.5)))
    names = [r.name for r in rows]
    assert len(names) == len(set(names)) and "lm.default" in names and "steps" in names
    alpha = next(r for r in rows if r.name == "alpha")
    assert (alpha.group, alpha.value, alpha.default) == ("merge", 0.5, 2 / 3) and "grounded" in alpha.description


def test_config_show_prints_the_effective_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = CliRunner()
    res = cli.invoke(app, ["config", "show", "--system", "afr-code", "--config", str(FLAT_V1), "--set", "merge.k=9",
                           "--set", "relax=[]", "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    # the file, then the preset's defaults (afr-code: l_max 3), then --set
    assert (shown["merge"]["k"], shown["grounding"]["l_max"], shown["grounding"]["relax"]) == (9, 3, [])
    assert shown["runtime"]["lm"]["default"] == "openai/m"
    (tmp_path / "shown.json").write_text(res.output)
    assert AutofocusConfig.load(tmp_path / "shown.json").merge.k == 9
    from autofocus import redact
    from autofocus.commands import config as config_command

    # what other tests of this worker left behind: the console's width from COLUMNS when the command's module
    # was first imported, and API keys registered for redaction (a test's key "k" is a word of the text below)
    monkeypatch.setattr(config_command.console, "width", 200)
    monkeypatch.setattr(redact, "_registered", set())
    res = cli.invoke(app, ["config", "show", "--set", "alpha=0.5"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "merge: Steps 6-7" in res.output and "share of the k places" in res.output and "0.5" in res.output
    res = cli.invoke(app, ["config", "show", "--set", "alhpa=0.5"])
    assert res.exit_code == 1 and "unknown setting 'alhpa'" in res.output
