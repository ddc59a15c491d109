"""Saves one /metrics page of llama-server while both of its slots generate and three
requests wait: the fixture tests/fixtures/engines/llamacpp_busy.txt.

    LLAMA_SERVER_DIR=... .venv/bin/python -m tests.live.capture_busy_page OUT

A fresh server with the live test's settings (the tiny random-weight llama, 2 slots
of 2048 tokens, one thread), five completions of 2000 tokens sent at once; the first
page that says 2 processing / 3 deferred is written. Not run by the suite.
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from harness import llama_server
from harness.polling import eventually
from harness.tiny_model import write_tiny_llama
from tests.live.test_llamacpp import N_PREDICT, REQUESTS, SLOT_CONTEXT, SLOTS


def _busy(text: str) -> bool:
    values = llama_server.page_values(text)
    return (values["llamacpp:requests_processing"] == SLOTS
            and values["llamacpp:requests_deferred"] == REQUESTS - SLOTS)


def main(out: Path) -> None:
    directory = llama_server.server_dir()
    if directory is None or llama_server.missing_files(directory):
        sys.exit(f"set {llama_server.ENV} to what `make llama-server` built")
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_llama(directory / llama_server.VOCAB, Path(tmp) / "tiny.gguf",
                                 context_length=SLOT_CONTEXT)
        group = ProcessGroup(Path(tmp))
        port = port_or_free(0)
        url = f"http://127.0.0.1:{port}"
        try:
            child = llama_server.start(group, directory, model, port, slots=SLOTS,
                                       slot_context=SLOT_CONTEXT)
            wait_ready(f"{url}/health", child, timeout=60)
            with ThreadPoolExecutor(REQUESTS) as clients:
                futures = [clients.submit(llama_server.complete, url, f"Request {i}:",
                                          N_PREDICT, 120) for i in range(REQUESTS)]
                page = eventually(lambda: llama_server.get(f"{url}/metrics").decode(),
                                  _busy, 30, "2 processing / 3 deferred", every=0.05)
                for f in futures:
                    f.result()
        finally:
            group.stop()
    out.write_text(page)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
