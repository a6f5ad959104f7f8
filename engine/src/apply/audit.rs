//! The write audit: a row for every write an identified caller asked for, and its retention.

use hub_identity::Identity;

use crate::audit::{AuditLog, AuthMethod, WriteAudit, WriteOutcome, MAX_AUDIT_RETENTION};
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::state::State;

use super::{changed, Tx};

/// Longest command name a recorded refusal may carry.
pub const MAX_COMMAND_NAME: usize = 64;
/// Longest target a recorded refusal may carry.
pub const MAX_TARGET: usize = 512;
/// Longest error a recorded refusal may carry.
pub const MAX_ERROR: usize = 2048;

impl State {
    /// Records the write of entry `tx.index` by `actor` with its outcome, then drops the
    /// oldest rows past the retention, counting them.
    pub(super) fn record_write(
        &mut self,
        actor: Identity,
        command: &str,
        target: String,
        result: &Result<CommandOutput, CommandError>,
        tx: &mut Tx,
    ) {
        let outcome = match result {
            Ok(_) => WriteOutcome::Applied,
            Err(e) => WriteOutcome::Refused(e.clone()),
        };
        self.write_audit.put(
            WriteAudit {
                index: tx.index,
                time_ms: tx.now,
                method: AuthMethod::of(&actor),
                actor,
                command: command.to_string(),
                target,
                outcome,
            },
            &mut tx.changed,
        );
        self.trim_write_audit(tx);
    }

    /// `RecordRefusal`: a node's refusal of `actor`'s write, as an audit row.
    pub(super) fn record_refusal(
        &mut self,
        actor: &Identity,
        command: &str,
        target: &str,
        error: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        for (field, text, max) in [
            ("command", command, MAX_COMMAND_NAME),
            ("target", target, MAX_TARGET),
            ("error", error, MAX_ERROR),
        ] {
            if text.len() > max {
                return Err(CommandError::invalid(field, format!("at most {max} bytes")));
            }
        }
        let refused = Err(CommandError::PermissionDenied(error.to_string()));
        self.record_write(actor.clone(), command, target.to_string(), &refused, tx);
        Ok(CommandOutput::Done)
    }

    /// `SetAuditRetention`: keeps the newest `entries` rows from now on.
    pub(super) fn set_audit_retention(
        &mut self,
        entries: u64,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if entries == 0 || entries > MAX_AUDIT_RETENTION {
            return Err(CommandError::invalid(
                "entries",
                format!("must be 1 to {MAX_AUDIT_RETENTION}"),
            ));
        }
        let mut log = self.audit_log();
        log.retention = entries;
        self.audit_log.put(log, &mut tx.changed);
        self.trim_write_audit(tx);
        Ok(changed(
            crate::audit::AUDIT_LOG_KEY,
            format!("the write audit keeps the newest {entries} rows"),
        ))
    }

    /// Drops the oldest rows past the retention and counts them.
    fn trim_write_audit(&mut self, tx: &mut Tx) {
        let mut log: AuditLog = self.audit_log();
        let mut dropped = 0;
        while self.write_audit.len() as u64 > log.retention {
            let Some(&oldest) = self.write_audit.keys().next() else {
                break;
            };
            self.write_audit.remove(&oldest, &mut tx.changed);
            dropped += 1;
        }
        if dropped > 0 {
            log.dropped += dropped;
            self.audit_log.put(log, &mut tx.changed);
        }
    }
}
