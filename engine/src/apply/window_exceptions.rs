//! Window-exception requests (issue 55): request, approve, reject. The approval that meets
//! the request's policy adds the window override, in the same entry; until then nothing
//! opens. Each step is audited, and for an entity also noted on its Activity.

use crate::access::ApprovalTarget;
use crate::approval::{Approvers, PolicyScope, MAX_REQUEST_ID_LEN};
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::evaluate::format_time;
use crate::name::validate_len;
use crate::settings::WindowOverride;
use crate::state::State;
use crate::suppression::Scope;
use crate::window_exception::{ExceptionStatus, WindowException, MAX_PENDING_PER_SCOPE};
use crate::TimestampMs;

use super::approvals::actor_text;
use super::{changed, check_scope_name, check_text, not_found, Tx};

/// Most live window overrides per scope (as `AddWindowOverride`).
const MAX_LIVE_OVERRIDES: usize = 32;

impl State {
    /// Who approves an exception on `scope`, and the policy scope it falls under: the
    /// product's editors and policy when the window an entity follows is its product's
    /// (SPEC C4), else the environment's approvers and policy.
    fn exception_approvers(&self, scope: &Scope) -> (Approvers, PolicyScope) {
        let env = scope.environment().to_string();
        if let Scope::Entity(id) = scope {
            let product_window = self.entities.get(id).and_then(|e| {
                let overridden = self
                    .environments
                    .get(&env)
                    .is_some_and(|en| en.settings.override_product_maintenance_windows);
                self.products
                    .get(&e.product_id)
                    .filter(|p| p.maintenance_window.is_some() && !overridden)
                    .map(|p| p.id.clone())
            });
            if let Some(product) = product_window {
                return (
                    Approvers::Product(product.clone()),
                    PolicyScope::Product(product),
                );
            }
        }
        (
            Approvers::Environment(env.clone()),
            PolicyScope::Environment(env),
        )
    }

    /// `RequestWindowException`: a pending request, approvable under the scope's policy.
    pub(super) fn request_window_exception(
        &mut self,
        scope: &Scope,
        start_ms: TimestampMs,
        end_ms: TimestampMs,
        reason: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        check_text("reason", reason, true)?;
        check_scope_name("scope", scope)?;
        if end_ms <= start_ms {
            return Err(CommandError::invalid("end", "must be after start"));
        }
        if end_ms <= now {
            return Err(CommandError::invalid("end", "is in the past"));
        }
        self.require_scope(scope)?;
        if tx.actor.is_none() {
            return Err(CommandError::PermissionDenied(
                "a window-exception request needs a verified requester (an entry of an operator)"
                    .into(),
            ));
        }
        let pending = self
            .window_exceptions
            .values()
            .filter(|w| w.scope == *scope && w.status == ExceptionStatus::Pending)
            .filter(|w| !w.expired_at(now))
            .count();
        if pending >= MAX_PENDING_PER_SCOPE {
            return Err(CommandError::invalid(
                "scope",
                format!("{scope} has {MAX_PENDING_PER_SCOPE} pending window exceptions"),
            ));
        }
        let (approvers, policy_scope) = self.exception_approvers(scope);
        let policy = self.approval_policy(&policy_scope);
        let approvals = State::new_request_approvals(policy, approvers, tx);
        let id = format!("wx-{}", tx.index);
        let needs = approvals.outstanding_text();
        let source = approvals.policy.source_text();
        self.window_exceptions.put(
            WindowException {
                id: id.clone(),
                scope: scope.clone(),
                start_ms,
                end_ms,
                reason: reason.to_string(),
                status: ExceptionStatus::Pending,
                approvals,
                created_ms: now,
                decided_by: None,
                closed_ms: None,
                message: String::new(),
            },
            &mut tx.changed,
        );
        let actor = actor_text(tx);
        let line = format!(
            "window exception {id} requested by {actor} from {} to {} ({reason}); \
             needs {needs} under {source}",
            format_time(start_ms),
            format_time(end_ms)
        );
        self.exception_note(scope, line.clone(), tx);
        self.audit_entry(&actor, "window-exception-request", id.clone(), reason, tx);
        Ok(changed(id, line))
    }

