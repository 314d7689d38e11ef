//! An example guest built with `tether-guest`, and the tests' command-driven
//! guest: its "script" is one command per line.
//!
//! | command | effect |
//! |---|---|
//! | `call NAME {json}` | calls a tool; the result is kept |
//! | `batch NAME {json} \| NAME {json} …` | calls several tools as one batch |
//! | `repeat N NAME {json}` | makes N calls one after another |
//! | `print TEXT` / `eprint TEXT` | writes a line to stdout / stderr |
//! | `alloc MIB` | allocates and touches MIB mebibytes |
//! | `spin` | computes forever |
//! | `recurse` | recurses until the stack runs out |
//! | `trap` | executes `unreachable` |
//! | `fail MESSAGE` | ends with a script error |
//! | `bad-pointer` / `bad-take` | breaks the ABI: a call with an out-of-bounds buffer / `take_response` with nothing staged |
//! | `oob-response` / `short-take` | makes a valid call, then takes the response into an out-of-bounds buffer / with the wrong length |
//! | `raw-call TEXT` | sends TEXT verbatim as the call document; the response document is kept as a string |
//! | `raw-call-nested N` | sends a call to `echo` whose arguments nest N levels deep |
//! | `raw-call-invalid-utf8` | sends a call document that is not UTF-8 |
//! | `big-args NAME BYTES` | calls NAME with `{"data": "xx…"}`, BYTES long |
//! | `bad-finish` | reports an outcome that is not JSON, then returns |
//! | `exit CODE` | exits with CODE without calling `finish` |
//! | `panic TEXT` | panics with TEXT |
//! | `wall NAME` | probes a wall of the sandbox through WASI directly (`walls.rs`); its report is kept |
//!
//! The result is the list of every call result and report, in order.

mod walls;

use serde_json::{Value, json};
use tether_guest::{CallRequest, CallResult, Outcome, ScriptError};

fn main() {
    let start = tether_guest::start();
    let outcome = match run(&start.source) {
        Ok(results) => Outcome::Ok(Value::Array(results)),
        Err(message) => Outcome::Err(ScriptError { kind: "runtime_error".into(), message, ..ScriptError::default() }),
    };
    tether_guest::finish(&outcome);
}

