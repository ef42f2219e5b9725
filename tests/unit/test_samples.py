"""See what the model saw: episodes as text in runs/<name>/samples/, and
`python -m relay.run.show` printing them with model turns highlighted and observations dimmed."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from relay.config import load_config
from relay.models.loading import load_tokenizer
from relay.run import show
from relay.run.samples import SampleWriter, render_episode, segments
from relay.types import Sample

TINY = str(Path(__file__).resolve().parents[2] / "relay/models/shipped/tiny")
TOKENIZER = load_tokenizer(TINY)


def enc(text: str) -> list[int]:
    return TOKENIZER.encode(text)


def multi_turn_sample(group_id: int = 0) -> Sample:
    """Prompt, a model turn with a tool call, the tool's observation, a final model turn."""
    prompt = TOKENIZER.apply_chat_template([{"role": "user", "content": "6*7?"}], add_generation_prompt=True)
    turn1, obs, turn2 = enc("<tool>print(6*7)</tool>"), enc("\n<result>\n42\n</result>\n"), enc("42<|im_end|>")
    response = turn1 + obs + turn2
    a, b = len(turn1), len(turn1) + len(obs)
    return Sample(
        prompt_ids=list(prompt if isinstance(prompt, list) else prompt["input_ids"]),
        response_ids=response,
        loss_mask=[1] * a + [0] * len(obs) + [1] * len(turn2),
        turn_spans=[(0, a), (b, len(response))],
        tool_calls=[{"name": "python", "arguments": {"code": "print(6*7)"}, "ok": True, "seconds": 0.04, "turn": 1}],
        reward=1.0,
        group_id=group_id,
        finish_reason="stop",
        ground_truth="42",
        meta={"env": {"rewards": [0.0, 1.0], "error": None}},
    )


def test_segments_follow_turn_spans_or_the_loss_mask():
    s = multi_turn_sample()
    kinds = [k for k, _, _ in segments(s)]
    assert kinds == ["model turn", "observation", "model turn"]
    s.turn_spans = []  # derived from the loss mask instead
    assert [k for k, _, _ in segments(s)] == kinds
    assert segments(Sample(prompt_ids=[1], response_ids=[5, 6], loss_mask=[1, 1])) == [("model turn", 0, 2)]


def test_an_episode_reads_as_the_model_saw_it():
    text = render_episode(multi_turn_sample(group_id=3), lambda ids: TOKENIZER.decode(ids), step=10, index=1, total=4)
    lines = text.splitlines()
    assert lines[0].startswith("════ step 10 · episode 1 of 4 · group 3 · reward 1 · finish stop")
    order = [line.split(" · ")[0].strip("─ ") for line in lines if line.startswith("────")]
    assert order == ["prompt", "model turn 1", "tool calls", "observation", "model turn 2", "result"]
    assert "<|im_start|>user\n6*7?<|im_end|>" in text  # special tokens kept: the chat template is visible
    assert (
        '<tool>print(6*7)</tool>\n──── tool calls · turn 1 ────\npython {"code": "print(6*7)"} -> ok (0.04 s)' in text
    )
    assert "<result>\n42\n</result>" in text and "42<|im_end|>" in text
    assert 'reward 1 · finish stop · ground truth "42"' in text and "environment rewards [0.0, 1.0]" in text


def test_writer_writes_first_every_k_and_last_step(tmp_path):
    cfg = load_config(None, ["logging.samples_every=3", "logging.samples_per_write=2", "training.steps=7"])
    writer = SampleWriter.from_config(cfg, tmp_path, TINY)
    batch = [multi_turn_sample(group_id=g) for g in range(8)]
    written = [step for step in range(1, 8) if writer.write(step, batch)]
    assert written == [1, 3, 6, 7]
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == [
        "step_000001.txt",
        "step_000003.txt",
        "step_000006.txt",
        "step_000007.txt",
    ]
    text = (tmp_path / "samples" / "step_000006.txt").read_text()
    assert text.count("════ step 6 · episode") == 2 and "group 0" in text and "group 4" in text  # spread out
    off = SampleWriter.from_config(load_config(None, ["logging.samples_every=0"]), tmp_path / "off", TINY)
    assert off.write(1, batch) is None and not (tmp_path / "off").exists()


def test_a_writer_that_cannot_decode_warns_once_and_stops(tmp_path, recwarn):
    writer = SampleWriter(tmp_path, str(tmp_path / "no-tokenizer"), every=1, per_write=1, total_steps=3)
    assert writer.write(1, [multi_turn_sample()]) is None and writer.write(2, [multi_turn_sample()]) is None
    assert len([w for w in recwarn if "cannot write samples" in str(w.message)]) == 1


def test_show_prints_the_latest_file_with_styles(tmp_path, capsys):
    writer = SampleWriter(tmp_path / "samples", TINY, every=1, per_write=1, total_steps=12)
    writer.write(2, [multi_turn_sample(group_id=2)])
    writer.write(11, [multi_turn_sample(group_id=11)])
    assert show.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "step_000011.txt" in out and "group 11" in out and "group 2 " not in out  # step 11 after step 2
    assert show.main([str(tmp_path), "--step", "2"]) == 0 and "group 2 " in capsys.readouterr().out
    assert show.main([str(tmp_path / "nothing")]) == 2
    assert "no sample files" in capsys.readouterr().err

    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=200)
    show.render((tmp_path / "samples" / "step_000011.txt").read_text(), console)
    styled = console.file.getvalue()
    assert "\x1b[2m<result>" in styled  # observation tokens dimmed
    assert "\x1b[1;32m<tool>print(6*7)</tool>" in styled  # model turns highlighted
