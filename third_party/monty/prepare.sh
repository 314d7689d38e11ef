#!/usr/bin/env bash
# Makes third_party/monty/patched/monty-<version>/: monty's published crate,
# as cargo downloaded and checked it, with patches/*.patch applied in order.
# The workspace's `[patch.crates-io]` builds monty from there (README.md
# beside this file says why each patch exists). Does nothing when the copy is
# already made from the same crate and patches.
#
#   third_party/monty/prepare.sh [CARGO...]   (default: cargo; ./x passes its pinned one)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cargo=("$@")
[ ${#cargo[@]} -gt 0 ] || cargo=(cargo)

version=$(sed -n 's/^monty = "=\(.*\)"$/\1/p' "$here/fetch/Cargo.toml")
out="$here/patched/monty-$version"
stamp="$(cat "$here/fetch/Cargo.lock" "$here"/patches/*.patch | sha256sum | cut -d' ' -f1)"
if [ -f "$out/.tether-patches" ] && [ "$(cat "$out/.tether-patches")" = "$stamp" ]; then
    exit 0
fi

# cargo downloads the crate and checks it against fetch/Cargo.lock's checksum.
"${cargo[@]}" fetch --locked --quiet --manifest-path "$here/fetch/Cargo.toml"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
crate=""
for candidate in "$cargo_home"/registry/cache/*/"monty-$version.crate"; do
    if [ -f "$candidate" ]; then crate="$candidate"; break; fi
done
if [ -z "$crate" ]; then
    echo "prepare.sh: cargo fetched monty $version, but no monty-$version.crate is under $cargo_home/registry/cache" >&2
    exit 1
fi

rm -rf "$out"
mkdir -p "$here/patched"
tar -xzf "$crate" -C "$here/patched"
for patch in "$here"/patches/*.patch; do
    if ! patch --quiet --forward --strip=1 --directory="$out" <"$patch"; then
        echo "prepare.sh: $(basename "$patch") does not apply to monty $version; see third_party/monty/README.md" >&2
        rm -rf "$out"
        exit 1
    fi
done
echo "$stamp" >"$out/.tether-patches"
