"""A non-Rust client of tether.v1, written from the proto alone (grpc.aio),
driving a real sidecar through every stream rule of docs/protocol.md.

Usage: conformance.py GENERATED_DIR TARGET [TARGET ...]
where a TARGET is `127.0.0.1:PORT` or `unix:/path/to/socket`. The stubs in
GENERATED_DIR come from `grpc_tools.protoc` run on proto/tether/v1/tether.proto.
Prints one line per check; exits 1 if any failed.
"""

import asyncio
import json
import sys
import traceback

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from tether.v1 import tether_pb2 as pb  # noqa: E402
from tether.v1 import tether_pb2_grpc as pb_grpc  # noqa: E402

FAILED = []


def start(source, **limits):
    tools = [pb.ToolSpec(name=name, description="a test tool", input_schema_json='{"type": "object"}')
             for name in ("lookup", "send", "echo")]
    return pb.BackendMessage(start=pb.Start(
        run_id="py-run", turn_id="py-turn", parent_call_id="c1", source=source,
        language="python", input_json='{"n": 2}', tools=tools, limits=pb.Limits(**limits)))


def result(call_id, value):
    return pb.BackendMessage(tool_result=pb.ToolResult(id=call_id, value_json=json.dumps(value)))


def failure(call_id, code, message):
    return pb.BackendMessage(tool_result=pb.ToolResult(id=call_id, failure=pb.Failure(code=code, message=message)))


async def until_finished(call, on_message=None):
    """Reads to `Finished` (which must come, then the end of the stream)."""
    seen = []
    while True:
        message = await call.read()
        assert message is not grpc.aio.EOF, "the stream ended without Finished"
        kind = message.WhichOneof("kind")
        seen.append(kind)
        if kind == "finished":
            assert await call.read() is grpc.aio.EOF, "nothing follows Finished"
            assert await call.code() == grpc.StatusCode.OK
            return message.finished, seen
        if on_message is not None:
            await on_message(call, message)


async def answer_echo(call, message):
    if message.WhichOneof("kind") == "tool_call":
        await call.write(result(message.tool_call.id, json.loads(message.tool_call.args_json)))


async def check_calls_and_batch_out_of_order(stub):
    call = stub.Run()
    await call.write(start(
        "import asyncio\n"
        "rs = await asyncio.gather(call_async('lookup', k='a'), call_async('lookup', k='b'), call_async('lookup', k='c'))\n"
        "[unwrap(r)['k'] for r in rs] + [input['n']]"))
    calls = []
    while len(calls) < 3:
        message = await call.read()
        if message.WhichOneof("kind") == "tool_call":
            calls.append(message.tool_call)
    assert {c.batch_size for c in calls} == {3} and len({c.batch for c in calls}) == 1, calls
    assert [c.id for c in calls] == ["c1/1", "c1/2", "c1/3"], [c.id for c in calls]
    assert all(c.max_result_bytes > 0 for c in calls)
    for c in reversed(calls):  # answered out of order
        await call.write(result(c.id, json.loads(c.args_json)))
    finished, _ = await until_finished(call)
    assert finished.status == pb.RUN_STATUS_OK, finished
    assert json.loads(finished.result_json) == ["a", "b", "c", 2], finished.result_json
    assert finished.stats.calls == 3
    await call.done_writing()


async def check_failures_are_values(stub):
    call = stub.Run()
    await call.write(start("r = send(to='x')\n[r['ok'], r['error']['code']]"))

    async def deny(call, message):
        if message.WhichOneof("kind") == "tool_call":
            await call.write(failure(message.tool_call.id, "approval_denied", "no"))

    finished, _ = await until_finished(call, deny)
    assert json.loads(finished.result_json) == [False, "approval_denied"], finished


