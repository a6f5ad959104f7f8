//! Facts about the processes the runner starts, read from `/proc`: a leaf module the
//! cluster, the network and the workloads all use.

/// Whether `pid` runs or still holds what it had open (a zombie first thread whose other
/// threads are still exiting counts as alive): the launcher's own test.
pub use hubctl::dev::is_alive;
