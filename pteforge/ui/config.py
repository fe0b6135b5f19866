"""``pteforge export -c pteforge.toml``: the export's options in a file.

The file holds the same options as the command line, under the flags' names
(``base-url`` or ``base_url``), at its top level — or under ``[tool.pteforge]`` in a
``pyproject.toml``. Its paths are read from its own directory (``_resolve_paths``).
Without ``-c``, the nearest such file is read (``discover``), and the run says so.
Flags given on the command line override the file. An unknown key or a value of the
wrong type is one error line naming the key and its line.
"""

from __future__ import annotations

import re
import sys

from ..families import families

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, before it joined the standard library
    import tomli as tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)

from ..core.errors import UsageError
from ..core.registry import closest
from ..core.request import first_duplicate


def _as_list(value):
    """A string where a list is expected is a list of one (``backends = "xnnpack"``), as
    the flag takes one value."""
    return [value] if isinstance(value, str) else value


Strings = Annotated[list[str] | None, BeforeValidator(_as_list)]


def _shapes(value):
    """Shapes as the flag writes them (``"1,3,224,224"``) or as TOML lists of integers
    (``[1, 3, 224, 224]``, or a list of those for several inputs)."""
    def dims(v):
        return isinstance(v, list) and v and all(isinstance(d, int) and not isinstance(d, bool) for d in v)

    if dims(value):
        return [",".join(map(str, value))]
    if isinstance(value, list):
        return [",".join(map(str, v)) if dims(v) else v for v in value]
    return _as_list(value)


class ModelTable(BaseModel):
    """A ``[[model]]`` table: one model of one's own, with what the flat keys would say for it
    (``source`` is what ``--model`` takes); what it leaves out, the top-level keys give."""

    model_config = ConfigDict(extra="forbid")

    source: str
    name: str | None = None
    task: str | None = None
    input_shape: Annotated[list[str] | None, BeforeValidator(_shapes)] = None
    input_dtype: Strings = None
    labels_file: str | None = None
    mean: str | None = None
    std: str | None = None
    fit: str | None = None
    backends: Strings = None
    precision: str | None = None


def _tables(value):
    """``model`` as strings, ``[[model]]`` tables (with dashed keys), or both."""
    value = _as_list(value)
    if isinstance(value, list):
        return [{k.replace("-", "_"): v for k, v in item.items()} if isinstance(item, dict) else item for item in value]
    return value


def _key_type(option):
    """A config-file key's type: what its flag takes, as TOML writes it."""
    if option.shape == "models":  # package.module:factory or file.pt2, or [[model]] tables (ModelTable)
        return Annotated[list[str | ModelTable] | None, BeforeValidator(_tables)]
    if option.shape == "shapes":
        return Annotated[list[str] | None, BeforeValidator(_shapes)]
    if option.kind in ("append", "list"):
        return Strings
    if option.kind in ("flag", "off"):
        return bool | None
    return (option.type or str) | None


def _export_options() -> type[BaseModel]:
    """The keys a config file may hold: each export option's (``options.py``), named as its
    flag, with its other flags' names as other spellings (``platform`` for ``target``)."""
    from ..core.options import OPTIONS

    keys: dict[str, Any] = {o.name: (_key_type(o), Field(None, validation_alias=AliasChoices(o.name, *o.aliases)) if o.aliases else None)
            for o in OPTIONS if o.file}
    return create_model("ExportOptions", __config__=ConfigDict(extra="forbid"), **keys)


ExportOptions = _export_options()


def export_file() -> type[BaseModel]:
    """``ExportOptions`` plus one key per task family: a list of its models, or true for
    its default model (as the bare flag)."""
    words: dict[str, Any] = {fam.word.replace("-", "_"): (Annotated[list[str] | bool | None, BeforeValidator(_as_list)], None)
             for fam in families() if fam.models}
    return create_model("ExportFile", __base__=ExportOptions, **words)


def discover(start: Path) -> Path | None:
    """The config file ``pteforge export`` reads without ``-c``, as ruff and pytest find
    theirs: the nearest ``pteforge.toml``, or ``pyproject.toml`` with a ``[tool.pteforge]``
    table, from ``start`` up to the project's root (the first directory holding a
    ``pyproject.toml`` or ``.git``)."""
    for directory in (start, *start.parents):
        if (directory / "pteforge.toml").is_file():
            return directory / "pteforge.toml"
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            try:
                text = pyproject.read_bytes().decode("utf-8-sig")
            except (OSError, UnicodeDecodeError):
                return None  # not a file pteforge could read its options from
            try:
                has_table = "pteforge" in tomllib.loads(text).get("tool", {})
            except tomllib.TOMLDecodeError:
                has_table = "[tool.pteforge]" in text  # load_config names the error and its line
            return pyproject if has_table else None
        if (directory / ".git").exists():
            return None
    return None


