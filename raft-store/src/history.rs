//! Reading history: records storage keeps that the state does not hold
//! ([`hub_engine::Residence::History`]): Activity lines and finished plans.
//!
//! Apply writes history in the same RocksDB batch as the state's rows, while it holds the
//! state's write lock, so a reader that holds the state's read guard
//! ([`crate::SharedState::read`]) sees the history of exactly the state it reads.

use hub_engine::activity::ActivityLine;
use hub_engine::plan::Plan;
use hub_engine::{Record, RecordKey};
use rocksdb::{Direction, IteratorMode};

use crate::codec::{self, Limit};
use crate::error::StoreError;
use crate::store::Store;

/// A read handle on the stored history. Cheap to clone.
#[derive(Clone)]
pub struct History {
    store: Store,
}

impl History {
    pub(crate) fn new(store: Store) -> Self {
        History { store }
    }

    /// The newest `limit` Activity lines of `entity`, newest first.
    pub fn activity_lines(
        &self,
        entity: &str,
        limit: usize,
    ) -> Result<Vec<ActivityLine>, StoreError> {
        let prefix = RecordKey::ActivityLine(ActivityLine::entity_prefix(entity)).to_bytes();
        // Past the last line: the prefix with its last byte (the separator) raised by one.
        let mut end = prefix.clone();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let (cf_sm, _) = self.store.sm_families();
        let mut lines = Vec::new();
        let iter = self
            .store
            .db
            .iterator_cf(cf_sm, IteratorMode::From(&end, Direction::Reverse));
        for item in iter {
            let (key, value) = item.map_err(|e| self.store.rocks_error(e))?;
            if lines.len() == limit || !key.starts_with(&prefix) {
                break;
            }
            let record: Record =
                codec::decode_bounded(&value, Limit::Snapshot).map_err(|cause| {
                    StoreError::Corrupt {
                        what: "activity line".to_string(),
                        cause,
                    }
                })?;
            match record {
                Record::ActivityLine(line) => lines.push(line),
                other => {
                    return Err(StoreError::Corrupt {
                        what: "activity line".to_string(),
                        cause: codec::CodecError::Malformed(format!(
                            "an activity line's key holds {:?}",
                            other.key()
                        )),
                    })
                }
            }
        }
        Ok(lines)
    }

    /// A finished plan in full, by id, while its entity keeps it (the state holds its
    /// outcome: [`hub_engine::State::plan_outcome`]).
    pub fn finished_plan(&self, id: &str) -> Result<Option<Plan>, StoreError> {
        let key = RecordKey::FinishedPlan(id.to_string());
        let (cf_sm, _) = self.store.sm_families();
        let Some(value) = self
            .store
            .db
            .get_pinned_cf(cf_sm, key.to_bytes())
            .map_err(|e| self.store.rocks_error(e))?
        else {
            return Ok(None);
        };
        let corrupt = |cause| StoreError::Corrupt {
            what: "finished plan".to_string(),
            cause,
        };
        match codec::decode_bounded(&value, Limit::Snapshot).map_err(corrupt)? {
            Record::FinishedPlan(plan) if plan.id == id => Ok(Some(plan)),
            other => Err(corrupt(codec::CodecError::Malformed(format!(
                "finished plan {id}'s key holds {:?}",
                other.key()
            )))),
        }
    }
}
