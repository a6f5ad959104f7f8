//! Who a party of the hub is: its identities and their URI SAN form
//! `hub://<cluster>/<kind>/<name>`. Certificates name them (`hub-tls`), role bindings are
//! bound to them and every replicated write records one as its actor (`hub-engine`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The URI scheme of every hub identity.
pub const URI_PREFIX: &str = "hub://";

/// Longest cluster id, agent environment or operator name an identity may carry.
pub const MAX_NAME_LEN: usize = 128;

/// A party of the hub, as its certificate names it. Part of the replicated format (role
/// bindings and entry actors): its variants keep their order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Identity {
    /// A hub node, by Raft node id.
    Node(u64),
    /// The agent of one environment.
    Agent(String),
    /// A person or script operating the hub.
    Operator(String),
    /// An operator token, by name (`hubctl token create`). Never named by a certificate:
    /// a token caller proves itself with the token's secret (`authorization: Bearer`).
    Token(String),
}

/// An identity with the cluster its certificate belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// The cluster id.
    pub cluster: String,
    /// The party.
    pub identity: Identity,
}

/// Why a string is not a hub identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Not `hub://cluster/kind/name`.
    #[error("{0:?} is not a hub identity (hub://<cluster>/node|agent|operator/<name>)")]
    Malformed(String),
    /// A part with characters outside `A-Za-z0-9._-`, empty, or too long.
    #[error(
        "{part} {value:?} must be 1–{MAX_NAME_LEN} characters of A-Z, a-z, 0-9, '.', '_' and '-'"
    )]
    BadName {
        /// Which part.
        part: &'static str,
        /// Its value.
        value: String,
    },
    /// `node/<id>` whose id is not a positive integer.
    #[error("node id {0:?} must be a positive integer")]
    BadNodeId(String),
}

/// Checks a cluster id or an identity's name.
pub fn validate_name(part: &'static str, value: &str) -> Result<(), IdentityError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME_LEN
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(IdentityError::BadName {
            part,
            value: value.chars().take(MAX_NAME_LEN + 1).collect(),
        })
    }
}

impl Identity {
    /// The identity's kind as written in its URI: `node`, `agent` or `operator`.
    pub fn kind(&self) -> &'static str {
        match self {
            Identity::Node(_) => "node",
            Identity::Agent(_) => "agent",
            Identity::Operator(_) => "operator",
            Identity::Token(_) => "token",
        }
    }

    /// Whether a certificate may name this identity (every kind but a token).
    pub fn is_certificate_identity(&self) -> bool {
        !matches!(self, Identity::Token(_))
    }

    /// Parses `kind/name` (the form [`fmt::Display`] writes).
    pub fn parse(s: &str) -> Result<Identity, IdentityError> {
        let malformed = || IdentityError::Malformed(s.chars().take(200).collect());
        let (kind, name) = s.split_once('/').ok_or_else(malformed)?;
        match kind {
            "node" => match name.parse::<u64>() {
                Ok(id) if id > 0 && !name.starts_with('0') => Ok(Identity::Node(id)),
                _ => Err(IdentityError::BadNodeId(name.chars().take(40).collect())),
            },
            "agent" => {
                validate_name("environment", name)?;
                Ok(Identity::Agent(name.to_string()))
            }
            "operator" => {
                validate_name("operator name", name)?;
                Ok(Identity::Operator(name.to_string()))
            }
            "token" => {
                validate_name("token name", name)?;
                Ok(Identity::Token(name.to_string()))
            }
            _ => Err(malformed()),
        }
    }

    /// The URI SAN of this identity in `cluster`.
    pub fn uri(&self, cluster: &str) -> String {
        format!("{URI_PREFIX}{cluster}/{self}")
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Node(id) => write!(f, "node/{id}"),
            Identity::Agent(env) => write!(f, "agent/{env}"),
            Identity::Operator(name) => write!(f, "operator/{name}"),
            Identity::Token(name) => write!(f, "token/{name}"),
        }
    }
}

impl ClusterIdentity {
    /// Parses `hub://<cluster>/<kind>/<name>`, the URI SAN of a certificate: a node, agent
    /// or operator (a token is never named by a certificate).
    pub fn parse_uri(uri: &str) -> Result<ClusterIdentity, IdentityError> {
        let malformed = || IdentityError::Malformed(uri.chars().take(200).collect());
        let rest = uri.strip_prefix(URI_PREFIX).ok_or_else(malformed)?;
        let (cluster, identity) = rest.split_once('/').ok_or_else(malformed)?;
        validate_name("cluster id", cluster)?;
        let identity = Identity::parse(identity)?;
        if !identity.is_certificate_identity() {
            return Err(malformed());
        }
        Ok(ClusterIdentity {
            cluster: cluster.to_string(),
            identity,
        })
    }

    /// The URI SAN.
    pub fn uri(&self) -> String {
        self.identity.uri(&self.cluster)
    }
}

impl fmt::Display for ClusterIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.uri())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        for identity in [
            Identity::Node(3),
            Identity::Agent("prod".into()),
            Identity::Operator("alice".into()),
        ] {
            let uri = identity.uri("c1");
            let back = ClusterIdentity::parse_uri(&uri).unwrap();
            assert_eq!(back.cluster, "c1");
            assert_eq!(back.identity, identity);
            assert_eq!(Identity::parse(&identity.to_string()).unwrap(), identity);
        }
        assert_eq!(Identity::Node(3).uri("c1"), "hub://c1/node/3");
        let token = Identity::Token("ci".into());
        assert_eq!(Identity::parse("token/ci").unwrap(), token);
        assert!(!token.is_certificate_identity());
    }

    #[test]
    fn malformed_identities_are_refused() {
        for bad in [
            "",
            "hub://",
            "hub://c1",
            "hub://c1/node",
            "hub://c1/node/0",
            "hub://c1/node/01",
            "hub://c1/node/x",
            "hub://c1/admin/alice",
            "hub://c1/token/ci",
            "hub://c1/operator/",
            "hub://c1/operator/a/b",
            "hub:///operator/a",
            "https://c1/operator/a",
        ] {
            assert!(ClusterIdentity::parse_uri(bad).is_err(), "{bad}");
        }
        let long = format!("hub://c1/operator/{}", "a".repeat(MAX_NAME_LEN + 1));
        assert!(matches!(
            ClusterIdentity::parse_uri(&long),
            Err(IdentityError::BadName { .. })
        ));
    }
}