    /// `ApproveWindowException`: records the actor's approval; the one that meets the policy
    /// opens the window.
    pub(super) fn approve_window_exception(
        &mut self,
        id: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let mut w = self.pending_exception(id)?.clone();
        let what = ApprovalTarget::WindowException(id.to_string());
        let approval = self.check_approval(&what, &w.approvals, tx)?;
        if now >= w.end_ms {
            return Err(CommandError::FailedPrecondition(format!(
                "{} may not approve {what}: its time range ended at {}",
                approval.identity,
                format_time(w.end_ms)
            )));
        }
        let actor = approval.identity.to_string();
        w.approvals.approvals.push(approval);
        let line = if w.approvals.is_met() {
            let override_id = format!("o-{}", tx.index);
            let live = self
                .overrides(&w.scope)?
                .iter()
                .filter(|o| o.end_ms > now)
                .count();
            if live >= MAX_LIVE_OVERRIDES {
                return Err(CommandError::FailedPrecondition(format!(
                    "{} has {MAX_LIVE_OVERRIDES} live window overrides; {what} cannot open another",
                    w.scope
                )));
            }
            let o = WindowOverride {
                id: override_id.clone(),
                start_ms: w.start_ms,
                end_ms: w.end_ms,
                reason: format!("exception {id}: {}", w.reason),
            };
            self.change_overrides(&w.scope, tx, |list| {
                list.retain(|o| o.end_ms > now);
                list.push(o);
            })?;
            self.touch_scope(&w.scope, tx);
            w.status = ExceptionStatus::Approved {
                override_id: override_id.clone(),
            };
            w.decided_by = Some(actor.clone());
            w.closed_ms = Some(now);
            format!(
                "window exception {id} approved by {actor}: override {override_id} opens the \
                 window from {} to {}",
                format_time(w.start_ms),
                format_time(w.end_ms)
            )
        } else {
            format!(
                "window exception {id} approved by {actor}; still needs {}",
                w.approvals.outstanding_text()
            )
        };
        let scope = w.scope.clone();
        self.window_exceptions.put(w, &mut tx.changed);
        self.exception_note(&scope, line.clone(), tx);
        self.audit_entry(&actor, "window-exception-approve", id.to_string(), "", tx);
        Ok(changed(id, line))
    }

    /// `RejectWindowException`.
    pub(super) fn reject_window_exception(
        &mut self,
        id: &str,
        reason: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_text("reason", reason, true)?;
        let w = self.pending_exception(id)?;
        let what = ApprovalTarget::WindowException(id.to_string());
        self.check_rejection(&what, &w.approvals, tx)?;
        let actor = actor_text(tx);
        let scope = w.scope.clone();
        let mut w = w.clone();
        w.status = ExceptionStatus::Rejected;
        w.decided_by = Some(actor.clone());
        w.closed_ms = Some(tx.now);
        w.message = reason.to_string();
        self.window_exceptions.put(w, &mut tx.changed);
        let line = format!("window exception {id} rejected by {actor} ({reason})");
        self.exception_note(&scope, line.clone(), tx);
        self.audit_entry(
            &actor,
            "window-exception-reject",
            id.to_string(),
            reason,
            tx,
        );
        Ok(changed(id, line))
    }

    /// Window exception `id`, if it is still pending.
    fn pending_exception(&self, id: &str) -> Result<&WindowException, CommandError> {
        validate_len("id", id, MAX_REQUEST_ID_LEN)?;
        let w = self
            .window_exceptions
            .get(id)
            .ok_or_else(|| not_found("window exception", id))?;
        if w.status != ExceptionStatus::Pending {
            return Err(CommandError::FailedPrecondition(format!(
                "window exception {id} is {}, not pending",
                w.status.as_str()
            )));
        }
        Ok(w)
    }

    /// Notes `line` on the Activity of the entity a request is about (an environment's
    /// requests are in the audit).
    fn exception_note(&mut self, scope: &Scope, line: String, tx: &mut Tx) {
        if let Scope::Entity(entity) = scope {
            self.note(entity, "window-exception", line, tx);
        }
    }
}