def load_config(path: Path, choices: dict[str, list] | None = None) -> dict[str, Any]:
    """The export options ``path`` sets, as the command line's destinations; a value that
    ``choices`` (destination -> the flag's choices) does not hold, or a task ``--task`` does
    not take, is an error naming it and its line, at the top level or in a ``[[model]]`` table."""
    path = Path(path)
    text = _read_text(path)
    table, prefix = _options(path, _parse_toml(path, text))
    if table is None:
        raise UsageError(f"{path} has no [tool.pteforge] table", fix="add [tool.pteforge] with the export options")
    table = {key.replace("-", "_"): value for key, value in table.items()}
    for key, value in table.items():
        if _holds_nul(value):  # no path, name or option can hold one (the OS refuses it in a path)
            raise UsageError(f"{_where(path, text, key, prefix[:-1])}: {prefix}{key.replace('_', '-')} holds a NUL "
                             "character (\\u0000)", fix="remove it from that value")
    schema = export_file()
    for name in schema.model_fields:
        given = [k for k in _spellings(schema, name) if k in table]
        if len(given) > 1:
            raise UsageError(f"{_where(path, text, given[1], prefix[:-1])}: {prefix}{given[0]} and {prefix}{given[1]} "
                             "are the same option", fix="keep one of them")
    try:
        parsed = schema.model_validate(table)
    except ValidationError as exc:
        raise _explain_refusal(exc, path, text, prefix, schema) from None
    values = parsed.model_dump(exclude_none=True)
    choices = {**(choices or {}), "task": _tasks()}
    for dest, allowed in choices.items():
        if dest in values and values[dest] not in allowed:
            key = next(k for k in _spellings(schema, dest) if k in table)
            raise UsageError(f"{_where(path, text, key, prefix[:-1])}: {prefix}{key.replace('_', '-')} has a wrong value: "
                             f"{_not_one_of(values[dest], allowed, dest)}", fix="use one of those values")
    _check_tables(path, text, prefix, values, choices)
    for family in set(schema.model_fields) - set(ExportOptions.model_fields):  # true: the default model
        if values.get(family) is True:
            values[family] = []
        elif values.get(family) is False:
            values.pop(family)
    return _resolve_paths(path.parent, values)


def _holds_nul(value) -> bool:
    """Whether a TOML value (a string, or a list or table holding one) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    return isinstance(value, list) and any(_holds_nul(v) for v in value)


def _read_text(path: Path) -> str:
    """``path``'s text (TOML is UTF-8); one error line naming the file (and the line) when
    it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"-c {path}: {exc.strerror}", fix="give the path of a pteforge.toml or pyproject.toml") from None
    try:
        return raw.decode("utf-8-sig")  # a byte order mark first (Windows' Notepad writes one) is not TOML's
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not valid TOML: byte {raw[exc.start]:#04x} is not UTF-8 text",
                         fix=f"save the file as UTF-8 text, or remove that byte from line {line}") from None


def _parse_toml(path: Path, text: str) -> dict:
    """``text`` parsed; invalid TOML is one error line naming the file and the line
    (tomllib's "(at line N, column M)", or the file's last line at "end of document")."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        end = re.search(r"\s*\(at end of document\)", message)
        line = int(at.group(1)) if at else max(len(text.splitlines()), 1)
        cause = message[:found.start()] if (found := at or end) else message
        column = f", column {at.group(2)}" if at else " (the file ends inside it)" if end else ""
        fix = ("that key is set twice: keep one of them" if cause.startswith("Cannot overwrite") else
               "fix the TOML syntax of that line" + (": strings take quotes, e.g. backends = [\"xnnpack\"]"
                                                     if at and cause.startswith("Invalid value") else ""))
        raise UsageError(f"{path}:{line}: not valid TOML: {cause}{column}", fix=fix) from None


def _tasks() -> list[str]:
    """The words ``--task`` takes (``models.task.as_task``): the app's tasks that a family with its
    preprocessing does, then each family's category."""
    from ..models.task import TASKS

    fams = families()
    words = [t for t in TASKS if any(f.task == TASKS[t] and f.preprocessing is not None for f in fams)]
    return words + [f.category for f in fams if f.category not in words]


def _not_one_of(value, allowed: list, key: str = "") -> str:
    """``'clasification' is not one of ...; did you mean classification?`` (a task: the app's
    tasks, then the families' categories, as ``--task``'s help says them)."""
    from ..models.task import TASKS

    hint = closest(value, [str(a) for a in allowed]) if isinstance(value, str) else None
    words = [str(a) for a in allowed]
    said = ", ".join(words)
    if key == "task":
        said = ", ".join(w for w in words if w in TASKS) + " (or a family's category: " + \
            ", ".join(w for w in words if w not in TASKS) + ")"
    return f"{value!r} is not one of {said}" + (f"; did you mean {hint}?" if hint else "")


