"""The Train tab's presets: the shipped models' recipes, read from their checkpoints, and the quick ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.registry import default_models_dir
from app.services.training import presets as tp
from app.services.training import runs as tr
from core.checkpoints import read_metadata

# how each shipped model was trained: the trainer preset its model card's command names
CARD_PRESETS = {"words": "speech", "units": "small", "retrieval": "aisfx"}


@pytest.fixture(scope="module")
def schemas() -> dict[str, list[tr.SettingSpec]]:
    return {kind: tr.settings_schema(kind) for kind in tr.KINDS}


@pytest.mark.parametrize("kind", list(tr.KINDS))
def test_the_default_preset_is_the_shipped_models_recipe(kind: str, schemas: dict) -> None:
    specs = schemas[kind]
    presets = tp.presets_for(kind, specs)
    shipped = presets[0]
    path = default_models_dir() / f"{kind}-default.safetensors"
    assert shipped.name == f"{kind}-default (shipped)" and shipped.source == path
    stored = read_metadata(path)["training"]["train_config"]
    recipe = {s.name for s in specs if s.name in stored} - tp.MACHINE_LOCAL
    assert len(recipe) >= 20  # the whole recipe, not a few numbers
    for name in recipe - ({"max_minutes"} if stored.get("max_minutes") is None else set()):  # given one: below
        assert tp.same_value(shipped.values[name], stored[name]), name
    assert shipped.values["preset"] == CARD_PRESETS[kind]  # the architecture, not only the hyperparameters
    assert not set(shipped.values) & tp.MACHINE_LOCAL  # that run's cores, caches and init file stay its own
    assert tr.check_settings(kind, shipped.values)  # launchable as it is: types, ranges, the configs' checks
    assert [p.name for p in presets] == [shipped.name, tp.QUICK]


@pytest.mark.parametrize("kind", list(tr.KINDS))
def test_every_shipped_recipe_has_a_time_budget(kind: str, schemas: dict) -> None:
    """retrieval-default's recipe had none: the Train tab said "Time budget: no limit" with no word of how long
    40 epochs would take. A recipe without one gets its run's own time with room to spare, and says so."""
    shipped = tp.presets_for(kind, schemas[kind])[0]
    training = read_metadata(shipped.source)["training"]
    budget = shipped.values["max_minutes"]
    assert isinstance(budget, float) and budget > 0
    if training["train_config"].get("max_minutes") is None:
        assert training["wall_time_s"] / 60 < budget <= training["wall_time_s"] / 60 * 1.25 + 5
        assert budget % 5 == 0 and "no time budget" in shipped.note and f"{budget:g} min" in shipped.note
    else:
        assert budget == training["train_config"]["max_minutes"] and "budget" not in shipped.note


@pytest.mark.parametrize("kind", list(tr.KINDS))
def test_the_quick_preset_is_tiny_short_and_launchable(kind: str, schemas: dict) -> None:
    quick = tp.presets_for(kind, schemas[kind])[1]
    assert quick.values["max_minutes"] <= 5 and tr.check_settings(kind, quick.values)
    assert quick.values["preset"] in ("tiny", "cpu-small")


def test_form_values_and_matching(schemas: dict) -> None:
    specs = schemas["words"]
    shipped, quick = tp.presets_for("words", specs)
    form = tp.form_values(quick, specs)
    assert form["preset"] == "tiny" and form["lr"] == 5e-4  # named by the preset / the setting's default
    assert "threads" not in form  # the machine's own: a preset leaves it as the form has it
    assert tp.matching([shipped, quick], {**form, "threads": 3}, specs) is quick
    assert tp.matching([shipped, quick], {**form, "lr": 1e-3}, specs) is None  # custom
    assert tp.matching([shipped, quick], {**tp.form_values(shipped, specs), "lr": 0.0003 + 1e-12}, specs) is shipped
    assert tp.same_value("", None) and tp.same_value(None, "") and not tp.same_value("", "noise")  # an unset folder


def test_the_card_names_the_preset_where_the_checkpoint_does_not(tmp_path: Path) -> None:
    card = tmp_path / "x.md"
    card.write_text("## Training\n\n```\nearshot train retrieval --data D \\\n    --preset aisfx --out O\n```\n")
    assert tp.card_preset(card, "retrieval") == "aisfx"
    assert tp.card_preset(card, "units") is None and tp.card_preset(tmp_path / "none.md", "retrieval") is None


def test_no_shipped_model_no_shipped_preset(tmp_path: Path, schemas: dict) -> None:
    assert tp.shipped_preset("words", schemas["words"], tmp_path) is None
    assert [p.name for p in tp.presets_for("words", schemas["words"], models_dir=tmp_path)] == [tp.QUICK]
