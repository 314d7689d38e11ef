"""Agents of both frameworks over a Tether turn opened with
`approver=tether.LATER`, for `test_adapter_hitl.py`: a run that ends on a
call waiting for a person (the framework's human-in-the-loop object, kept
as text), and — in a fresh process, `python hitl_world.py ARGS` — the
person's answer and the resumed run. The tools are `parked_world`'s: `wire`
(needs approval; each transfer a line in the effects file) and `balance`,
and `note` (no approval; each note a line in the effects file too)."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import tether

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import parked_world  # noqa: E402


def tools(effects: str) -> List[tether.Tool]:
    """`parked_world`'s tools, and `note(text)`, which has an effect and needs no approval."""

    def note(text: str) -> str:
        """Note `text` down."""
        with open(effects, "a") as file:
            file.write(f"noted {text}\n")
        return "noted"

    return [*parked_world.tools(effects), tether.make_tool(note)]


@dataclass
class Interrupted:
    """What a backend keeps when the run ends on a waiting call: the
    framework's state as text, and the turn's id."""

    turn_id: str
    #: Agents SDK: `result.to_state().to_string()`; Pydantic AI: the messages
    #: and the deferred tool requests, as JSON.
    saved: str
    #: What the person is shown, as the adapter lists it.
    waiting: List[Any]


def agents_agent(base_url: str, tools: List[Any]) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model="fake", openai_client=AsyncOpenAI(base_url=base_url, api_key="k"))
    return Agent(name="bank", tools=tools, model=model)


def pydantic_agent(base_url: str, toolset: Any) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=base_url, api_key="k"))
    return Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])


async def interrupt(framework: str, base_url: str, effects: str, audit: str,
                    options: Optional[Dict[str, Any]] = None) -> Interrupted:
    """Runs the agent until it ends on a call that waits for a person
    (`options`: more of the turn's options, e.g. `approval_timeout`)."""
    made = tools(effects)
    options = options or {}
    if framework == "openai_agents":
        from agents import Runner
        from tether.adapters.openai_agents import open_turn as open_agents_turn

        async with open_agents_turn(made, approver=tether.LATER, audit=audit, **options) as turn_tools:
            result = await Runner.run(agents_agent(base_url, turn_tools.tools), "wire the supplier")
            assert result.interruptions, f"the run ended without an interruption: {result.final_output!r}"
            waiting = await turn_tools.pending(result.interruptions)
            return Interrupted(turn_tools.turn.id, result.to_state().to_string(), waiting)

    from pydantic_ai import DeferredToolRequests
    from pydantic_core import to_json

    from tether.adapters.pydantic_ai import open_turn as open_pydantic_turn, pending

    async with open_pydantic_turn(made, approver=tether.LATER, audit=audit, **options) as pyd_tools:
        run = await pydantic_agent(base_url, pyd_tools.toolset).run("wire the supplier")
        assert isinstance(run.output, DeferredToolRequests), f"the run ended without deferred calls: {run.output!r}"
        saved = json.dumps({"messages": json.loads(run.all_messages_json()), "requests": json.loads(to_json(run.output))})
        return Interrupted(pyd_tools.turn.id, saved, pending(run.output))


async def resume(framework: str, base_url: str, effects: str, audit: str, saved: str, turn_id: str,
                 answer: Union[Dict[str, Any], List[Dict[str, Any]]],
                 options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Answers the waiting calls as `answer` says (a list: one answer each,
    by `call_id`) and resumes the run: what still waits (and the state to
    keep meanwhile), or the run's final output. `options`: more of the
    turn's options."""
    answers = answer if isinstance(answer, list) else [answer]
    made = tools(effects)
    options = options or {}
    if framework == "openai_agents":
        from agents import RunState, Runner
        from tether.adapters.openai_agents import open_turn as open_agents_turn

        async with open_agents_turn(made, approver=tether.LATER, audit=audit, **options) as turn_tools:
            agent = agents_agent(base_url, turn_tools.tools)
            state = await RunState.from_string(agent, saved)
            still = [w for each in answers for w in await turn_tools.answer(state, turn_id=turn_id, **each)]
            if still:  # the state goes on waiting, as it was
                return {"still": [w.to_json() for w in still], "output": None, "saved": state.to_string()}
            result = await Runner.run(agent, state)
            return {"still": [], "output": result.final_output, "interrupted": bool(result.interruptions)}

    from pydantic import TypeAdapter
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ModelMessagesTypeAdapter
    from pydantic_core import to_json

    from tether.adapters.pydantic_ai import answer as answer_requests, open_turn as open_pydantic_turn, pending

    data = json.loads(saved)
    messages = ModelMessagesTypeAdapter.validate_python(data["messages"])
    requests = TypeAdapter(DeferredToolRequests).validate_python(data["requests"])
    async with open_pydantic_turn(made, approver=tether.LATER, audit=audit, **options) as pyd_tools:
        results = DeferredToolResults()
        for each in answers:
            results.update(answer_requests(requests, **each))
        run = await pydantic_agent(base_url, pyd_tools.toolset).run(message_history=messages, deferred_tool_results=results)
        if isinstance(run.output, DeferredToolRequests):
            saved = json.dumps({"messages": json.loads(run.all_messages_json()), "requests": json.loads(to_json(run.output))})
            return {"still": [w.to_json() for w in pending(run.output)], "output": None, "saved": saved}
        return {"still": [], "output": run.output}


def main(argv: List[str]) -> None:
    """`python hitl_world.py ARGS`: `resume(**json.loads(ARGS))` in this
    fresh process; prints its outcome as JSON, or the error's type and text
    (exit code 3)."""
    args = json.loads(argv[1])
    try:
        outcome: Optional[Dict[str, Any]] = asyncio.run(resume(**args))
    except Exception as error:  # the test reads which, and why
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        sys.exit(3)
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv)


async def approve_bare(framework: str, base_url: str, effects: str, audit: str, saved: str) -> List[Any]:
    """Approves every waiting call the framework's own way, WITHOUT Tether's
    answer (`True` in `DeferredToolResults`, `state.approve(item)`), and
    resumes: Pydantic AI's run ends on the calls again (what it lists);
    the Agents SDK's run raises."""
    made = tools(effects)
    if framework == "openai_agents":
        from agents import RunState, Runner
        from tether.adapters.openai_agents import open_turn as open_agents_turn

        async with open_agents_turn(made, approver=tether.LATER, audit=audit) as turn_tools:
            agent = agents_agent(base_url, turn_tools.tools)
            state = await RunState.from_string(agent, saved)
            for item in state.get_interruptions():
                state.approve(item)
            result = await Runner.run(agent, state)
            return [result.final_output]

    from pydantic import TypeAdapter
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ModelMessagesTypeAdapter

    from tether.adapters.pydantic_ai import open_turn as open_pydantic_turn, pending

    data = json.loads(saved)
    messages = ModelMessagesTypeAdapter.validate_python(data["messages"])
    requests = TypeAdapter(DeferredToolRequests).validate_python(data["requests"])
    bare = DeferredToolResults(approvals={call.tool_call_id: True for call in requests.approvals})
    async with open_pydantic_turn(made, approver=tether.LATER, audit=audit) as pyd_tools:
        run = await pydantic_agent(base_url, pyd_tools.toolset).run(message_history=messages, deferred_tool_results=bare)
        assert isinstance(run.output, DeferredToolRequests), f"the run went on: {run.output!r}"
        return list(pending(run.output))
