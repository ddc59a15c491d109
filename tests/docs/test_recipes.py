"""docs/design.md's recipes for changing the contract list every file each change
touches, and say which are edited by hand and which `make generate` renders.

Each recipe is walked for real in a copy of the checkout: the walk makes a minimal
change of its kind by hand (a summary field, an engine, an alert, a threshold), runs
the Makefile's generate target, and the files it edited and the files generation
rewrote must be exactly those the recipe lists (parsed from the doc). Then the
project's own checks that guard those files run on the copy, so the hand edits the
recipe asks for are also enough. The checks that start Prometheus or a stack are left
out; promtool runs only the walk's own case (a whole rule test file takes a minute).
Generating once before the edit makes the walk compare against the working tree as
it is, rendered: what another change left unrendered is not counted against a recipe.
Each walk costs about 30 s of CPU (generation twice, one pytest run of its checks), so
the walks are `integration`; the parsing and its ability to fail are checked alone.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.docs import recipes
from tests.docs.recipes import insert_after


@dataclass(frozen=True)
class Walk:
    """One recipe walked: its hand edits, the names its placeholders take, the
    conditional files (as the doc spells them) this change touches, and the checks
    that guard what it touched (pytest node ids; promtool cases by file and name)."""

    recipe: str
    edit: Callable[[Path], None]
    guards: tuple[str, ...]
    names: Mapping[str, str] = field(default_factory=dict)
    takes: frozenset[str] = frozenset()
    promtool: tuple[tuple[str, str], ...] = ()


# --- a new summary field: utilization.cpu_min -----------------------------------------

FIELD_CASE = "host and GPU rollups for two pools"


def add_field(root: Path) -> None:
    fields = root / "contract" / "fields.py"
    text = fields.read_text()
    anchor = '    # health\n    Field("health.resource_freshness_s_avg"'
    assert text.count(anchor) == 1, "fields.py: the health section moved; update the walk"
    fields.write_text(text.replace(anchor, (
        '    Field("utilization.cpu_min", "proxy_pool:cpu_utilization:min",\n'
        "          Classification.MEASURED, _CPU, _NO_RESOURCE, scale=PERCENT, "
        'group="resource",\n'
        "          inputs=(Input.HOST,)),\n") + anchor))
    rules = root / "rules" / "src" / "proxy_pool.yml"
    insert_after(rules, "        expr: max by (proxy_id) "
                        "(poolscope_host_cpu_utilization_ratio) >= 0\n",
                 "\n      # utilization.cpu_min: the idlest host.\n"
                 "      - record: proxy_pool:cpu_utilization:min\n"
                 "        labels: {source: psutil}\n"
                 "        expr: min by (proxy_id) (poolscope_host_cpu_utilization_ratio >= 0)\n")
    insert_after(rules, "            and on (proxy_id) proxy_pool:cpu_utilization:max\n",
                 "            and on (proxy_id) proxy_pool:cpu_utilization:min\n")
    floor = root / "bench" / "floor_rules" / "proxy_pool.yml"
    insert_after(floor, "        expr: max by (proxy_id) (poolscope_host_cpu_utilization_ratio)\n",
                 "      - record: floor_pool:cpu_utilization:min\n"
                 "        expr: min by (proxy_id) (poolscope_host_cpu_utilization_ratio)\n")
    insert_after(floor, "            and on (proxy_id) floor_pool:cpu_utilization:max\n",
                 "            and on (proxy_id) floor_pool:cpu_utilization:min\n")
    insert_after(root / "rules" / "tests" / "poolscope.proxy_pool.yml",
                 "          - {labels: 'proxy_pool:cpu_utilization:max{proxy_id=\"pb\","
                 "source=\"psutil\"}', value: 0.5}\n",
                 "      - expr: proxy_pool:cpu_utilization:min\n"
                 "        eval_time: 1m\n"
                 "        exp_samples:\n"
                 "          - {labels: 'proxy_pool:cpu_utilization:min{proxy_id=\"pa\","
                 "source=\"psutil\"}', value: 0.25}\n"
                 "          - {labels: 'proxy_pool:cpu_utilization:min{proxy_id=\"pb\","
                 "source=\"psutil\"}', value: 0.5}\n")


# --- a new engine: "walk", detected by `walk_` ----------------------------------------

ENGINE_PAGE = """\
# HELP walk_requests_running Requests in the running batch.
# TYPE walk_requests_running gauge
walk_requests_running{model="m"} 3
# HELP walk_requests_waiting Requests queued.
# TYPE walk_requests_waiting gauge
walk_requests_waiting{model="m"} 1
# HELP walk_kv_cache_usage_ratio KV-cache blocks in use.
# TYPE walk_kv_cache_usage_ratio gauge
walk_kv_cache_usage_ratio{model="m"} 0.5
# HELP walk_requests_succeeded_total Requests finished.
# TYPE walk_requests_succeeded_total counter
walk_requests_succeeded_total{model="m"} 42
"""


def add_engine(root: Path) -> None:
    engines = root / "exporters" / "instance" / "engines.py"
    text = engines.read_text()
    head, sep, tail = text.partition("MAPPINGS: dict[str, EngineMapping] = {")
    assert sep and tail.count(")}\n") >= 1, "engines.py: MAPPINGS moved; update the walk"
    engines.write_text(head + (
        'WALK = EngineMapping(\n    engine="walk",\n    detect=("walk_",),\n'
        '    running=read("walk_requests_running"),\n'
        '    waiting=read("walk_requests_waiting"),\n'
        '    kv_cache_usage=read("walk_kv_cache_usage_ratio"),\n'
        '    request_success=read("walk_requests_succeeded_total"),\n'
        "    prompt_tokens=(),\n    generation_tokens=(),\n)\n\n")
        + sep + tail.replace(")}\n", ", WALK)}\n", 1))
    catalog = root / "contract" / "catalog.py"
    text, count = re.subn(r"^(ENGINES = \(.*)\)$", r'\1, "walk")', catalog.read_text(),
                          flags=re.M)
    assert count == 1, "catalog.py: ENGINES moved; update the walk"
    catalog.write_text(text)
    fixtures = root / "tests" / "fixtures" / "engines"
    (fixtures / "walk.txt").write_text(ENGINE_PAGE)
    readme = fixtures / "README.md"
    last_row = [line for line in readme.read_text().splitlines() if line.startswith("| `")][-1]
    insert_after(readme, last_row + "\n",
                 "| `walk.txt` | the recipe's walk | made up. True: running 3, waiting 1, "
                 "KV 0.5, success 42 |\n")
    insert_after(root / "tests" / "instance" / "test_engine.py",
                 "                          generation_tokens=307200, capacity=256)),\n",
                 '    ("walk", dict(engine="walk", running=3, waiting=1, **_kv(0.5),\n'
                 "                  request_success=42, prompt_tokens=None, "
                 "generation_tokens=None)),\n")


# --- a new alert: PoolscopePoolEngineBacklog ------------------------------------------

ALERT = "PoolscopePoolEngineBacklog"
ALERT_EXPR = "max by (proxy_id) (proxy_pool:engine_requests_waiting:sum) > 100"
ALERT_CASE = "engines holding a backlog for hours, then not"


def add_alert(root: Path) -> None:
    insert_after(root / "rules" / "src" / "alerts.yml",
                 "          runbook_url: ${RUNBOOK_URL}#poolscopepoolsaturated\n", f"""
      # A pool's engines hold a backlog for the whole window.
      - alert: {ALERT}
        expr: {ALERT_EXPR}
        for: ${{ALERT_SATURATED_S:duration}}
        labels: {{severity: warning}}
        annotations:
          summary: Pool {{{{ $labels.proxy_id }}}} has {{{{ $value }}}} requests waiting.
          description: >-
            Pool {{{{ $labels.proxy_id }}}} has had over 100 requests waiting in its engines for
            ${{ALERT_SATURATED_S:duration}}.
          runbook_url: ${{RUNBOOK_URL}}#{ALERT.lower()}
