//! Options on the process's TCP connections to PostgreSQL that sqlx does not set.
//!
//! - **`TCP_NODELAY`.** sqlx 0.9.0 no longer sets it on the sockets it opens (its fix is merged
//!   upstream but not released). The last segment of a message larger than one segment then
//!   waits for the server's delayed acknowledgement, 40 ms on Linux: an ingest group's journal
//!   insert, an import chunk's look-up, anything with a large parameter.
//! - **A dead peer is noticed in seconds** ([`KEEPALIVE_IDLE`], [`UNACKNOWLEDGED_LIMIT`]). When
//!   the network to the server drops packets (a partition, a host gone without closing its
//!   connections), a statement on an open connection would otherwise wait for the system's
//!   retransmission time-outs (about 15 minutes on Linux) and hold its request and connection
//!   that long. With these, data the server's host has not acknowledged within
//!   [`UNACKNOWLEDGED_LIMIT`] closes the connection (`TCP_USER_TIMEOUT`, Linux), and a
//!   connection waiting for an answer probes the server's host after [`KEEPALIVE_IDLE`] of
//!   silence: the statement fails as a lost connection (503) and the pool opens a new one
//!   once the server answers. A busy server does not trip them: its host's kernel acknowledges
//!   data and probes whatever the backend is doing, so a statement that runs for minutes is
//!   not cut short. Five seconds, not less: a server that stops reading a large message (a
//!   `COPY` stalled on its disk) holds data unacknowledged too, and that must not cost the
//!   connection.
//!
//! sqlx offers no hook on the socket, so after a connection is made this sets the options on
//! every socket of the process whose peer is the server's port (those already set are set
//! again, which changes nothing). Remove the `TCP_NODELAY` part once an sqlx release sets it.

use std::time::Duration;

#[cfg(unix)]
use socket2::{SockRef, TcpKeepalive};
#[cfg(unix)]
use std::os::fd::BorrowedFd;

/// Silence on a connection before its peer's host is probed, and between probes.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(1);
/// How long data sent (a statement, a probe) may stay unacknowledged by the server's host
/// before the connection is closed.
pub const UNACKNOWLEDGED_LIMIT: Duration = Duration::from_secs(5);

/// The same limits on the server's side of a connection, as session settings: a partition
/// leaves the server's process of a connection this side has given up waiting, idle or inside
/// a transaction, holding its locks (an organization's lease, a claimed row) until the server
/// notices the client is gone, after two hours by default. With these it notices within
/// seconds, during the partition or at its end, and rolls that transaction back.
pub fn server_settings() -> [(&'static str, String); 4] {
    [
        ("tcp_keepalives_idle", KEEPALIVE_IDLE.as_secs().to_string()),
        (
            "tcp_keepalives_interval",
            KEEPALIVE_IDLE.as_secs().to_string(),
        ),
        ("tcp_keepalives_count", "5".to_string()),
        (
            "tcp_user_timeout",
            UNACKNOWLEDGED_LIMIT.as_millis().to_string(),
        ),
    ]
}

/// Sets the options on the process's TCP sockets connected to `port`; answers how many.
#[cfg(unix)]
pub fn configure_towards(port: u16) -> usize {
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        // Without /proc (macOS, the BSDs): the low descriptors, where a server's pool lives.
        Err(_) => (0..4096).collect(),
    };
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_IDLE);
    let mut set = 0;
    for raw in fds {
        // SAFETY: the descriptor is only borrowed for calls that fail harmlessly on a
        // descriptor that is not a socket, or that another thread closed meanwhile; nothing here
        // closes or reads from it.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let socket = SockRef::from(&fd);
        let towards = socket
            .peer_addr()
            .ok()
            .and_then(|peer| peer.as_socket())
            .is_some_and(|peer| peer.port() == port);
        if towards && socket.set_tcp_nodelay(true).is_ok() {
            let _ = socket.set_tcp_keepalive(&keepalive);
            set_unacknowledged_limit(raw);
            set += 1;
        }
    }
    set
}

#[cfg(target_os = "linux")]
fn set_unacknowledged_limit(fd: i32) {
    let ms = libc::c_uint::try_from(UNACKNOWLEDGED_LIMIT.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: a plain setsockopt with a pointer to a live c_uint of the size passed; it fails
    // harmlessly on a descriptor that is not a TCP socket.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        );
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
fn set_unacknowledged_limit(_fd: i32) {}

#[cfg(not(unix))]
pub fn configure_towards(_port: u16) -> usize {
    0
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A connection to a listener on 127.0.0.1 gets the options; a socket to another port keeps
    /// the system's defaults.
    #[test]
    fn sets_the_options_on_connections_to_the_port_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let to_port = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let to_other = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!to_port.nodelay().unwrap());
        assert!(configure_towards(port) >= 1);
        assert!(to_port.nodelay().unwrap());
        assert!(!to_other.nodelay().unwrap());
        assert!(SockRef::from(&to_port).keepalive().unwrap());
        assert_eq!(
            SockRef::from(&to_port).tcp_keepalive_time().unwrap(),
            KEEPALIVE_IDLE
        );
        assert!(!SockRef::from(&to_other).keepalive().unwrap());
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let limit = |s: &std::net::TcpStream| {
                let mut ms: libc::c_uint = 0;
                let mut len = std::mem::size_of::<libc::c_uint>() as libc::socklen_t;
                // SAFETY: reads a c_uint option into a live c_uint of the size passed.
                let rc = unsafe {
                    libc::getsockopt(
                        s.as_raw_fd(),
                        libc::IPPROTO_TCP,
                        libc::TCP_USER_TIMEOUT,
                        (&mut ms as *mut libc::c_uint).cast(),
                        &mut len,
                    )
                };
                assert_eq!(rc, 0);
                ms
            };
            assert_eq!(limit(&to_port), 5_000);
            assert_eq!(limit(&to_other), 0);
        }
    }
}
