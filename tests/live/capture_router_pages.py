"""Saves what llama-server in router mode answers an exporter: the fixtures
tests/fixtures/engines/llamacpp_router_*.

    LLAMA_SERVER_DIR=... .venv/bin/python -m tests.live.capture_router_pages OUT_DIR

A fresh router over one tiny random-weight model (`tiny`, the live test's settings:
2 slots of 2048 tokens, one thread). Written: its own /props (`_props.json`);
/metrics without ?model= (`_no_model.json`, the 400 body); /metrics?model=tiny
&autoload=false before the model is loaded (`_not_loaded.json`, the 400 body); then,
with the model loaded and one completion of 20 tokens done, its page
(`_model.txt`) and /props?model=tiny&autoload=false (`_model_props.json`).
Not run by the suite.
"""

from __future__ import annotations

import sys
import tempfile
import urllib.error
from pathlib import Path

from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from harness import llama_server
from harness.polling import eventually
from harness.tiny_model import write_tiny_llama
from tests.live.test_llamacpp import SLOT_CONTEXT, SLOTS

MODEL = "tiny"
N_PREDICT = 20


def error_body(url: str) -> str:
    """The body of the error answer `url` must give (it fails the capture otherwise)."""
    try:
        llama_server.get(url)
    except urllib.error.HTTPError as e:
        return e.read().decode()
    raise AssertionError(f"{url} answered 200")


def main(out: Path) -> None:
    directory = llama_server.server_dir()
    if directory is None or llama_server.missing_files(directory):
        sys.exit(f"set {llama_server.ENV} to what `make llama-server` built")
    pages: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        write_tiny_llama(directory / llama_server.VOCAB, models / f"{MODEL}.gguf",
                         context_length=SLOT_CONTEXT)
        group = ProcessGroup(Path(tmp))
        port = port_or_free(0)
        url = f"http://127.0.0.1:{port}"
        one = f"model={MODEL}&autoload=false"
        try:
            child = llama_server.start_router(group, directory, models, port, slots=SLOTS,
                                              slot_context=SLOT_CONTEXT)
            wait_ready(f"{url}/health", child, timeout=60)
            pages["props.json"] = llama_server.get(f"{url}/props").decode()
            pages["no_model.json"] = error_body(f"{url}/metrics")
            pages["not_loaded.json"] = error_body(f"{url}/metrics?{one}")
            llama_server.post_json(f"{url}/models/load", {"model": MODEL})
            eventually(lambda: llama_server.model_status(url, MODEL),
                       lambda status: status == "loaded", 60, f"{MODEL} loaded")
            llama_server.complete(url, "Once upon a time", N_PREDICT, 60, model=MODEL)
            pages["model.txt"] = llama_server.get(f"{url}/metrics?{one}").decode()
            pages["model_props.json"] = llama_server.get(f"{url}/props?{one}").decode()
        finally:
            group.stop()
    out.mkdir(parents=True, exist_ok=True)
    for suffix, text in pages.items():
        (out / f"llamacpp_router_{suffix}").write_text(text)
        print(f"wrote {out / f'llamacpp_router_{suffix}'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
