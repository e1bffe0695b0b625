//! A guard against UCX 1.22's connection-manager spin: a TCP connection to a listener's port
//! that sends more than about 2 KiB of garbage and closes is never closed by UCX
//! (`uct_tcp_sockcm` does not check the declared private-data length), and UCX's async thread
//! then polls its readable, finished socket at 100 % of a core for the process's life. No UCX
//! setting avoids it, and closing the listener does not stop it.
//!
//! [`StuckConnections::check`], called about once a second, finds such sockets: connections to
//! the listener's port whose peer has closed (`CLOSE_WAIT` in `/proc/self/net/tcp*`) with the
//! same number of bytes left unread at two checks in a row, each after an interval in which
//! UCX's async thread used over a fifth of a core. Unread bytes are the mark of the garbage (2017 of
//! 4096 sent, seen here): UCX reads everything a real client sends, so a connection whose
//! client has just gone (`CLOSE_WAIT` until UCX processes the disconnect) has none, and the
//! guard leaves it to UCX even while another connection makes UCX spin.
//! Each one's file descriptor is pointed at `/dev/null` (`dup2`), which closes the socket: the
//! kernel drops it from UCX's epoll set, the spin stops and the connection is freed. UCX logs
//! an error when it later fails to remove the descriptor from its epoll set; nothing else
//! changes for it.
//!
//! Linux only (the `/proc` files); elsewhere `check` finds nothing.
use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Instant;

/// The share of a core UCX's async thread must have used over the interval before the socket
/// table (every socket on the host) is read. The spin takes a whole core when it has one; three
/// such processes on two cores got 0.47–0.6 each, which a bar of half a core missed, so the
/// stuck sockets stayed. The unread-bytes mark, not this bar, is what spares live connections.
const BUSY: f64 = 0.2;

/// `CLOSE_WAIT` in `/proc/net/tcp`'s `st` column.
const CLOSE_WAIT: &str = "08";

/// The guard for one listener's port; see the module's docs.
#[derive(Debug)]
pub struct StuckConnections {
    port: u16,
    /// Socket inodes seen in `CLOSE_WAIT` with unread bytes at the last check, with how many.
    seen: HashMap<u64, u64>,
    /// UCX's async thread's CPU time (clock ticks) at the last check, and when.
    last: Option<(u64, Instant)>,
}

impl StuckConnections {
    /// A guard for a listener on `port`.
    pub fn new(port: u16) -> StuckConnections {
        StuckConnections { port, seen: HashMap::new(), last: None }
    }

    /// Lets go of the connections stuck since the last check while UCX spun; returns how
    /// many. Call it about once a second.
    pub fn check(&mut self) -> io::Result<usize> {
        let now = Instant::now();
        let ticks = async_thread_ticks()?;
        let busy = match self.last.replace((ticks, now)) {
            Some((before, then)) => {
                let secs = now.duration_since(then).as_secs_f64().max(1e-3);
                ticks.saturating_sub(before) as f64 / clock_ticks_per_second() / secs
            }
            None => 0.0,
        };
        // While UCX is quiet nothing spins, and the socket table (every socket on the host)
        // is not read: a connection is let go after two busy intervals in a row.
        if busy < BUSY {
            self.seen.clear();
            return Ok(0);
        }
        let waiting = unread_close_wait(self.port)?;
        // Stuck: the same socket with the same unread bytes as at the last check.
        let stuck: HashSet<u64> =
            waiting.iter().filter(|(inode, unread)| self.seen.get(inode) == Some(unread)).map(|(i, _)| *i).collect();
        self.seen = waiting;
        if stuck.is_empty() {
            return Ok(0);
        }
        let mut released = 0;
        for (fd, inode) in socket_fds()? {
            if stuck.contains(&inode) && release(fd, inode)? {
                self.seen.remove(&inode);
                released += 1;
            }
        }
        Ok(released)
    }
}

/// The CPU time (user + system, clock ticks) of this process's threads named `async`: UCX's
/// async thread.
fn async_thread_ticks() -> io::Result<u64> {
    let mut total = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Ok(0) };
    for task in tasks {
        let Ok(stat) = std::fs::read_to_string(task?.path().join("stat")) else { continue };
        if let Some(ticks) = async_ticks_of(&stat) {
            total += ticks;
        }
    }
    Ok(total)
}

/// utime + stime from a `/proc/<pid>/task/<tid>/stat` line whose name is `async`.
fn async_ticks_of(stat: &str) -> Option<u64> {
    let name = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?;
    if name != "async" {
        return None;
    }
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // After the name: state is field 0, utime field 11, stime field 12.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// The TCP sockets whose local port is `port`, whose peer has closed and which hold unread
/// bytes: inode to the number of bytes.
fn unread_close_wait(port: u16) -> io::Result<HashMap<u64, u64>> {
    let mut sockets = HashMap::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        sockets.extend(text.lines().skip(1).filter_map(|line| unread_close_wait_row(line, port)));
    }
    Ok(sockets)
}

/// The inode and unread byte count of one `/proc/net/tcp` row, if it is a `CLOSE_WAIT` socket
/// on local `port` with bytes left unread.
fn unread_close_wait_row(line: &str, port: u16) -> Option<(u64, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local_port = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
    (local_port == port && *fields.get(3)? == CLOSE_WAIT).then_some(())?;
    // `tx_queue:rx_queue`, hexadecimal.
    let unread = u64::from_str_radix(fields.get(4)?.split(':').nth(1)?, 16).ok()?;
    (unread > 0).then_some(())?;
    Some((fields.get(9)?.parse().ok()?, unread))
}

/// This process's file descriptors that are sockets, with their inodes.
fn socket_fds() -> io::Result<Vec<(i32, u64)>> {
    let mut fds = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Ok(fds) };
    for entry in dir {
        let entry = entry?;
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else { continue };
        if let Some(inode) = socket_inode(fd) {
            fds.push((fd, inode));
        }
    }
    Ok(fds)
}

/// The inode of the socket `fd` refers to now.
fn socket_inode(fd: i32) -> Option<u64> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// Points `fd` at `/dev/null` if it still refers to socket `inode`, closing the socket.
fn release(fd: i32, inode: u64) -> io::Result<bool> {
    let null = std::fs::File::open("/dev/null")?;
    // Checked again right before: UCX may have closed the descriptor and the number been
    // reused since the scan.
    if socket_inode(fd) != Some(inode) {
        return Ok(false);
    }
    // SAFETY: both descriptors are open; dup2 replaces `fd` atomically, and UCX keeps using
    // the number, now /dev/null, until it closes it.
    let r = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_async_threads_time_and_close_wait_rows() {
        let stat = "4242 (async) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0";
        assert_eq!(async_ticks_of(stat), Some(150));
        assert_eq!(async_ticks_of("4242 (python) S 1 2 3 4 5 6 7 8 9 10 11 120 30"), None);
        assert_eq!(async_ticks_of("garbage"), None);
        let row = "  3: 0100007F:D0A5 0100007F:9C41 08 00000000:000007E1 00:00000000 00000000  0 0 123456 1";
        assert_eq!(unread_close_wait_row(row, 0xD0A5), Some((123456, 0x7E1)));
        assert_eq!(unread_close_wait_row(row, 0xD0A6), None, "another port");
        assert_eq!(unread_close_wait_row(&row.replace(" 08 ", " 01 "), 0xD0A5), None, "established");
        let read = row.replace("00000000:000007E1", "00000000:00000000");
        assert_eq!(unread_close_wait_row(&read, 0xD0A5), None, "a client that has gone, everything read");
        assert_eq!(unread_close_wait_row("", 1), None);
    }
}
