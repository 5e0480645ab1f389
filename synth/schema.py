"""JSON-schema validation of parsed input files, with one-line errors a person can act on.

Every file format synth reads that has a shape (topology, sketch, custom collective) states it as
a JSON schema and validates the parsed data here, so they refuse the same mistakes with the same
words. Two things differ from plain jsonschema:

* ``integer`` means a whole number *written as one*: jsonschema accepts ``2.0`` as an integer (JSON
  numbers have no type), but a rank, a count or an index written ``2.0`` then reaches
  ``range()``, a tuple key or a file name as a float. A float where a whole number belongs is an
  error naming the field ("must be a whole number, got 2.0"); ``true`` is not the number 1 either.
* messages are built from the failed keyword, not jsonschema's text, which quotes the whole
  offending value (a five-megabyte name would be a five-megabyte error line) and describes
  ``oneOf``/``anyOf`` failures as the schema rather than the fix.

A format may pass ``explain``, a function that phrases a failure of its own rules (``if``/``then``
pairs, say) better than a generic sentence can; it returns None to keep the generic one.
"""

from __future__ import annotations

import itertools
import reprlib
from collections.abc import Callable, Iterable
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from .errors import SynthError
from .memo import by_identity

Explain = Callable[[ValidationError], "str | None"]

_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
_Validator = jsonschema.validators.extend(Draft202012Validator, type_checker=_TYPES)

MAX_ERRORS = 1000
"""Errors collected before the first (by field) is reported: enough to order them, and bounded
for a file that is wrong in a million places."""

_TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string",
               "integer": "a whole number", "number": "a number", "boolean": "true or false",
               "null": "null"}

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


def short(value: Any) -> str:
    """A value for an error message: its repr, cut to a few dozen characters and one line."""
    return _REPR.repr(value)


def field_name(path: Iterable[Any]) -> str:
    """``links.3.class``: the path of a value in a document, each part cut short and printable, the
    middle of a very deep path elided."""
    parts = []
    for p in path:
        text = str(p)
        if len(text) > 40 or not text.isprintable():
            text = short(text)
        parts.append(text)
    if len(parts) > 8:
        parts = [*parts[:4], f"...({len(parts) - 7} more)...", *parts[-3:]]
    return ".".join(parts) or "(top level)"


@by_identity(64)
def _validator(schema: dict[str, Any]) -> Any:
    """The validator of ``schema``, checked and built once per schema object (the formats' schemas
    are module constants)."""
    _Validator.check_schema(schema)
    return _Validator(schema)


def validate(data: Any, schema: dict[str, Any], source: str, explain: Explain | None = None,
             at: tuple[Any, ...] = ()) -> None:
    """Raise a :class:`SynthError` ``"<source>: field '<path>': <what is wrong>"`` for the first
    problem (by field path, then message) when ``data`` does not match ``schema``; ``at`` is where
    ``data`` sits in its file (prefixed to the path)."""
    validator = _validator(schema)
    errors = list(itertools.islice(validator.iter_errors(data), MAX_ERRORS))
    if not errors:
        return
    err = _focus(min(errors, key=lambda e: (_path_key(e.absolute_path), e.message)))
    message = (explain(err) if explain is not None else None) or describe(err)
    raise SynthError(f"{source}: field '{field_name((*at, *err.absolute_path))}': {message}")


def _focus(err: ValidationError) -> ValidationError:
    """Inside a failed ``oneOf``/``anyOf``, the error of the one alternative whose shape the value
    has (a mapping where a mapping or a list is allowed): "pre.0.0 must be a whole number" says
    more than "fits none of the allowed forms". With no such single alternative, ``err`` itself."""
    while err.validator in ("oneOf", "anyOf") and err.context:
        shaped = [e for e in err.context if e.validator != "type" or e.relative_path]
        branches = {e.relative_schema_path[0] for e in shaped}
        if len(branches) != 1:
            break
        err = min(shaped, key=lambda e: (_path_key(e.absolute_path), e.message))
    return err


def _path_key(path: Iterable[Any]) -> tuple[tuple[int, Any], ...]:
    """Sort key for a path whose parts may mix list indices and (int, str, ...) mapping keys."""
    return tuple((0, p) if isinstance(p, int) and not isinstance(p, bool) else (1, str(p))
                 for p in path)


def describe(err: ValidationError) -> str:
    """The failure as a sentence that says what the field must be and what it is."""
    kind, want, got = err.validator, err.validator_value, err.instance
    if kind == "type":
        wanted = [want] if isinstance(want, str) else list(want)
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in wanted)
        return f"must be {words}, got {short(got)}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "greater than",
                 "exclusiveMaximum": "less than"}[kind]
        return f"must be {bound} {want}, got {short(got)}"
    if kind == "enum":
        return f"must be one of {', '.join(map(str, want))}, got {short(got)}"
    if kind == "const":
        return f"must be {want!r}, got {short(got)}"
    if kind == "pattern":
        return f"must match {want} (letters, digits and the characters the pattern lists), got {short(got)}"
    if kind == "required":
        missing = [k for k in want if isinstance(got, dict) and k not in got]
        return f"missing required field '{missing[0] if missing else want[0]}'"
    if kind == "additionalProperties":
        known = sorted(err.schema.get("properties") or {})
        extra = sorted((str(k) for k in got if k not in known), key=str) if isinstance(got, dict) \
            else []
        shown = ", ".join(short(k) for k in extra[:3]) + (", ..." if len(extra) > 3 else "")
        return f"unknown field(s) {shown}" + (f"; known: {', '.join(known)}" if known else "")
    if kind in ("minItems", "maxItems"):
        bound = "at least" if kind == "minItems" else "at most"
        return f"must list {bound} {want} item(s), got {len(got)}"
    if kind in ("minLength", "maxLength"):
        bound = "at least" if kind == "minLength" else "at most"
        return f"must be {bound} {want} character(s) long, got {len(got)}"
    if kind in ("minProperties", "maxProperties"):
        bound = "at least" if kind == "minProperties" else "at most"
        return f"must have {bound} {want} entr{'y' if want == 1 else 'ies'}, got {len(got)}"
    if kind in ("oneOf", "anyOf"):
        return _alternatives(err)
    if kind == "not":
        return f"{short(got)} is not allowed here"
    text = " ".join(err.message.split())
    return text if len(text) <= 200 else text[:197] + "..."


def _alternatives(err: ValidationError) -> str:
    """``oneOf``/``anyOf``: which alternatives exist, and why the value fits none (or several)."""
    branches = err.validator_value
    if all(set(b) == {"required"} for b in branches):
        names = " / ".join("+".join(b["required"]) for b in branches)
        return (f"needs exactly one of {names}" if err.validator == "oneOf"
                else f"needs at least one of {names}")
    if not err.context:
        return "matches more than one of the allowed forms; keep one"
    reasons = []
    for sub in sorted(err.context, key=lambda e: (_path_key(e.relative_path), e.message)):
        where = field_name(sub.relative_path)
        reason = describe(sub)
        reasons.append(reason if where == "(top level)" else f"{where}: {reason}")
    unique = list(dict.fromkeys(reasons))
    return "fits none of the allowed forms (" + "; ".join(unique[:3]) + \
        ("; ..." if len(unique) > 3 else "") + ")"
