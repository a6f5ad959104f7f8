//! The redirect policy of clients that follow redirects.

use std::sync::Arc;

use reqwest::redirect::Policy;

use crate::deny::DenyList;
use crate::error::RedirectRefused;
use crate::target::{check_literal, shown};

/// Follows at most `max` redirects, refusing loops, other schemes, https → http and IP
/// literals in `deny` (host names are checked when resolved). reqwest drops
/// `Authorization` on every hop that changes scheme, host or port.
pub(crate) fn policy(max: usize, deny: Arc<DenyList>) -> Policy {
    Policy::custom(move |attempt| {
        let next = attempt.url();
        let previous = attempt.previous();
        let refused = if previous.iter().any(|p| p == next) {
            Some(RedirectRefused::Loop(shown(next)))
        } else if previous.len() > max {
            Some(RedirectRefused::TooMany(max))
        } else if !matches!(next.scheme(), "http" | "https") {
            Some(RedirectRefused::Scheme(shown(next)))
        } else if next.scheme() == "http" && previous.iter().any(|p| p.scheme() == "https") {
            Some(RedirectRefused::Downgrade(shown(next)))
        } else {
            check_literal(next, &deny)
                .err()
                .map(RedirectRefused::Denied)
        };
        match refused {
            Some(why) => attempt.error(why),
            None => attempt.follow(),
        }
    })
}
