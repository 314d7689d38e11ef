"""Tools defined in Python: the :func:`tool` decorator, JSON Schemas from
type hints or pydantic models (or given explicitly), the metadata the turn
decides by, and how a call's outcome is handed to the turn."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import json
import logging
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterable, Literal, Mapping, Optional, Tuple, Union, overload

import pydantic
import pydantic_core

from ._native import ConfigError
from ._records import ApprovalRequest

logger = logging.getLogger("tether")

Repeats = Literal["default", "refuse", "allow"]

#: Decides, call by call, whether a call needs the approver: given the
#: :class:`ApprovalRequest` (the exact arguments), returns or awaits a bool.
ApprovalPredicate = Callable[[ApprovalRequest], Union[bool, Awaitable[bool]]]

#: What the model providers accept as a tool name (OpenAI, Anthropic, Gemini).
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def check_tool_name(name: Any) -> str:
    """``name`` if every model provider accepts it as a tool name, else
    :class:`tether.ConfigError` saying what is allowed."""
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise ConfigError(
            f"tool name `{name}` is not one the model providers accept: use 1 to 64 letters, digits, `_` or `-`"
            " (pass `name=` to choose one)"
        )
    return name


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean `x`?"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean `{close[0]}`?" if close else ""


class ToolError(Exception):
    """Raise from a tool to report a failure with the tool's own code.

    The caller (the model, or the script) receives
    ``{"ok": False, "error": {"code": code, "message": message}}``. Any
    other exception becomes the turn's ``tool_failed`` with the exception's
    type and message.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


_Binder = Callable[[Dict[str, Any]], Dict[str, Any]]


def _is_model(annotation: Any) -> bool:
    return inspect.isclass(annotation) and issubclass(annotation, pydantic.BaseModel)


