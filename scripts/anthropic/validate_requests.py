"""Checks Messages API request bodies against the official `anthropic` Python SDK's
request types: `MessageCreateParamsNonStreaming` / `MessageCreateParamsStreaming` and
the block types they name (TypedDicts), through pydantic's TypeAdapter (types,
required keys, literals), plus a walk of the same types that refuses any key a
TypedDict does not declare (pydantic lets extra keys through a TypedDict).

    python validate_requests.py FILE.jsonl...

Each line is `{"body": {...}}` (with optional `case` or `path`). Exits 1 naming the
line, the case and the first problem.
"""

import json
import sys
import typing

from pydantic import BaseModel, TypeAdapter
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)

ADAPTERS = {
    False: TypeAdapter(MessageCreateParamsNonStreaming),
    True: TypeAdapter(MessageCreateParamsStreaming),
}


def hints(td):
    return typing.get_type_hints(td, include_extras=True)


def required_keys(td):
    """The keys a TypedDict requires. The SDK's modules use postponed annotations, so
    `__required_keys__` does not see their `Required[...]`: read the hints (the SDK
    declares its TypedDicts `total=False` and marks every required key)."""
    out = set()
    for key, tp in hints(td).items():
        name = getattr(typing.get_origin(tp), "_name", None) or str(typing.get_origin(tp))
        if "Required" in name and "NotRequired" not in name:
            out.add(key)
    return out


def is_model(tp):
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def strip(tp):
    """Required[X], NotRequired[X], Annotated[X, ...], ReadOnly[X] -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is not None and getattr(origin, "_name", None) in ("Required", "NotRequired", "ReadOnly"):
            tp = typing.get_args(tp)[0]
        elif str(origin).endswith(("Required", "NotRequired", "ReadOnly")):
            tp = typing.get_args(tp)[0]
        else:
            return tp


def is_typeddict(tp):
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__")


def literal_type(td):
    """The `type` literal of a block TypedDict, if it has one."""
    tp = strip(hints(td).get("type", type(None)))
    if typing.get_origin(tp) is typing.Literal:
        return set(typing.get_args(tp))
    return None


def members(tp):
    tp = strip(tp)
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        out = []
        for a in typing.get_args(tp):
            out.extend(members(a))
        return out
    return [tp]


def walk(value, tp, where):
    """Checks `value` against the SDK type `tp`: TypedDicts (required keys present, no
    undeclared key, each value checked), literals, unions, lists and iterables,
    primitives. pydantic checks iterables lazily (not at all until consumed), so this
    walk is what reaches every block."""
    tp = strip(tp)
    if tp is typing.Any or tp is object:
        return
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{where}: {value!r} is not one of {list(args)}")
        return
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        options = members(tp)
        if isinstance(value, dict) and "type" in value:
            def matches(t):
                if is_typeddict(t):
                    return value["type"] in (literal_type(t) or set())
                if is_model(t):
                    field = t.model_fields.get("type")
                    return field is not None and value["type"] in typing.get_args(field.annotation)
                return True  # a free-form mapping
            options = [t for t in options if matches(t)] or options
        errors = []
        for opt in options:
            try:
                walk(value, opt, where)
                return
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0] if len(errors) == 1 else " | ".join(dict.fromkeys(errors[:3])))
    if is_typeddict(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object ({tp.__name__}), got {value!r:.60}")
        declared = hints(tp)
        missing = required_keys(tp) - set(value)
        if missing:
            raise ValueError(f"{where}: {tp.__name__} requires {sorted(missing)}")
        extra = set(value) - set(declared)
        if extra:
            raise ValueError(f"{where}: keys {sorted(extra)} are not in {tp.__name__}")
        for k, v in value.items():
            walk(v, declared[k], f"{where}.{k}")
        return
    if is_model(tp):
        # A response type the SDK also accepts as a param (a block sent back as read).
        try:
            tp.model_validate(value, strict=False)
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"{where}: not a {tp.__name__}: {str(e).splitlines()[0]}") from None
        extra = set(value) - set(tp.model_fields)
        if extra:
            raise ValueError(f"{where}: keys {sorted(extra)} are not in {tp.__name__}")
        return
    if tp is type(None):
        if value is not None:
            raise ValueError(f"{where}: expected null")
        return
    if origin in (dict, typing.Dict) or tp is dict or str(origin).endswith("Mapping'>"):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object")
        return
    if origin is not None and str(origin) in (
        "<class 'collections.abc.Iterable'>", "<class 'list'>", "<class 'collections.abc.Sequence'>",
    ):
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {value!r:.60}")
        item = args[0] if args else typing.Any
        for i, v in enumerate(value):
            walk(v, item, f"{where}[{i}]")
        return
    if tp is str:
        ok = isinstance(value, str)
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        return  # a type this walk does not know (bytes, file types): pydantic's part
    if not ok:
        raise ValueError(f"{where}: {value!r:.60} is not a {tp.__name__}")


def main(paths):
    checked = 0
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                doc = json.loads(line)
                body = doc["body"]
                label = f"{path}:{n} ({doc.get('case') or doc.get('path', '')})"
                try:
                    ADAPTERS[bool(body.get("stream"))].validate_python(body)
                    walk(body, MessageCreateParamsStreaming if body.get("stream") else MessageCreateParamsNonStreaming, "body")
                except Exception as e:  # noqa: BLE001 - report whatever the check says
                    print(f"{label}: not a valid MessageCreateParams: {e}", file=sys.stderr)
                    return 1
                checked += 1
    if checked == 0:
        print("no request bodies to check", file=sys.stderr)
        return 1
    print(f"{checked} request bodies match the anthropic SDK's MessageCreateParams")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
