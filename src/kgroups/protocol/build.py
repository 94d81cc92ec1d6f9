"""Build any version of a kio message from one plain dict.

Kafka responses differ between versions mostly by which fields exist. Rather than one
hand-written encoder per version, an encoder describes its answer once as a dict (nested
lists of dicts for nested arrays) and `build(cls, values)` makes the instance of the exact
versioned class the client asked for: fields that version lacks are dropped, fields it
has but the dict does not mention get their schema default (or a zero value), and plain
Python values are converted to kio's (milliseconds to timedelta, ints to ErrorCode, None
to "" where a version's string is not nullable).

A name that no version of the message has is refused (`UnknownField`): that is a typo,
which would otherwise be dropped as silently as a field an old version lacks.

Plans are computed once per class and cached, which keeps encoding in the microseconds.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import pkgutil
import typing
import uuid
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

T = TypeVar("T")
Converter = Callable[[Any], Any]
NULL_UUID = uuid.UUID(int=0)


def _ms(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _error(value: Any) -> ErrorCode:
    return value if isinstance(value, ErrorCode) else ErrorCode(int(value))


def _identity(value: Any) -> Any:
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    convert: Converter
    required: bool
    zero: Callable[[], Any]


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(hint) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        return (args[0] if len(args) == 1 else hint), len(args) < len(typing.get_args(hint))
    return hint, False


def _scalar(kafka_type: str, optional: bool) -> tuple[Converter, Callable[[], Any]]:
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _ms, lambda: datetime.timedelta(0)
    if kafka_type == "error_code":
        return _error, lambda: ErrorCode.none
    if kafka_type == "string":
        if optional:
            return _identity, lambda: None
        return (lambda v: "" if v is None else v), lambda: ""
    if kafka_type in ("bytes", "records"):
        if optional:
            return _identity, lambda: None
        return (lambda v: b"" if v is None else v), lambda: b""
    if kafka_type == "uuid":
        if optional:
            return _identity, lambda: None
        return (lambda v: NULL_UUID if v is None else v), lambda: NULL_UUID
    if kafka_type == "bool":
        return bool, lambda: False
    return _identity, lambda: 0


class UnknownField(ValueError):
    """A value for a field that no version of the message has."""


_PLANS: dict[type, tuple[tuple[_FieldPlan, ...], frozenset[str]]] = {}


def _plan(cls: type) -> tuple[tuple[_FieldPlan, ...], frozenset[str]]:
    plans = _PLANS.get(cls)
    if plans is None:
        plans = _PLANS[cls] = (_make_plan(cls), _names_in_any_version(cls))
    return plans


def _names_in_any_version(cls: type) -> frozenset[str]:
    """Field names of `cls` in every version of its message (kio.schema.<api>.vN...);
    for a class extending a kio one (kgroups.protocol.extensions), its base's too."""
    names = {f.name for f in dataclasses.fields(cls)}
    for base in cls.__mro__:
        if dataclasses.is_dataclass(base) and base.__module__.startswith("kio.schema."):
            names.update(_family(base.__module__, base.__name__))
    return frozenset(names)


def _family(module_name: str, class_name: str) -> set[str]:
    names: set[str] = set()
    parts = module_name.split(".")
    for i, part in enumerate(parts):
        if part[:1] == "v" and part[1:].isdigit():
            package = importlib.import_module(".".join(parts[:i]))
            for info in pkgutil.iter_modules(package.__path__):
                if info.name[:1] != "v" or not info.name[1:].isdigit():
                    continue
                try:
                    module = importlib.import_module(
                        ".".join([*parts[:i], info.name, *parts[i + 1 :]])
                    )
                except ImportError:
                    continue
                other = getattr(module, class_name, None)
                if isinstance(other, type) and dataclasses.is_dataclass(other):
                    names.update(f.name for f in dataclasses.fields(other))
            break
    return names


def _make_plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        hint, optional = _unwrap(hints[f.name])
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        kafka_type = f.metadata.get("kafka_type", "")
        convert: Converter
        zero: Callable[[], Any]
        if typing.get_origin(hint) is tuple:
            (item,) = typing.get_args(hint)[:1]
            if dataclasses.is_dataclass(item):
                item_cls: type = item  # type: ignore[assignment]

                def convert(v: Any, c: type = item_cls) -> Any:
                    return None if v is None else tuple(build(c, x) for x in v)
            else:
                item_convert, _ = _scalar(kafka_type, False)

                def convert(v: Any, ic: Converter = item_convert) -> Any:
                    return None if v is None else tuple(ic(x) for x in v)

            zero = (lambda: None) if optional else tuple
        elif dataclasses.is_dataclass(hint):
            nested: type = hint  # type: ignore[assignment]

            def convert(v: Any, c: type = nested) -> Any:
                return v if v is None or isinstance(v, c) else build(c, v)

            def zero(c: type = nested, opt: bool = optional) -> Any:
                return None if opt else build(c, {})
        else:
            convert, zero = _scalar(kafka_type, optional)
        plans.append(_FieldPlan(f.name, convert, not has_default, zero))
    return tuple(plans)


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """An instance of the kio class `cls` from `values` (see the module docstring)."""
    kwargs: dict[str, Any] = {}
    plans, known = _plan(cls)
    if not known.issuperset(values):
        unknown = sorted(set(values) - known)
        raise UnknownField(f"{cls.__module__}.{cls.__name__} has no field {unknown} in any version")
    for p in plans:
        if p.name in values:
            kwargs[p.name] = p.convert(values[p.name])
        elif p.required:
            kwargs[p.name] = p.zero()
    return cls(**kwargs)
