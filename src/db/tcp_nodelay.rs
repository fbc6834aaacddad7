//! Nagle's algorithm off on the process's TCP connections to PostgreSQL.
//!
//! sqlx 0.9.0 no longer sets `TCP_NODELAY` on the sockets it opens (its fix is merged upstream
//! but not released). The last segment of a message larger than one segment then waits for the
//! server's delayed acknowledgement, 40 ms on Linux: an ingest group's journal insert, an
//! import chunk's look-up, anything with a large parameter. sqlx offers no hook on the socket,
//! so after a connection is made this turns the option on for every socket of the process whose
//! peer is the server's port (those already set are set again, which changes nothing). Remove it
//! once an sqlx release sets the option itself.

#[cfg(unix)]
use socket2::SockRef;
#[cfg(unix)]
use std::os::fd::BorrowedFd;

/// Turns `TCP_NODELAY` on for the process's TCP sockets connected to `port`; answers how many.
#[cfg(unix)]
pub fn set_towards(port: u16) -> usize {
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        // Without /proc (macOS, the BSDs): the low descriptors, where a server's pool lives.
        Err(_) => (0..4096).collect(),
    };
    let mut set = 0;
    for fd in fds {
        // SAFETY: the descriptor is only borrowed for two calls that fail harmlessly on a
        // descriptor that is not a socket, or that another thread closed meanwhile; nothing here
        // closes or reads from it.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&fd);
        let towards = socket
            .peer_addr()
            .ok()
            .and_then(|peer| peer.as_socket())
            .is_some_and(|peer| peer.port() == port);
        if towards && socket.set_tcp_nodelay(true).is_ok() {
            set += 1;
        }
    }
    set
}

#[cfg(not(unix))]
pub fn set_towards(_port: u16) -> usize {
    0
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A connection to a listener on 127.0.0.1 gets the option; a socket to another port keeps
    /// Nagle's algorithm.
    #[test]
    fn sets_the_option_on_connections_to_the_port_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let to_port = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let to_other = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!to_port.nodelay().unwrap());
        assert!(set_towards(port) >= 1);
        assert!(to_port.nodelay().unwrap());
        assert!(!to_other.nodelay().unwrap());
    }
}
