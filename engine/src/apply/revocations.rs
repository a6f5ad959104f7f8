//! The certificate revocation list ([`crate::revocation`]): revoking a certificate, and
//! pruning the entries of certificates long expired in the same entry.

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::evaluate::format_time;
use crate::revocation::{
    check_reason, expired_long_ago, normalise_serial, parse_certificate_identity,
    CertificateRevocation, RevokedCertificate, MAX_REVOKED_CERTIFICATES,
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

    /// `RevokeCertificates`: every certificate of the batch revoked in this one entry, or none
    /// (the first bad entry is named by its position). Serials already revoked, or repeated
    /// in the batch, keep their first entry. The list after the entry, less the entries it
    /// prunes, must fit in [`MAX_REVOKED_CERTIFICATES`].
    pub(super) fn revoke_certificates(
        &mut self,
        certificates: &[CertificateRevocation],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let Some(actor) = tx.actor.clone() else {
            return Err(CommandError::invalid(
                "actor",
                "a revocation must name who revoked the certificates",
            ));
        };
        if certificates.is_empty() || certificates.len() > MAX_REVOKED_CERTIFICATES {
            return Err(CommandError::invalid(
                "certificates",
                format!(
                    "{} certificates; a batch holds 1 to {MAX_REVOKED_CERTIFICATES}",
                    certificates.len()
                ),
            ));
        }
        let mut new: std::collections::BTreeMap<String, RevokedCertificate> =
            std::collections::BTreeMap::new();
        for (i, c) in certificates.iter().enumerate() {
            let at = |e: CommandError| e.within(&format!("certificates[{i}]"));
            let serial = normalise_serial(&c.serial)
                .map_err(|e| at(CommandError::invalid("serial", e.to_string())))?;
            check_reason(&c.reason).map_err(at)?;
            let identity = c
                .identity
                .as_deref()
                .map(parse_certificate_identity)
                .transpose()
                .map_err(at)?;
            if self.revoked_certificates.get(&serial).is_some() || new.contains_key(&serial) {
                continue;
            }
            let entry = RevokedCertificate {
                serial: serial.clone(),
                reason: c.reason.clone(),
                identity,
                not_after: c.not_after,
                revoked_at: tx.now,
                revoked_by: actor.clone(),
                revoked_index: tx.index,
            };
            new.insert(serial, entry);
        }
        let prunable = self.prunable_revocations(tx.now);
        let after = self.revoked_certificates.len() - prunable.len() + new.len();
        if !new.is_empty() && after > MAX_REVOKED_CERTIFICATES {
            return Err(CommandError::FailedPrecondition(format!(
                "the batch would make {after} revoked certificates, more than the \
                 {MAX_REVOKED_CERTIFICATES} the cluster keeps: a CA with that many compromised \
                 certificates is itself compromised, rotate it (docs/SECURITY.md)"
            )));
        }
        let (added, kept) = (new.len(), certificates.len() - new.len());
        if added > 0 {
            for old in &prunable {
                self.revoked_certificates.remove(old, &mut tx.changed);
            }
        }
        for entry in new.into_values() {
            self.revoked_certificates.put(entry, &mut tx.changed);
        }
        let pruned = match prunable.len() {
            n if n > 0 && added > 0 => {
                format!("; {n} entries of certificates expired over a day ago dropped")
            }
            _ => String::new(),
        };
        Ok(changed(
            "revocation-list",
            format!("{added} certificates revoked, {kept} already revoked or repeated{pruned}"),
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
