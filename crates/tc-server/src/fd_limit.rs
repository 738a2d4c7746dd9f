//! The open-file limit. Every connection (served, or being refused past
//! the connection limit), database handle and downstream call holds a file
//! descriptor; many systems start a process with a soft limit of 1024,
//! which would refuse connections at the kernel (accept fails) long before
//! the server's own limits answer them with a 503. So the soft limit is
//! raised at start toward what the server may need, within the hard limit.

/// Raises the soft limit on open files to `wanted`, or to the hard limit if
/// that is lower; never lowers it. Returns the limit now in force (`None`
/// where it cannot be read).
#[cfg(unix)]
pub(crate) fn raise_to(wanted: u64) -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current?;
    if current >= wanted {
        return Some(current);
    }
    let target = limit.maximum.map_or(wanted, |max| max.min(wanted));
    let raised = rustix::process::Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => Some(target),
        Err(_) => Some(current),
    }
}

/// Elsewhere the limit is the system's business.
#[cfg(not(unix))]
pub(crate) fn raise_to(_wanted: u64) -> Option<u64> {
    None
}

#[cfg(all(test, unix))]
mod tests {
    use rustix::process::{Resource, getrlimit};

    #[test]
    fn the_soft_limit_is_raised_within_the_hard_one_and_never_lowered() {
        let before = getrlimit(Resource::Nofile);
        let now = super::raise_to(1).unwrap();
        assert_eq!(Some(now), before.current, "never lowered");
        let wanted = before.current.unwrap().saturating_add(16);
        let now = super::raise_to(wanted).unwrap();
        let expected = before.maximum.map_or(wanted, |max| max.min(wanted));
        assert_eq!(now, expected.max(before.current.unwrap()));
        assert_eq!(getrlimit(Resource::Nofile).current, Some(now));
    }
}
