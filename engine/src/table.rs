//! A table of the replicated state: rows by key that record their own changes and keep
//! their own derived lookups.
//!
//! Reads go through `Deref` to the underlying `BTreeMap` (`get`, `values`, `range`, …) and
//! [`Table::index`]. There is no `DerefMut`: every write goes through [`Table::put`],
//! [`Table::remove`], [`Table::get_mut`], [`Table::get_or_insert_with`] or [`Table::update`].
//! Each pushes the row's [`RecordKey`] onto the transaction's change list, so a transition
//! cannot change a row and forget to have it persisted, and each keeps the table's
//! [`RowIndex`] in step with the rows, so no transition maintains an index by hand.
//! Loading persisted records ([`Table::load`]) indexes the row and records nothing.
//!
//! An index holds only what can be derived from one row at a time (a plan's entity, an
//! entity's product). Lookups that join tables (an entity's dependents through its deployed
//! release) are the state's own ([`crate::state::State::reindex_dependencies`]).

use std::borrow::Borrow;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Deref, DerefMut};

use crate::record::{Record, RecordKey};

/// Lookups derived from the rows of one table, one row at a time. After any sequence of
/// writes the lookups equal the ones built by adding every current row to empty ones.
pub(crate) trait Lookups<V>: Default + Debug + Clone + PartialEq + Eq {
    /// Adds `row`'s entries.
    fn add(&mut self, row: &V);
    /// Removes `row`'s entries (the row was added before, unchanged since).
    fn remove(&mut self, row: &V);
}

/// What a table keeps beside its rows: [`Lookups`], or `()` for none.
pub(crate) trait RowIndex<V: Row>: Default + Debug + Clone + PartialEq + Eq {
    /// A row being changed in place: a plain `&mut V` without lookups, a [`RowMut`] (which
    /// re-indexes the row when it drops) with them.
    type RowMut<'a>: DerefMut<Target = V>
    where
        V: 'a,
        Self: 'a;
    /// Starts changing `row` in place.
    fn row_mut<'a>(row: &'a mut V, index: &'a mut Self) -> Self::RowMut<'a>;
    /// Adds `row`'s entries.
    fn add(&mut self, row: &V);
    /// Removes `row`'s entries.
    fn remove(&mut self, row: &V);
}

/// A table without lookups changes rows through a plain reference.
impl<V: Row> RowIndex<V> for () {
    type RowMut<'a>
        = &'a mut V
    where
        V: 'a;
    fn row_mut<'a>(row: &'a mut V, _: &'a mut ()) -> &'a mut V {
        row
    }
    fn add(&mut self, _: &V) {}
    fn remove(&mut self, _: &V) {}
}

/// Makes each `Lookups` type the [`RowIndex`] of its row type (a blanket impl would
/// overlap the one for `()`).
macro_rules! lookups_index {
    ($($row:ty => $lookups:ty),* $(,)?) => {$(
        impl $crate::table::RowIndex<$row> for $lookups {
            type RowMut<'a> = $crate::table::RowMut<'a, $row, $lookups>;
            fn row_mut<'a>(row: &'a mut $row, index: &'a mut Self) -> Self::RowMut<'a> {
                $crate::table::RowMut::new(row, index)
            }
            fn add(&mut self, row: &$row) {
                $crate::table::Lookups::add(self, row);
            }
            fn remove(&mut self, row: &$row) {
                $crate::table::Lookups::remove(self, row);
            }
        }
    )*};
}
pub(crate) use lookups_index;

/// A type stored as rows of one table.
pub(crate) trait Row: Sized {
    /// The table's key.
    type Key: Ord + Clone + Debug;
    /// The table's derived lookups (`()` for none).
    type Index: RowIndex<Self>;
    /// The row's key.
    fn key(&self) -> Self::Key;
    /// The record key a row with `key` is persisted under.
    fn record_key(key: &Self::Key) -> RecordKey;
    /// The table key named by a record key's name; `None` if it names none.
    fn key_of_name(name: &str) -> Option<Self::Key>;
    /// The row as a persisted record.
    fn to_record(&self) -> Record;
}

/// Rows of `V` by key, with their index; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table<V: Row> {
    rows: BTreeMap<V::Key, V>,
    index: V::Index,
}

impl<V: Row> Default for Table<V> {
    fn default() -> Self {
        Table {
            rows: BTreeMap::new(),
            index: V::Index::default(),
        }
    }
}

