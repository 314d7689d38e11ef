# Run inside every peer's sandbox before the script: Tether's guest provides
# `unwrap` natively (guest-sdk/python/src/api.rs); the peers get the same
# function in Python. A failure is a value `{"ok": False, "error": {...}}`.
def unwrap(result):
    if result["ok"]:
        return result.get("value")
    error = result.get("error") or {}
    raise RuntimeError(f"tool call failed: {error.get('code', 'unknown')}: {error.get('message', 'unknown')}")
