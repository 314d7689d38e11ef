//! `wall NAME`: probes one wall of the sandbox from inside, through WASI
//! preview 1 directly (raw calls via the `wasi` crate) and through Rust std
//! (which goes through wasi-libc's emulation: preopens, a cwd, `environ`).
//!
//! Each probe reports what it saw as JSON, whatever it saw: the test on the
//! host decides what is allowed. Errors are WASI errno names (`"BADF"`,
//! `"NOTSOCK"`) for raw calls and the `io::Error` text for std calls; a call
//! that succeeds reports what it got, never file or environment contents.

use serde_json::{Value, json};
use std::io::Read;

/// File descriptors probed: stdio, and where preopens and sockets would be.
const FDS: std::ops::RangeInclusive<u32> = 0..=9;

/// Paths tried: absolute, relative, the roots, escapes, and files that exist
/// on almost every host.
const PATHS: [&str; 10] =
    ["/etc/passwd", "/", ".", "..", "", "etc/passwd", "../../etc/passwd", "/proc/self/environ", "/tmp", "Cargo.toml"];

/// Runs the probe `name`.
pub(crate) fn probe(name: &str) -> Result<Value, String> {
    let report = match name {
        "files" => files(),
        "dirs" => dirs(),
        "preopens" => preopens(),
        "env" => env(),
        "args" => args(),
        "sockets" => sockets(),
        "stdin" => stdin(),
        "clocks" => clocks(),
        "random" => random(),
        other => return Err(format!("unknown wall `{other}`")),
    };
    Ok(json!({ "wall": name, "report": report }))
}

fn errno(result: Result<impl Sized, wasi::Errno>) -> Value {
    match result {
        Ok(_) => json!("ok"),
        Err(errno) => json!(errno.name()),
    }
}

fn io<T>(result: std::io::Result<T>, ok: impl FnOnce(T) -> Value) -> Value {
    match result {
        Ok(value) => json!({ "ok": ok(value) }),
        Err(error) => json!({ "error": error.to_string() }),
    }
}

/// Opens, creates and stats files through std, and opens paths relative to
/// every low fd through raw `path_open`.
fn files() -> Value {
    let read: Vec<Value> = PATHS
        .iter()
        .map(|path| json!({ "path": path, "result": io(std::fs::read(path), |b| json!(b.len())) }))
        .collect();
    let create: Vec<Value> = ["/tmp/tether-escape", "tether-escape", "/etc/tether-escape"]
        .iter()
        .map(|path| json!({ "path": path, "result": io(std::fs::File::create(path), |_| json!("created")) }))
        .collect();
    let stat: Vec<Value> = PATHS
        .iter()
        .map(|path| json!({ "path": path, "result": io(std::fs::metadata(path), |m| json!(m.is_dir())) }))
        .collect();
    let rights = wasi::RIGHTS_FD_READ | wasi::RIGHTS_FD_WRITE | wasi::RIGHTS_PATH_OPEN | wasi::RIGHTS_FD_READDIR;
    let mut path_open = Vec::new();
    for fd in FDS {
        for path in ["etc/passwd", ".", "/etc/passwd", "x"] {
            // SAFETY: `path` is a valid str for the call; the result is an fd number or an errno.
            let opened = unsafe { wasi::path_open(fd, 0, path, wasi::OFLAGS_CREAT, rights, rights, 0) };
            path_open.push(json!({ "fd": fd, "path": path, "result": errno(opened) }));
        }
    }
    json!({ "read": read, "create": create, "stat": stat, "path_open": path_open })
}

/// Lists directories through std and raw `fd_readdir`.
fn dirs() -> Value {
    let read_dir: Vec<Value> = PATHS
        .iter()
        .map(|path| json!({ "path": path, "result": io(std::fs::read_dir(path), |entries| json!(entries.count())) }))
        .collect();
    let mut buffer = [0u8; 1024];
    let fd_readdir: Vec<Value> = FDS
        .map(|fd| {
            // SAFETY: `buffer` is valid for `buffer.len()` writes.
            let listed = unsafe { wasi::fd_readdir(fd, buffer.as_mut_ptr(), buffer.len(), 0) };
            json!({ "fd": fd, "result": errno(listed) })
        })
        .collect();
    json!({ "read_dir": read_dir, "fd_readdir": fd_readdir })
}

/// Every fd from 0 to 63 that is a preopened directory, with its name; and
/// what `fd_prestat_get` says for fd 3, where the first preopen would be.
fn preopens() -> Value {
    let mut found = Vec::new();
    for fd in 0..64 {
        // SAFETY: plain fd query; the prestat is returned by value.
        if let Ok(prestat) = unsafe { wasi::fd_prestat_get(fd) } {
            // SAFETY: tag 0 (`dir`) is the only prestat kind; its length sizes the buffer.
            let len = unsafe { prestat.u.dir.pr_name_len };
            let mut name = vec![0u8; len];
            // SAFETY: `name` is valid for `len` writes.
            let named = unsafe { wasi::fd_prestat_dir_name(fd, name.as_mut_ptr(), len) };
            found.push(json!({ "fd": fd, "name": String::from_utf8_lossy(&name), "name_result": errno(named) }));
        }
    }
    // SAFETY: plain fd query.
    let fd3 = errno(unsafe { wasi::fd_prestat_get(3) });
    json!({ "preopened": found, "fd_prestat_get_3": fd3 })
}