impl<V: Row> Deref for Table<V> {
    type Target = BTreeMap<V::Key, V>;

    fn deref(&self) -> &Self::Target {
        &self.rows
    }
}

/// A row of a table with lookups, being changed in place. Its entries are out of the
/// lookups while the guard lives and go back in, from the changed row, when it drops.
pub(crate) struct RowMut<'a, V: Row, L: Lookups<V>> {
    row: &'a mut V,
    index: &'a mut L,
    /// The row's key when the guard was made: a change must keep it.
    #[cfg(debug_assertions)]
    key: V::Key,
}

impl<'a, V: Row, L: Lookups<V>> RowMut<'a, V, L> {
    /// Takes `row`'s entries out of `index` until the guard drops.
    pub(crate) fn new(row: &'a mut V, index: &'a mut L) -> Self {
        index.remove(row);
        RowMut {
            #[cfg(debug_assertions)]
            key: row.key(),
            row,
            index,
        }
    }
}

impl<V: Row, L: Lookups<V>> Deref for RowMut<'_, V, L> {
    type Target = V;

    fn deref(&self) -> &V {
        self.row
    }
}

impl<V: Row, L: Lookups<V>> DerefMut for RowMut<'_, V, L> {
    fn deref_mut(&mut self) -> &mut V {
        self.row
    }
}

impl<V: Row, L: Lookups<V>> Drop for RowMut<'_, V, L> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        assert!(
            std::thread::panicking() || self.row.key() == self.key,
            "a row's key changed in place: {:?} became {:?}",
            self.key,
            self.row.key()
        );
        self.index.add(self.row);
    }
}

impl<V: Row> Table<V> {
    /// The table's derived lookups.
    pub(crate) fn index(&self) -> &V::Index {
        &self.index
    }

    /// Sets the row under its own key and records the change; returns the row it replaced.
    pub(crate) fn put(&mut self, value: V, changed: &mut Vec<RecordKey>) -> Option<V> {
        let key = value.key();
        changed.push(V::record_key(&key));
        self.insert_indexed(key, value)
    }