""")
    url = "https://github.com/poolscope/poolscope/blob/main/docs/runbooks.md"
    tests = root / "rules" / "tests" / "poolscope.alerts.pools.yml"
    tests.write_text(tests.read_text().rstrip("\n") + f"""

  - name: {ALERT_CASE}
    # pe's engines hold 150 requests waiting for 2h, then none.
    interval: 15s
    input_series:
      - series: 'proxy_pool:engine_requests_waiting:sum{{proxy_id="pe",source="engine"}}'
        values: '150x480 0x40'
    alert_rule_test:
      - {{eval_time: 5m, alertname: {ALERT}, exp_alerts: []}}
      - eval_time: 11m
        alertname: {ALERT}
        exp_alerts: &backlog
          - exp_labels: {{severity: warning, proxy_id: pe}}
            exp_annotations:
              summary: Pool pe has 150 requests waiting.
              description: Pool pe has had over 100 requests waiting in its engines for 10m.
              runbook_url: {url}#{ALERT.lower()}
      - {{eval_time: 1h30m, alertname: {ALERT}, exp_alerts: *backlog}}
      - {{eval_time: 2h5m, alertname: {ALERT}, exp_alerts: []}}
""")
    runbooks = root / "docs" / "runbooks.md"
    runbooks.write_text(runbooks.read_text().rstrip("\n") + f"""

