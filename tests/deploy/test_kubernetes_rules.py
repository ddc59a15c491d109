"""deploy/kubernetes/prometheusrule.yaml: generated from rules/, committed,
and failing here as soon as the two drift apart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from deploy.kubernetes import generate
from harness.prometheus import REPO, binary

COMMITTED = REPO / "deploy" / "kubernetes" / "prometheusrule.yaml"
RULE_FILES = sorted((REPO / "rules").glob("*.yml"))


def test_committed_file_is_the_generated_one() -> None:
    assert COMMITTED.read_text() == generate.render(), (
        "deploy/kubernetes/prometheusrule.yaml is stale: "
        "run `python -m deploy.kubernetes.generate`")


def test_groups_are_the_rule_files_groups() -> None:
    """Compared with rules/ directly, not with the generator's own reading of it."""
    expected = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    groups = yaml.safe_load(COMMITTED.read_text())["spec"]["groups"]
    assert [g["interval"] for g in groups] == [g.get("interval", "5s") for g in expected]
    assert [{k: v for k, v in g.items() if k != "interval"} for g in groups] == [
        {k: v for k, v in g.items() if k != "interval"} for g in expected]


def test_promtool_accepts_the_groups(tmp_path: Path) -> None:
    rules = tmp_path / "groups.yml"
    rules.write_text(yaml.safe_dump({"groups": yaml.safe_load(COMMITTED.read_text())
                                     ["spec"]["groups"]}))
    done = subprocess.run([binary("promtool"), "check", "rules", str(rules)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_flag_reports_drift_and_writing_fixes_it(tmp_path: Path) -> None:
    output = tmp_path / "prometheusrule.yaml"
    output.write_text(COMMITTED.read_text().replace("5s", "30s"))
    assert generate.main(["--check", "--output", str(output)]) == 1
    assert generate.main(["--output", str(output)]) == 0
    assert generate.main(["--check", "--output", str(output)]) == 0
    assert output.read_text() == generate.render()


def test_a_group_interval_in_rules_wins(tmp_path: Path) -> None:
    rules = tmp_path / "r.yml"
    rules.write_text(yaml.safe_dump({"groups": [
        {"name": "g", "interval": "1m", "rules": [{"record": "a:b:c", "expr": "up\n+ 1"}]}]}))
    [group] = yaml.safe_load(generate.render([rules]))["spec"]["groups"]
    assert group == {"name": "g", "interval": "1m",
                     "rules": [{"record": "a:b:c", "expr": "up\n+ 1"}]}
