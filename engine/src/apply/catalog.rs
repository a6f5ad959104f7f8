//! The release catalog: products, releases, custom channels and recalls.

use semver::Version;

use crate::artifact::validate_artifact_uri;
use crate::command::{CommandOutput, WindowSpec};
use crate::error::CommandError;
use crate::name::{validate_channel_name, validate_product_id};
use crate::product::{is_builtin_channel, Channel, Product, Recall, Release};
use crate::release::parse_manifest;
use crate::state::{State, Trigger};

use super::{changed, check_text, not_found, parse_version, parse_window, Tx};

impl State {
    /// `CreateProduct`.
    pub(super) fn create_product(
        &mut self,
        product_id: &str,
        description: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        validate_product_id("product_id", product_id)?;
        check_text("description", description, false)?;
        if self.products.contains_key(product_id) {
            return Err(CommandError::AlreadyExists {
                kind: "product".into(),
                name: product_id.to_string(),
            });
        }
        self.products.put(
            Product {
                id: product_id.to_string(),
                description: description.to_string(),
                maintenance_window: None,
                created_at_ms: now,
            },
            &mut tx.changed,
        );
        Ok(changed(
            product_id.to_string(),
            format!("product {product_id} created"),
        ))
    }

    /// `SetProductWindow`: sets or removes the product's maintenance window.
    pub(super) fn set_product_window(
        &mut self,
        product_id: &str,
        window: &Option<WindowSpec>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let parsed = window
            .as_ref()
            .map(|w| parse_window("window", w))
            .transpose()?;
        let p = self
            .products
            .get_mut(product_id, &mut tx.changed)
            .ok_or_else(|| not_found("product", product_id))?;
        let verb = if parsed.is_some() { "set" } else { "removed" };
        p.maintenance_window = parsed;
        tx.triggers.push(Trigger::Product(product_id.to_string()));
        Ok(changed(
            product_id.to_string(),
            format!("product window {verb}"),
        ))
    }

    /// `PublishRelease`: releases are immutable; publishing the identical release again is a no-op.
    pub(super) fn publish_release(
        &mut self,
        manifest: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let m = parse_manifest(manifest)
            .map_err(|e| CommandError::invalid("manifest", e.to_string()))?;
        for (i, a) in m.artifacts.iter().enumerate() {
            validate_artifact_uri(&a.uri).map_err(|e| {
                CommandError::invalid(&format!("manifest: artifacts[{i}].uri"), e.to_string())
            })?;
        }
        if !self.products.contains_key(&m.product_id) {
            return Err(CommandError::NotFound {
                kind: "product".into(),
                name: format!("{} (create it first: hubctl product create)", m.product_id),
            });
        }
        let key = Release::key_name(&m.product_id, &m.version);
        if let Some(existing) = self.releases.get(&key) {
            if existing.artifacts == m.artifacts && existing.dependencies == m.dependencies {
                return Ok(changed(key, "release already published (identical)"));
            }
            return Err(CommandError::AlreadyExists {
                kind: "release (releases are immutable)".into(),
                name: key,
            });
        }
        self.releases.put(
            Release {
                product_id: m.product_id.clone(),
                version: m.version.clone(),
                artifacts: m.artifacts,
                dependencies: m.dependencies,
                custom_channels: Default::default(),
                published_at_ms: now,
            },
            &mut tx.changed,
        );
        // Entities already reporting this version now have dependency edges.
        let ids: Vec<String> = self
            .entities
            .values()
            .filter(|e| {
                e.product_id == m.product_id && e.reported.version.as_ref() == Some(&m.version)
            })
            .map(|e| e.id.0.clone())
            .collect();
        for id in ids {
            self.reindex_dependencies(&id);
        }
        tx.triggers.push(Trigger::Product(m.product_id.clone()));
        Ok(changed(key.clone(), format!("release {key} published")))
    }

