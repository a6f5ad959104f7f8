//! Facts about the processes the runner starts, read from `/proc`: a leaf module the
//! cluster, the network and the workloads all use.

/// Whether `pid` is a live (not zombie) process.
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}