fn run(script: &str) -> Result<Vec<Value>, String> {
    let mut results = Vec::new();
    for (number, line) in script.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
        match command {
            "" => {}
            "call" => results.push(to_json(tether_guest::call_batch(vec![parse_call(rest)?]).remove(0))),
            "batch" => {
                let calls = rest.split('|').map(parse_call).collect::<Result<Vec<_>, _>>()?;
                results.extend(tether_guest::call_batch(calls).into_iter().map(to_json));
            }
            "repeat" => {
                let (count, call) = rest.split_once(' ').ok_or("usage: repeat N NAME {json}")?;
                let count: u32 = count.parse().map_err(|_| format!("line {number}: bad count"))?;
                let call = parse_call(call)?;
                for _ in 0..count {
                    results.push(to_json(tether_guest::call(&call.name, call.args.clone())));
                }
            }
            "print" => println!("{rest}"),
            "eprint" => eprintln!("{rest}"),
            "alloc" => {
                let mib: usize = rest.parse().map_err(|_| format!("line {number}: bad size"))?;
                let block = vec![1u8; mib << 20];
                results.push(json!(block.iter().map(|&b| b as u64).sum::<u64>()));
            }
            "spin" => spin(),
            "recurse" => results.push(json!(recurse(0, std::hint::black_box(1)))),
            "trap" => std::process::abort(),
            "fail" => return Err(rest.to_owned()),
            "bad-pointer" => {
                // SAFETY: deliberately wrong; the host must refuse it without reading.
                let _ = unsafe { raw::call(u32::MAX - 16, 1 << 20) };
            }
            "bad-take" => {
                let mut buffer = [0u8; 16];
                // SAFETY: the buffer is valid; nothing is staged, which the host must refuse.
                let _ = unsafe { raw::take_response(buffer.as_mut_ptr(), buffer.len() as u32) };
            }
            "oob-response" | "short-take" => {
                let request = br#"{"calls":[{"name":"ping","args":{}}]}"#;
                // SAFETY: `request` is valid for its length during the call.
                let len = unsafe { raw::call(request.as_ptr() as u32, request.len() as u32) };
                let mut buffer = vec![0u8; len as usize];
                // SAFETY: deliberately wrong; the host must refuse it without writing.
                let _ = unsafe {
                    if command == "oob-response" {
                        raw::take_response((u32::MAX - 8) as usize as *mut u8, len)
                    } else {
                        raw::take_response(buffer.as_mut_ptr(), len.saturating_sub(1))
                    }
                };
            }
            "raw-call" => results.push(raw_call(rest.as_bytes())),
            "raw-call-nested" => {
                let depth: usize = rest.parse().map_err(|_| format!("line {number}: bad depth"))?;
                let args = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                results.push(raw_call(format!(r#"{{"calls":[{{"name":"echo","args":{{"a":{args}}}}}]}}"#).as_bytes()));
            }
            "raw-call-invalid-utf8" => results.push(raw_call(b"{\"calls\":[{\"name\":\"ec\xff\xfeho\",\"args\":{}}]}")),
            "big-args" => {
                let (name, bytes) = rest.split_once(' ').ok_or("usage: big-args NAME BYTES")?;
                let bytes: usize = bytes.parse().map_err(|_| format!("line {number}: bad size"))?;
                results.push(to_json(tether_guest::call(name, json!({ "data": "x".repeat(bytes) }))));
            }
            "bad-finish" => {
                let outcome = b"this is not an outcome";
                // SAFETY: `outcome` is valid for its length during the call.
                unsafe { raw::finish(outcome.as_ptr(), outcome.len() as u32) };
                std::process::exit(0);
            }
            "exit" => std::process::exit(rest.parse().map_err(|_| format!("line {number}: bad exit code"))?),
            "panic" => panic!("{rest}"),
            "wall" => results.push(walls::probe(rest)?),
            other => return Err(format!("line {number}: unknown command `{other}`")),
        }
    }
    Ok(results)
}

/// The raw `tether_v1` imports, for the commands that break the ABI on purpose.
mod raw {
    #[link(wasm_import_module = "tether_v1")]
    unsafe extern "C" {
        pub(crate) fn call(ptr: u32, len: u32) -> u32;
        pub(crate) fn take_response(ptr: *mut u8, len: u32) -> u32;
        pub(crate) fn finish(ptr: *const u8, len: u32);
    }
}

/// Sends `document` as it is through `tether_v1.call` and returns the
/// response document as a string.
fn raw_call(document: &[u8]) -> Value {
    // SAFETY: `document` is valid for its length during the call.
    let len = unsafe { raw::call(document.as_ptr() as u32, document.len() as u32) };
    let mut buffer = vec![0u8; len as usize];
    // SAFETY: `buffer` is valid for `len` writes.
    let written = unsafe { raw::take_response(buffer.as_mut_ptr(), len) };
    buffer.truncate(written as usize);
    json!(String::from_utf8_lossy(&buffer))
}

fn parse_call(text: &str) -> Result<CallRequest, String> {
    let text = text.trim();
    let (name, args) = text.split_once(' ').unwrap_or((text, "{}"));
    let args = serde_json::from_str(args).map_err(|e| format!("bad arguments for `{name}`: {e}"))?;
    Ok(CallRequest { name: name.to_owned(), args })
}

fn to_json(result: CallResult) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

fn spin() -> ! {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// Recursion that uses only wasm locals (no shadow-stack frame) and cannot
/// become a loop, so it ends at the engine's wasm stack limit.
#[inline(never)]
fn recurse(depth: u64, salt: u64) -> u64 {
    if salt == u64::MAX {
        return depth;
    }
    recurse(depth + 1, salt ^ depth).wrapping_mul(3) ^ depth
}
