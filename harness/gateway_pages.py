"""The gateway pages of tests/fixtures/gateways/ (its README gives their sources and
sums), and the pages the gateway tests derive from them."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gateways"
# The llm-d router's endpoint picker: its llm_d_epp_* names and the deprecated GIE
# names beside them, with the same values.
LLM_D = "llm_d_router_epp"
LLM_D_POOL = "vllm-llama3-8b-instruct"


def fixture_text(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


def without_families(text: str, prefix: str) -> str:
    """The page without every family whose name starts with `prefix` (its HELP, TYPE
    and samples): one generation of a page that carries two, as an older or a
    future release serves it."""
    def family(line: str) -> str:
        return line.split()[2] if line.startswith("# ") else line
    kept = [line for line in text.splitlines() if not family(line).startswith(prefix)]
    assert len(kept) < len(text.splitlines()), f"no {prefix}* family on the page"
    return "\n".join(kept) + "\n"


def many_endpoints(text: str, endpoints: int) -> str:
    """llmgw's page grown to `endpoints` more endpoints of pool `chat`: each of
    chat-0's lines, in every family, repeated for `chat-x0`, `chat-x1`, ... right after
    it, as the router lists a large pool."""
    grown: list[str] = []
    for line in text.splitlines():
        grown.append(line)
        if line.startswith("llmgw_endpoint_") and 'replica="chat-0"}' in line:
            grown.extend(line.replace('replica="chat-0"', f'replica="chat-x{i}"')
                         for i in range(endpoints))
    assert len(grown) == len(text.splitlines()) + 7 * endpoints, "not llmgw's seven families"
    return "\n".join(grown) + "\n"
