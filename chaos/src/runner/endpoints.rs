//! The hub's current endpoints, shared by the runner's clients (register clients, the rollout
//! workload's hub client) and updated by the runner after each membership change, as a real
//! client learns the members (or a DNS name follows them): a client whose first endpoints were
//! all replaced still reaches the cluster.

use std::sync::{Arc, RwLock};

/// The endpoints (`host:port`) of the current members.
#[derive(Debug, Clone, Default)]
pub struct SharedEndpoints(Arc<RwLock<Vec<String>>>);

impl SharedEndpoints {
    /// Starts with `endpoints`.
    pub fn new(endpoints: Vec<String>) -> Self {
        SharedEndpoints(Arc::new(RwLock::new(endpoints)))
    }

    /// The endpoints now.
    pub fn get(&self) -> Vec<String> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces them (an empty list is ignored: clients keep what they had).
    pub fn set(&self, endpoints: Vec<String>) {
        if !endpoints.is_empty() {
            *self.0.write().unwrap_or_else(|p| p.into_inner()) = endpoints;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_see_an_update_and_an_empty_list_changes_nothing() {
        let a = SharedEndpoints::new(vec!["n1:1".into()]);
        let b = a.clone();
        a.set(vec!["n4:1".into(), "n5:1".into()]);
        assert_eq!(b.get(), vec!["n4:1".to_string(), "n5:1".to_string()]);
        a.set(Vec::new());
        assert_eq!(b.get().len(), 2);
    }
}