    /// `CreateChannel`: a custom release channel.
    pub(super) fn create_channel(
        &mut self,
        name: &str,
        description: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        validate_channel_name("name", name)?;
        check_text("description", description, false)?;
        if is_builtin_channel(name) || self.channels.contains_key(name) {
            return Err(CommandError::AlreadyExists {
                kind: "channel".into(),
                name: name.to_string(),
            });
        }
        self.channels.put(
            Channel {
                name: name.to_string(),
                description: description.to_string(),
                created_at_ms: now,
            },
            &mut tx.changed,
        );
        Ok(changed(name.to_string(), format!("channel {name} created")))
    }

    /// The version a command adds to custom channel `channel` or removes from it, parsed;
    /// refused when the channel is built in (`builtin` says why it takes no members), does not
    /// exist, or `version` is not a semantic version.
    pub(super) fn custom_channel_version(
        &self,
        channel: &str,
        version: &str,
        builtin: &str,
    ) -> Result<Version, CommandError> {
        if is_builtin_channel(channel) {
            return Err(CommandError::invalid(
                "channel",
                format!("{channel} is built in: {builtin}"),
            ));
        }
        if !self.channels.contains_key(channel) {
            return Err(not_found("channel", channel));
        }
        parse_version("version", version)
    }

    /// `SetReleaseChannel`: adds a release to, or removes it from, a custom channel.
    pub(super) fn set_release_channel(
        &mut self,
        channel: &str,
        product_id: &str,
        version: &str,
        member: bool,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let v = self.custom_channel_version(
            channel,
            version,
            "its releases follow from their version",
        )?;
        if !self.products.contains_key(product_id) {
            return Err(not_found("product", product_id));
        }
        let key = Release::key_name(product_id, &v);
        let r = self
            .releases
            .get(&key)
            .ok_or_else(|| not_found("release", &key))?;
        if r.custom_channels.contains(channel) == member {
            let state = if member { "already in" } else { "not in" };
            return Err(CommandError::FailedPrecondition(format!(
                "release {key} is {state} channel {channel}"
            )));
        }
        // The release exists (checked above).
        let Some(mut r) = self.releases.get_mut(&key, &mut tx.changed) else {
            unreachable!("release {key} checked above");
        };
        if member {
            r.custom_channels.insert(channel.to_string());
        } else {
            r.custom_channels.remove(channel);
        }
        tx.triggers.push(Trigger::Product(product_id.to_string()));
        let verb = if member { "added to" } else { "removed from" };
        Ok(changed(key.clone(), format!("{key} {verb} {channel}")))
    }

    /// `RecallReleases`: recalls a version range of a product.
    pub(super) fn recall_releases(
        &mut self,
        product_id: &str,
        from: &str,
        to: &str,
        reason: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let index = tx.index;
        let from = parse_version("from", from)?;
        let to = parse_version("to", to)?;
        if to < from {
            return Err(CommandError::invalid(
                "to",
                format!("{to} is below from {from}"),
            ));
        }
        check_text("reason", reason, true)?;
        if !self.products.contains_key(product_id) {
            return Err(not_found("product", product_id));
        }
        let id = format!("r-{index}");
        let recall = Recall {
            id: id.clone(),
            product_id: product_id.to_string(),
            from,
            to,
            reason: reason.to_string(),
            created_at_ms: now,
        };
        let summary = format!("{product_id} {} recalled", recall.range_text());
        self.put_recall(recall, tx);
        Ok(changed(id, summary))
    }

    /// Stores a validated recall: the product's entities running a recalled version roll
    /// off (SPEC P4). Also used by rollouts whose wave fails with `onFailure: recall`.
    pub(super) fn put_recall(&mut self, recall: Recall, tx: &mut Tx) {
        tx.triggers
            .push(Trigger::Product(recall.product_id.clone()));
        self.recalls.put(recall, &mut tx.changed);
    }

    /// `DeleteRecall`: withdraws a recall.
    pub(super) fn delete_recall(
        &mut self,
        id: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let recall = self
            .recalls
            .remove(id, &mut tx.changed)
            .ok_or_else(|| not_found("recall", id))?;
        tx.triggers
            .push(Trigger::Product(recall.product_id.clone()));
        Ok(changed(id.to_string(), format!("recall {id} withdrawn")))
    }
}
