"""resources.rollout.count as a range {min, max} (relay/config/elastic.py): typed, checked in one line
per bad value, written back as it was read; a plain integer stays exactly what it was."""

from pathlib import Path

import pytest
import yaml

from relay.config import ConfigError, RoleResources, load_config, save_resolved
from relay.config.elastic import CountRange, fixed, is_elastic, starting_count, sync_counts

ELASTIC = "resources.rollout.count={min: 1, max: 4}"


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(None, list(overrides))
    return e.value.problems


def test_a_range_is_typed_and_starts_at_its_min():
    res = load_config(None, [ELASTIC]).resources
    assert res.rollout.count == CountRange(min=1, max=4) and is_elastic(res.rollout.count)
    assert starting_count(res.rollout.count) == 1
    assert fixed(res.rollout).count == 1 and fixed(res.rollout).cpus == res.rollout.cpus


def test_a_plain_integer_is_unchanged():
    cfg = load_config(None, ["resources.rollout.count=2", "resources.colocate=false"])
    assert cfg.resources.rollout.count == 2 and type(cfg.resources.rollout.count) is int
    assert not is_elastic(cfg.resources.rollout.count) and fixed(cfg.resources.rollout) is cfg.resources.rollout
    assert cfg.to_dict()["resources"]["rollout"]["count"] == 2
    assert load_config(None, []).resources.colocate is True  # the default still colocates its one worker


def test_one_key_of_the_range_may_be_set_on_its_own():
    assert load_config(None, ["resources.rollout.count.max=4"]).resources.rollout.count == CountRange(1, 4)


def test_a_range_is_written_back_as_a_mapping_and_reads_the_same(tmp_path: Path):
    cfg = load_config(None, [ELASTIC])
    save_resolved(cfg, tmp_path / "config.yaml")
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert written["resources"]["rollout"]["count"] == {"min": 1, "max": 4}
    assert load_config(tmp_path / "config.yaml").resources.rollout.count == CountRange(1, 4)


@pytest.mark.parametrize(
    "count, line",
    [
        ("{min: 3, max: 2}", "resources.rollout.count: min must be <= max, got {min: 3, max: 2}"),
        ("{min: 0, max: 2}", "resources.rollout.count: min must be >= 1, got {min: 0, max: 2}"),
        ("0", "resources.rollout.count: must be >= 1, got 0"),
    ],
)
def test_a_bad_count_is_one_line_naming_the_key(count, line):
    assert problems(f"resources.rollout.count={count}") == [line]


def test_an_unknown_key_in_the_range_is_named():
    (line,) = problems("resources.rollout.count={min: 1, mx: 4}")
    assert line.startswith("resources.rollout.count.mx: unknown key (did you mean resources.rollout.count.max?)")


def test_only_the_rollout_role_takes_a_range():
    (line,) = problems("resources.learner.count={min: 1, max: 2}")
    assert line.startswith("resources.learner.count: expected an integer")


def test_a_colocated_run_has_no_pool_to_grow():
    assert load_config(None, [ELASTIC]).resources.colocate is False  # null resolves to separate actors
    (line,) = problems(ELASTIC, "resources.colocate=true")
    assert "resources.rollout.count=1, not {min: 1, max: 4}" in line


def test_sync_mode_needs_a_count_above_min_that_splits_the_prompts():
    assert sync_counts(CountRange(1, 4), 16) == [1, 2, 4]
    (line,) = problems("resources.rollout.count={min: 2, max: 3}", "training.prompts_per_step=4")
    assert line.startswith("resources.rollout.count={min: 2, max: 3}: no count above min divides")
    overlapped = ["resources.rollout.count={min: 2, max: 3}", "training.prompts_per_step=4", "training.mode=async"]
    assert load_config(None, overlapped).resources.rollout.count == CountRange(2, 3)


def test_other_roles_keep_plain_role_resources():
    res = load_config(None, [ELASTIC]).resources
    assert type(res.learner) is RoleResources and isinstance(res.rollout, RoleResources)