## {ALERT}

**Warning.** A ticket.

### Meaning

For `for: 10m`, the pool's engines have held over 100 requests waiting.

### Impact

Requests wait in the engines before they run.

### Diagnosis

```promql
{ALERT_EXPR}
```

- `poolscope-status <pool>`: its load and queues.
- Kubernetes: `kubectl get pods -A -l poolscope.io/role=instance,poolscope.io/proxy-id=<pool>`.
- systemd: `systemctl list-units 'poolscope-instance-exporter@*'` on the pool's hosts.

### Mitigation

Add Instances to the pool, or have the Scheduler send it less.
""")
    for doc in ("metrics.md", "operating.md"):
        path = root / "docs" / doc
        [row] = [line for line in path.read_text().splitlines()
                 if line.startswith("| `PoolscopePoolSaturated` |")]
        insert_after(path, row + "\n", f"| `{ALERT}` | warning | engines with over 100 "
                                       "requests waiting for `ALERT_SATURATED_S` |\n")


# --- a new threshold, read by a rule: ENGINE_WAITING_MAX -------------------------------

def add_threshold(root: Path) -> None:
    thresholds = root / "contract" / "thresholds.py"
    thresholds.write_text(thresholds.read_text() + (
        "\nENGINE_WAITING_MAX = 250000.0\n"
        '"""The most requests waiting in one engine that the pool\'s sum believes."""\n'))
    insert_after(root / "rules" / "src" / "proxy_pool.yml",
                 "        expr: sum by (proxy_id) (poolscope_engine_requests_waiting >= 0",
                 " <= ${ENGINE_WAITING_MAX}")
    insert_after(root / "tests" / "rules" / "test_thresholds.py",
                 '    "IDLE_GPUS_S": {"PoolscopeIdleInstanceHoldsGpus"},\n',
                 '    "ENGINE_WAITING_MAX": {"proxy_pool:engine_requests_waiting:sum"},\n')


# The checks that the rendered copies are the generators' output.
RENDERED_COPIES = (
    "tests/rules/test_thresholds.py::test_committed_rule_files_and_doc_are_the_rendered_ones",
    "tests/deploy/test_kubernetes_rules.py::test_committed_file_is_the_generated_one")
RULES = "tests/rules/test_rules.py::"
THRESHOLDS = "tests/rules/test_thresholds.py::"
WALKS = (
    Walk("A new summary field", add_field, (
        "tests/rules/test_floor_rules.py", "tests/rules/test_data_quality.py",
        "tests/scheduler_bridge/test_generated_contract.py", "tests/docs/test_metrics_doc.py",
        RULES + "test_every_rollup_the_bridge_reads_is_recorded",
        RULES + "test_every_rule_says_why_it_exists",
        RULES + "test_the_fleet_series_is_written_after_every_rollup", *RENDERED_COPIES),
        promtool=(("poolscope.proxy_pool.yml", FIELD_CASE),)),
    Walk("A new engine", add_engine, (
        "tests/instance/test_engine.py::test_fixture_pages_map_to_engine_load",
        "tests/instance/test_engine.py::test_every_mapping_reads_only_names_of_its_own_engine",
        "tests/docs/test_metrics_doc.py"),
        names={"<engine>": "walk"}),
    Walk("A new alert", add_alert, (
        "tests/rules/test_alerts.py", THRESHOLDS + "test_every_alert_window_comes_from_a_threshold",
        "tests/docs/test_runbooks_doc.py::test_an_alerts_runbook_has_the_four_parts_and_its_own_query",
        "tests/docs/test_runbooks_doc.py::test_every_runbook_url_lands_on_a_heading",
        "tests/docs/test_metrics_doc.py", RULES + "test_every_rule_says_why_it_exists",
        *RENDERED_COPIES),
        names={"<group>": "pools"}, promtool=(("poolscope.alerts.pools.yml", ALERT_CASE),)),
    Walk("A new threshold", add_threshold, (
        THRESHOLDS + "test_a_changed_threshold_reaches_every_rule_and_leaves_no_old_copy",
        THRESHOLDS + "test_the_doc_states_each_threshold_and_where_the_rules_use_it",
        *RENDERED_COPIES),
        names={"<file>": "proxy_pool"},
        takes=frozenset({"rules/src/<file>.yml", "tests/rules/test_thresholds.py",
                         "rules/<file>.yml", "deploy/kubernetes/prometheusrule.yaml"}),
        promtool=(("poolscope.proxy_pool.yml", "embedded Proxy load for two pools"),)),
)


