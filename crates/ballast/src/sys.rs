//! Process-level setup the operating system needs before a broker can hold many connections.

use std::io;

/// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit, since every MQTT
/// connection is a file descriptor and the usual soft default (1024) would cap a node at about
/// a thousand clients. Returns the limits before and after.
pub fn raise_nofile_limit() -> io::Result<(libc::rlim_t, libc::rlim_t)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and keeps no pointer to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    let mut target = lim.rlim_max;
    if target == libc::RLIM_INFINITY {
        // Linux refuses an infinite soft limit for files; the real ceiling is fs.nr_open.
        target = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if target <= before {
        return Ok((before, before));
    }
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((before, target))
}

#[cfg(test)]
mod tests {
    #[test]
    fn raising_twice_is_stable() {
        let (_, first) = super::raise_nofile_limit().unwrap();
        let (before, after) = super::raise_nofile_limit().unwrap();
        assert_eq!(before, first);
        assert_eq!(after, first);
    }
}
