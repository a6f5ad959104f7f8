//! Module channels (issue 55): adding a published module version to a custom channel (which
//! opens change requests for the installations tracking it), removing it (which cancels
//! theirs), and choosing the channel an installation tracks.

use semver::Version;

use crate::approval::MAX_MODULE_VERSION_LEN;
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::installation::PublishedModule;
use crate::module_channel::{InstallationChannel, ModuleChannels};
use crate::name::{validate_channel_name, validate_installation_id, validate_len, validate_name};
use crate::product::is_builtin_channel;
use crate::state::State;

use super::modules::check_actor;
use super::{changed, not_found, Tx};

impl State {
    /// Refuses a channel that is neither built in nor created.
    pub(super) fn require_channel(&self, field: &str, channel: &str) -> Result<(), CommandError> {
        validate_channel_name(field, channel)?;
        if is_builtin_channel(channel) || self.channels.contains_key(channel) {
            Ok(())
        } else {
            Err(CommandError::invalid(
                field,
                format!("channel {channel:?} does not exist"),
            ))
        }
    }

    /// `SetModuleChannel`.
    pub(super) fn set_module_channel(
        &mut self,
        module: &str,
        version: &str,
        channel: &str,
        member: bool,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        validate_name("module", module)?;
        validate_len("version", version, MAX_MODULE_VERSION_LEN)?;
        validate_channel_name("channel", channel)?;
        let v = self.custom_channel_version(channel, version, "every module version is on it")?;
        let key = PublishedModule::key_name(module, &v);
        if self.module(module, &v).is_none() {
            return Err(not_found("module version", &key));
        }
        if self.module_on_channel(module, &v, channel) == member {
            let state = if member { "already on" } else { "not on" };
            return Err(CommandError::FailedPrecondition(format!(
                "module {key} is {state} channel {channel}"
            )));
        }
        let mut row = self
            .module_version_channels(module, &v)
            .cloned()
            .unwrap_or_else(|| ModuleChannels {
                module: module.to_string(),
                version: v.clone(),
                channels: Default::default(),
            });
        if member {
            row.channels.insert(channel.to_string());
        } else {
            row.channels.remove(channel);
        }
        if row.channels.is_empty() {
            self.module_channels
                .remove(&ModuleChannels::key_name(module, &v), &mut tx.changed);
        } else {
            self.module_channels.put(row, &mut tx.changed);
        }
        let tracking: Vec<String> = self
            .installations
            .values()
            .filter(|i| i.module == module && self.tracked_channel(&i.id) == channel)
            .map(|i| i.id.clone())
            .collect();
        let summary = if member {
            let opened = self.deliver_on_channel(&tracking, &v, channel, tx);
            format!("module {key} added to {channel}; {opened} change request(s) opened")
        } else {
            let message = format!("module {key} removed from channel {channel}");
            for inst in &tracking {
                self.cancel_change_requests_to(inst, |to| *to == v, &message, tx);
            }
            message
        };
        Ok(changed(key, summary))
    }

    /// Opens a change request to `v` for each of `installations` that is behind it, not
    /// paused, and not already heading to `v` or newer; returns how many it opened.
    fn deliver_on_channel(
        &mut self,
        installations: &[String],
        v: &Version,
        channel: &str,
        tx: &mut Tx,
    ) -> usize {
        let mut opened = 0;
        for inst in installations {
            let Some(i) = self.installations.get(inst) else {
                continue;
            };
            let heading = self
                .open_change_requests(inst)
                .iter()
                .any(|cr| self.change_requests[cr].to_version >= *v);
            if i.paused || i.version >= *v || heading {
                continue;
            }
            let module = i.module.clone();
            let superseded = format!("superseded by {module} {v} on channel {channel}");
            self.cancel_open_change_requests(inst, &superseded, tx);
            let reason = format!("module update on channel {channel}");
            self.open_change_request(inst, v, &reason, opened, tx);
            opened += 1;
        }
        opened
    }

    /// Cancels the open change requests of `inst` whose target `cancel` selects.
    fn cancel_change_requests_to(
        &mut self,
        inst: &str,
        cancel: impl Fn(&Version) -> bool,
        message: &str,
        tx: &mut Tx,
    ) {
        let now = tx.now;
        for id in self.open_change_requests(inst) {
            if !cancel(&self.change_requests[&id].to_version) {
                continue;
            }
            if let Some(c) = self.change_requests.get_mut(&id, &mut tx.changed) {
                c.status = crate::installation::ChangeRequestStatus::Cancelled;
                c.message = message.to_string();
                c.closed_ms = Some(now);
            }
        }
    }

    /// `SetInstallationChannel`: open change requests to versions off the new channel are
    /// cancelled, and the newest version on it, if newer, is delivered.
    pub(super) fn set_installation_channel(
        &mut self,
        id: &str,
        channel: Option<&str>,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_actor(actor)?;
        validate_installation_id("installation", id)?;
        let module = self.require_installation(id)?.module.clone();
        match channel {
            Some(c) => {
                self.require_channel("channel", c)?;
                self.installation_channels.put(
                    InstallationChannel {
                        installation: id.to_string(),
                        channel: c.to_string(),
                        set_ms: tx.now,
                    },
                    &mut tx.changed,
                );
            }
            None => {
                if self
                    .installation_channels
                    .remove(id, &mut tx.changed)
                    .is_none()
                {
                    return Err(CommandError::FailedPrecondition(format!(
                        "installation {id} already tracks its default channel"
                    )));
                }
            }
        }
        let tracked = self.tracked_channel(id);
        let message = format!("installation {id} now tracks channel {tracked}");
        let off = |s: &State, to: &Version| !s.module_on_channel(&module, to, &tracked);
        let offs: Vec<Version> = self
            .open_change_requests(id)
            .iter()
            .map(|cr| self.change_requests[cr].to_version.clone())
            .filter(|to| off(self, to))
            .collect();
        self.cancel_change_requests_to(id, |to| offs.contains(to), &message, tx);
        let latest = self
            .latest_module_on_channel(&module, &tracked)
            .map(|m| m.version.clone());
        let opened = match latest {
            Some(v) => self.deliver_on_channel(&[id.to_string()], &v, &tracked, tx),
            None => 0,
        };
        self.audit_entry(actor, "module-channel", id.to_string(), &tracked, tx);
        Ok(changed(
            id,
            format!("{message}; {opened} change request(s) opened"),
        ))
    }
}