def _check_tables(path: Path, text: str, prefix: str, values: dict, choices: dict[str, list]) -> None:
    """Each ``[[model]]`` table's values that have choices (``task``, ``fit``) among them, and
    no two tables naming different models alike (one would overwrite the other): an error
    naming the table and its line."""
    entries = values.get("model") or []
    for number, entry in enumerate(entries, 1):
        for key, value in entry.items() if isinstance(entry, dict) else ():
            if key in choices and value not in choices[key]:
                raise UsageError(f"{_table_line(path, text, prefix + 'model', number, key)}: [[{prefix}model]] table "
                                 f"{number}: {key.replace('_', '-')} has a wrong value: {_not_one_of(value, choices[key], key)}",
                                 fix="use one of those values")
    # plain --model strings: the export names them (run.checks.check_run)
    pair = first_duplicate(entries, lambda entry: _model_name(entry, values.get("name")),
                           lambda a, b: isinstance(a, dict) or isinstance(b, dict))
    if pair is not None:
        first, later = pair
        name = _model_name(entries[later], values.get("name"))
        table = later if isinstance(entries[later], dict) else first
        key = "name" if entries[table].get("name") else None
        both = (f"[[{prefix}model]] tables" if all(isinstance(entries[i], dict) for i in (first, later))
                else f"{prefix}model entries")
        raise UsageError(f"{_table_line(path, text, prefix + 'model', table + 1, key)}: {both} {first + 1} and "
                         f"{later + 1} are both named {name!r}; one model would overwrite the other's files",
                         fix=f'{"write" if key else "add"} name = "{name}_{table + 1}" (or another name) '
                             f'{"there" if key else f"to [[{prefix}model]] table {table + 1}"}')


def _model_name(entry, given: str | None) -> str | None:
    """The name a ``model`` entry exports under (``models.factory.factory_spec``, ``models.own.custom_spec``):
    its table's ``name``, the top level's, its factory's or its file's; None if unknown."""
    from ..models.factory import factory_name, parse_factory

    ref = entry.get("source") if isinstance(entry, dict) else entry
    name = (entry.get("name") if isinstance(entry, dict) else None) or given
    if name or not isinstance(ref, str):
        return name
    module, colon, _ = ref.partition(":")
    if colon and not re.match(r"^[A-Za-z]:[\\/]", ref):  # not a Windows drive
        try:
            module, func, args, _ = parse_factory(ref)
        except UsageError:
            return None  # the export says what is wrong with it
        return factory_name(func, args, module)
    return Path(ref).stem


def _explain_refusal(exc: ValidationError, path: Path, text: str, prefix: str, schema) -> UsageError:
    """The first thing wrong in the file, in one line naming its key (and its [[model]] table)."""

    errors = exc.errors()
    err = errors[0]
    key = str(err["loc"][0])
    if key == "model" and any(len(e["loc"]) > 2 and e["loc"][2] == "ModelTable" for e in errors):
        # a [[model]] table: pydantic tried it as a string first; the table's own error is the one
        err = next(e for e in errors if len(e["loc"]) > 2 and e["loc"][2] == "ModelTable")
        field = str(err["loc"][3]) if len(err["loc"]) > 3 else "source"
        hint = closest(field, list(ModelTable.model_fields)) if err["type"] == "extra_forbidden" else None
        what = ("is not a key of a model table" + (f"; did you mean {hint.replace('_', '-')}?" if hint else "")
                if err["type"] == "extra_forbidden" else "is missing: what --model takes" if err["type"] == "missing"
                else f"has a wrong value: {err['msg']}")
        number = int(err["loc"][1]) + 1
        return UsageError(f"{_table_line(path, text, prefix + 'model', number, field)}: [[{prefix}model]] table {number}: "
                          f"{field.replace('_', '-')} {what}",
                          fix="a model table takes source, name, task, input-shape, input-dtype, labels-file, mean, std, "
                              "fit, backends and precision")
    if err["type"] == "extra_forbidden":
        hint = closest(key, list(schema.model_fields))
        what = "is not an option" + (f"; did you mean {hint.replace('_', '-')}?" if hint else "")
    else:
        what = f"has a wrong value: {err['msg']}"
    return UsageError(f"{_where(path, text, key, prefix[:-1])}: {prefix}{key.replace('_', '-')} {what}",
                      fix="use the export flags' names and types (pteforge export --help)")


