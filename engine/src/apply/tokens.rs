//! Operator tokens: creating one with its roles, revoking one with its roles, and the check
//! that an entry's token actor is still live at the entry's time ([`crate::token`]).

use std::collections::BTreeSet;

use hub_identity::{validate_name, Identity};

use crate::command::{CommandOutput, TokenRole};
use crate::error::CommandError;
use crate::evaluate::format_time;
use crate::role::RoleBinding;
use crate::state::State;
use crate::token::{OperatorToken, TokenHash, MAX_TOKENS, MAX_TOKEN_TTL_MS};
use crate::TimestampMs;

use super::{changed, Tx};

impl State {
    /// `CreateToken`: a token named `name` acting as `token/<name>` with `roles`, valid for
    /// `ttl_ms` from the entry's time (or forever).
    pub(super) fn create_token(
        &mut self,
        name: &str,
        hash: &TokenHash,
        ttl_ms: Option<u64>,
        roles: &[TokenRole],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let Some(actor) = tx.actor.clone() else {
            return Err(CommandError::invalid(
                "actor",
                "a token must name who created it",
            ));
        };
        validate_name("token name", name)
            .map_err(|e| CommandError::invalid("name", e.to_string()))?;
        if self.tokens.contains_key(name) {
            return Err(CommandError::AlreadyExists {
                kind: "token".into(),
                name: name.to_string(),
            });
        }
        if self.tokens.len() >= MAX_TOKENS {
            return Err(CommandError::FailedPrecondition(format!(
                "the cluster holds {MAX_TOKENS} tokens, the most it keeps: revoke unused or expired ones"
            )));
        }
        if self.tokens.index().by_hash.contains_key(hash) {
            return Err(CommandError::invalid(
                "hash",
                "another token has this secret: generate a new one",
            ));
        }
        let expires_ms = match ttl_ms {
            None => None,
            Some(0) => return Err(CommandError::invalid("ttl", "must be more than zero")),
            Some(ttl) if ttl > MAX_TOKEN_TTL_MS => {
                return Err(CommandError::invalid(
                    "ttl",
                    "at most ten years (omit it for a token that never expires)",
                ))
            }
            // At most ten years: fits in i64 milliseconds.
            Some(ttl) => Some(tx.now.saturating_add(ttl as TimestampMs)),
        };
        let mut seen = BTreeSet::new();
        for r in roles {
            if !seen.insert(r.role) {
                return Err(CommandError::invalid(
                    "roles",
                    format!("{} is given twice", r.role),
                ));
            }
            self.check_scope(r.role, &r.environments, &r.products)?;
        }
        let token = OperatorToken {
            name: name.to_string(),
            hash: *hash,
            created_ms: tx.now,
            expires_ms,
            created_by: actor.to_string(),
        };
        let identity = token.identity();
        self.tokens.put(token, &mut tx.changed);
        for r in roles {
            self.role_bindings.put(
                RoleBinding {
                    identity: identity.clone(),
                    role: r.role,
                    environments: r.environments.clone(),
                    products: r.products.clone(),
                    bound_ms: tx.now,
                    bound_by: actor.to_string(),
                },
                &mut tx.changed,
            );
        }
        let expiry = expires_ms.map_or_else(
            || "never expires".to_string(),
            |at| format!("expires {}", format_time(at)),
        );
        Ok(changed(
            identity.to_string(),
            format!("{identity} created ({expiry}, {} role(s))", roles.len()),
        ))
    }

    /// `RevokeToken`: removes token `name` and every role binding of `token/<name>`.
    pub(super) fn revoke_token(
        &mut self,
        name: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if !self.tokens.contains_key(name) {
            return Err(CommandError::NotFound {
                kind: "token".into(),
                name: name.to_string(),
            });
        }
        let identity = Identity::Token(name.to_string());
        let roles: Vec<_> = self.bindings_of(&identity).map(|b| b.role).collect();
        for role in roles {
            self.role_bindings
                .remove(&(identity.clone(), role), &mut tx.changed);
        }
        self.tokens.remove(&name.to_string(), &mut tx.changed);
        Ok(changed(identity.to_string(), format!("{identity} revoked")))
    }

    /// Refuses an entry whose actor is a token revoked or expired by the entry's time `now`:
    /// a node accepted the bearer, but the log decides.
    pub(super) fn require_live_token(
        &self,
        actor: &Identity,
        now: TimestampMs,
    ) -> Result<(), CommandError> {
        let Identity::Token(name) = actor else {
            return Ok(());
        };
        match self.tokens.get(name) {
            None => Err(CommandError::PermissionDenied(format!(
                "{actor} is revoked"
            ))),
            Some(t) if t.is_expired(now) => Err(CommandError::PermissionDenied(format!(
                "{actor} expired at {}",
                format_time(t.expires_ms.unwrap_or(now))
            ))),
            Some(_) => Ok(()),
        }
    }
}