/// The environment as WASI reports it, and as std sees it.
fn env() -> Value {
    // SAFETY: returns two sizes by value.
    let sizes = unsafe { wasi::environ_sizes_get() };
    let names: Vec<String> = std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
    json!({
        "environ_sizes_get": match sizes { Ok((count, bytes)) => json!([count, bytes]), Err(e) => json!(e.name()) },
        "std_var_names": names,
        "std_home": std::env::var_os("HOME").is_some(),
        "std_path": std::env::var_os("PATH").is_some(),
    })
}

/// The arguments as WASI reports them, and as std sees them.
fn args() -> Value {
    // SAFETY: returns two sizes by value.
    let sizes = unsafe { wasi::args_sizes_get() };
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    json!({
        "args_sizes_get": match sizes { Ok((count, bytes)) => json!([count, bytes]), Err(e) => json!(e.name()) },
        "std_args": args,
    })
}

/// The four preview-1 socket calls on every low fd, and std's networking.
fn sockets() -> Value {
    let mut buffer = [0u8; 64];
    let message = *b"GET / HTTP/1.0\r\n\r\n";
    let per_fd: Vec<Value> = FDS
        .map(|fd| {
            let recv = [wasi::Iovec { buf: buffer.as_mut_ptr(), buf_len: buffer.len() }];
            let send = [wasi::Ciovec { buf: message.as_ptr(), buf_len: message.len() }];
            // SAFETY: the iovecs point at live buffers of the stated lengths.
            let (accept, received, sent, shutdown) = unsafe {
                (
                    wasi::sock_accept(fd, 0),
                    wasi::sock_recv(fd, &recv, 0),
                    wasi::sock_send(fd, &send, 0),
                    wasi::sock_shutdown(fd, wasi::SDFLAGS_RD | wasi::SDFLAGS_WR),
                )
            };
            json!({
                "fd": fd,
                "sock_accept": errno(accept),
                "sock_recv": errno(received),
                "sock_send": errno(sent),
                "sock_shutdown": errno(shutdown),
            })
        })
        .collect();
    use std::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
    json!({
        "per_fd": per_fd,
        "std_tcp_bind": io(TcpListener::bind("127.0.0.1:0"), |_| json!("bound")),
        "std_tcp_connect": io(TcpStream::connect("127.0.0.1:80"), |_| json!("connected")),
        "std_udp_bind": io(UdpSocket::bind("0.0.0.0:0"), |_| json!("bound")),
        "std_resolve": io("localhost:80".to_socket_addrs(), |addrs| json!(addrs.count())),
    })
}

/// What stdin holds: std's read to the end, and one raw `fd_read`.
fn stdin() -> Value {
    let mut all = Vec::new();
    let std_read = io(std::io::stdin().read_to_end(&mut all), |n| json!(n));
    let mut buffer = [0u8; 64];
    let iov = [wasi::Iovec { buf: buffer.as_mut_ptr(), buf_len: buffer.len() }];
    // SAFETY: the iovec points at a live buffer of the stated length.
    let raw = match unsafe { wasi::fd_read(0, &iov) } {
        Ok(n) => json!({ "ok": n }),
        Err(e) => json!({ "error": e.name() }),
    };
    json!({ "std_read_to_end": std_read, "fd_read": raw })
}

/// Every clock: its reading and resolution, or the errno.
fn clocks() -> Value {
    let clock = |id: wasi::Clockid| {
        // SAFETY: plain clock queries, answered by value.
        let (time, resolution) = unsafe { (wasi::clock_time_get(id, 1), wasi::clock_res_get(id)) };
        let show = |r: Result<u64, wasi::Errno>| match r {
            Ok(ns) => json!({ "ns": ns }),
            Err(e) => json!({ "error": e.name() }),
        };
        json!({ "time": show(time), "resolution": show(resolution) })
    };
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64);
    json!({
        "realtime": clock(wasi::CLOCKID_REALTIME),
        "monotonic": clock(wasi::CLOCKID_MONOTONIC),
        "process_cputime": clock(wasi::CLOCKID_PROCESS_CPUTIME_ID),
        "thread_cputime": clock(wasi::CLOCKID_THREAD_CPUTIME_ID),
        "std_system_time_ms": since_epoch.ok(),
    })
}

/// Two draws of 32 random bytes, as hex.
fn random() -> Value {
    let draw = || {
        let mut bytes = [0u8; 32];
        // SAFETY: `bytes` is valid for 32 writes.
        match unsafe { wasi::random_get(bytes.as_mut_ptr(), bytes.len()) } {
            Ok(()) => json!(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            Err(e) => json!({ "error": e.name() }),
        }
    };
    json!([draw(), draw()])
}
