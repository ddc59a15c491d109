"""bench/propagation.py --layers: which layers a change passes on its way to the
bridge, and how the time between them is split. On VictoriaMetrics every recording
rule that reads another rule's result is one more evaluation and write, so the
chain must follow the deepest path, and a layer that was not seen must not vanish
from the total."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench.propagation import INFLIGHT_ROLLUP, Seen, rule_chain, stages


def rules(tmp_path: Path, *groups: dict[str, str]) -> list[Path]:
    """One rule file per group, each group a mapping record -> expr."""
    paths = []
    for k, group in enumerate(groups):
        path = tmp_path / f"g{k}.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": f"g{k}", "rules": [
            {"record": name, "expr": expr} for name, expr in group.items()]}]}))
        paths.append(path)
    return paths


def test_chain_follows_the_deepest_recorded_input_across_files(tmp_path: Path) -> None:
    files = rules(tmp_path,
                  {"a:x:max": "max by (p) (raw_x >= 0)", "a:y:max": "max by (p) (raw_y)",
                   "a:z:bool": "a:y:max > bool 1"},
                  {"pool:x:sum": "sum by (p) (a:x:max) * on (p) group by (p) (a:z:bool)"})
    assert rule_chain("pool:x:sum", files) == ["a:y:max", "a:z:bool", "pool:x:sum"]


def test_a_record_reading_its_own_name_and_raw_series_is_one_layer(tmp_path: Path) -> None:
    files = rules(tmp_path, {"pool:q": 'raw_q{q="a"}'}, {"pool:q": 'pool:q{q="a"} * 0'})
    assert rule_chain("pool:q", files) == ["pool:q"]


def test_the_bridges_inflight_rollup_is_recorded_in_rules() -> None:
    # The layered bench watches the rules between the raw series and the bridge;
    # a rollup renamed in rules/ but not in fields.py fails here, not mid-bench.
    assert rule_chain(INFLIGHT_ROLLUP)[-1] == INFLIGHT_ROLLUP


def test_stages_split_the_whole_time_between_consecutive_events() -> None:
    split = stages(10.0, {"raw": Seen(10.4, 11.2), "rule": None, "pool": Seen(11.0, 12.1)},
                   12.5)
    assert split == pytest.approx({
        "source -> raw sampled": 0.4, "raw sampled -> raw searchable": 0.8,
        "raw searchable -> pool sampled": -0.2, "pool sampled -> pool searchable": 1.1,
        "pool searchable -> bridge": 0.4})
    assert sum(split.values()) == pytest.approx(2.5)
