"""Router-mode models that load and unload: llama.cpp's router (one llama-server, a child
server per loaded model) over a few tiny random-weight models, each model an Instance
read by its own Instance exporter through /metrics?model=NAME.

That is how the Instance exporter reads a router (one model's page per exporter, never
loading a model by reading it), so a model's coming and going is an exporter whose
reads fail while the model is unloaded and succeed once it is loaded again. The soak
loads and unloads the models in turns and watches those exporters stay flat. Their
pool has no Proxy: its members are the exporters that declare it.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from bench.fleet_members import start_instance_exporter
from deploy.demo.cluster import Pool
from deploy.demo.processes import Child, ProcessGroup
from harness import llama_server
from harness.tiny_model import write_tiny_llama

POOL = "router-models"
SLOTS = 2
SLOT_CONTEXT = 512  # per slot: small, so a model loads in a moment and holds little
START_S = 120.0


@dataclass(frozen=True)
class ModelReader:
    model: str
    instance_id: str
    exporter_url: str
    exporter: Child


class RouterModels:
    """The router's URL, its models' exporters, and which models are loaded now."""

    def __init__(self, group: ProcessGroup, workdir: Path, count: int) -> None:
        directory = llama_server.server_dir()
        if directory is None or llama_server.missing_files(directory):
            raise SystemExit("bench.churn_soak: --router-models needs llama.cpp's server; "
                             "run `make llama-server` (it exports LLAMA_SERVER_DIR) or pass "
                             "--router-models 0")
        models = workdir / "models"
        models.mkdir(parents=True, exist_ok=True)
        names = [f"tiny-{k + 1}" for k in range(count)]
        for k, name in enumerate(names):
            write_tiny_llama(directory / llama_server.VOCAB, models / f"{name}.gguf",
                             context_length=SLOT_CONTEXT, seed=k)
        self.url = llama_server.serve(group, directory, models, slots=SLOTS,
                                      slot_context=SLOT_CONTEXT, timeout=START_S, router=True)
        self.readers = [self._reader(group, name) for name in names]
        self.loaded: set[str] = set()
        self.loads = 0
        self.unloads = 0
        self._turn = 0

    def pool(self) -> Pool:
        return Pool(POOL, "", tuple(r.exporter_url for r in self.readers),
                    instance_ids=tuple(r.instance_id for r in self.readers))

    def toggle(self) -> str:
        """The next model in turn is loaded if it is not, else unloaded; what was done."""
        model = self.readers[self._turn % len(self.readers)].model
        self._turn += 1
        if model in self.loaded:
            llama_server.post_json(f"{self.url}/models/unload", {"model": model})
            self.loaded.discard(model)
            self.unloads += 1
            return f"unloaded {model}"
        llama_server.post_json(f"{self.url}/models/load", {"model": model}, timeout=START_S)
        self.loaded.add(model)
        self.loads += 1
        return f"loaded {model}"

    def _reader(self, group: ProcessGroup, model: str) -> ModelReader:
        instance_id = f"{POOL}-{model}"
        query = urllib.parse.urlencode({"model": model})
        url, child = start_instance_exporter(group, instance_id, POOL,
                                             f"{self.url}/metrics?{query}", "llamacpp")
        return ModelReader(model, instance_id, url, child)
