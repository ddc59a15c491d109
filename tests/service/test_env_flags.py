"""Every console flag can come from its POOLSCOPE_* variable, checked like the flag."""

from __future__ import annotations

import argparse

import pytest

from poolscope.exporters.instance.config import build_parser as instance_parser
from poolscope.exporters.instance.config import parse as parse_instance
from poolscope.exporters.proxy.__main__ import parse as parse_proxy_exporter
from poolscope.scheduler_bridge.__main__ import build_parser as scheduler_bridge_parser
from poolscope.service.argtypes import ServiceParser, UsageError, env_name
from tests.deploy.clis import console_scripts
from tests.deploy.test_console_flags import parser_of

IDS = ["--instance-id=i-1", "--proxy-id=p-1"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("POOLSCOPE_")]:
        monkeypatch.delenv(name)


def test_the_variable_is_named_after_the_canonical_flag() -> None:
    parser = instance_parser()
    names = {env_name(a) for a in parser.configurable()}
    assert {"POOLSCOPE_WEB_LISTEN_ADDRESS", "POOLSCOPE_WEB_CONFIG_FILE",
            "POOLSCOPE_LOG_LEVEL", "POOLSCOPE_INSTANCE_ID",
            "POOLSCOPE_ADMISSION_KV_DEGRADED"} <= names
    assert "POOLSCOPE_LISTEN" not in names  # an alias has no variable of its own


@pytest.mark.parametrize("script", sorted(console_scripts()))
def test_every_flag_of_every_script_names_its_variable_in_help(script: str) -> None:
    parser = parser_of(console_scripts()[script])
    assert isinstance(parser, ServiceParser), f"{script} does not read POOLSCOPE_* variables"
    text = parser.format_help()
    missing = [env_name(a) for a in parser.configurable() if env_name(a) not in text]
    assert not missing


def test_the_environment_sets_what_the_command_line_leaves_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLSCOPE_INSTANCE_ID", "from-env")
    monkeypatch.setenv("POOLSCOPE_PROXY_ID", "pool-env")
    monkeypatch.setenv("POOLSCOPE_WEB_LISTEN_ADDRESS", "127.0.0.1:10155")
    monkeypatch.setenv("POOLSCOPE_DRAINING", "true")
    monkeypatch.setenv("POOLSCOPE_ADMISSION_KV_DEGRADED", "0.5")
    config = parse_instance([])
    assert (config.settings.instance_id, config.settings.proxy_id) == ("from-env", "pool-env")
    assert tuple(config.listen) == ("127.0.0.1", 10155)
    assert config.settings.draining is True
    assert config.settings.thresholds.kv_degraded == 0.5


def test_the_command_line_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLSCOPE_WEB_LISTEN_ADDRESS", "127.0.0.1:10155")
    monkeypatch.setenv("POOLSCOPE_INSTANCE_ID", "from-env")
    config = parse_instance([*IDS, "--listen=127.0.0.1:10156"])
    assert config.listen.port == 10156
    assert config.settings.instance_id == "i-1"


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLSCOPE_ENGINE_METRICS_URL", "")
    assert parse_instance(IDS).settings.engine_metrics_url is None


@pytest.mark.parametrize(("name", "value", "flag"), [
    ("POOLSCOPE_ADMISSION_KV_DEGRADED", "nan", "--admission-kv-degraded"),
    ("POOLSCOPE_WEB_LISTEN_ADDRESS", "nowhere", "--web.listen-address"),
    ("POOLSCOPE_ENGINE", "not-an-engine", "--engine"),
    ("POOLSCOPE_DRAINING", "maybe", "--draining"),
    ("POOLSCOPE_LOG_LEVEL", "loud", "--log.level"),
])
def test_a_bad_variable_is_refused_naming_it_and_its_flag(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, flag: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(UsageError) as refused:
        parse_instance(IDS)
    assert name in str(refused.value) and flag in str(refused.value)


def test_a_bad_variable_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POOLSCOPE_CACHE_TTL", "-1")
    with pytest.raises(SystemExit) as exited:
        scheduler_bridge_parser().parse_args(["--prometheus-url=http://127.0.0.1:9"])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "POOLSCOPE_CACHE_TTL" in lines[0] and "--cache-ttl" in lines[0]


def test_a_repeatable_flag_takes_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLSCOPE_PROMETHEUS_URL", "http://a:9090, http://b:9090")
    args = scheduler_bridge_parser().parse_args([])
    assert args.prometheus_url == ["http://a:9090", "http://b:9090"]
    # ... and the command line replaces the list rather than adding to it
    args = scheduler_bridge_parser().parse_args(["--prometheus-url=http://c:9090"])
    assert args.prometheus_url == ["http://c:9090"]


def test_a_variable_satisfies_a_required_choice_of_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["--gateway=llmgw", "--gateway-metrics-url=http://127.0.0.1:9/metrics"]
    monkeypatch.setenv("POOLSCOPE_PROXY_ID", "pool-env")
    assert parse_proxy_exporter(base).reader.pools.proxy_id == "pool-env"
    # the command line's choice of the other flag wins over the variable
    chosen = parse_proxy_exporter([*base, "--pool-label=pool"])
    assert chosen.reader.pools.proxy_id is None and chosen.reader.pools.label == "pool"
    monkeypatch.setenv("POOLSCOPE_POOL_LABEL", "pool")
    with pytest.raises(UsageError, match="POOLSCOPE_PROXY_ID and POOLSCOPE_POOL_LABEL"):
        parse_proxy_exporter(base)


def test_version_is_on_every_script(capsys: pytest.CaptureFixture[str]) -> None:
    for script, entry in console_scripts().items():
        parser: argparse.ArgumentParser = parser_of(entry)
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(["--version"])
        assert exited.value.code == 0
        line = capsys.readouterr().out.strip()
        assert line.startswith(f"{script} ") and "python" in line, line


def test_a_prefix_of_a_flag_is_not_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """With abbreviations, `--prometheus=URL` would add to POOLSCOPE_PROMETHEUS_URL's
    list instead of replacing it; it is refused instead."""
    with pytest.raises(SystemExit) as exited:
        scheduler_bridge_parser().parse_args(["--prometheus=http://c:9090"])
    assert exited.value.code == 2 and "--prometheus" in capsys.readouterr().err


def test_help_and_version_answer_whatever_the_environment_holds(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POOLSCOPE_CACHE_TTL", "-1")
    for asked in ("--help", "--version"):
        with pytest.raises(SystemExit) as exited:
            scheduler_bridge_parser().parse_args([asked])
        assert exited.value.code == 0, asked
    assert "POOLSCOPE_CACHE_TTL" in capsys.readouterr().out