def schema_from_signature(function: Callable[..., Any]) -> Tuple[Dict[str, Any], _Binder]:
    """The JSON Schema of ``function``'s parameters, and how to turn the
    validated arguments into its keyword arguments.

    A function of one parameter annotated with a pydantic model takes the
    model's fields as the tool's arguments; otherwise each parameter is an
    argument, typed by its annotation (``Annotated[..., Field(description=…)]``
    works), required unless it has a default.
    """
    signature = inspect.signature(function)
    hints = _type_hints(function, include_extras=True)
    params = [
        p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in signature.parameters.values()):
        raise TypeError(f"tool `{_name_of(function)}`: positional-only and *args parameters cannot be tool arguments")
    if len(params) == 1 and _is_model(hints.get(params[0].name)):
        model: type[pydantic.BaseModel] = hints[params[0].name]
        name = params[0].name
        return model.model_json_schema(), lambda args: {name: model.model_validate(args)}
    fields: Dict[str, Any] = {
        p.name: (hints.get(p.name, Any), ... if p.default is p.empty else p.default) for p in params
    }
    try:
        model = pydantic.create_model(
            f"{_name_of(function)}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
        schema = model.model_json_schema()
    except pydantic.PydanticUserError as error:
        raise ConfigError(f"tool `{_name_of(function)}`: its parameters have no JSON Schema: {error}") from error
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema, lambda args: dict(model.model_validate(args))


def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """The function a ``functools.partial`` (however nested) wraps, else ``function``."""
    while isinstance(function, functools.partial):
        function = function.func
    return function


def _name_of(function: Callable[..., Any]) -> str:
    """The function's name; a ``functools.partial`` is named by its function."""
    function = _unwrapped(function)
    return str(getattr(function, "__name__", type(function).__name__))


def _type_hints(function: Callable[..., Any], include_extras: bool = False) -> Dict[str, Any]:
    """The type hints of ``function`` (of the function a ``functools.partial`` wraps)."""
    function = _unwrapped(function)
    target = function if inspect.isroutine(function) or inspect.isclass(function) else type(function).__call__
    return typing.get_type_hints(target, include_extras=include_extras)


def _output_schema(function: Callable[..., Any]) -> Optional[Dict[str, Any]]:
    annotation = _type_hints(function).get("return", inspect.Signature.empty)
    if annotation in (inspect.Signature.empty, None, type(None), Any):
        return None
    try:
        return pydantic.TypeAdapter(annotation).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as error:
        # An output schema only documents the result for the stubs; the tool works without it.
        logger.info("tool `%s`: its return annotation has no JSON Schema (%s)", _name_of(function), error)
        return None


@dataclass
class Tool:
    """A tool of the turn: what the model sees (name, description, input
    schema) and the metadata the turn decides by — never the model.

    Call it like the function it wraps; the turn calls it through
    :meth:`_invoke`.
    """

    name: str
    description: str
    function: Callable[..., Any]
    input_schema: Dict[str, Any]
    output_schema: Optional[Dict[str, Any]] = None
    #: Every call needs the approver's yes (``True``), or the calls this
    #: predicate says so (it gets the :class:`ApprovalRequest`; a call it
    #: waives is approved as ``decided_by="tool-policy"``, and still counts
    #: against ``max_approval_calls``; a predicate that raises denies).
    requires_approval: Union[bool, ApprovalPredicate] = False
    #: Has no effects: no effect-ledger rows, identical repeats allowed.
    read_only: bool = False
    #: Listed by name only until activated (``Turn.activate``).
    deferred: bool = False
    #: Asks the user a question: excluded from scripts.
    asks_user: bool = False
    #: Runs on the user's device: excluded from scripts.
    runs_on_device: bool = False
    #: Changes the turn (activates tools...): excluded from scripts.
    meta_tool: bool = False
    #: Idempotent: may run again under a call id the ledger already settled.
    replay_safe: bool = False
    #: A script's calls of it may run alongside its other calls.
    concurrency_safe: bool = False
    #: Identical repeats in one turn: ``"default"`` (refused unless
    #: read-only), ``"refuse"`` or ``"allow"``.
    repeats: Repeats = "default"
    #: The tool's own time limit in seconds (default: the turn's, 120).
    time_limit: Optional[float] = None
    _bind: Optional[_Binder] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_tool_name(self.name)
        if not isinstance(self.requires_approval, bool) and not callable(self.requires_approval):
            raise ConfigError(
                f"tool `{self.name}`: `requires_approval` is `{self.requires_approval!r}`;"
                " give True, False, or a function of the ApprovalRequest that returns a bool"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def spec_json(self) -> str:
        """The spec the Rust side reads (``src/tool.rs``)."""
        meta = {
            # A predicate is decided in Python, at the turn's approval step (`_turn.py`).
            "requires_approval": self.requires_approval is not False,
            "read_only": self.read_only,
            "deferred": self.deferred,
            "asks_user": self.asks_user,
            "runs_on_device": self.runs_on_device,
            "meta_tool": self.meta_tool,
            "replay_safe": self.replay_safe,
            "concurrency_safe": self.concurrency_safe,
            "repeats": self.repeats,
            "time_limit": self.time_limit,
        }
        return json.dumps(
            {
                "name": self.name,
                "description": self.description,
                "input_schema": self.input_schema,
                "output_schema": self.output_schema,
                "meta": meta,
            }
        )

    async def _invoke(self, args_json: str) -> Tuple[Any, ...]:
        """Runs one call: ``("ok", result JSON)``, ``("tool_error", code,
        message)``, ``("raised", type, message)`` or ``("invalid_result",
        problem)``. Cancellation propagates."""
        try:
            args = json.loads(args_json)
            kwargs = self._bind(args) if self._bind is not None else args
            result = self.function(**kwargs)
            if inspect.isawaitable(result):
                result = await result
        except ToolError as error:
            return ("tool_error", error.code, error.message)
        except Exception as error:
            # The full text, for the operator; the model gets the type only,
            # unless the turn is opened with `verbatim_tool_errors=True`.
            kind = type(error).__qualname__
            logger.warning("tool `%s` raised `%s`: %s", self.name, kind, error, exc_info=True)
            return ("raised", kind, str(error))
        try:
            return ("ok", json.dumps(pydantic_core.to_jsonable_python(result)))
        except (TypeError, ValueError, pydantic_core.PydanticSerializationError) as error:
            return ("invalid_result", f"not JSON: {error}")


ToolLike = Union[Tool, Callable[..., Any]]


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    schema: Optional[Mapping[str, Any]] = None,
    output_schema: Optional[Mapping[str, Any]] = None,
    requires_approval: Union[bool, ApprovalPredicate] = False,
    read_only: bool = False,
    deferred: bool = False,
    asks_user: bool = False,
    runs_on_device: bool = False,
    meta_tool: bool = False,
    replay_safe: bool = False,
    concurrency_safe: bool = False,
    repeats: Repeats = "default",
    time_limit: Optional[float] = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(function: Optional[Callable[..., Any]] = None, /, **options: Any) -> Any:
    """Makes a tool of a function (sync or ``async def``).

    Its name is the function's, its description the docstring, its input
    schema taken from the type hints (or a pydantic model parameter) unless
    ``schema=`` gives one; the keyword options are the turn's metadata.
    """

    def make(function: Callable[..., Any]) -> Tool:
        return make_tool(function, **options)

    return make(function) if function is not None else make


#: The options of :func:`tool` that are the turn's metadata (fields of :class:`Tool`).
META_OPTIONS = (
    "requires_approval",
    "read_only",
    "deferred",
    "asks_user",
    "runs_on_device",
    "meta_tool",
    "replay_safe",
    "concurrency_safe",
    "repeats",
    "time_limit",
)


def make_tool(
    function: Callable[..., Any],
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    schema: Optional[Mapping[str, Any]] = None,
    output_schema: Optional[Mapping[str, Any]] = None,
    **meta: Any,
) -> Tool:
    """:func:`tool` without the decorator syntax. Given a :class:`Tool`,
    returns a copy with the options given applied (the original is
    unchanged). An option that is not one of :func:`tool`'s raises
    :class:`tether.ConfigError` with a did-you-mean."""
    for key in meta:
        if key not in META_OPTIONS:
            known = ("name", "description", "schema", "output_schema", *META_OPTIONS)
            raise ConfigError(f"`{key}` is not an option of a tool{did_you_mean(key, known)}")
    if isinstance(function, Tool):
        changes: Dict[str, Any] = dict(meta)
        if name is not None:
            changes["name"] = name
        if description is not None:
            changes["description"] = description
        if schema is not None:
            changes["input_schema"], changes["_bind"] = dict(schema), None
        if output_schema is not None:
            changes["output_schema"] = dict(output_schema)
        return dataclasses.replace(function, **changes) if changes else function
    if not callable(function):
        raise ConfigError(f"a tool is made of a function, not `{type(function).__name__}`")
    if name is None and _name_of(function) == "<lambda>":
        raise ConfigError("a lambda has no name a model can call: pass `name=`")
    if schema is not None:
        input_schema, bind = dict(schema), None
    else:
        input_schema, bind = schema_from_signature(function)
    return Tool(
        name=name or _name_of(function),
        description=description if description is not None else inspect.cleandoc(_doc_of(function)),
        function=function,
        input_schema=input_schema,
        output_schema=dict(output_schema) if output_schema is not None else _output_schema(function),
        _bind=bind,
        **meta,
    )


def _doc_of(function: Callable[..., Any]) -> str:
    """The docstring; a ``functools.partial``'s is its function's."""
    return _unwrapped(function).__doc__ or ""