def test_the_doc_has_the_four_recipes_and_each_is_walked() -> None:
    parsed = recipes.parse(recipes.DESIGN.read_text())
    assert set(parsed) == {w.recipe for w in WALKS}
    for name, recipe in parsed.items():
        assert recipe.hand and recipe.rendered, name


def test_a_file_left_out_of_a_recipe_fails_the_walk() -> None:
    """The comparison can fail: the doc with one hand-edited file and one rendered file
    dropped from a recipe no longer matches what that recipe's walk changes."""
    whole = recipes.DESIGN.read_text()
    text = whole[whole.index(recipes.SECTION):]  # the recipes, not the rest of the page
    walk = WALKS[0]
    recipe = recipes.parse(text)[walk.recipe]
    hand, rendered = recipes.expected(recipe, walk.takes, walk.names)
    assert recipes.mismatch(recipe, walk.takes, walk.names, hand, rendered) == []
    for dropped in ("`bench/floor_rules/proxy_pool.yml`", "`scheduler_bridge/client_fields.py`"):
        assert text.count(dropped) == 1
        short = recipes.parse(text.replace(dropped, "the file"))[walk.recipe]
        [problem] = recipes.mismatch(short, walk.takes, walk.names, hand, rendered)
        assert dropped.strip("`") in problem and "not listed" in problem
    moved = text.replace("`scheduler_bridge/client_fields.py`,", "", 1).replace(
        "2. By hand, `rules/src/proxy_pool.yml`",
        "2. By hand, `scheduler_bridge/client_fields.py`, `rules/src/proxy_pool.yml`", 1)
    problems = recipes.mismatch(recipes.parse(moved)[walk.recipe], walk.takes, walk.names,
                                hand, rendered)
    assert len(problems) == 2, problems


@pytest.fixture(scope="module")
def rendered_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working tree copied once and rendered: each walk starts from a copy of it."""
    root = recipes.copy_checkout(tmp_path_factory.mktemp("checkout") / "poolscope")
    recipes.generate(root, recipes.checkout_env(root, root.parent / "site"))
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


def _promtool_case(root: Path, test_file: str, case_name: str, env: Mapping[str, str],
                   out: Path) -> None:
    """One case of a promtool test file, as tests/rules/test_rules.py runs each."""
    from harness import prometheus  # the walk needs promtool; the checks above do not
    source = root / "rules" / "tests" / test_file
    spec = yaml.safe_load(source.read_text())
    spec["rule_files"] = [str((source.parent / r).resolve()) for r in spec["rule_files"]]
    spec["tests"] = [c for c in spec["tests"] if c.get("name") == case_name]
    assert spec["tests"], f"{test_file} has no case {case_name!r}"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = recipes.run([prometheus.binary("promtool"), "test", "rules", str(out)], root, env)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("walk", WALKS, ids=lambda w: w.recipe)
def test_walking_a_recipe_changes_exactly_the_files_it_lists(
        rendered_copy: Path, tmp_path: Path, walk: Walk) -> None:
    recipe = recipes.parse(recipes.DESIGN.read_text())[walk.recipe]
    root = tmp_path / "poolscope"
    shutil.copytree(rendered_copy, root)
    env = recipes.checkout_env(root, tmp_path / "site")
    before = recipes.snapshot(root)
    walk.edit(root)
    edited = recipes.snapshot(root)
    recipes.generate(root, env)
    hand = recipes.changed(before, edited)
    rendered = recipes.changed(edited, recipes.snapshot(root))
    assert recipes.mismatch(recipe, walk.takes, walk.names, hand, rendered) == []
    checks = recipes.run([*recipes.PYTEST, *walk.guards], root, env, timeout=600)
    assert checks.returncode == 0, checks.stdout[-6000:] + checks.stderr[-2000:]
    for test_file, case in walk.promtool:
        _promtool_case(root, test_file, case, env, tmp_path / test_file)
