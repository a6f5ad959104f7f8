//! A table of the replicated state: rows by key that record their own changes.
//!
//! Reads go through `Deref` to the underlying `BTreeMap` (`get`, `values`, `range`, …). There
//! is no `DerefMut`: every write goes through [`Table::put`], [`Table::remove`],
//! [`Table::get_mut`], [`Table::get_or_insert_with`] or [`Table::update`], which push the
//! row's [`RecordKey`] onto the transaction's change list, so a transition cannot change a row and forget to have it
//! persisted. Loading persisted records ([`Table::load`]) records nothing.

use std::borrow::Borrow;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Deref;

use crate::record::{Record, RecordKey};

/// A type stored as rows of one table.
pub(crate) trait Row: Sized {
    /// The table's key.
    type Key: Ord + Clone;
    /// The row's key.
    fn key(&self) -> Self::Key;
    /// The record key a row with `key` is persisted under.
    fn record_key(key: &Self::Key) -> RecordKey;
    /// The table key named by a record key's name; `None` if it names none.
    fn key_of_name(name: &str) -> Option<Self::Key>;
    /// The row as a persisted record.
    fn to_record(&self) -> Record;
}

/// Rows of `V` by key; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table<V: Row> {
    rows: BTreeMap<V::Key, V>,
}

impl<V: Row> Default for Table<V> {
    fn default() -> Self {
        Table {
            rows: BTreeMap::new(),
        }
    }
}

impl<V: Row> Deref for Table<V> {
    type Target = BTreeMap<V::Key, V>;

    fn deref(&self) -> &Self::Target {
        &self.rows
    }
}

impl<V: Row> Table<V> {
    /// Sets the row under its own key and records the change; returns the row it replaced.
    pub(crate) fn put(&mut self, value: V, changed: &mut Vec<RecordKey>) -> Option<V> {
        let key = value.key();
        changed.push(V::record_key(&key));
        self.rows.insert(key, value)
    }

    /// Removes the row under `key`, recording the change if there was one.
    pub(crate) fn remove<Q>(&mut self, key: &Q, changed: &mut Vec<RecordKey>) -> Option<V>
    where
        V::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (key, value) = self.rows.remove_entry(key)?;
        changed.push(V::record_key(&key));
        Some(value)
    }

    /// The row under `key` to change in place, recording the change if the row exists. The
    /// caller must not change the row's key fields.
    pub(crate) fn get_mut<Q>(&mut self, key: &Q, changed: &mut Vec<RecordKey>) -> Option<&mut V>
    where
        V::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let row = self.rows.get_mut(key)?;
        changed.push(V::record_key(&row.key()));
        Some(row)
    }

    /// The row under `key`, created with `make` if missing, to change in place; records the
    /// change.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: V::Key,
        changed: &mut Vec<RecordKey>,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        changed.push(V::record_key(&key));
        self.rows.entry(key).or_insert_with(make)
    }

    /// Runs `change` on the row under `key` (on a new row from `make` if missing) and records
    /// the change only if `change` says it changed something; a new row is kept only then.
    /// Returns what `change` said.
    pub(crate) fn update(
        &mut self,
        key: V::Key,
        changed: &mut Vec<RecordKey>,
        make: impl FnOnce() -> V,
        change: impl FnOnce(&mut V) -> bool,
    ) -> bool {
        match self.rows.entry(key) {
            Entry::Occupied(mut row) => {
                let did = change(row.get_mut());
                if did {
                    changed.push(V::record_key(row.key()));
                }
                did
            }
            Entry::Vacant(slot) => {
                let mut row = make();
                let did = change(&mut row);
                if did {
                    changed.push(V::record_key(slot.key()));
                    slot.insert(row);
                }
                did
            }
        }
    }

    /// Adds a row while loading persisted state; records nothing.
    pub(crate) fn load(&mut self, value: V) {
        self.rows.insert(value.key(), value);
    }

    /// The persisted record under `name` (a record key's name), if any.
    pub(crate) fn record_named(&self, name: &str) -> Option<Record> {
        self.rows.get(&V::key_of_name(name)?).map(V::to_record)
    }

    /// Every row as a persisted record, in key order.
    pub(crate) fn records(&self) -> impl Iterator<Item = Record> + '_ {
        self.rows.values().map(V::to_record)
    }
}
