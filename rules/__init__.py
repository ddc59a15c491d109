"""The recording rules: rules/*.yml are rendered from rules/src/ by `python -m rules.render`."""
