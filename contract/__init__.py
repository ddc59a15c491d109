"""The contract every other part is built from, in one home: the metric catalog (what the
exporters publish), the thresholds (what every rule, alert and bridge judges by) and the
summary fields (what the Scheduler bridge serves). These import nothing of Poolscope;
the rule files, the JSON Schemas, the typed client and the docs' tables are rendered
from them (`make generate`), so a change to the contract starts here."""
