//! Loopback ports for the servers and proxies a test starts.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Where the choice starts; the kernel's ephemeral range begins above it.
const LOWEST: u16 = 10000;

/// A loopback port nobody listens on now and that this process has not handed out before.
///
/// It is chosen below the kernel's ephemeral range: the kernel gives ports in that range to
/// outgoing connections, and a test's own clients could take the port between its choice and
/// its server's bind (seen in CI as "Address already in use"). Tests in one binary never get the
/// same port twice. Another process may still bind it first; the server launchers then try
/// another port.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let ephemeral = ephemeral_low();
    if ephemeral > LOWEST + 1000 {
        for _ in 0..1000 {
            let port = rand::random_range(LOWEST..ephemeral);
            if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                handed_out.insert(port);
                return port;
            }
        }
    }
    // No room below the ephemeral range: the kernel's choice, still never handed out twice.
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("bind 127.0.0.1:0 to find a free port")
            .port();
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range (0 if it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_handed_out_are_distinct_and_below_the_ephemeral_range() {
        let ports: BTreeSet<u16> = (0..200).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 200, "a port was handed out twice");
        let ephemeral = ephemeral_low();
        if ephemeral > LOWEST + 1000 {
            assert!(
                ports.iter().all(|p| (LOWEST..ephemeral).contains(p)),
                "{ports:?}"
            );
        }
    }
}
