//! Reading history: records storage keeps that the state does not hold
//! ([`hub_engine::Residence::History`]), such as Activity lines.
//!
//! Apply writes history in the same RocksDB batch as the state's rows, while it holds the
//! state's write lock, so a reader that holds the state's read guard
//! ([`crate::SharedState::read`]) sees the history of exactly the state it reads.

use hub_engine::activity::ActivityLine;
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
}
