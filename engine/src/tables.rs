//! The one declaration of the state's tables: which row type each holds, the record variant
//! and key it is persisted under, and from that list the state's `record`, `records` and
//! loading of persisted rows.
//!
//! `Record` and `RecordKey` themselves are declared in [`crate::record`], with their explicit
//! wire tags: they are the persisted format and change only with a format version.

use semver::Version;

use crate::activity::Activity;
use crate::canary_record::Canary;
use crate::cluster_key::ClusterKey;
use crate::entity::Entity;
use crate::environment::Environment;
use crate::installation::{ChangeRequest, Installation, PublishedModule};
use crate::plan::Plan;
use crate::product::{Channel, Product, Recall, Release};
use crate::record::{AuditEntry, Record, RecordKey, RequestRecord};
use crate::state::State;
use crate::suppression::Suppression;
use crate::table::Row;

/// Rows keyed by a name that is also their record key's name.
macro_rules! named_rows {
    ($($row:ty => $variant:ident, |$v:ident| $key:expr;)*) => {$(
        impl Row for $row {
            type Key = String;
            fn key(&self) -> String {
                let $v = self;
                $key
            }
            fn record_key(key: &String) -> RecordKey {
                RecordKey::$variant(key.clone())
            }
            fn key_of_name(name: &str) -> Option<String> {
                Some(name.to_string())
            }
            fn to_record(&self) -> Record {
                Record::$variant(self.clone().into())
            }
        }
    )*};
}

named_rows! {
    Environment => Environment, |e| e.name.clone();
    Entity => Entity, |e| e.id.0.clone();
    RequestRecord => Request, |r| r.id.clone();
    Product => Product, |p| p.id.clone();
    Release => Release, |r| Release::key_name(&r.product_id, &r.version);
    Channel => Channel, |c| c.name.clone();
    Recall => Recall, |r| r.id.clone();
    Suppression => Suppression, |s| s.id.clone();
    Plan => Plan, |p| p.id.clone();
    Activity => Activity, |a| a.entity.clone();
    AuditEntry => Audit, |a| AuditEntry::key_name(a.index);
    Installation => Installation, |i| i.id.clone();
    ChangeRequest => ChangeRequest, |c| c.id.clone();
    Canary => Canary, |c| c.id.clone();
    ClusterKey => ClusterKey, |k| k.name.clone();
}

/// Published modules are keyed by (name, version) and persisted as `name@version`.
impl Row for PublishedModule {
    type Key = (String, Version);
    fn key(&self) -> Self::Key {
        (self.name.clone(), self.version.clone())
    }
    fn record_key((name, version): &Self::Key) -> RecordKey {
        RecordKey::Module(PublishedModule::key_name(name, version))
    }
    fn key_of_name(name: &str) -> Option<Self::Key> {
        let (name, version) = name.rsplit_once('@')?;
        Some((name.to_string(), Version::parse(version).ok()?))
    }
    fn to_record(&self) -> Record {
        Record::Module(self.clone())
    }
}

/// The row inside a record variant (`boxed` variants hold a `Box`).
macro_rules! unbox {
    ($r:ident) => {
        $r
    };
    ($r:ident boxed) => {
        *$r
    };
}

/// The tables, in record-tag order: `field: Variant`.
macro_rules! state_tables {
    ($($field:ident: $variant:ident $($boxed:ident)?),* $(,)?) => {
        impl State {
            /// The current record under `key`, if any.
            pub fn record(&self, key: &RecordKey) -> Option<Record> {
                match key {
                    $(RecordKey::$variant(name) => self.$field.record_named(name),)*
                }
            }

            /// Every record, table by table in tag order, each table in key order.
            pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
                std::iter::empty()$(.chain(self.$field.records()))*
            }

            /// Adds a persisted row to its table (no change recorded, no index updated).
            pub(crate) fn load_row(&mut self, record: Record) {
                match record {
                    $(Record::$variant(row) => self.$field.load(unbox!(row $($boxed)?)),)*
                }
            }
        }
    };
}

state_tables! {
    environments: Environment,
    entities: Entity,
    requests: Request,
    products: Product,
    releases: Release,
    channels: Channel,
    recalls: Recall,
    suppressions: Suppression,
    plans: Plan,
    activity: Activity,
    audit: Audit,
    modules: Module,
    installations: Installation,
    change_requests: ChangeRequest,
    canaries: Canary boxed,
    cluster_keys: ClusterKey,
}