    /// Removes the row under `key`, recording the change if there was one.
    pub(crate) fn remove<Q>(&mut self, key: &Q, changed: &mut Vec<RecordKey>) -> Option<V>
    where
        V::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (key, value) = self.rows.remove_entry(key)?;
        changed.push(V::record_key(&key));
        self.index.remove(&value);
        Some(value)
    }

    /// The row under `key` to change in place, recording the change if the row exists. The
    /// caller must not change the row's key fields (checked in debug builds).
    pub(crate) fn get_mut<Q>(
        &mut self,
        key: &Q,
        changed: &mut Vec<RecordKey>,
    ) -> Option<<V::Index as RowIndex<V>>::RowMut<'_>>
    where
        V::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let row = self.rows.get_mut(key)?;
        changed.push(V::record_key(&row.key()));
        Some(V::Index::row_mut(row, &mut self.index))
    }

    /// The row under `key`, created with `make` if missing, to change in place; records the
    /// change.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: V::Key,
        changed: &mut Vec<RecordKey>,
        make: impl FnOnce() -> V,
    ) -> <V::Index as RowIndex<V>>::RowMut<'_> {
        changed.push(V::record_key(&key));
        let row = match self.rows.entry(key) {
            Entry::Occupied(row) => row.into_mut(),
            Entry::Vacant(slot) => {
                let row = slot.insert(make());
                // `row_mut` takes the row's entries out; a new row has none yet.
                self.index.add(row);
                row
            }
        };
        V::Index::row_mut(row, &mut self.index)
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
            Entry::Occupied(row) => {
                let key = V::record_key(row.key());
                let did = change(&mut V::Index::row_mut(row.into_mut(), &mut self.index));
                if did {
                    changed.push(key);
                }
                did
            }
            Entry::Vacant(slot) => {
                let mut row = make();
                let did = change(&mut row);
                if did {
                    changed.push(V::record_key(slot.key()));
                    self.index.add(&row);
                    slot.insert(row);
                }
                did
            }
        }
    }

    /// Adds a row while loading persisted state; indexes it and records nothing.
    pub(crate) fn load(&mut self, value: V) {
        self.insert_indexed(value.key(), value);
    }

    /// Inserts `value` under `key`, moving the index from the row it replaces to it.
    fn insert_indexed(&mut self, key: V::Key, value: V) -> Option<V> {
        match self.rows.entry(key) {
            Entry::Occupied(mut row) => {
                self.index.remove(row.get());
                self.index.add(&value);
                Some(row.insert(value))
            }
            Entry::Vacant(slot) => {
                self.index.add(&value);
                slot.insert(value);
                None
            }
        }
    }

    /// The persisted record under `name` (a record key's name), if any.
    pub(crate) fn record_named(&self, name: &str) -> Option<Record> {
        self.rows.get(&V::key_of_name(name)?).map(V::to_record)
    }

    /// Every row as a persisted record, in key order.
    pub(crate) fn records(&self) -> impl Iterator<Item = Record> + '_ {
        self.rows.values().map(V::to_record)
    }

    /// The index, to corrupt in a test of the invariant checks.
    #[cfg(test)]
    pub(crate) fn index_mut(&mut self) -> &mut V::Index {
        &mut self.index
    }

    /// Whether the index equals one built from the rows alone (an invariant; O(rows)).
    #[cfg(test)]
    pub(crate) fn index_is_derived(&self) -> bool {
        let mut index = V::Index::default();
        for row in self.rows.values() {
            index.add(row);
        }
        index == self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Plan, PlanKind, PlanStatus};

    fn plan(id: &str, entity: &str, index: u64, status: PlanStatus) -> Plan {
        Plan {
            id: id.into(),
            entity: entity.into(),
            environment: "env".into(),
            kind: PlanKind::Install,
            from_config_sha256: None,
            from_version: None,
            to_version: None,
            to_config: None,
            secrets_revision: 0,
            artifacts: Vec::new(),
            reason: String::new(),
            tasks: Vec::new(),
            output: String::new(),
            failure: None,
            created_ms: 0,
            issued_ms: 0,
            started_ms: None,
            ended_ms: None,
            status,
            cancel_reason: None,
            issued_index: index,
        }
    }

    #[test]
    fn every_write_keeps_the_index_derived_and_records_its_key() {
        let mut t: Table<Plan> = Table::default();
        let mut changed = Vec::new();
        t.put(plan("p-1", "e", 1, PlanStatus::Succeeded), &mut changed);
        t.put(plan("p-2", "e", 2, PlanStatus::Issued), &mut changed);
        assert_eq!(t.index().active.get("e").map(String::as_str), Some("p-2"));
        assert!(t.index_is_derived());
        if let Some(mut p) = t.get_mut("p-2", &mut changed) {
            p.status = PlanStatus::Failed;
        }
        assert!(t.index().active.is_empty());
        assert!(t.index_is_derived());
        // Replacing a row moves its entries.
        t.put(plan("p-2", "e", 2, PlanStatus::Running), &mut changed);
        assert_eq!(t.index().active.get("e").map(String::as_str), Some("p-2"));
        assert!(t.update(
            "p-3".into(),
            &mut changed,
            || plan("p-3", "f", 3, PlanStatus::Issued),
            |_| true
        ));
        assert!(!t.update(
            "p-4".into(),
            &mut changed,
            || plan("p-4", "g", 4, PlanStatus::Issued),
            |_| false
        ));
        assert!(!t.contains_key("p-4"));
        assert!(t.index_is_derived());
        t.remove("p-2", &mut changed);
        t.remove("p-1", &mut changed);
        assert!(t.index_is_derived());
        assert!(
            t.index().counts.is_empty() || !t.index().counts.values().any(|n| *n == 0),
            "no zero counts are kept"
        );
        assert!(!t.index().active.contains_key("e"));
        let keys: Vec<String> = changed
            .iter()
            .map(|k| match k {
                RecordKey::Plan(id) => id.clone(),
                other => panic!("not a plan key: {other:?}"),
            })
            .collect();
        assert_eq!(keys, ["p-1", "p-2", "p-2", "p-2", "p-3", "p-2", "p-1"]);
    }

    #[test]
    #[should_panic(expected = "a row's key changed in place")]
    fn changing_a_key_in_place_is_caught() {
        let mut t: Table<Plan> = Table::default();
        let mut changed = Vec::new();
        t.put(plan("p-1", "e", 1, PlanStatus::Issued), &mut changed);
        let guard = t.get_mut("p-1", &mut changed);
        if let Some(mut p) = guard {
            p.id = "p-9".into();
        }
    }
}
