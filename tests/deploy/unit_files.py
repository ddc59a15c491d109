"""Just enough of systemd's unit and environment file syntax to check the
units in deploy/systemd without systemd: sections, repeated keys, `\\`
continuations, the `%i` specifier and `$VAR` / `${VAR}` expansion in
ExecStart (systemd.service(5), "Command lines")."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

_WORD_VAR = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_BRACED_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SPECIFIER = re.compile(r"%(.)")


@dataclass(frozen=True)
class Unit:
    path: Path
    sections: dict[str, dict[str, list[str]]]

    @property
    def is_template(self) -> bool:
        return self.path.stem.endswith("@")

    def values(self, section: str, key: str) -> list[str]:
        return self.sections.get(section, {}).get(key, [])

    def one(self, section: str, key: str) -> str:
        """The key's only value; a key given twice where systemd keeps the last is a bug."""
        found = self.values(section, key)
        if len(found) != 1:
            raise AssertionError(f"{self.path.name}: [{section}] {key} set {len(found)} times")
        return found[0]


def parse_unit(path: Path) -> Unit:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    logical = re.sub(r"\\\n\s*", " ", path.read_text())
    for number, line in enumerate(logical.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise ValueError(f"{path.name}:{number}: not KEY=VALUE inside a section: {line!r}")
        current.setdefault(key.strip(), []).append(value.strip())
    return Unit(path, sections)


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=value lines, as systemd's EnvironmentFile= reads them (no shell)."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path.name}: not KEY=value: {line!r}")
            env[key.strip()] = value.strip()
    return env


def expand_specifiers(text: str, instance: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) == "i":
            return instance
        if m.group(1) == "%":
            return "%"
        raise ValueError(f"specifier %{m.group(1)} is not modelled here")
    return _SPECIFIER.sub(one, text)


def referenced_variables(command: str) -> set[str]:
    words = shlex.split(command)
    return ({m.group(1) for w in words if (m := _WORD_VAR.match(w))}
            | {name for w in words for name in _BRACED_VAR.findall(w)})


def expand_command(command: str, env: dict[str, str], instance: str) -> list[str]:
    """The argv systemd would run: `$VAR` alone splits into words, `${VAR}` does not."""
    argv: list[str] = []
    for word in shlex.split(expand_specifiers(command, instance)):
        if m := _WORD_VAR.match(word):
            argv.extend(env.get(m.group(1), "").split())
        else:
            argv.append(_BRACED_VAR.sub(lambda m: env.get(m.group(1), ""), word))
    return argv
