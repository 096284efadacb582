"""Typed payloads: parameters annotated with a dataclass or a pydantic model receive that type.

At enqueue each such argument is validated (a dict or an instance) and stored as plain JSON; at run
time the JSON is decoded into the type again. A stored payload that no longer fits (a field renamed
by a deploy) is a PayloadError whose message starts "stored arguments no longer fit", which the
worker fails at once, without retrying, and `leased why` explains.

pydantic is optional: models are recognised only if it is importable. Dataclasses need nothing;
their fields are checked for presence, for unknown names, for nested dataclasses, and for the
JSON scalar types (str, int, float, bool). Other field types are stored as given (plain JSON).
A parameter annotated with a JSON scalar itself (`order_id: int`, `note: str | None`) is checked
at enqueue too, so that '["one"]' from the command line is refused rather than run.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
import types
import typing
from typing import Any, Callable

from leased.errors import PayloadError

NO_LONGER_FITS = "stored arguments no longer fit"


class Invalid(Exception):
    """A value that does not fit its type; `path` names the field, outermost first."""

    def __init__(self, path: tuple[str | int, ...], problem: str):
        super().__init__(problem)
        self.path, self.problem = path, problem

    def where(self) -> str:
        return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in self.path).lstrip(".")


class Codec:
    """Turns one annotated value into JSON (to_json) and back (from_json); both raise Invalid."""

    name: str

    def to_json(self, value: Any) -> Any:
        raise NotImplementedError

    def from_json(self, value: Any) -> Any:
        raise NotImplementedError


def _pydantic_model() -> type | None:
    pydantic = sys.modules.get("pydantic")  # a model class exists only if pydantic was imported
    return getattr(pydantic, "BaseModel", None)


class PydanticCodec(Codec):
    def __init__(self, model: type):
        self.model: Any = model  # a pydantic BaseModel subclass: pydantic is imported only when one is used
        self.name = model.__name__

    def _validated(self, value: Any) -> Any:
        import pydantic

        if isinstance(value, self.model):
            return value
        try:
            return self.model.model_validate(value)
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            raise Invalid(tuple(first.get("loc", ())), f"{first.get('msg', 'invalid')} "
                          f"(got {first.get('input')!r:.80})") from None

    def to_json(self, value: Any) -> Any:
        return self._validated(value).model_dump(mode="json")

    def from_json(self, value: Any) -> Any:
        return self._validated(value)


_SCALARS: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}


class DataclassCodec(Codec):
    def __init__(self, cls: type, hints: Callable[[type], dict[str, Any]]):
        self.cls, self.name = cls, cls.__name__
        resolved = hints(cls)
        self.fields = [field for field in dataclasses.fields(cls) if field.init]
        self.required = {field.name for field in self.fields
                         if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
        self.codecs = {field.name: codec_for(resolved.get(field.name), hints) for field in self.fields}
        self.scalars = {field.name: _SCALARS[resolved.get(field.name)] for field in self.fields
                        if resolved.get(field.name) in _SCALARS}

    def _fields_of(self, value: Any) -> dict[str, Any]:
        if isinstance(value, self.cls):
            return {field.name: getattr(value, field.name) for field in self.fields}
        if not isinstance(value, dict):
            raise Invalid((), f"expects {self.name} or a dict of its fields, got {type(value).__name__}")
        unknown = sorted(set(value) - {field.name for field in self.fields})
        if unknown:
            raise Invalid((unknown[0],), f"{self.name} has no field {unknown[0]!r}")
        missing = sorted(self.required - set(value))
        if missing:
            raise Invalid((missing[0],), "field required")
        return value

    def _each(self, value: Any, convert: Callable[[Codec, Any], Any]) -> dict[str, Any]:
        converted = {}
        for name, field_value in self._fields_of(value).items():
            allowed = self.scalars.get(name)
            if allowed and (not isinstance(field_value, allowed) or (bool not in allowed and
                                                                     isinstance(field_value, bool))):
                raise Invalid((name,), f"expects {allowed[-1].__name__}, got {field_value!r:.80}")
            codec = self.codecs[name]
            try:
                converted[name] = field_value if codec is None else convert(codec, field_value)
            except Invalid as error:
                raise Invalid((name, *error.path), error.problem) from None
        return converted

    def to_json(self, value: Any) -> Any:
        return self._each(value, lambda codec, item: codec.to_json(item))

    def from_json(self, value: Any) -> Any:
        return self.cls(**self._each(value, lambda codec, item: codec.from_json(item)))


class OptionalCodec(Codec):
    def __init__(self, inner: Codec):
        self.inner, self.name = inner, f"{inner.name} | None"

    def to_json(self, value: Any) -> Any:
        return None if value is None else self.inner.to_json(value)

    def from_json(self, value: Any) -> Any:
        return None if value is None else self.inner.from_json(value)


class ListCodec(Codec):
    def __init__(self, inner: Codec):
        self.inner, self.name = inner, f"list[{inner.name}]"

    def _each(self, value: Any, convert: Callable[[Any], Any]) -> list[Any]:
        if not isinstance(value, (list, tuple)):
            raise Invalid((), f"expects {self.name}, got {type(value).__name__}")
        items = []
        for position, item in enumerate(value):
            try:
                items.append(convert(item))
            except Invalid as error:
                raise Invalid((position, *error.path), error.problem) from None
        return items

    def to_json(self, value: Any) -> Any:
        return self._each(value, self.inner.to_json)

    def from_json(self, value: Any) -> Any:
        return self._each(value, self.inner.from_json)


def codec_for(hint: Any, hints: Callable[[type], dict[str, Any]]) -> Codec | None:
    """The codec of an annotation, or None when it is plain JSON (no conversion)."""
    model = _pydantic_model()
    if isinstance(hint, type):
        if model is not None and issubclass(hint, model):
            return PydanticCodec(hint)
        if dataclasses.is_dataclass(hint):
            return DataclassCodec(hint, hints)
        return None
    origin, parts = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        others = [part for part in parts if part is not type(None)]
        if len(others) == 1 and len(parts) == 2:
            inner = codec_for(others[0], hints)
            return None if inner is None else OptionalCodec(inner)
        return None
    if origin is list and len(parts) == 1:  # list[int] and typing.List[int] alike
        inner = codec_for(parts[0], hints)
        return None if inner is None else ListCodec(inner)
    return None


def _scalar_types(hint: Any, default: Any) -> tuple[type, ...] | None:
    """The types a parameter annotated with a JSON scalar accepts (`int | None`: int or None; a
    default of None is accepted too); None for any other annotation."""
    parts = (typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,))
    scalars = [part for part in parts if part is not type(None)]
    if len(scalars) != 1 or scalars[0] not in _SCALARS:
        return None
    takes_none = len(parts) > 1 or default is None
    return _SCALARS[scalars[0]] + ((type(None),) if takes_none else ())


def _fits(value: Any, allowed: tuple[type, ...]) -> bool:
    """Whether a value whose type is not one of `allowed` fits a scalar parameter anyway (a
    subclass); a value JSON cannot store (a set, an object, NaN) is left to the encoder, whose error
    says to pass plain JSON values."""
    if isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed):
        return True
    return not isinstance(value, _JSON_TYPES) or (isinstance(value, float) and not math.isfinite(value))


_JSON_TYPES = (str, int, float, bool, type(None), list, tuple, dict)


def _hints(owner: Any) -> dict[str, Any]:
    """Resolved annotations, one by one: one that cannot be resolved (a name imported only under
    TYPE_CHECKING, a class local to a function) is left out, so its parameter is plain JSON."""
    try:
        return typing.get_type_hints(owner)
    except Exception:
        pass
    namespace = getattr(owner, "__globals__", None) or vars(sys.modules.get(owner.__module__, typing))
    resolved = {}
    for name, value in getattr(owner, "__annotations__", {}).items():
        try:
            # as typing.get_type_hints does
            resolved[name] = eval(value, namespace) if isinstance(value, str) else value
        except Exception:
            continue
    return resolved


class ArgumentTypes:
    """The typed parameters of one task, by position (after the context) and by name."""

    def __init__(self, task_name: str, func: Callable[..., Any], signature: inspect.Signature, leading: int):
        self.task_name = task_name
        resolved = _hints(func)
        parameters = list(signature.parameters.values())[leading:]
        self.by_name: dict[str, Codec] = {}
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.by_position: list[tuple[str, Codec | None]] = []
        # Parameters annotated with a JSON scalar (order_id: int): checked at enqueue only, since
        # they are stored and passed on as they are.
        self.scalars_by_position: list[tuple[int, str, tuple[type, ...]]] = []
        self.scalars_by_name: dict[str, tuple[type, ...]] = {}
        for parameter in parameters:
            hint = resolved.get(parameter.name)
            codec = None if hint is None else codec_for(hint, _hints)
            if parameter.kind in positional:
                self.by_position.append((parameter.name, codec))
            if codec is not None and parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
                self.by_name[parameter.name] = codec
            allowed = _scalar_types(hint, parameter.default)
            if allowed is not None and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                              inspect.Parameter.VAR_KEYWORD):
                if parameter.kind in positional:
                    self.scalars_by_position.append((len(self.by_position) - 1, parameter.name, allowed))
                if parameter.kind is not inspect.Parameter.POSITIONAL_ONLY:
                    self.scalars_by_name[parameter.name] = allowed
        self.check_scalars = (self._check_scalars if self.scalars_by_position or self.scalars_by_name
                              else None)  # called at enqueue (Task), before to_json

    def __bool__(self) -> bool:
        """Whether stored arguments need decoding (dataclass and pydantic parameters)."""
        return bool(self.by_name)

    def _check_scalars(self, args: tuple | list, kwargs: dict[str, Any]) -> None:
        count = len(args)
        for position, name, allowed in self.scalars_by_position:  # `type() in` first: the cost of most calls
            if position < count and type(args[position]) not in allowed and not _fits(args[position], allowed):
                self._refuse(name, allowed, args[position])
        if kwargs:
            for name, value in kwargs.items():
                named = self.scalars_by_name.get(name)
                if named is not None and type(value) not in named and not _fits(value, named):
                    self._refuse(name, named, value)

    def _refuse(self, name: str, allowed: tuple[type, ...], value: Any) -> None:
        expected = " | ".join(dict.fromkeys("None" if kind is type(None) else kind.__name__
                                            for kind in allowed if kind is not int or float not in allowed))
        raise PayloadError(f"{self.task_name}: argument {name!r} ({expected}): got {type(value).__name__} "
                           f"{value!r:.80}")

    def _convert(self, args: tuple | list, kwargs: dict[str, Any], stored: bool) -> tuple[list[Any], dict[str, Any]]:
        converted_args = list(args)
        for position, value in enumerate(args[:len(self.by_position)]):
            name, codec = self.by_position[position]
            if codec is not None:
                converted_args[position] = self._one(name, codec, value, stored)
        converted_kwargs = dict(kwargs)
        for name, value in kwargs.items():
            codec = self.by_name.get(name)
            if codec is not None:
                converted_kwargs[name] = self._one(name, codec, value, stored)
        return converted_args, converted_kwargs

    def _one(self, name: str, codec: Codec, value: Any, stored: bool) -> Any:
        try:
            return codec.from_json(value) if stored else codec.to_json(value)
        except Invalid as error:
            field = f"argument {name!r} ({codec.name})" + (f", field {error.where()!r}" if error.path else "")
            if stored:
                raise PayloadError(f"{NO_LONGER_FITS} {self.task_name}: {field}: {error.problem}; the job was "
                                   "enqueued before the handler's types changed. Fix the row, or retry it "
                                   "after a deploy that accepts it") from None
            raise PayloadError(f"{self.task_name}: {field}: {error.problem}") from None

    def to_json(self, args: tuple | list, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Validate typed arguments and make them plain JSON values; PayloadError names the field.
        (Scalar parameters are checked by check_scalars, which enqueue calls first.)"""
        return self._convert(args, kwargs, stored=False)

    def from_json(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Stored JSON back into the handler's types; PayloadError if it no longer fits them."""
        return self._convert(args, kwargs, stored=True)
