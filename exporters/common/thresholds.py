"""The thresholds the exporters and the rules share, written once.

The rule files in rules/ are YAML and cannot import this module; a test
(tests/rules/test_thresholds.py) reads every rule expression and fails when a
constant there differs from the one here, so a change is made here and in the
rules together or not at all.
"""

from __future__ import annotations

# A host sample is fresh for 3 scrape intervals of 5 s. The Instance exporter
# serves no sample older than this, so the rules need no freshness gate.
FRESH_S = 15.0
# An Instance with no dispatch for this long counts as idle.
IDLE_S = 300.0
# Engine waiting requests that count as a full queue, and the KV-cache occupancy
# that counts as saturated (the Gateway API Inference Extension's defaults).
WAITING_Q = 5.0
KV_FULL = 0.8
# Without a Proxy-side source, an Instance exporter that stops answering stays a
# (stale) member of its self-declared pool for this long, then leaves it.
MEMBER_MEMORY = "5m"