async def check_the_call_cap(stub):
    call = stub.Run()
    await call.write(start("[echo(i=i)['ok'] for i in range(4)]", max_calls=2))
    refused = []

    async def on_message(call, message):
        await answer_echo(call, message)
        if message.WhichOneof("kind") == "call_refused":
            refused.append(message.call_refused)

    finished, _ = await until_finished(call, on_message)
    assert json.loads(finished.result_json) == [True, True, False, False], finished.result_json
    assert [(r.id, r.failure.code) for r in refused] == [("c1/3", "script_call_cap_reached")], refused
    assert finished.limits.max_calls == 2


async def check_cancel(stub):
    call = stub.Run()
    await call.write(start("send(to='x')"))
    while (await call.read()).WhichOneof("kind") != "tool_call":
        pass
    await call.write(pb.BackendMessage(cancel=pb.Cancel(reason="user stopped")))
    finished, _ = await until_finished(call)
    assert finished.status == pb.RUN_STATUS_CANCELLED and "user stopped" in finished.error.message, finished


async def check_half_close(stub):
    call = stub.Run()
    await call.write(start("send(to='x')"))
    while (await call.read()).WhichOneof("kind") != "tool_call":
        pass
    await call.done_writing()
    finished, _ = await until_finished(call)
    assert finished.status == pb.RUN_STATUS_CANCELLED, finished


async def check_bad_messages(stub):
    call = stub.Run()
    await call.write(start("send(to='x')"))
    while (await call.read()).WhichOneof("kind") != "tool_call":
        pass
    await call.write(result("c1/99", 1))
    finished, _ = await until_finished(call)
    assert finished.status == pb.RUN_STATUS_PROTOCOL_ERROR, finished
    assert finished.error.kind == "protocol_error" and "c1/99" in finished.error.message, finished.error


async def check_admission_errors(stub):
    call = stub.Run()
    message = start("1")
    message.start.language = "cobol"
    await call.write(message)
    try:
        await call.read()
        raise AssertionError("an unknown language must fail the stream")
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        assert "cobol" in error.details(), error


async def check_big_results(stub):
    # A large result within the limit arrives whole under the default 4 MiB receive limit.
    call = stub.Run()
    await call.write(start("'x' * 1_500_000"))
    finished, _ = await until_finished(call)
    assert finished.status == pb.RUN_STATUS_OK and len(finished.result_json) == 1_500_002
    # A result too large to send is a clear limit error, not a transport failure.
    call = stub.Run()
    await call.write(start("'x' * 4_500_000"))
    finished, _ = await until_finished(call)
    assert finished.status == pb.RUN_STATUS_LIMIT_EXCEEDED, finished.status
    assert (finished.error.kind, finished.error.limit) == ("size_limit", "max_script_result_bytes"), finished.error


async def check_output_streaming(stub):
    call = stub.Run()
    # A line every 100 ms for half a second, no tool calls.
    await call.write(start("import time\nt = time.time()\nfor i in range(5):\n    print('tick', i)\n"
                           "    while time.time() - t < 0.1 * (i + 1):\n        pass\n'done'"))
    outputs = []

    async def keep(call, message):
        if message.WhichOneof("kind") == "output":
            outputs.append(message.output.data)

    finished, _ = await until_finished(call, keep)
    assert len(outputs) >= 2, f"output arrives while the script runs: {outputs}"
    assert b"".join(outputs) == finished.stdout, (outputs, finished.stdout)


CHECKS = [
    check_calls_and_batch_out_of_order,
    check_failures_are_values,
    check_the_call_cap,
    check_cancel,
    check_half_close,
    check_bad_messages,
    check_admission_errors,
    check_big_results,
    check_output_streaming,
]


async def main(targets):
    for target in targets:
        # Default channel options: what a user of grpc-python gets.
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.SidecarStub(channel)
            for check in CHECKS:
                name = f"{target} {check.__name__}"
                try:
                    await asyncio.wait_for(check(stub), timeout=60)
                    print(f"ok   {name}")
                except Exception:  # noqa: BLE001 — every failure is reported, then the next check runs
                    FAILED.append(name)
                    print(f"FAIL {name}\n{traceback.format_exc()}")
    print(f"{len(CHECKS) * len(targets) - len(FAILED)} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[2:])))
