//! `products`, `releases`, `channels` and `recalls`: what can be deployed.

use serde::{Deserialize, Serialize};

use super::{ArtifactView, Typed};
use crate::query::Query;

/// One product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProductView {
    /// Free text.
    pub description: String,
    /// `group:name`.
    pub id: String,
    /// The product's maintenance window, if any.
    pub maintenance_window: Option<String>,
    /// How many releases it has.
    pub releases: usize,
}

/// The answer to `products`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProductsAnswer {
    /// By id.
    pub products: Vec<ProductView>,
}

/// Asks for every product.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListProducts;

impl Typed for ListProducts {
    type Answer = ProductsAnswer;
    fn query(&self) -> Query {
        Query::Products
    }
}

/// One release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseView {
    /// What the agent fetches.
    pub artifacts: Vec<ArtifactView>,
    /// The channels it is in: the built-in ones its version puts it in, then custom ones.
    pub channels: Vec<String>,
    /// The products it depends on, in manifest order: `group:name [min, max]`, with
    /// ` optional` when optional.
    pub dependencies: Vec<String>,
    /// `group:name`.
    pub product: String,
    /// When it was published.
    pub published: String,
    /// The recall that covers it (`r-…`), if any.
    pub recalled: Option<String>,
    /// Its version.
    pub version: String,
}

/// The answer to `releases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasesAnswer {
    /// By product, each product's newest first.
    pub releases: Vec<ReleaseView>,
}

/// Asks for the releases of a product, or of all, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListReleases {
    /// Only this product (`group:name`).
    pub product: Option<String>,
}

impl Typed for ListReleases {
    type Answer = ReleasesAnswer;
    fn query(&self) -> Query {
        Query::Releases {
            product: self.product.clone(),
        }
    }
}

/// One release channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelView {
    /// Whether it is built in (`DEV`, `RELEASE_CANDIDATE`, `RELEASE`).
    pub builtin: bool,
    /// Free text (`built in` for a built-in one).
    pub description: String,
    /// Upper-case name.
    pub name: String,
}

/// The answer to `channels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelsAnswer {
    /// The built-in channels, then the custom ones by name.
    pub channels: Vec<ChannelView>,
}

/// Asks for every release channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListChannels;

impl Typed for ListChannels {
    type Answer = ChannelsAnswer;
    fn query(&self) -> Query {
        Query::Channels
    }
}

/// One recall: releases of a product that must not be deployed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecallView {
    /// When it was recalled.
    pub created: String,
    /// `r-…`.
    pub id: String,
    /// `group:name`.
    pub product: String,
    /// Why.
    pub reason: String,
    /// The versions recalled: `1.2.3` or `1.2.0..=1.2.9`.
    pub versions: String,
}

/// The answer to `recalls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecallsAnswer {
    /// Every recall.
    pub recalls: Vec<RecallView>,
}

/// Asks for every recall.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListRecalls;

impl Typed for ListRecalls {
    type Answer = RecallsAnswer;
    fn query(&self) -> Query {
        Query::Recalls
    }
}