def _table_line(path: Path, text: str, name: str, number: int, key: str | None = None) -> str:
    """``path:line`` of ``key`` (in either spelling) in the ``number``-th ``[[name]]`` table, or
    of its header when ``key`` is None or not there; for tables written inline
    (``model = [{source = ...}]``), the line of ``name`` itself."""
    pattern = re.compile(r"\s*\[\[\s*" + re.escape(name).replace("\\.", r"\s*\.\s*") + r"\s*\]\]")
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines, 1) if pattern.match(line)]
    if len(starts) < number:
        table, _, last = name.rpartition(".")
        return _where(path, text, last, table)
    spellings = {key, key.replace("_", "-")} if key else set()
    for number_, line in enumerate(lines[starts[number - 1]:], starts[number - 1] + 1):
        if re.match(r"\s*\[\[?\s*[\w\-.\"' ]+\]\]?\s*(#.*)?$", line):
            break  # the next table
        m = re.match(r"\s*([\w\-\"']+)\s*=", line)
        if m and m.group(1).strip("\"'") in spellings:
            return f"{path}:{number_}"
    return f"{path}:{starts[number - 1]}"


def _resolve_paths(base: Path, values: dict[str, Any]) -> dict[str, Any]:
    """The file's paths read from its own directory, as ruff and pytest read theirs, so a
    file found from a subdirectory means what it says: the options that are paths
    (``Option.path``: ``out``, ``calibration``, ``publish``, ``labels-file``, ``weights``
    (a state dict)) and the files among ``model`` (``nets.py:net``, ``model.pt2``);
    ``package.module:factory`` references are imported from the current directory, then
    from the file's (``cli._with_config``)."""
    from ..core.options import OPTIONS
    from ..models.own import FILE_SUFFIXES

    def here(value: str) -> str:
        path = Path(value).expanduser()  # no shell expands a ~ written in the file
        return str(path if path.is_absolute() else base / path)

    def source(ref: str) -> str:
        module, colon, rest = ref.partition(":")
        if ref.endswith(FILE_SUFFIXES) or (not colon and Path(here(ref)).is_file()):  # a file, by name or content
            return here(ref)
        if colon and module.strip().endswith(".py"):
            return here(module.strip()) + colon + rest
        return ref

    for option in (o for o in OPTIONS if o.path and o.name in values):
        value = values[option.name]
        if option.shape == "models":
            values[option.name] = [
                source(ref) if isinstance(ref, str) else
                {**ref, "source": source(ref["source"]), **({"labels_file": here(ref["labels_file"])} if ref.get("labels_file") else {})}
                for ref in value]
        elif value not in ("pretrained", "none"):  # --weights' words, not files
            values[option.name] = here(value)
    return values


def _options(path: Path, data: dict) -> tuple[dict | None, str]:
    """The table of ``data`` (``path``'s TOML) that holds the options, and its dotted
    name with a trailing dot ("" for the top level)."""
    if path.name == "pyproject.toml":
        return data.get("tool", {}).get("pteforge"), "tool.pteforge."
    return data, ""


def locations(path: Path) -> dict[str, str]:
    """``path:line`` of each option the file sets, by the command line's destination."""
    path = Path(path)
    text = path.read_text()
    table, prefix = _options(path, tomllib.loads(text))
    schema = export_file()
    dests = {spelling: name for name in schema.model_fields for spelling in _spellings(schema, name)}
    keys = [key.replace("-", "_") for key in table or {}]
    return {dests.get(key, key): _where(path, text, key, prefix[:-1]) for key in keys}


def table_locations(path: Path, values: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Each key of each ``[[model]]`` table of ``path`` (whose options are ``values``,
    ``load_config``'s) by a label naming it (``[[model]] table 2: backends``): its
    ``path:line`` and its value, so an error the export finds in it names its line."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    _, prefix = _options(path, {})
    return {f"[[{prefix}model]] table {number}: {key}": (_table_line(path, text, prefix + "model", number, key), value)
            for number, entry in enumerate(values.get("model") or [], 1) if isinstance(entry, dict)
            for key, value in entry.items()}


def _spellings(schema: type[BaseModel], name: str) -> list[str]:
    """The keys a file may set option ``name`` with: its name, or its aliases (``platform``)."""
    alias = schema.model_fields[name].validation_alias
    return [str(k) for k in alias.choices] if isinstance(alias, AliasChoices) else [name]


def _where(path: Path, text: str, key: str, table: str) -> str:
    """``path:line`` of the line where ``key`` (in either spelling) is set in ``table`` (a
    dotted name, "" for the top level), as ``key = ...`` or as its own table header
    (``[[model]]``); ``path`` alone when it cannot be found."""
    spellings = {key, key.replace("_", "-")}
    inside = table.split(".") if table else []
    current: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$", line)
        if header:
            current = [part.strip().strip("\"'") for part in header.group(1).split(".")]
            if current[:-1] == inside and current[-1] in spellings:
                return f"{path}:{number}"
            continue
        m = re.match(r"\s*([\w\-\"']+)\s*=", line)
        if m and current == inside and m.group(1).strip("\"'") in spellings:
            return f"{path}:{number}"
    return str(path)
