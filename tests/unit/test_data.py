import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from relay.envs.arithmetic import arithmetic_reward, make_rows, parse_answer
from relay.envs.data import PromptIterator, load_rows, row_messages
from relay.types import Sample


def test_jsonl_and_parquet_rows(tmp_path):
    rows = [
        {"prompt": "1+2", "ground_truth": "3"},
        {"messages": [{"role": "user", "content": "hi"}], "ground_truth": "x"},
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pq.write_table(pa.Table.from_pylist([{"question": "2+2", "answer": "4"}]), tmp_path / "d.parquet")
    assert load_rows(tmp_path / "d.jsonl") == rows
    assert load_rows(tmp_path / "d.parquet", prompt_key="question", answer_key="answer") == [
        {"prompt": "2+2", "ground_truth": "4"}
    ]
    assert row_messages(rows[0], "sys") == [{"role": "system", "content": "sys"}, {"role": "user", "content": "1+2"}]


def test_bad_rows_name_file_and_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "ground_truth": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        load_rows(tmp_path / "bad.jsonl")
    (tmp_path / "noanswer.jsonl").write_text('{"prompt": "a", "ground_truth": 1}\n\n{"prompt": "b"}\n')
    with pytest.raises(ValueError, match=r"noanswer.jsonl:3: row has no 'ground_truth' \(task.answer_key\)"):
        load_rows(tmp_path / "noanswer.jsonl")


def test_prompt_iterator_resumes_exactly():
    rows = make_rows(10, seed=1)
    full = PromptIterator(rows, seed=3)
    first, rest = full.take(7), full.take(9)  # crosses an epoch boundary
    again = PromptIterator(rows, seed=3)
    again.take(7)
    resumed = PromptIterator(rows, seed=3, **again.state_dict())
    assert resumed.take(9) == rest and sorted(map(str, first)) != sorted(map(str, rest))


def test_arithmetic_reward_is_exact_match():
    sample = Sample(prompt_ids=[1], ground_truth="42", response_text=" 42 ", final_text=" 42 ")
    assert arithmetic_reward(sample) == 1.0
    sample.final_text = "41"
    assert arithmetic_reward(sample) == 0.0
    assert parse_answer("4 2") is None
    assert make_rows(3, seed=5) == make_rows(3, seed=5)
