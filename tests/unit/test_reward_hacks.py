"""relay.rewards.hacks: the wrong answers of a GRPO run that the reward model scored at least as
high as the right one, read back from the run's sample files for the next build of tiny-rm, and
the collected ones that build reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.models.loading import load_tokenizer
from relay.rewards import hacks as rm_hacks
from relay.run.samples import SampleWriter
from relay.types import Sample

TINY = str(Path(__file__).resolve().parents[2] / "relay/models/shipped/tiny")
TOKENIZER = load_tokenizer(TINY)


def episode(prompt: str, answer: str) -> Sample:
    ids = TOKENIZER.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    response = TOKENIZER.encode(answer + "<|im_end|>")
    a, b = (int(x) for x in prompt.split("+"))
    return Sample(
        prompt_ids=list(ids if isinstance(ids, list) else ids["input_ids"]),
        response_ids=response,
        loss_mask=[1] * len(response),
        reward=0.0,
        ground_truth=str(a + b),
        meta={"rm_score": 0.5, "rule_reward": 0.0},
    )


def write_run(folder: Path) -> None:
    writer = SampleWriter(folder / "samples", TINY, every=1, per_write=8, total_steps=2)
    writer.write(1, [episode("17+25", "32"), episode("10+10", "20"), episode("3+4", "7 7")])
    writer.write(2, [episode("17+25", "32"), episode("40+2", "")])


def test_the_wrong_answers_of_a_run_are_read_back_from_its_sample_files(tmp_path):
    write_run(tmp_path)
    assert rm_hacks.wrong_answers(tmp_path) == [("17+25", "32"), ("3+4", "7 7"), ("40+2", "")]


def test_collecting_keeps_what_the_reward_model_is_fooled_by_sorted_and_once(tmp_path, capsys):
    write_run(tmp_path)
    out = tmp_path / "hacks.jsonl"
    out.write_text(json.dumps({"prompt": "1+1", "answer": "3"}) + "\n")  # kept from an earlier collection
    assert rm_hacks.main([str(tmp_path), "--out", str(out)]) == 0
    first = out.read_text()
    rows = [tuple(json.loads(line).values()) for line in first.splitlines()]
    assert rows[0] == ("1+1", "3") and rows == sorted(set(rows))
    fooled = set(rm_hacks.fooling(rm_hacks.wrong_answers(tmp_path), rm_hacks.shipped_rm()))
    assert set(rows) == {("1+1", "3")} | fooled
    assert "3 distinct wrong answers" in capsys.readouterr().out
    assert rm_hacks.main([str(tmp_path), "--out", str(out)]) == 0 and out.read_text() == first  # idempotent


def test_a_folder_without_sample_files_is_one_line(tmp_path, capsys):
    assert rm_hacks.main([str(tmp_path)]) == 2
    assert "no sample files" in capsys.readouterr().err


def test_a_tiny_rm_rebuild_reads_the_collected_hacks():
    """The build trains on every collected hack, each one wrong by the exact rule; the shipped
    tiny-rm's manifest records how many its build read."""
    from relay.models.shipped import RM_NAME, SHIPPED_DIR
    from relay.rewards import build_rm

    collected = build_rm.read_hacks(build_rm.RECIPE["digits"])
    manifest = json.loads((SHIPPED_DIR / "manifest.json").read_text())
    assert len(collected) == manifest[RM_NAME]["recipe"]["hacks"] == 276
    samples, labels, kinds = build_rm.labelled(collected)
    assert len(samples) == 276 and set(labels) == {0.0} and set(kinds) == {"hack"}


def test_the_collected_hacks_ship_with_the_package_and_a_missing_file_is_an_error(tmp_path):
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["setuptools"]["package-data"]["relay.rewards"]
    assert rm_hacks.HACKS.parent == Path(rm_hacks.__file__).parent and rm_hacks.HACKS.name in shipped
    with pytest.raises(FileNotFoundError):
        rm_hacks.read_hacks(2, tmp_path / "rm_hacks.jsonl")
