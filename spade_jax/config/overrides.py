"""`key=value` overrides on nested dataclass configs, validated with one-line errors.

apply_overrides(cfg, ["learner.lr=1e-5", "loop.steps=20", "selfplay.plays_per_condition=4"])
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints

from spade_jax.config.ablations import ablation_overrides


class ConfigError(ValueError):
    """A bad config key or value; the message is one line naming the problem."""


def _list_items(value: str, key: str) -> list[Any]:
    """The items of a list value: a JSON list (`["a", "b"]`) or comma-separated text (`a,b`).

    A malformed JSON list, or a JSON object where a list belongs, is a ConfigError naming `key` (json's own
    message gives only a position, which on a command line of several overrides does not say which one).
    """
    text = value.strip()
    if text.startswith("{") and text.endswith("}"):
        try:
            is_object = isinstance(json.loads(text), dict)
        except json.JSONDecodeError:
            is_object = False
        if is_object:
            raise ConfigError(f"{key}={value!r}: expected a list (a,b or a JSON list), got a JSON object")
    if not text.startswith("["):
        return [v for v in value.split(",") if v]
    try:
        return json.loads(text)  # starts with "[", so a list when it parses
    except json.JSONDecodeError as e:
        raise ConfigError(f"{key}={value!r}: not a valid JSON list ({e.msg} at char {e.pos})") from None


def _parse(value: str, typ: Any, key: str) -> Any:
    origin = get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(typ) if a is not type(None)]
        if value.lower() in ("none", "null") and len(options) < len(get_args(typ)):
            return None
        errors = []
        for option in options:
            try:
                return _parse(value, option, key)
            except ConfigError as e:
                errors.append(str(e))
        if len(errors) == 1:  # e.g. `tuple[str, ...] | None`: the one real option's reason is the useful one
            raise ConfigError(errors[0])
        raise ConfigError(f"{key}={value!r}: not a valid {typ}")
    if typ is bool:
        low = value.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}={value!r}: expected true/false")
    if typ in (int, float):
        try:
            return typ(float(value)) if typ is int and float(value).is_integer() else typ(value)
        except ValueError:
            raise ConfigError(f"{key}={value!r}: expected {typ.__name__}") from None
    if typ is str:
        return value
    if origin in (tuple, list) or typ in (tuple, list):
        items = _list_items(value, key)
        args = [a for a in get_args(typ) if a is not Ellipsis]
        item_type = args[0] if args else str
        parsed = [_parse(str(v), item_type, key) for v in items]
        return tuple(parsed) if (origin or typ) is tuple else parsed
    if origin is dict or typ is dict:
        try:
            out = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{key}={value!r}: expected a JSON object ({e.msg} at char {e.pos})") from None
        if not isinstance(out, dict):
            raise ConfigError(f"{key}={value!r}: expected a JSON object")
        return out
    if typing.get_origin(typ) is typing.Literal:
        if value not in get_args(typ):
            raise ConfigError(f"{key}={value!r}: expected one of {list(get_args(typ))}")
        return value
    raise ConfigError(f"{key}: cannot override a field of type {typ}")


def set_key(cfg: Any, key: str, value: str, _prefix: str = "") -> Any:
    """Returns a copy of the dataclass `cfg` with dotted `key` set from the string `value`."""
    head, _, rest = key.partition(".")
    full = f"{_prefix}{head}"
    fields = {f.name for f in dataclasses.fields(cfg)}
    if head not in fields:
        raise ConfigError(f"unknown config key {full!r}; known here: {', '.join(sorted(fields))}")
    current = getattr(cfg, head)
    if rest:
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"unknown config key {_prefix + key!r}: {full} has no sub-keys")
        new = set_key(current, rest, value, f"{full}.")
    elif dataclasses.is_dataclass(current):
        raise ConfigError(f"{full} is a section; set one of its keys, e.g. {full}.<name>=...")
    else:
        new = _parse(value, get_type_hints(type(cfg))[head], full)
    try:  # the section's own validation (__post_init__) runs on the new value
        return dataclasses.replace(cfg, **{head: new})
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{_prefix + key}={value!r}: {e}") from None


def apply_overrides(cfg: Any, overrides: list[str]) -> Any:
    """Applies `key=value` strings in order; raises ConfigError with a one-line message on the first bad one.
    `ablation=NAME[,NAME]` on a config with an `ablation` field applies the paper ablation's own overrides
    (config/ablations.py) there, then records the name."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, value = (part.strip() for part in item.split("=", 1))
        if (
            key == "ablation"
            and dataclasses.is_dataclass(cfg)
            and "ablation" in {f.name for f in dataclasses.fields(cfg)}
        ):
            try:
                expanded = ablation_overrides(value)
            except ValueError as e:
                raise ConfigError(f"ablation={value!r}: {e}") from None
            cfg = apply_overrides(cfg, expanded)
        cfg = set_key(cfg, key, value)
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict of a nested dataclass config."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def changed_keys(old: dict[str, Any], new: dict[str, Any], _prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two `to_dict` outputs (a key on one side only counts)."""
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_keys(a, b, f"{_prefix}{key}.")
        elif a != b or (key in old) != (key in new):
            out.append(_prefix + key)
    return out


def _is_tuple_type(typ: Any) -> bool:
    """True for tuple, tuple[...] and unions holding one (e.g. `tuple[str, ...] | None`)."""
    if typ is tuple or get_origin(typ) is tuple:
        return True
    return get_origin(typ) in (typing.Union, types.UnionType) and any(_is_tuple_type(a) for a in get_args(typ))


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuilds a nested dataclass config from `to_dict` output (unknown keys are an error)."""
    hints = get_type_hints(cls)
    kwargs = {}
    names = {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"unknown config key {key!r} in {cls.__name__}")
        typ = hints[key]
        if dataclasses.is_dataclass(typ) and isinstance(value, dict):
            value = from_dict(typ, value)
        elif _is_tuple_type(typ) and isinstance(value, list | tuple):  # also `tuple[...] | None`
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[key] = value
    return cls(**kwargs)
