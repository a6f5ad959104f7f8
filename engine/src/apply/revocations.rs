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
use hub_identity::Identity;

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
        let actor = revoking_actor(tx)?;
        let entry = revoked_entry(serial, reason, identity, not_after, &actor, tx)?;
        let serial = entry.serial.clone();
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
        let who = entry
            .identity
            .as_ref()
            .map_or_else(String::new, |i| format!(" ({i})"));
        let pruned = self.revoke(&prunable, vec![entry], tx);
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
        let actor = revoking_actor(tx)?;
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
            let entry = revoked_entry(
                &c.serial,
                &c.reason,
                c.identity.as_deref(),
                c.not_after,
                &actor,
                tx,
            )
            .map_err(|e| e.within(&format!("certificates[{i}]")))?;
            if self.revoked_certificates.get(&entry.serial).is_none() {
                new.entry(entry.serial.clone()).or_insert(entry);
            }
        }
        let (added, kept) = (new.len(), certificates.len() - new.len());
        if added == 0 {
            return Ok(changed(
                "revocation-list",
                format!("0 certificates revoked, {kept} already revoked or repeated"),
            ));
        }
        let prunable = self.prunable_revocations(tx.now);
        let after = self.revoked_certificates.len() - prunable.len() + added;
        if after > MAX_REVOKED_CERTIFICATES {
            return Err(CommandError::FailedPrecondition(format!(
                "the batch would make {after} revoked certificates, more than the \
                 {MAX_REVOKED_CERTIFICATES} the cluster keeps: a CA with that many compromised \
                 certificates is itself compromised, rotate it (docs/SECURITY.md)"
            )));
        }
        let pruned = self.revoke(&prunable, new.into_values().collect(), tx);
        Ok(changed(
            "revocation-list",
            format!("{added} certificates revoked, {kept} already revoked or repeated{pruned}"),
        ))
    }

    /// Drops the `prunable` entries, then adds the `new` ones (which must fit: checked by
    /// the caller); returns the summary's note on what was dropped.
    fn revoke(&mut self, prunable: &[String], new: Vec<RevokedCertificate>, tx: &mut Tx) -> String {
        debug_assert!(
            !new.is_empty(),
            "an entry that revokes nothing prunes nothing"
        );
        for old in prunable {
            self.revoked_certificates.remove(old, &mut tx.changed);
        }
        for entry in new {
            debug_assert!(self.revoked_certificates.get(&entry.serial).is_none());
            self.revoked_certificates.put(entry, &mut tx.changed);
        }
        debug_assert!(
            self.revoked_certificates.len() <= MAX_REVOKED_CERTIFICATES,
            "the revocation list outgrew its bound"
        );
        match prunable.len() {
            0 => String::new(),
            n => format!("; {n} entries of certificates expired over a day ago dropped"),
        }
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

/// The actor a revocation is recorded under: every revocation names who made it.
fn revoking_actor(tx: &Tx) -> Result<Identity, CommandError> {
    tx.actor.clone().ok_or_else(|| {
        CommandError::invalid(
            "actor",
            "a revocation must name who revoked the certificate",
        )
    })
}

/// One certificate's revocation, checked and recorded as revoked by `actor` at the entry's
/// time and index.
fn revoked_entry(
    serial: &str,
    reason: &str,
    identity: Option<&str>,
    not_after: Option<TimestampMs>,
    actor: &Identity,
    tx: &Tx,
) -> Result<RevokedCertificate, CommandError> {
    let serial =
        normalise_serial(serial).map_err(|e| CommandError::invalid("serial", e.to_string()))?;
    check_reason(reason)?;
    let identity = identity.map(parse_certificate_identity).transpose()?;
    Ok(RevokedCertificate {
        serial,
        reason: reason.to_string(),
        identity,
        not_after,
        revoked_at: tx.now,
        revoked_by: actor.clone(),
        revoked_index: tx.index,
    })
}
