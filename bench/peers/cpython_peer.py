"""CPython, one subprocess per script (`python -I -S cpython_child.py`),
timed around one run: from starting the process to its result. Tool calls
cross a pipe as JSON lines and are answered by this process (the host).
Concurrent runs are concurrent processes, one thread each here.
"""

import json
import pathlib
import subprocess
import sys
import threading

from world import PRELUDE, call_args, clock, parse_args, report

CHILD = str(pathlib.Path(__file__).with_name("cpython_child.py"))


def one_run(python, job, world):
    """Runs one script in a new process: its result, or an error."""
    child = subprocess.Popen(
        [python, "-I", "-S", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    try:
        child.stdin.write(job)
        child.stdin.flush()
        for line in child.stdout:
            message = json.loads(line)
            if "call" in message:
                reply = world.execute(message["call"], call_args(message["args"], {}))
                child.stdin.write(json.dumps(reply) + "\n")
                child.stdin.flush()
            elif "error" in message:
                raise RuntimeError(f"the script failed in CPython: {message['error']}")
            else:
                return message["result"]
        raise RuntimeError("the CPython child exited without a result")
    finally:
        child.stdin.close()
        child.wait()


def main():
    args = parse_args(["subprocess"])
    job = json.dumps({"source": args.source, "prelude": PRELUDE, "input": args.input}) + "\n"
    lock = threading.Lock()
    remaining = {"warmup": args.warmup, "timed": args.samples}
    samples, results, errors = [], [], []

    def take():
        with lock:
            for kind in ("warmup", "timed"):
                if remaining[kind] > 0:
                    remaining[kind] -= 1
                    return kind
            return None

    def runner():
        try:
            while (kind := take()) is not None:
                started = clock()
                result = one_run(sys.executable, job, args.world)
                if kind == "timed":
                    with lock:
                        samples.append(clock() - started)
                        results.append(result)
        except Exception as error:  # reported once every runner has stopped
            errors.append(error)

    threads = [threading.Thread(target=runner) for _ in range(args.concurrency)]
    started = clock()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = clock() - started
    if errors:
        sys.exit(f"cpython peer: {errors[0]}")
    report(samples, elapsed, results[-1], sys.version.split()[0])


if __name__ == "__main__":
    main()
