//! The certificate revocation list ([`crate::revocation`]): revoking a certificate, and
//! pruning the entries of certificates long expired in the same entry.

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::evaluate::format_time;
use crate::revocation::{
    check_reason, expired_long_ago, normalise_serial, parse_certificate_identity,
    RevokedCertificate, MAX_REVOKED_CERTIFICATES,
};
use crate::state::State;
use crate::TimestampMs;

use super::{changed, Tx};

impl State {
    /// `RevokeCertificate`: adds `serial` to the revocation list, by the entry's actor at the
    /// entry's time. A serial already revoked keeps its first entry and nothing changes (not
    /// an error: a retry must succeed). A new entry first drops the entries whose certificate
    /// expired [`crate::revocation::PRUNE_AFTER_EXPIRY_MS`] or more before the entry's time, then must fit in
    /// [`MAX_REVOKED_CERTIFICATES`].
    pub(super) fn revoke_certificate(
        &mut self,
        serial: &str,
        reason: &str,
        identity: Option<&str>,
        not_after: Option<TimestampMs>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let Some(actor) = tx.actor.clone() else {
            return Err(CommandError::invalid(
                "actor",
                "a revocation must name who revoked the certificate",
            ));
        };
        let serial =
            normalise_serial(serial).map_err(|e| CommandError::invalid("serial", e.to_string()))?;
        check_reason(reason)?;
        let identity = identity.map(parse_certificate_identity).transpose()?;
        if let Some(first) = self.revoked_certificates.get(&serial) {
            let summary = format!(
                "certificate {serial} was already revoked at {} by {} ({}): nothing changed",
                format_time(first.revoked_at),
                first.revoked_by,
                first.reason
            );
            return Ok(changed(serial, summary));
        }
        let prunable = self.prunable_revocations(tx.now);
        if self.revoked_certificates.len() - prunable.len() >= MAX_REVOKED_CERTIFICATES {
            return Err(CommandError::FailedPrecondition(format!(
                "the cluster holds {MAX_REVOKED_CERTIFICATES} revoked certificates, the most it keeps: \
                 a CA with that many compromised certificates is itself compromised, rotate it \
                 (docs/SECURITY.md); entries that give their certificate's notAfter are dropped \
                 a day after it"
            )));
        }
        for old in &prunable {
            self.revoked_certificates.remove(old, &mut tx.changed);
        }
        let who = identity
            .as_ref()
            .map_or_else(String::new, |i| format!(" ({i})"));
        self.revoked_certificates.put(
            RevokedCertificate {
                serial: serial.clone(),
                reason: reason.to_string(),
                identity,
                not_after,
                revoked_at: tx.now,
                revoked_by: actor,
                revoked_index: tx.index,
            },
            &mut tx.changed,
        );
        let pruned = match prunable.len() {
            0 => String::new(),
            n => format!("; {n} entries of certificates expired over a day ago dropped"),
        };
        Ok(changed(
            serial.clone(),
            format!("certificate {serial} revoked{who}{pruned}"),
        ))
    }

    /// The serials of the entries an entry at time `now` may drop, oldest `notAfter` first.
    fn prunable_revocations(&self, now: TimestampMs) -> Vec<String> {
        self.revoked_certificates
            .index()
            .by_not_after
            .iter()
            .take_while(|(not_after, _)| expired_long_ago(*not_after, now))
            .map(|(_, serial)| serial.clone())
            .collect()
    }
}
