//! Release channels of modules (issue 55): which custom channels a published module version
//! is on, and the channel an installation tracks.
//!
//! Module versions are plain versions (`0.N.0`), so every one is on the built-in channels
//! (`DEV`, `RELEASE_CANDIDATE`, `RELEASE`) as soon as it is published. A custom channel
//! (`STABLE`, created with `CreateChannel`) holds the versions a module editor added to it.
//! An installation tracks one channel: the one chosen for it ([`InstallationChannel`]), else
//! the `default_channel` of the approval policy that governs it, else `RELEASE` (every
//! version, the behaviour before channels). A new version reaches it, as a change request,
//! only once the version is on that channel.

use std::collections::BTreeSet;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// The channel an installation tracks when nothing chose one.
pub const DEFAULT_MODULE_CHANNEL: &str = crate::release::CHANNEL_RELEASE;

/// The channel chosen for one installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallationChannel {
    /// `<environment>/<module>`.
    pub installation: String,
    /// The channel it tracks.
    pub channel: String,
    /// Entry time it was chosen.
    pub set_ms: TimestampMs,
}

/// The custom channels one published module version is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleChannels {
    /// The module's name.
    pub module: String,
    /// The version.
    pub version: Version,
    /// Custom channel names (never empty: a version on none has no record).
    pub channels: BTreeSet<String>,
}

impl ModuleChannels {
    /// The record key name: `name@version`.
    pub fn key_name(module: &str, version: &Version) -> String {
        format!("{module}@{version}")
    }
}
